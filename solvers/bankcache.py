"""Parsed question files kept between runs, in the user's cache directory.

A file is parsed again only when its bytes changed, or when the parser itself did (the
cache's name carries a hash of the code that builds a Question). A file with a problem is
never kept, so its error is found afresh with file, field and line. A cache that cannot be
read or written is ignored: the bank loads as if there were none.

The cache is a pickle in the user's own cache directory: whoever can write there can already
run code as the user, so reading it back trusts no one new.
"""
from __future__ import annotations

import gc
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from solvers.bankindex import cache_file, file_digest, other_versions
from solvers.paths import open_regular, user_cache_dir

if TYPE_CHECKING:
    from solvers.bank import Question

_Entry = tuple[bytes, "Question"]  # a hash of the file, the question parsed from it


@contextmanager
def _no_gc() -> Iterator[None]:
    """No garbage collection while unpickling: the objects it makes are all kept, and in a process that
    already holds many (the app after a session, the benchmark) each collection walks them all."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class QuestionCache:
    """Questions by file, read from and written back to one cache file."""

    def __init__(self, root: Path, directory: Path | None = None):
        self.directory = user_cache_dir() if directory is None else directory
        self._root = root
        self.path = cache_file(self.directory, root, "bank", ".pickle")
        self._entries: dict[str, _Entry] = self._read()
        self._used: set[str] = set()
        self._changed = False
        self.parsed = 0  # files parsed this time (the rest came from the cache)
        self.read: dict[Path, tuple[int, bytes]] = {}  # each file asked for: its size and hash, as read

    def _read(self) -> dict[str, _Entry]:
        try:
            with open_regular(self.path) as file, _no_gc():  # a FIFO would hang "Loading the bank…"
                entries = pickle.load(file)
        except Exception:  # absent, truncated, written by other code: start afresh
            return {}
        return entries if isinstance(entries, dict) else {}

    def question(self, path: Path, data: bytes, parse: Callable[[], Question]) -> Question:
        """The question in `path`, whose bytes are `data`: the cached one while they hash the same (a
        hash, not the modification time, which a quick rewrite can leave unchanged), else `parse()`,
        whose errors pass through and are not cached."""
        key = os.path.abspath(path)  # not resolve(): a symlink walk per file was a third of a warm load
        self._used.add(key)
        digest = file_digest(data)
        self.read[path] = (len(data), digest)
        entry = self._entries.get(key)
        if entry is not None and entry[0] == digest:
            return entry[1]
        question = parse()
        self.parsed += 1
        self._entries[key] = (digest, question)
        self._changed = True
        return question

    def save(self) -> None:
        """Write back what changed (files gone from the bank are dropped); this bank's caches from
        other versions of the parser are removed."""
        stale = set(self._entries) - self._used
        for key in stale:
            del self._entries[key]
        if not (self._changed or stale):
            return
        temporary = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".bank-", suffix=".tmp")
            with os.fdopen(handle, "wb") as file:
                pickle.dump(self._entries, file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, self.path)
            temporary = None
            for old in other_versions(self.directory, self._root, "bank", ".pickle"):
                old.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only or full cache directory costs speed, nothing else
        finally:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
