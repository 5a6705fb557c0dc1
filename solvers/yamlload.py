"""Safe, bounded YAML loading that remembers the line of every mapping key (for errors).

A data or question file is something a user may drop in their config directory, so what
it may cost is bounded before it is built: its size, its nesting depth and the nodes it
expands to through aliases (a "billion laughs" file is refused, not expanded). Every
failure is one YamlError line naming the line where the file goes wrong.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from solvers.paths import open_regular

MAX_BYTES = 1_000_000  # the largest shipped file is ~30 KB
MAX_DEPTH = 50  # the deepest shipped structure is 5
MAX_NODES = 200_000  # nodes after alias expansion; the bank's files have a few thousand


class YamlError(ValueError):
    """A file that cannot be read as bounded, safe YAML: the line where it goes wrong, and what."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}")
        self.line, self.what = line, what


_TOO_LARGE = f"over {MAX_BYTES // 1000:,} KB: not a question or data file"


class LineDict(dict):
    """A mapping from YAML that knows the line of each of its keys."""

    line: int = 0
    lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return getattr(self, "lines", {}).get(key, self.line)


# libyaml's parser (about ten times faster) where PyYAML was built with it; its marks keep the lines.
class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    mapping = LineDict(yaml.SafeLoader.construct_mapping(loader, node, deep=True))
    mapping.line = node.start_mark.line + 1
    mapping.lines = {loader.construct_object(key, deep=True): key.start_mark.line + 1 for key, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _check_size(node: yaml.Node) -> None:
    """Refuse a node graph too deep or too large once aliases are expanded (iterative: no recursion)."""
    count, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise YamlError(current.start_mark.line + 1, f"expands to over {MAX_NODES:,} values "
                            "(aliases repeated too often)")
        if depth > MAX_DEPTH:
            raise YamlError(current.start_mark.line + 1, f"nested over {MAX_DEPTH} levels deep")
        if isinstance(current, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in current.value for child in pair)


def load_with_lines(text: str) -> Any:
    """yaml.safe_load within the bounds above, mappings as LineDicts. Raises YamlError."""
    if len(text) > MAX_BYTES:
        raise YamlError(1, _TOO_LARGE)
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise YamlError(mark.line + 1 if mark else 1, f"not valid YAML: {problem}") from None
    except RecursionError:
        raise YamlError(1, f"nested over {MAX_DEPTH} levels deep") from None
    except ValueError as error:  # an integer past Python's digit limit, a malformed timestamp
        raise YamlError(1, f"a value cannot be read ({str(error).splitlines()[0][:80]})") from None
    finally:
        loader.dispose()


def read_text(path: Path) -> str:
    """A file's text, refusing what is too large or not UTF-8 with one line. Raises YamlError
    (OSError passes through: the caller names the path)."""
    return decode_text(read_bytes(path))


def read_bytes(path: Path) -> bytes:
    """A file's bytes, refusing one too large to be a question or data file. Raises YamlError
    (OSError passes through)."""
    with open_regular(path) as file:  # a FIFO would hang the load, /dev/zero is no data file
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YamlError(1, _TOO_LARGE)
    return data


def decode_text(data: bytes) -> str:
    """UTF-8 text, or YamlError naming the line of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise YamlError(line, f"not UTF-8 text (byte 0x{data[error.start]:02x}); save the file as UTF-8") from None


def read_yaml(path: Path) -> Any:
    """read_text then load_with_lines. Raises YamlError or OSError."""
    return load_with_lines(read_text(path))
