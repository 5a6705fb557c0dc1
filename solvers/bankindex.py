"""The bank's listing, kept beside the parsed-bank cache: each question's id, title, group, topic
and difficulty as JSON, so that `infradrill list` reads neither YAML nor the parser (nor sympy).

A listing is written only after a load that found no problem, and read back only while it still
describes the bank exactly: the same files, each of the same size and bytes (the cache's hash),
under the same parser. On any difference (a file edited, added, removed or broken) the caller
loads the bank the full way, which parses again only what changed and names the file, field and
line of any problem.

This module imports only the standard library, so that reading a listing costs what the listing
costs; the cache's file names and hashes are defined here for both.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from contextlib import suppress
from functools import lru_cache
from pathlib import Path

from solvers.paths import data_file, open_regular, question_files, questions_dir, user_cache_dir

_PACKAGE = Path(__file__).resolve().parent

# One question as `infradrill list` shows it (and `list --json` prints it): a plain dict, as a
# NamedTuple would import typing (a few of the ~30 ms of CPU the whole command costs).
Listed = dict[str, str | int]
LISTED_FIELDS = {"id": str, "title": str, "group": str, "topic": str, "difficulty": int}


def file_digest(data: bytes) -> bytes:
    """The hash a file's bytes are known by in the cache and the listing."""
    return hashlib.blake2b(data, digest_size=16).digest()


@lru_cache(maxsize=1)
def parser_version() -> str:
    """A hash of the code a cached Question depends on: everything in solvers/ but the solvers."""
    digest = hashlib.sha256()
    kinds = ("*.py", "answers/*.py", "params/*.py")
    for path in (path for pattern in kinds for path in sorted(_PACKAGE.glob(pattern))):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_file(directory: Path, root: Path, kind: str, suffix: str) -> Path:
    """The file a bank directory's `kind` (bank, listing) is kept in under this parser. One per bank
    directory, so that loading another (a test's, a user's pack) keeps this one."""
    return directory / f"{kind}-{_root_key(root)}-{parser_version()}{suffix}"


def other_versions(directory: Path, root: Path, kind: str, suffix: str) -> list[Path]:
    """This bank directory's files of `kind` written under other versions of the parser."""
    current = cache_file(directory, root, kind, suffix)
    return [old for old in directory.glob(f"{kind}-{_root_key(root)}-*{suffix}") if old != current]


def _root_key(root: Path) -> str:
    return hashlib.blake2b(str(root.resolve()).encode(), digest_size=8).hexdigest()


def read_listing(root: Path, directory: Path) -> list[Listed] | None:
    """The kept listing of the bank under `root`, in learning order; None unless it describes every file
    there as it is now, and groups.yaml too (then the bank must be loaded the full way)."""
    try:
        with open_regular(cache_file(directory, root, "listing", ".json")) as listing:  # a FIFO would hang `list`
            kept = json.loads(listing.read())
        files = question_files(root)
        size, digest, order = kept["groups"]
        if not _unchanged(data_file("groups.yaml"), size, digest) or not all(isinstance(c, str) for c in order):
            return None
        questions = kept["files"]
        if not isinstance(questions, dict) or len(questions) != len(files):
            return None
        listed = []
        for path in files:
            size, digest, question = questions[path.relative_to(root).as_posix()]
            if not _unchanged(path, size, digest):
                return None
            if question.keys() != LISTED_FIELDS.keys() or not all(
                    isinstance(question[name], kind) for name, kind in LISTED_FIELDS.items()):
                return None
            listed.append(question)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, unreadable, damaged
        return None
    return in_learning_order(listed, order)


def _unchanged(path: Path, size: int, digest: str) -> bool:
    """Whether the file has the size and bytes it was kept with."""
    if path.stat().st_size != size:
        return False
    with open_regular(path) as file:
        data = file.read(size + 1)  # one byte more: a file that grew since is caught
    return len(data) == size and file_digest(data).hex() == digest


def in_learning_order(listed: list[Listed], order: list[str]) -> list[Listed]:
    """Questions by group in the order a new user meets them (groups.yaml; a user's pack's own groups
    last), then by id: the order browse lists them in."""
    def rank(question: Listed) -> tuple[int, str, str]:
        group = str(question["group"])
        return order.index(group) if group in order else len(order), group, str(question["id"])

    return sorted(listed, key=rank)


def write_listing(root: Path, directory: Path, files: Iterable[tuple[Path, int, bytes, Listed]],
                  order: list[str]) -> None:
    """Keep the listing of a bank that loaded without a problem: (file, size, hash of the bytes it
    was parsed from, its question) for every file under `root`, and the groups' learning order with
    the size and hash of groups.yaml it came from. Listings under other versions of the parser go."""
    groups = data_file("groups.yaml").read_bytes()
    kept = {"files": {path.relative_to(root).as_posix(): [size, digest.hex(), listed]
                      for path, size, digest, listed in files},
            "groups": [len(groups), file_digest(groups).hex(), order]}
    target = cache_file(directory, root, "listing", ".json")
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(kept, separators=(",", ":")), encoding="utf-8")
        os.replace(partial, target)
        for old in other_versions(directory, root, "listing", ".json"):
            old.unlink(missing_ok=True)
    except OSError:  # a read-only or full cache directory costs speed, nothing else
        with suppress(OSError):
            partial.unlink(missing_ok=True)


def bank_listing(root: Path | None = None, directory: Path | None = None) -> tuple[list[Listed], list[str]]:
    """Every question's listing under `root` (default: the shipped bank), in learning order, and the bank's
    problems: from the kept listing while it describes the files as they are, else from a full load (which
    keeps a fresh listing when it finds no problem)."""
    root = questions_dir() if root is None else root
    directory = user_cache_dir() if directory is None else directory
    kept = read_listing(root, directory)
    if kept is not None:
        return kept, []
    # The full way: imported here, as it costs the parser, YAML and every answer kind.
    from solvers.bank import load_bank
    from solvers.bankcache import QuestionCache
    from solvers.groups import group_names

    cache = QuestionCache(root, directory)
    bank = load_bank(root, cache)
    order = list(group_names())
    listed: list[Listed] = [{name: getattr(q, name) for name in LISTED_FIELDS} for q in bank.questions.values()]
    if not bank.problems:  # then each file read gave the question named after it
        by_id = dict(zip(bank.questions, listed))
        write_listing(root, directory, [(path, size, digest, by_id[path.stem])
                                        for path, (size, digest) in cache.read.items()], order)
    return in_learning_order(listed, order), bank.problems
