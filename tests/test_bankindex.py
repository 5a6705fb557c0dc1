"""The bank's kept listing (what `infradrill list` reads): shown only while it describes every file
as it is; any change sends the listing the full way, which names broken files and keeps a fresh one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from solvers import bankindex
from solvers.bankindex import bank_listing, cache_file, read_listing
from solvers.paths import questions_dir


@pytest.fixture
def root(tmp_path):
    shutil.copytree(questions_dir(), tmp_path / "questions")
    return tmp_path / "questions"


@pytest.fixture
def full_loads(monkeypatch):
    """The ids listed by each full load (the parser's way) in this test."""
    import solvers.bank

    loads: list[list[str]] = []
    real = solvers.bank.load_bank

    def load_bank(*args, **kwargs):
        bank = real(*args, **kwargs)
        loads.append(sorted(bank.questions))
        return bank

    monkeypatch.setattr(solvers.bank, "load_bank", load_bank)
    return loads


def _titles(listed):
    return {q["id"]: q["title"] for q in listed}


def test_the_second_listing_is_read_from_the_kept_one_and_says_the_same(root, tmp_path, full_loads):
    cache = tmp_path / "cache"
    first, problems = bank_listing(root, cache)
    assert not problems and len(full_loads) == 1 and len(first) == len(full_loads[0]) > 30
    second, problems = bank_listing(root, cache)
    assert not problems and len(full_loads) == 1  # no parse this time
    assert second == first
    kv = next(q for q in second if q["id"] == "kv-bytes-per-token")
    assert kv == {"id": "kv-bytes-per-token", "title": kv["title"], "group": "F", "topic": kv["topic"],
                  "difficulty": kv["difficulty"]} and isinstance(kv["difficulty"], int)


def test_an_edit_of_the_same_size_is_never_shown_stale(root, tmp_path, full_loads, monkeypatch):
    """Same size, same modification time (set back): only the hash can tell, and it does; the full
    way then parses that file alone (the parsed-bank cache holds the others)."""
    import solvers.bank

    cache = tmp_path / "cache"
    bank_listing(root, cache)
    parsed = []
    real = solvers.bank.question_from_bytes
    monkeypatch.setattr(solvers.bank, "question_from_bytes",
                        lambda path, data: parsed.append(path.stem) or real(path, data))
    path = root / "F" / "kv-bytes-per-token.yaml"
    text, stat = path.read_text(), path.stat()
    title = next(line for line in text.splitlines() if line.startswith("title: "))
    edited = "title: " + "X" * (len(title) - len("title: "))
    path.write_text(text.replace(title, edited, 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    assert read_listing(root, cache) is None
    listed, problems = bank_listing(root, cache)
    assert not problems and len(full_loads) == 2 and parsed == ["kv-bytes-per-token"]
    assert _titles(listed)["kv-bytes-per-token"] == edited.removeprefix("title: ")
    assert _titles(read_listing(root, cache))["kv-bytes-per-token"] == edited.removeprefix("title: ")


@pytest.mark.parametrize("change", ["added", "removed", "grown"])
def test_a_file_added_removed_or_grown_sends_the_listing_the_full_way(root, tmp_path, full_loads, change):
    cache = tmp_path / "cache"
    bank_listing(root, cache)
    source = root / "F" / "weight-read-intensity.yaml"
    if change == "added":
        copy = root / "F" / "weight-read-intensity-copy.yaml"
        copy.write_text(source.read_text().replace("id: weight-read-intensity", "id: weight-read-intensity-copy", 1))
    elif change == "removed":
        source.unlink()
    else:
        source.write_text(source.read_text() + "\n# a comment\n")
    assert read_listing(root, cache) is None
    listed, problems = bank_listing(root, cache)
    ids = {q["id"] for q in listed}
    assert not problems and len(full_loads) == 2
    assert ("weight-read-intensity-copy" in ids) == (change == "added")
    assert ("weight-read-intensity" in ids) == (change != "removed")
    assert read_listing(root, cache) == listed  # kept afresh


def test_a_broken_file_is_named_with_its_line_every_time_and_no_listing_is_kept(root, tmp_path, full_loads):
    cache = tmp_path / "cache"
    bank_listing(root, cache)
    path = root / "F" / "kv-bytes-per-token.yaml"
    path.write_text(path.read_text().replace("group: F", "group: [F", 1))
    for run in range(2):
        listed, problems = bank_listing(root, cache)
        assert len(full_loads) == 2 + run
        assert "kv-bytes-per-token" not in {q["id"] for q in listed} and len(listed) > 30
        assert any(p.startswith(f"{path}:") and p.split(":")[1].isdigit() for p in problems), problems
        assert read_listing(root, cache) is None


def test_a_damaged_listing_is_ignored_and_written_again(root, tmp_path, full_loads):
    cache = tmp_path / "cache"
    first, _ = bank_listing(root, cache)
    kept = cache_file(cache, root, "listing", ".json")
    damages = (b"not json", b"[]", json.dumps({"files": {"F/kv-bytes-per-token.yaml": [1, "00", {}]}}).encode(),
               json.dumps(json.loads(kept.read_bytes()) | {"groups": [1, "00", [7]]}).encode())
    for damage in damages:
        kept.write_bytes(damage)
        listed, problems = bank_listing(root, cache)
        assert listed == first and not problems
        assert read_listing(root, cache) == first
    document = json.loads(kept.read_bytes())
    document["files"]["F/kv-bytes-per-token.yaml"][2]["difficulty"] = "1"  # a field of the wrong kind
    kept.write_text(json.dumps(document))
    assert read_listing(root, cache) is None


def test_a_listing_under_another_parser_is_not_read_and_is_replaced(root, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    bank_listing(root, cache)
    old = cache_file(cache, root, "listing", ".json")
    monkeypatch.setattr(bankindex, "parser_version", lambda: "another-parser")
    assert read_listing(root, cache) is None
    bank_listing(root, cache)
    assert not old.exists() and read_listing(root, cache) is not None


@pytest.fixture
def groups_file(tmp_path, monkeypatch):
    """groups.yaml copied where a test may edit it, read from there by the listing and by solvers.groups."""
    import solvers.groups

    copy, real = tmp_path / "groups.yaml", solvers.groups.data_file
    shutil.copy(real("groups.yaml"), copy)

    def data_file(name):
        return copy if name == "groups.yaml" else real(name)

    monkeypatch.setattr(bankindex, "data_file", data_file)
    monkeypatch.setattr(solvers.groups, "data_file", data_file)
    solvers.groups.group_names.cache_clear()
    yield copy
    solvers.groups.group_names.cache_clear()


def _group_runs(listed):
    """The groups in the order the listing meets them, each once."""
    return list(dict.fromkeys(q["group"] for q in listed))


def test_the_listing_runs_in_learning_order_and_follows_an_edit_of_the_order(root, tmp_path, full_loads,
                                                                             groups_file):
    import solvers.groups

    cache = tmp_path / "cache"
    order = list(solvers.groups.group_names())
    first, _ = bank_listing(root, cache)
    kept, _ = bank_listing(root, cache)
    assert len(full_loads) == 1 and kept == first
    assert _group_runs(first) == [g for g in order if g in _group_runs(first)] and len(_group_runs(first)) > 5
    for group in _group_runs(first):
        ids = [q["id"] for q in first if q["group"] == group]
        assert ids == sorted(ids)
    lines = groups_file.read_text().splitlines()
    entries = [line for line in lines if line.startswith("  ")]
    groups_file.write_text("\n".join([line for line in lines if not line.startswith("  ")] + entries[::-1]) + "\n")
    solvers.groups.group_names.cache_clear()
    edited, _ = bank_listing(root, cache)
    assert len(full_loads) == 2  # the order changed: the kept listing no longer describes it
    assert _group_runs(edited) == _group_runs(first)[::-1]
    assert bank_listing(root, cache)[0] == edited and len(full_loads) == 2


def test_an_unwritable_cache_directory_still_lists(root, tmp_path):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    listed, problems = bank_listing(root, blocked / "cache")
    assert len(listed) > 30 and not problems


def test_list_reads_neither_yaml_nor_the_parser_nor_sympy_once_the_listing_is_kept(tmp_path):
    env = dict(os.environ, INFRADRILL_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import sys, io, contextlib\nfrom tui.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n    assert main(['list', '--json']) == 0\n"
            "print(len(__import__('json').loads(out.getvalue())))\nprint(' '.join(sys.modules))")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    (count_full, modules_full), (count_kept, modules_kept) = (r.stdout.splitlines() for r in runs)
    assert count_full == count_kept and int(count_kept) > 30
    assert "solvers.bank" in modules_full.split()  # the first run took the full way and kept a listing
    heavy = {"yaml", "sympy", "numpy", "solvers.bank", "solvers.answers"} & set(modules_kept.split())
    assert not heavy


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG rule is said for Linux only")
@pytest.mark.parametrize("xdg", [None, "/tmp/xdg-cache", "relative/ignored"])
def test_the_cache_directory_is_the_one_platformdirs_names(monkeypatch, xdg):
    """`list` finds the cache without importing platformdirs: both must name the same folder."""
    import platformdirs

    from solvers.paths import user_cache_dir

    monkeypatch.delenv("INFRADRILL_CACHE_DIR", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert str(user_cache_dir()) == platformdirs.user_cache_dir("infradrill")
