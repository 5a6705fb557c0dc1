"""A store that is ours but damaged inside, and hostile progress imports: the damage is
repaired or moved aside with a notice, a hostile file is refused whole, and nothing crashes."""
from __future__ import annotations

import copy
import json
import os
import sqlite3
from datetime import UTC, datetime

import pytest

from practice.schema import FILE_NAME, StoreError
from practice.store import ProgressStore
from practice.transfer import ProgressFormatError, export_progress, import_progress
from tests.test_cli import run_cli
from tests.test_store import asides, first_review, make_attempt

AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def filled(tmp_path):
    """A store with one attempt of each of two questions, each with its review and card."""
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    for question_id in ("kv-bytes-per-token", "weight-read-intensity"):
        store.record_attempt(make_attempt(question_id, at=AT), first_review(question_id, AT))
    store.close()
    return tmp_path / FILE_NAME


def damage(path, sql):
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


ROW_DAMAGE = {  # SQL that damages one row -> the kind of row the notice names
    "UPDATE cards SET card = '{not json' WHERE question_id = 'kv-bytes-per-token'": "card",
    "UPDATE attempts SET submitted = 'yesterday' WHERE question_id = 'kv-bytes-per-token'": "attempt",
    "UPDATE reviews SET reviewed = 'soon' WHERE question_id = 'kv-bytes-per-token'": "review",
}


@pytest.mark.parametrize("sql", list(ROW_DAMAGE))
def test_a_damaged_row_is_removed_with_a_notice_and_the_rest_is_kept(filled, sql):
    damage(filled, sql)
    store, notices = ProgressStore.open(filled)
    with store:
        assert len(notices) == 1 and f"1 damaged {ROW_DAMAGE[sql]} row(s)" in notices[0]
        assert "weight-read-intensity" in store.cards() and len(store.reviews("weight-read-intensity")) == 1
        assert len(store.attempts(question_id="weight-read-intensity")) == 1
    _, again = ProgressStore.open(filled)
    assert again == []  # repaired once, for good


@pytest.mark.parametrize("sql", ["DROP TABLE reviews", "ALTER TABLE attempts RENAME COLUMN seconds TO secs"])
def test_a_store_with_the_wrong_tables_is_moved_aside(filled, sql):
    damage(filled, sql)
    store, notices = ProgressStore.open(filled)
    with store:
        assert len(notices) == 1 and "moved aside" in notices[0] and store.attempt_count() == 0
    assert len(asides(filled.parent)) == 1


def test_a_fifo_in_place_of_the_store_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / FILE_NAME)
    with pytest.raises(StoreError, match="not a regular file"):
        ProgressStore.open(tmp_path / FILE_NAME)


def test_progress_check_reports_the_repair(filled, capsys):
    damage(filled, "UPDATE cards SET due = 'never'")
    code, out, err = run_cli(capsys, "--data-dir", str(filled.parent), "progress", "check")
    assert code == 0 and "2 damaged card row(s)" in err and "2 attempt(s) and 2 review(s) readable" in out


def hostile(good, change):
    data = copy.deepcopy(good)
    change(data)
    return data


def answer(data):
    return data["attempts"][0]["answers"]


HOSTILE_IMPORTS = {
    "an answer key twice": lambda d: answer(d).append(dict(answer(d)[0])),
    "an integer past SQLite's range": lambda d: d["attempts"][0].update(hints_used=10**30),
    "NaN seconds": lambda d: d["attempts"][0].update(seconds=float("nan")),
    "negative seconds": lambda d: d["attempts"][0].update(seconds=-5),
    "negative hints": lambda d: d["attempts"][0].update(hints_used=-1),
    "infinite error": lambda d: answer(d)[0].update(error=float("inf")),
}


@pytest.mark.parametrize("name", list(HOSTILE_IMPORTS))
def test_a_hostile_import_is_refused_whole(filled, tmp_path, name):
    with ProgressStore.open(filled)[0] as store:
        good = export_progress(store)
    target, _ = ProgressStore.open(tmp_path / "other" / FILE_NAME)
    with target:
        with pytest.raises(ProgressFormatError):
            import_progress(target, json.loads(json.dumps(hostile(good, HOSTILE_IMPORTS[name]))))
        assert target.attempt_count() == 0 and target.reviews() == []


def test_an_import_nested_past_recursion_is_one_line(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "import", str(tmp_path / "deep.json"))
    assert code == 2 and err.count("\n") == 1 and "nested too deeply" in err


def test_an_import_with_several_bad_records_names_each_and_writes_none(filled, tmp_path, capsys):
    with ProgressStore.open(filled)[0] as store:
        data = export_progress(store)
    data["attempts"][0]["seconds"] = -1
    data["attempts"][1]["hints_used"] = -2
    data["reviews"][0]["rating"] = 9
    (tmp_path / "bad.json").write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path / "other"), "progress", "import",
                           str(tmp_path / "bad.json"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 4 and "3 record(s) refused, nothing imported" in lines[-1]
    assert {line.split(": ")[2] for line in lines[:3]} == {"attempts[0]", "attempts[1]", "reviews[0]"}
    with ProgressStore.open(tmp_path / "other" / FILE_NAME)[0] as other:
        assert other.attempt_count() == 0
