"""The settings file: `settings.toml` in the user's config directory (beside a user's own
hardware.yaml), one table per owner ([review] for the scheduler, [app] for the application),
every key checked against its Setting: its kind and its range or options.

Read with tomllib. A value of the wrong kind or out of range gives one line naming the key and
the default it keeps, and the other keys still load; so they do when a line is not TOML at all
(the file is then read a line at a time, as a settings file is flat). Written whole with
tomli-w to a temporary file that then replaces the old one, so a crash never leaves half a file.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETTINGS_FILE = "settings.toml"
MAX_BYTES = 64 * 1024  # a settings file is a dozen lines: a larger one is not this file
HEADER = "# infradrill settings: the settings screen rewrites this file (comments are not kept).\n\n"

Value = int | float | str


class SettingsError(RuntimeError):
    """The settings file cannot be written (the message says where and why)."""


@dataclass(frozen=True)
class Setting:
    """One key of the settings file. Its default fixes its kind (int, float or str); a number has a
    range, a text may have a list of options. `label` and `help` are what the settings screen shows."""

    name: str
    label: str
    default: Value
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""

    @property
    def bounds(self) -> str:
        """The range in short ("0 to 1000"); empty for a text."""
        return "" if self.low is None or self.high is None else f"{self.low:g} to {self.high:g}"

    @property
    def range_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.low is None or self.high is None:
            return "any text" if isinstance(self.default, str) else "a number"
        kind = "a whole number" if isinstance(self.default, int) else "a number"
        return f"{kind} from {self.low:g} to {self.high:g}"

    def check(self, value: object) -> Value:
        """`value` as this setting holds it; ValueError (saying what is allowed) if it is not one."""
        if isinstance(self.default, str):
            if not isinstance(value, str) or (self.choices and value not in self.choices):
                raise ValueError(f"must be {self.range_text}")
            return value
        whole = isinstance(self.default, int)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            raise ValueError(f"must be {self.range_text}")
        if isinstance(value, float) and not math.isfinite(value) or (self.low is not None and value < self.low) or \
                (self.high is not None and value > self.high):
            raise ValueError(f"must be {self.range_text}")
        return int(value) if whole else float(value)

    def parse(self, text: str) -> Value:
        """A value as typed on the settings screen; ValueError with a message to show beside it."""
        text = text.strip()
        if isinstance(self.default, str):
            return self.check(text)
        try:
            number: int | float = int(text) if isinstance(self.default, int) else float(text)
        except ValueError:
            raise ValueError(f"'{text}' is not {self.range_text}") from None
        return self.check(number)


def settings_path(directory: Path | str | None = None) -> Path:
    """The settings file in `directory`, by default the user's config directory
    ($INFRADRILL_CONFIG_DIR, else the platform's)."""
    if directory is None:
        from solvers.paths import user_config_dir

        directory = user_config_dir()
    return Path(directory).expanduser() / SETTINGS_FILE


# Reading ------------------------------------------------------------------------------------------
_HEADER = re.compile(r"\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(#.*)?")
_KEY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")


def _text(path: Path) -> tuple[str | None, str]:
    """The file's text ("" where there is no file), or None and why it is no settings file to read."""
    from solvers.paths import open_regular

    try:
        with open_regular(path) as file:  # a FIFO would block the app before it paints
            raw = file.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):  # no file there (yet)
        return "", ""
    except OSError as error:
        return None, f"{path} cannot be read ({error.strerror})"
    if len(raw) > MAX_BYTES:
        return None, f"{path} is over {MAX_BYTES // 1024} KB, so not a settings file"
    try:
        return raw.decode("utf-8").removeprefix("\ufeff"), ""  # a BOM would hide the first table header
    except UnicodeDecodeError:
        return None, f"{path} is not UTF-8 text"


