"""The progress store: records, crash safety, two writers at once, corrupt files, migration."""
from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fsrs import Card, Rating, Scheduler

from practice.records import AnswerRecord, Attempt, Review, card_id_for
from practice.schema import APPLICATION_ID, FILE_NAME, SCHEMA_VERSION, StoreError, data_dir, store_path
from practice.store import ProgressStore, open_store

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_V1 = Path(__file__).with_name("fixtures") / "progress-v1.sqlite3"
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
ASIDE = re.compile(r"^progress\.sqlite3\.corrupt-\d{8}-\d{6}(-\d+)?$")


def make_attempt(question_id="kv-bytes-per-token", at=T0, mode="drill", mock_id=None, verdicts=("correct", "wrong"),
                 **extra) -> Attempt:
    answers = tuple(AnswerRecord(f"k{i}", f"{i} GiB", v, 0.0 if v == "correct" else 1.0,
                                 "x8: bits and bytes mixed up" if v == "wrong" else None)
                    for i, v in enumerate(verdicts))
    return Attempt(question_id=question_id, variant=f"{question_id}@7", mode=mode, started=at - timedelta(seconds=40),
                   submitted=at, seconds=40.0, hints_used=1, answers=answers, mock_id=mock_id, suggested=2, **extra)


def first_review(question_id: str, at: datetime, rating: Rating = Rating.Good) -> Review:
    before = Card(card_id=card_id_for(question_id), due=at)
    after, _ = Scheduler(enable_fuzzing=False).review_card(before, rating, at)
    return Review(question_id, int(rating), at, after, before)


@pytest.fixture
def store(tmp_path):
    store, notices = ProgressStore.open(tmp_path / FILE_NAME)
    assert notices == []
    yield store
    store.close()


def asides(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if ASIDE.match(p.name))


# Location and opening -------------------------------------------------------------------------
def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRADRILL_DATA_DIR", str(tmp_path / "elsewhere"))
    assert data_dir() == tmp_path / "elsewhere"
    assert store_path() == tmp_path / "elsewhere" / FILE_NAME
    assert store_path(tmp_path) == tmp_path / FILE_NAME  # an explicit directory wins
    monkeypatch.delenv("INFRADRILL_DATA_DIR")
    assert data_dir().name == "infradrill"


def test_fresh_store_is_wal_versioned_and_marked(tmp_path):
    store, notices = open_store(tmp_path / "new" / "dir")
    with store:
        assert notices == [] and store.path == tmp_path / "new" / "dir" / FILE_NAME
        assert store.schema_version == SCHEMA_VERSION
        assert store._read("PRAGMA journal_mode") == [("wal",)]
        assert store._read("PRAGMA foreign_keys") == [(1,)]
        assert store._read("PRAGMA busy_timeout")[0][0] >= 5000
        assert store._read("PRAGMA application_id") == [(APPLICATION_ID,)]
    reopened, notices = open_store(tmp_path / "new" / "dir")  # a second open changes nothing
    with reopened:
        assert notices == [] and reopened.schema_version == SCHEMA_VERSION


def test_a_directory_where_the_file_should_be(tmp_path):
    (tmp_path / FILE_NAME).mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        ProgressStore.open(tmp_path / FILE_NAME)


def test_an_empty_file_becomes_a_store(tmp_path):
    (tmp_path / FILE_NAME).touch()
    store, notices = ProgressStore.open(tmp_path / FILE_NAME)
    with store:
        assert notices == [] and store.schema_version == SCHEMA_VERSION
    assert asides(tmp_path) == []


# Records ---------------------------------------------------------------------------------------
def test_attempt_round_trip(store):
    attempt = make_attempt()
    assert store.record_attempt(attempt) == attempt.uid
    assert store.attempts() == [attempt]
    assert store.attempt(attempt.uid) == attempt
    assert store.attempt("nope") is None
    assert not attempt.all_correct
    store.set_rating(attempt.uid, Rating.Good)
    assert store.attempt(attempt.uid).rating == 3
    with pytest.raises(KeyError):
        store.set_rating("nope", 3)


