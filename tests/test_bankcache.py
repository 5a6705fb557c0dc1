"""The parsed-bank cache: a file is parsed again only when its bytes change; broken files, damaged
or unwritable caches never change what loads."""
from __future__ import annotations

import shutil

import pytest

from solvers.bank import load_bank
from solvers.bankcache import QuestionCache
from solvers.engine import VariantCode, make_variant
from solvers.paths import questions_dir


@pytest.fixture
def root(tmp_path):
    shutil.copytree(questions_dir(), tmp_path / "questions")
    return tmp_path / "questions"


def _load(root, cache_dir):
    cache = QuestionCache(root, cache_dir)
    return load_bank(root, cache), cache


def test_a_second_load_parses_nothing_and_a_changed_file_alone_is_parsed_again(root, tmp_path):
    cold, first = _load(root, tmp_path / "cache")
    assert first.parsed == len(cold.questions) > 30
    warm, second = _load(root, tmp_path / "cache")
    assert second.parsed == 0 and warm.questions.keys() == cold.questions.keys()
    path = root / "F" / "kv-bytes-per-token.yaml"
    text = path.read_text()
    path.write_text(text.replace("title: ", "title: Edited, ", 1))  # within the mtime's tick, maybe
    edited, third = _load(root, tmp_path / "cache")
    assert third.parsed == 1
    assert edited.questions["kv-bytes-per-token"].title.startswith("Edited, ")


def test_cached_questions_solve_exactly_as_freshly_parsed_ones(root, tmp_path, catalog):
    fresh, _ = _load(root, tmp_path / "cache")
    cached, cache = _load(root, tmp_path / "cache")
    assert cache.parsed == 0
    for qid in sorted(fresh.questions):
        a = make_variant(fresh, catalog, VariantCode(qid, 7))
        b = make_variant(cached, catalog, VariantCode(qid, 7))
        assert (a.prompt, a.expected) == (b.prompt, b.expected), qid


def test_a_broken_file_is_reported_with_its_line_every_time_and_never_cached(root, tmp_path):
    path = root / "F" / "kv-bytes-per-token.yaml"
    path.write_text(path.read_text().replace("group: F", "group: [F", 1))
    for _ in range(2):
        bank, cache = _load(root, tmp_path / "cache")
        assert "kv-bytes-per-token" not in bank.questions
        assert any(p.startswith(f"{path}:") and p.split(":")[1].isdigit() for p in bank.problems), bank.problems


def test_a_damaged_cache_is_ignored_and_rewritten(root, tmp_path):
    _, cache = _load(root, tmp_path / "cache")
    cache.path.write_bytes(b"\x80\x05 not a pickle at all")
    bank, again = _load(root, tmp_path / "cache")
    assert again.parsed == len(bank.questions) and not bank.problems
    assert _load(root, tmp_path / "cache")[1].parsed == 0


def test_an_unwritable_cache_directory_costs_speed_only(root, tmp_path):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    bank, cache = _load(root, blocked / "cache")
    assert len(bank.questions) > 30 and not bank.problems
    assert not list(tmp_path.glob(".bank-*"))


def test_a_removed_file_leaves_the_bank_and_the_cache(root, tmp_path):
    _load(root, tmp_path / "cache")
    (root / "F" / "kv-bytes-per-token.yaml").unlink()
    bank, cache = _load(root, tmp_path / "cache")
    assert "kv-bytes-per-token" not in bank.questions and cache.parsed == 0
    assert not any(key.endswith("kv-bytes-per-token.yaml") for key in QuestionCache(root, tmp_path / "cache")._entries)