def _tables(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Every table of the file (none if it is missing), and a line for each part that did not read."""
    text, problem = _text(path)
    if text is None:
        return {}, [f"{problem}: every setting keeps its default"]
    return _parsed(path, text)


def _parsed(path: Path, text: str) -> tuple[dict[str, Any], list[str]]:
    try:
        return tomllib.loads(text), []
    except _UNREADABLE:
        return _line_by_line(path, text)


# What tomllib raises besides TOMLDecodeError (a ValueError): an integer past Python's 4,300-digit
# limit is a ValueError, an array nested thousands deep a RecursionError.
_UNREADABLE = (ValueError, RecursionError)
MAX_NOTICES = 5  # lines named one by one; more is a file of garbage, said in one line


def _line_by_line(path: Path, text: str) -> tuple[dict[str, Any], list[str]]:
    """The file read a line at a time, after it failed to read whole: each line that is a table
    header or a `key = value` that reads is kept, each other line gives a notice, and so does a
    key set again (TOML allows a key once: the first stays)."""
    tables: dict[str, Any] = {}
    table = tables
    notices, again = [], []
    name = ""  # the table's, "" before the first header
    first: dict[tuple[str, str], int] = {}  # (table, key) -> the line that set it
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if header := _HEADER.fullmatch(line):
            if not isinstance(tables.get(header.group(1)), dict):  # after `[[review]]` or `review = 1`
                tables[header.group(1)] = {}
            name, table = header.group(1), tables[header.group(1)]
            continue
        try:
            for item, value in tomllib.loads(line).items():
                if (name, item) in first:
                    again.append(f"{path.name} line {number} sets {item} again: line {first[name, item]}'s "
                                 "value is kept")
                    continue
                first[name, item] = number
                table[item] = value
        except _UNREADABLE as error:
            key = _KEY.match(line)
            what = f"{key.group(1)} keeps its default" if key else "the line is skipped"
            reason = str(error).split(" (at ")[0].split(": ")[0] or type(error).__name__
            notices.append(f"{path.name} line {number} is not TOML ({reason}): {what}")
    if len(notices) > MAX_NOTICES:  # not a settings file gone wrong in a line or two: one line for it all
        notices = [f"{path.name}: {len(notices):,} lines are not TOML and were skipped, the first: {notices[0]}"]
    if len(again) > MAX_NOTICES:
        again = [f"{path.name}: {len(again):,} lines set a key again and were skipped, the first: {again[0]}"]
    return tables, notices + again


def read_table(table: str, settings: Sequence[Setting], path: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """The valid values of one table (keys absent or invalid are left out: they keep their
    defaults), and one notice per problem. Keys this version does not know are ignored. Each
    value is of its Setting's kind (typed Any: they are keyword arguments of a settings class)."""
    path = path or settings_path()
    tables, notices = _tables(path)
    found = tables.get(table, {})
    if not isinstance(found, dict):
        return {}, [*notices, f"{path.name}: [{table}] is not a table: its settings keep their defaults"]
    values: dict[str, Any] = {}
    for setting in settings:
        if setting.name not in found:
            continue
        try:
            values[setting.name] = setting.check(found[setting.name])
        except ValueError as error:
            notices.append(f"{path.name}: [{table}] {setting.name} = {_shown(found[setting.name])} {error}; "
                           f"it keeps its default {_shown(setting.default)}")
    return values, notices


def _shown(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# Writing ------------------------------------------------------------------------------------------
def write_table(table: str, values: Mapping[str, Value], path: Path | None = None) -> Path:
    """Set these keys of one table and write the whole file atomically; every other table and key
    read from the file stays as it was. Raises SettingsError when the file cannot be written."""
    import tomli_w

    path = path or settings_path()
    text, problem = _text(path)
    if text is None:  # rewriting it would lose whatever it holds
        raise SettingsError(f"{problem}: left as it is, so nothing in it is lost")
    tables, _ = _parsed(path, text)
    current = tables.get(table)
    tables[table] = {**(current if isinstance(current, dict) else {}), **values}
    text = HEADER + tomli_w.dumps(tables)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        raise SettingsError(f"cannot write {path}: {error.strerror or error}") from error
    return path