def test_attempt_queries(store):
    a = make_attempt("a", T0)
    b = make_attempt("b", T0 + timedelta(days=1), mode="practice")
    c = make_attempt("a", T0 + timedelta(days=2))
    for attempt in (c, a, b):
        store.record_attempt(attempt)
    assert [x.uid for x in store.attempts()] == [a.uid, b.uid, c.uid]  # oldest first
    assert [x.uid for x in store.attempts(question_id="a")] == [a.uid, c.uid]
    assert [x.uid for x in store.attempts(mode="practice")] == [b.uid]
    assert [x.uid for x in store.attempts(since=T0 + timedelta(hours=1))] == [b.uid, c.uid]
    assert store.attempt_count() == 3


def test_bad_mode_is_refused(store):
    with pytest.raises(ValueError, match="mode"):
        store.record_attempt(make_attempt(mode="exam"))
    assert store.attempt_count() == 0


def test_attempt_review_and_card_are_one_transaction(store):
    def failing(card):
        raise RuntimeError("scheduler exploded")

    with pytest.raises(RuntimeError):
        store.record_attempt(make_attempt(), failing)
    assert store.attempt_count() == 0 and store.reviews() == []  # nothing half-written

    attempt = make_attempt("q")
    review = first_review("q", T0)
    store.record_attempt(attempt, review)
    [logged] = store.reviews()
    assert logged.attempt_uid == attempt.uid and logged.card_after == review.card_after
    assert store.card("q") == review.card_after
    assert store.review_of(attempt.uid) == logged
    assert store.first_reviews() == {"q": T0}


def test_review_function_sees_the_current_card(store):
    seen = []

    def review(card):
        seen.append(card)
        return first_review("q", T0)

    store.record_attempt(make_attempt("q"), review)
    store.record_attempt(make_attempt("q", T0 + timedelta(hours=1)), review)
    assert seen[0] is None and seen[1] == first_review("q", T0).card_after


def test_cards_and_due_queries(store):
    early, late = first_review("a", T0), first_review("b", T0 + timedelta(days=3))
    store.log_review(late)
    store.log_review(early)
    assert set(store.cards()) == {"a", "b"}
    assert [q for q, _ in store.due_cards(T0 + timedelta(days=30))] == ["a", "b"]  # most overdue first
    assert [q for q, _ in store.due_cards(early.card_after.due)] == ["a"]
    assert store.due_cards(T0) == []
    card = Card(card_id=1, due=T0)
    store.save_card("c", card)
    assert store.card("c") == card and store.card("none") is None


def test_mock_interview_sheet(store):
    mock_id = store.start_mock(2, 300.0, started=T0)
    first = make_attempt("a", T0 + timedelta(minutes=4), mode="mock", mock_id=mock_id, verdicts=("correct",))
    second = make_attempt("b", T0 + timedelta(minutes=9), mode="mock", mock_id=mock_id)
    store.record_attempt(second)
    store.record_attempt(first)
    store.record_attempt(make_attempt("c"))  # not part of it
    store.finish_mock(mock_id, T0 + timedelta(minutes=10))
    sheet = store.mock_sheet(mock_id)
    assert sheet.mock.planned == 2 and sheet.mock.budget_seconds == 300.0
    assert sheet.mock.finished == T0 + timedelta(minutes=10)
    assert [a.question_id for a in sheet.attempts] == ["a", "b"]
    assert sheet.correct == 1 and sheet.seconds == 80.0
    assert [m.id for m in store.mocks()] == [mock_id]
    with pytest.raises(KeyError):
        store.mock_sheet("nope")


def test_a_deleted_mock_keeps_its_answers_as_history(store):
    mock_id = store.start_mock(3, 300.0, started=T0)
    store.record_attempt(make_attempt("a", T0 + timedelta(minutes=4), mode="mock", mock_id=mock_id))
    store.delete_mock(mock_id)
    assert store.mocks() == []
    (kept,) = store.attempts()
    assert kept.question_id == "a" and kept.mode == "mock" and kept.mock_id is None
    with pytest.raises(KeyError):
        store.delete_mock(mock_id)
    with pytest.raises(sqlite3.IntegrityError):  # an attempt cannot name a mock that does not exist
        store.record_attempt(make_attempt(mode="mock", mock_id="no-such-mock"))


def test_legacy_settings_are_read_and_dropped(store):
    """Settings an older infradrill kept in meta (the settings file has them now, practice.config)."""
    assert store.legacy_settings() == {}
    with sqlite3.connect(store.path) as conn:
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                         [("setting.new_per_day", "8"), ("setting.desired_retention", "0.85")])
    assert store.legacy_settings() == {"new_per_day": "8", "desired_retention": "0.85"}
    store.drop_legacy_settings()
    assert store.legacy_settings() == {}
    assert store._read("SELECT COUNT(*) FROM meta WHERE key = 'created'") == [(1,)]  # the rest of meta stays


