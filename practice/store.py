"""The progress store: attempts, FSRS cards and their review log, mock interviews (SQLite).

Every write is one `BEGIN IMMEDIATE` transaction, so an attempt, its review and its card
land together or not at all. The store keeps no scheduling logic: practice.review computes
cards with fsrs and hands them here. practice.schema opens the file; practice.transfer
exports and imports it.
"""
from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from fsrs import Card, Rating

from practice.records import (
    MODES,
    AnswerRecord,
    Attempt,
    Hold,
    Mock,
    MockSheet,
    Review,
    card_from_json,
    from_text,
    now_utc,
    to_text,
)
from practice.schema import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    NotOurs,
    StoreError,
    is_corruption,
    move_aside,
    prepare,
    store_path,
)


def open_store(directory: Path | str | None = None) -> tuple[ProgressStore, list[str]]:
    """The store in `directory` (default: data_dir()), with any notices to show the user."""
    return ProgressStore.open(store_path(directory))



# The store ------------------------------------------------------------------------------------
class ProgressStore:
    """Progress in one SQLite file. Thread-safe: one connection behind a lock."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = threading.RLock()
        self.path = path

    @classmethod
    def open(cls, path: Path | str) -> tuple[ProgressStore, list[str]]:
        """Open (or create) the store at `path`; notices say what was moved aside, if anything."""
        path = Path(path).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the data directory {path.parent}: {error.strerror}") from error
        if path.is_dir():
            raise StoreError(f"{path} is a directory, not a progress file")
        notices: list[str] = []
        for _ in range(2):
            try:
                conn, repairs = prepare(path)
                return cls(conn, path), notices + repairs
            except NotOurs as reason:
                notices.append(move_aside(path, str(reason)))
            except sqlite3.DatabaseError as error:
                if not is_corruption(error) or not path.exists():
                    raise StoreError(f"cannot open {path}: {error}") from error
                notices.append(move_aside(path, f"it is not a readable SQLite database ({error})"))
        raise StoreError(f"cannot create a fresh progress store at {path}")

    @classmethod
    def open_to_read(cls, path: Path | str) -> tuple[ProgressStore, list[str]]:
        """The store for a command that only reads it (stats, progress export): as open(), and where
        the disk is too full for SQLite's shared-memory file, the file as it lies on disk, read-only,
        with a notice; so progress can still be exported off a full disk."""
        try:
            return cls.open(path)
        except StoreError as error:
            cause = error.__cause__
            if not (isinstance(cause, sqlite3.OperationalError)
                    and getattr(cause, "sqlite_errorname", "").startswith(("SQLITE_IOERR", "SQLITE_FULL"))):
                raise
            path = Path(path).expanduser()
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True,
                                   isolation_level=None, check_same_thread=False)
            try:
                marks = (conn.execute("PRAGMA application_id").fetchone()[0],
                         conn.execute("PRAGMA user_version").fetchone()[0])
            except sqlite3.Error:
                marks = (0, 0)
            if marks != (APPLICATION_ID, SCHEMA_VERSION):
                conn.close()
                raise
        wal = Path(f"{path}-wal")
        unread = " (its last changes, still in the write-ahead log, are not included)" \
            if wal.exists() and wal.stat().st_size > 0 else ""
        return cls(conn, path), [f"{path} could not be opened to write ({cause}): it was read as it lies on "
                                 f"disk{unread}; free some space to save progress again."]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ProgressStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so that it never deadlocks."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                raise StoreError(f"the progress store is busy or unwritable: {error}") from error
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    @property
    def schema_version(self) -> int:
        return self._read("PRAGMA user_version")[0][0]

    # Settings an older infradrill kept in the store (meta); practice.config has them now ----------
    def legacy_settings(self) -> dict[str, str]:
        rows = self._read("SELECT key, value FROM meta WHERE key LIKE 'setting.%'")
        return {key.removeprefix("setting."): value for key, value in rows}

    def drop_legacy_settings(self) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM meta WHERE key LIKE 'setting.%'")

    # Attempts --------------------------------------------------------------------------------
    def record_attempt(self, attempt: Attempt,
                       review: Review | Callable[[Card | None], Review] | None = None) -> str:
        """Write the attempt, its answers and its review and card in ONE transaction.

        `review` may be a function of the question's current card (None if it has none),
        called inside the transaction, so that two instances never schedule from a stale card."""
        if attempt.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {attempt.mode!r}")
        with self.transaction() as conn:
            insert_attempt(conn, attempt)
            if callable(review):
                review = review(card_in(conn, attempt.question_id))
            if review is not None:
                review = replace(review, attempt_uid=attempt.uid)
                insert_review(conn, review)
                put_card(conn, review.question_id, review.card_after)
        return attempt.uid

    def set_rating(self, uid: str, rating: int | Rating, reviews: Sequence[Review] = ()) -> None:
        """The rating the user chose, with the reviews (and so the card) it changes, at once."""
        with self.transaction() as conn:
            if conn.execute("UPDATE attempts SET rating = ? WHERE uid = ?", (int(rating), uid)).rowcount != 1:
                raise KeyError(f"no attempt {uid}")
            for review in reviews:
                replace_review(conn, review)

    def update_answers(self, uid: str, answers: Sequence[AnswerRecord], suggested: int | None = None,
                       reviews: Sequence[Review] = ()) -> None:
        """Regraded answers (a checklist ticked after the reveal), in one transaction."""
        with self.transaction() as conn:
            if conn.execute("UPDATE attempts SET suggested = COALESCE(?, suggested) WHERE uid = ?",
                            (suggested, uid)).rowcount != 1:
                raise KeyError(f"no attempt {uid}")
            conn.execute("DELETE FROM answers WHERE attempt_uid = ?", (uid,))
            insert_answers(conn, uid, answers)
            for review in reviews:
                replace_review(conn, review)

    def attempt(self, uid: str) -> Attempt | None:
        found = self.attempts(uid=uid)
        return found[0] if found else None

    def attempts(self, *, question_id: str | None = None, mode: str | None = None, mock_id: str | None = None,
                 since: datetime | None = None, uid: str | None = None) -> list[Attempt]:
        """Attempts with their answers, oldest first."""
        where, params = [], []
        for column, value in (("question_id", question_id), ("mode", mode), ("mock_id", mock_id), ("uid", uid)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("submitted >= ?")
            params.append(to_text(since))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            rows = self._conn.execute(
                "SELECT uid, question_id, variant, mode, started, submitted, seconds, hints_used, mock_id, "
                f"suggested, rating FROM attempts {clause} ORDER BY submitted, uid", params).fetchall()
            answers: dict[str, list[AnswerRecord]] = {}
            answer_rows = self._conn.execute(
                "SELECT attempt_uid, key, typed, verdict, error, slip, stage, stage_kind FROM answers "
                f"WHERE attempt_uid IN (SELECT uid FROM attempts {clause}) ORDER BY attempt_uid, position",
                params).fetchall()
        for attempt_uid, *values in answer_rows:
            answers.setdefault(attempt_uid, []).append(AnswerRecord(*values))
        return [Attempt(question_id=r[1], variant=r[2], mode=r[3], started=from_text(r[4]),
                        submitted=from_text(r[5]), seconds=r[6], hints_used=r[7], mock_id=r[8], suggested=r[9],
                        rating=r[10], answers=tuple(answers.get(r[0], ())), uid=r[0]) for r in rows]

    def attempt_count(self) -> int:
        return self._read("SELECT COUNT(*) FROM attempts")[0][0]

    # Cards and reviews ---------------------------------------------------------------------------
    def card(self, question_id: str) -> Card | None:
        rows = self._read("SELECT card FROM cards WHERE question_id = ?", (question_id,))
        return card_from_json(rows[0][0]) if rows else None

    def cards(self) -> dict[str, Card]:
        return {qid: card_from_json(text) for qid, text in self._read("SELECT question_id, card FROM cards")}

    def due_cards(self, before: datetime) -> list[tuple[str, Card]]:
        """Cards due at or before `before`, most overdue first."""
        rows = self._read("SELECT question_id, card FROM cards WHERE due <= ? ORDER BY due, question_id",
                          (to_text(before),))
        return [(qid, card_from_json(text)) for qid, text in rows]

    # Holds: questions kept out of the drill ----------------------------------------------------
    def hold(self, question_id: str, kind: str, until: datetime | None = None) -> None:
        """Suspend a question (kind 'suspended': until released) or bury it ('buried': until `until`)."""
        with self.transaction() as conn:
            put_hold(conn, Hold(question_id, kind, until))

    def release(self, question_id: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM holds WHERE question_id = ?", (question_id,))

    def holds(self) -> list[Hold]:
        """Every hold as kept, those whose time has passed included (an export carries them as they are)."""
        rows = self._read("SELECT question_id, kind, until FROM holds ORDER BY question_id")
        return [hold_from_row(row) for row in rows]

    def held(self, now: datetime) -> dict[str, str]:
        """Questions held out at `now`, with how: suspended, or buried until a time still to come."""
        rows = self._read("SELECT question_id, kind, until FROM holds")
        return {qid: kind for qid, kind, until in rows if kind == "suspended" or (until and from_text(until) > now)}

    def save_card(self, question_id: str, card: Card) -> None:
        with self.transaction() as conn:
            put_card(conn, question_id, card)

    def log_review(self, review: Review | Callable[[Card | None], Review], question_id: str | None = None) -> Review:
        """A review without an attempt: the log entry and the card, in one transaction (a
        function of the current card, as in record_attempt, needs `question_id`)."""
        with self.transaction() as conn:
            if callable(review):
                if question_id is None:
                    raise TypeError("log_review(function) needs question_id")
                review = review(card_in(conn, question_id))
            insert_review(conn, review)
            put_card(conn, review.question_id, review.card_after)
        return review

    def review_of(self, attempt_uid: str) -> Review | None:
        found = self.reviews(attempt_uid=attempt_uid)
        return found[-1] if found else None

    def reviews(self, question_id: str | None = None, attempt_uid: str | None = None) -> list[Review]:
        """The review log, oldest first."""
        where, params = [], []
        if question_id is not None:
            where.append("question_id = ?")
            params.append(question_id)
        if attempt_uid is not None:
            where.append("attempt_uid = ?")
            params.append(attempt_uid)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._read("SELECT uid, question_id, attempt_uid, rating, reviewed, duration_ms, card_before, "
                          f"card_after FROM reviews {clause} ORDER BY reviewed, uid", params)
        return [review_from_row(row) for row in rows]

    def first_reviews(self) -> dict[str, datetime]:
        """When each question was first reviewed (for the daily cap on new questions)."""
        rows = self._read("SELECT question_id, MIN(reviewed) FROM reviews GROUP BY question_id")
        return {qid: from_text(first) for qid, first in rows}

    def latest_review_uid(self, question_id: str) -> str | None:
        rows = self._read("SELECT uid FROM reviews WHERE question_id = ? ORDER BY reviewed DESC, uid DESC LIMIT 1",
                          (question_id,))
        return rows[0][0] if rows else None

    # Mock interviews ------------------------------------------------------------------------
    def start_mock(self, planned: int, budget_seconds: float | None, started: datetime | None = None) -> str:
        mock_id = str(uuid.uuid4())
        with self.transaction() as conn:
            conn.execute("INSERT INTO mocks (id, started, planned, budget_seconds) VALUES (?, ?, ?, ?)",
                         (mock_id, to_text(started or now_utc()), planned, budget_seconds))
        return mock_id

    def finish_mock(self, mock_id: str, finished: datetime | None = None) -> None:
        with self.transaction() as conn:
            if conn.execute("UPDATE mocks SET finished = ? WHERE id = ?",
                            (to_text(finished or now_utc()), mock_id)).rowcount != 1:
                raise KeyError(f"no mock interview {mock_id}")

    def delete_mock(self, mock_id: str) -> None:
        """Forget a mock interview; its attempts stay (as history), no longer under it."""
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET mock_id = NULL WHERE mock_id = ?", (mock_id,))
            if conn.execute("DELETE FROM mocks WHERE id = ?", (mock_id,)).rowcount != 1:
                raise KeyError(f"no mock interview {mock_id}")

    def mocks(self) -> list[Mock]:
        """Every mock interview, newest first."""
        rows = self._read("SELECT id, started, planned, budget_seconds, finished FROM mocks ORDER BY started DESC")
        return [_mock_from_row(row) for row in rows]

    def mock_sheet(self, mock_id: str) -> MockSheet:
        rows = self._read("SELECT id, started, planned, budget_seconds, finished FROM mocks WHERE id = ?", (mock_id,))
        if not rows:
            raise KeyError(f"no mock interview {mock_id}")
        return MockSheet(_mock_from_row(rows[0]), tuple(self.attempts(mock_id=mock_id)))


# Rows, inside a transaction -------------------------------------------------------------------------------
def insert_attempt(conn: sqlite3.Connection, a: Attempt) -> None:
    conn.execute("INSERT INTO attempts (uid, question_id, variant, mode, started, submitted, seconds, hints_used, "
                 "mock_id, suggested, rating) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (a.uid, a.question_id, a.variant, a.mode, to_text(a.started), to_text(a.submitted),
                  float(a.seconds), int(a.hints_used), a.mock_id,
                  None if a.suggested is None else int(a.suggested), None if a.rating is None else int(a.rating)))
    insert_answers(conn, a.uid, a.answers)

def insert_answers(conn: sqlite3.Connection, uid: str, answers: Sequence[AnswerRecord]) -> None:
    conn.executemany("INSERT INTO answers (attempt_uid, position, key, typed, verdict, error, slip, stage, stage_kind) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     [(uid, i, a.key, a.typed, a.verdict, _finite(a.error), a.slip, a.stage, a.stage_kind)
                      for i, a in enumerate(answers)])

def insert_review(conn: sqlite3.Connection, r: Review) -> None:
    conn.execute("INSERT INTO reviews (uid, question_id, attempt_uid, rating, reviewed, duration_ms, card_before, "
                 "card_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (r.uid, r.question_id, r.attempt_uid, int(r.rating), to_text(r.reviewed), r.duration_ms,
                  r.card_before.to_json() if r.card_before else None, r.card_after.to_json()))

def replace_review(conn: sqlite3.Connection, r: Review) -> None:
    updated = conn.execute("UPDATE reviews SET rating = ?, card_before = ?, card_after = ? WHERE uid = ?",
                           (int(r.rating), r.card_before.to_json() if r.card_before else None,
                            r.card_after.to_json(), r.uid)).rowcount
    if updated != 1:
        insert_review(conn, r)
    latest = conn.execute("SELECT uid FROM reviews WHERE question_id = ? ORDER BY reviewed DESC, uid DESC LIMIT 1",
                          (r.question_id,)).fetchone()
    if latest is not None and latest[0] == r.uid:
        put_card(conn, r.question_id, r.card_after)

def card_in(conn: sqlite3.Connection, question_id: str) -> Card | None:
    """The question's card, None where it has none or one the scheduler cannot review (damaged
    since the store was opened and repaired): the next review starts it afresh and overwrites
    it, and the attempt it goes with is saved, not rolled back with it."""
    row = conn.execute("SELECT card FROM cards WHERE question_id = ?", (question_id,)).fetchone()
    try:
        return card_from_json(row[0]) if row else None
    except ValueError:
        return None

def put_hold(conn: sqlite3.Connection, hold: Hold) -> None:
    conn.execute("INSERT INTO holds (question_id, kind, until) VALUES (?, ?, ?) ON CONFLICT (question_id) "
                 "DO UPDATE SET kind = excluded.kind, until = excluded.until",
                 (hold.question_id, hold.kind, to_text(hold.until) if hold.until is not None else None))


def hold_from_row(row: tuple[str, str, str | None]) -> Hold:
    question_id, kind, until = row
    return Hold(question_id, kind, from_text(until) if until else None)


def put_card(conn: sqlite3.Connection, question_id: str, card: Card) -> None:
    conn.execute("INSERT INTO cards (question_id, card, due) VALUES (?, ?, ?) ON CONFLICT (question_id) DO UPDATE "
                 "SET card = excluded.card, due = excluded.due", (question_id, card.to_json(), to_text(card.due)))


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def review_from_row(row: Sequence[Any]) -> Review:
    uid, question_id, attempt_uid, rating, reviewed, duration_ms, before, after = row
    return Review(question_id=question_id, rating=rating, reviewed=from_text(reviewed),
                  card_after=card_from_json(after), card_before=card_from_json(before) if before else None,
                  attempt_uid=attempt_uid, duration_ms=duration_ms, uid=uid)


def _mock_from_row(row: Sequence[Any]) -> Mock:
    mock_id, started, planned, budget, finished = row
    return Mock(mock_id, from_text(started), planned, budget, from_text(finished) if finished else None)
