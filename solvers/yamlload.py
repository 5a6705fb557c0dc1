"""Safe YAML loading that remembers the line of every mapping key (for error messages)."""
from __future__ import annotations

from typing import Any

import yaml


class LineDict(dict):
    """A mapping from YAML that knows the line of each of its keys."""

    line: int = 0
    lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return getattr(self, "lines", {}).get(key, self.line)


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    mapping = LineDict(yaml.SafeLoader.construct_mapping(loader, node, deep=True))
    mapping.line = node.start_mark.line + 1
    mapping.lines = {loader.construct_object(key, deep=True): key.start_mark.line + 1 for key, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_with_lines(text: str) -> Any:
    """yaml.safe_load, but mappings are LineDicts. Raises yaml.YAMLError."""
    return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