# Nothing is lost -----------------------------------------------------------------------------------
CRASH = textwrap.dedent("""
    import os, signal, sys
    from datetime import datetime, timedelta, UTC
    from solvers.answers import Grade
    from practice.review import Reviewer
    from practice.store import open_store

    store, _ = open_store(sys.argv[1])
    submitted = datetime(2025, 3, 3, 9, 0, 40, tzinfo=UTC)
    grades = [Grade("kv_per_token", "correct", "320 KiB", "320 KiB", 0.0)]
    done = Reviewer(store).submit(question_id="kv-bytes-per-token", variant="kv-bytes-per-token@4821",
                                  mode="drill", grades=grades, typed={"kv_per_token": "320 KiB"},
                                  started=submitted - timedelta(seconds=40), submitted=submitted)
    print(done.attempt.uid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_sigkill_right_after_submitting_loses_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == -signal.SIGKILL, result.stderr
    uid = result.stdout.strip()
    assert (tmp_path / f"{FILE_NAME}-wal").exists()  # killed before any checkpoint: recovery runs from the WAL
    store, notices = open_store(tmp_path)
    with store:
        assert notices == []
        attempt = store.attempt(uid)
        assert attempt is not None and attempt.answers[0].typed == "320 KiB"
        card = store.card("kv-bytes-per-token")
        assert card is not None and card.last_review == attempt.submitted
        # Correct in 40 s (more than 30 s for its one answer): Good, the second learning step.
        assert store.review_of(uid).rating == Rating.Good
        assert card.due == attempt.submitted + timedelta(minutes=10)


WRITER = textwrap.dedent("""
    import sys, time
    from datetime import datetime, timedelta, UTC
    from solvers.answers import Grade
    from practice.review import Reviewer
    from practice.store import open_store

    directory, name, count, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    offset = timedelta(milliseconds=int(sys.argv[5]))  # distinct review times in the two processes
    time.sleep(max(0.0, start_at - time.time()))
    store, notices = open_store(directory)  # both processes may create the file at once
    reviewer = Reviewer(store)
    t0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
    for i in range(count):
        question = "shared" if i % 2 else f"{name}-{i}"
        grades = [Grade("k", "correct" if i % 3 else "wrong", "1", "1", 0.0)]
        at = t0 + timedelta(seconds=i) + offset
        reviewer.submit(question_id=question, variant=f"{question}@{i}", mode="drill", grades=grades,
                        typed={"k": "1"}, started=at - timedelta(seconds=20), submitted=at)
    store.close()
    print(len(notices), *notices)
""")


def test_two_processes_writing_at_once(tmp_path):
    count, start_at = 60, time.time() + 1.5
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(count), str(start_at), offset],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, offset in (("left", "0"), ("right", "500"))]
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0, err
        assert out.strip() == "0", out  # neither saw the other's half-made file as foreign
    store, notices = open_store(tmp_path)
    with store:
        assert notices == []
        assert store._read("PRAGMA integrity_check") == [("ok",)]
        attempts = store.attempts()
        assert len(attempts) == 2 * count and len({a.uid for a in attempts}) == 2 * count
        assert {a.variant for a in attempts if a.question_id != "shared"} == {
            f"{name}-{i}@{i}" for name in ("left", "right") for i in range(0, count, 2)}
        # The shared card was read and written under one lock: the reviews form one chain, each
        # starting from the card the previous one left, whichever process wrote it (no lost update).
        log = store.reviews(question_id="shared")
        assert len(log) == count
        starts = [r.card_before.last_review for r in log]
        assert starts.count(None) == 1
        chained = [t for t in starts if t is not None]
        assert len(set(chained)) == count - 1 and set(chained) <= {r.reviewed for r in log}


# Corrupt and foreign files ------------------------------------------------------------------------
def test_garbage_is_moved_aside(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_bytes(b"this is not a database, but it might be precious\n" * 100)
    Path(f"{path}-wal").write_bytes(b"stale wal")
    store, notices = ProgressStore.open(path)
    with store:
        assert store.schema_version == SCHEMA_VERSION and store.attempt_count() == 0
    [moved] = asides(tmp_path)
    assert moved.read_bytes().startswith(b"this is not a database")  # kept, byte for byte
    assert Path(f"{moved}-wal").read_bytes() == b"stale wal"  # the stale log went with it
    [notice] = notices
    assert "not an SQLite database" in notice and moved.name in notice and "nothing was deleted" in notice


def test_foreign_sqlite_database_is_moved_aside(tmp_path):
    path = tmp_path / FILE_NAME
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT)")
        conn.execute("INSERT INTO recipes VALUES ('bread')")
    conn.close()
    store, notices = ProgressStore.open(path)
    store.close()
    [moved] = asides(tmp_path)
    assert "another program" in notices[0] and moved.name in notices[0]
    with sqlite3.connect(moved) as conn:
        assert conn.execute("SELECT name FROM recipes").fetchall() == [("bread",)]
    conn.close()


def test_newer_schema_is_moved_aside(tmp_path):
    path = tmp_path / FILE_NAME
    store, _ = ProgressStore.open(path)
    store.record_attempt(make_attempt())
    store._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    store.close()
    store, notices = ProgressStore.open(path)
    with store:
        assert store.attempt_count() == 0  # a fresh store
    [notice] = notices
    assert f"schema v{SCHEMA_VERSION + 1}" in notice and "newer infradrill" in notice
    [moved] = asides(tmp_path)
    with sqlite3.connect(moved) as conn:  # the newer progress is all there
        assert conn.execute("SELECT COUNT(*) FROM attempts").fetchone() == (1,)
    conn.close()


def test_damaged_pages_are_moved_aside(tmp_path):
    path = tmp_path / FILE_NAME
    store, _ = ProgressStore.open(path)
    for i in range(30):
        store.record_attempt(make_attempt(f"q{i}"))
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    page = 4096
    data[2 * page:len(data)] = b"\xff" * (len(data) - 2 * page)  # every page after the first two
    path.write_bytes(bytes(data))
    store, notices = ProgressStore.open(path)
    with store:
        assert store.attempt_count() == 0
    assert len(notices) == 1 and len(asides(tmp_path)) == 1


def test_two_moves_in_one_second_do_not_collide(tmp_path):
    path = tmp_path / FILE_NAME
    for _ in range(2):
        path.write_bytes(b"garbage" * 50)
        ProgressStore.open(path)[0].close()
    assert len(asides(tmp_path)) == 2


# Migration ---------------------------------------------------------------------------------------------
def test_v1_fixture_is_migrated_in_place(tmp_path):
    path = tmp_path / FILE_NAME
    shutil.copy(FIXTURE_V1, path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
    conn.close()
    store, notices = ProgressStore.open(path)
    with store:
        assert notices == [] and store.schema_version == SCHEMA_VERSION
        [attempt] = store.attempts()
        assert attempt.uid == "6f1c1d9e-0000-4000-8000-000000000001"
        assert attempt.variant == "kv-bytes-per-token@4821" and attempt.rating == 3
        assert attempt.mock_id is None and attempt.suggested is None  # columns v2 added
        assert [(a.key, a.typed, a.verdict) for a in attempt.answers] == [
            ("kv_per_token", "320 KiB", "correct"), ("users", "324", "wrong")]
        assert attempt.answers[1].slip.startswith("x2")
        card = store.card("kv-bytes-per-token")
        assert card.last_review == datetime(2025, 1, 6, 9, 0, 30, tzinfo=UTC)
        assert store.review_of(attempt.uid).rating == Rating.Good
        mock_id = store.start_mock(1, 120.0)  # and what v2 adds works on the old data
        store.record_attempt(make_attempt(mode="mock", mock_id=mock_id))
        assert len(store.mock_sheet(mock_id).attempts) == 1
    assert set(os.listdir(tmp_path)) <= {FILE_NAME, f"{FILE_NAME}-wal", f"{FILE_NAME}-shm"}  # in place


def test_a_failing_migration_leaves_the_old_version(tmp_path, monkeypatch):
    import practice.schema as store_module

    path = tmp_path / FILE_NAME
    shutil.copy(FIXTURE_V1, path)
    broken = (*store_module.MIGRATIONS[:1], (*store_module.MIGRATIONS[1], "CREATE TABLE attempts (x)"))
    monkeypatch.setattr(store_module, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="already exists"):
        ProgressStore.open(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(attempts)")]
        assert "mock_id" not in columns  # rolled back as a whole
    conn.close()
