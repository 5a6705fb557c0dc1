"""The progress store: attempts, FSRS cards and their review log, mock interviews (SQLite).

One file, `progress.sqlite3`, in the data directory ($INFRADRILL_DATA_DIR, else the
platform's user data directory). WAL mode, a busy timeout so that two instances can write
at once, `PRAGMA application_id` as the schema marker and `PRAGMA user_version` as the
schema version, upgraded in place by the migrations below (each in one transaction).

Nothing is deleted silently: a file that is not ours (not SQLite, SQLite without our
marker, a newer schema than this code knows, or corrupt) is moved aside to
`progress.sqlite3.corrupt-YYYYmmdd-HHMMSS` and a notice says so.

Every write is one `BEGIN IMMEDIATE` transaction, so an attempt, its review and its card
land together or not at all. The store keeps no scheduling logic: practice.review computes
cards with fsrs and hands them here. Timestamps are stored as UTC ISO text.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsrs import Card, Rating, Scheduler

FILE_NAME = "progress.sqlite3"
APPLICATION_ID = 0x49447231  # 'IDr1': marks a file as an infradrill progress store
BUSY_TIMEOUT_MS = 5000
MODES = ("practice", "drill", "mock")
EXPORT_FORMAT = "infradrill-progress"
EXPORT_SCHEMA = 1  # the JSON layout of export_json; bump (and refuse the old one) when it changes

# Each migration takes the schema from version i to i + 1. Never edit a shipped one: add
# the next. Statements run one by one inside the caller's transaction (executescript
# would commit in between).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # v1: attempts with their answers, one FSRS card per question, the review log
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE attempts (
            uid TEXT PRIMARY KEY,
            question_id TEXT NOT NULL,
            variant TEXT NOT NULL,
            mode TEXT NOT NULL CHECK (mode IN ('practice', 'drill', 'mock')),
            started TEXT NOT NULL,
            submitted TEXT NOT NULL,
            seconds REAL NOT NULL,
            hints_used INTEGER NOT NULL DEFAULT 0,
            rating INTEGER CHECK (rating BETWEEN 1 AND 4)
        )""",
        "CREATE INDEX attempts_by_question ON attempts (question_id, submitted)",
        "CREATE INDEX attempts_by_time ON attempts (submitted)",
        """CREATE TABLE answers (
            attempt_uid TEXT NOT NULL REFERENCES attempts (uid) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            key TEXT NOT NULL,
            typed TEXT NOT NULL,
            verdict TEXT NOT NULL,
            error REAL,
            slip TEXT,
            PRIMARY KEY (attempt_uid, key)
        )""",
        """CREATE TABLE cards (
            question_id TEXT PRIMARY KEY,
            card TEXT NOT NULL,
            due TEXT NOT NULL
        )""",
        "CREATE INDEX cards_by_due ON cards (due)",
        """CREATE TABLE reviews (
            uid TEXT PRIMARY KEY,
            question_id TEXT NOT NULL,
            attempt_uid TEXT REFERENCES attempts (uid) ON DELETE SET NULL,
            rating INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 4),
            reviewed TEXT NOT NULL,
            duration_ms INTEGER,
            card_before TEXT,
            card_after TEXT NOT NULL
        )""",
        "CREATE INDEX reviews_by_question ON reviews (question_id, reviewed)",
        "CREATE INDEX reviews_by_attempt ON reviews (attempt_uid)",
    ),
    (  # v2: mock interviews; the rating the grade suggested, kept apart from the one chosen
        """CREATE TABLE mocks (
            id TEXT PRIMARY KEY,
            started TEXT NOT NULL,
            finished TEXT,
            planned INTEGER NOT NULL,
            budget_seconds REAL
        )""",
        "ALTER TABLE attempts ADD COLUMN mock_id TEXT REFERENCES mocks (id)",
        "ALTER TABLE attempts ADD COLUMN suggested INTEGER CHECK (suggested BETWEEN 1 AND 4)",
        "CREATE INDEX attempts_by_mock ON attempts (mock_id)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

# sqlite error codes that mean "this file is not a (sound) database", as opposed to
# "cannot open / busy / read-only", which are reported and never trigger a move.
_CORRUPT_CODES = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}


class StoreError(RuntimeError):
    """The store cannot be opened or written (permissions, disk, a lock held too long)."""


class _NotOurs(Exception):
    """The file at the store's path is not a usable infradrill store (the message says why)."""


class ProgressFormatError(ValueError):
    """An import file that is not infradrill progress of the schema this code reads."""


# Time ---------------------------------------------------------------------------------------
def utc(moment: datetime) -> datetime:
    """An aware datetime in `UTC` (fsrs insists on that exact tzinfo)."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: give times with a timezone (UTC)")
    return moment.astimezone(UTC)


def now_utc() -> datetime:
    return datetime.now(UTC)


def to_text(moment: datetime) -> str:
    """UTC ISO text of one fixed width, so that text order is time order."""
    return utc(moment).isoformat(timespec="microseconds")


def from_text(text: str) -> datetime:
    return utc(datetime.fromisoformat(text))


def card_id_for(question_id: str) -> int:
    """A card id derived from the question id: the same on every machine, so merges agree."""
    return int(hashlib.sha1(question_id.encode()).hexdigest()[:12], 16)


def card_from_json(text: str) -> Card:
    return Card.from_json(text)


# Records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerRecord:
    key: str
    typed: str
    verdict: str
    error: float | None = None  # relative error (decades for log answers)
    slip: str | None = None


@dataclass(frozen=True)
class Attempt:
    question_id: str
    variant: str  # the variant code, e.g. kv-bytes-per-token@4821
    mode: str  # practice | drill | mock
    started: datetime
    submitted: datetime
    seconds: float
    hints_used: int = 0
    answers: tuple[AnswerRecord, ...] = ()
    mock_id: str | None = None
    suggested: int | None = None  # the rating the grade suggested (fsrs.Rating value)
    rating: int | None = None  # the rating the user chose; None until they do
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def all_correct(self) -> bool:
        return bool(self.answers) and all(a.verdict == "correct" for a in self.answers)

    @property
    def effective_rating(self) -> int | None:
        return self.rating if self.rating is not None else self.suggested


@dataclass(frozen=True)
class Review:
    """One entry of the FSRS review log, with the card before and after it."""

    question_id: str
    rating: int
    reviewed: datetime
    card_after: Card
    card_before: Card | None = None
    attempt_uid: str | None = None
    duration_ms: int | None = None
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass(frozen=True)
class Mock:
    id: str
    started: datetime
    planned: int  # questions in the session
    budget_seconds: float | None  # per question
    finished: datetime | None = None


@dataclass(frozen=True)
class MockSheet:
    mock: Mock
    attempts: tuple[Attempt, ...]  # in the order they were submitted

    @property
    def correct(self) -> int:
        return sum(a.all_correct for a in self.attempts)

    @property
    def seconds(self) -> float:
        return sum(a.seconds for a in self.attempts)


@dataclass(frozen=True)
class ImportResult:
    attempts_added: int = 0
    attempts_present: int = 0
    reviews_added: int = 0
    mocks_added: int = 0
    cards_changed: int = 0

    def summary(self) -> str:
        return (f"{self.attempts_added} attempt(s) added, {self.attempts_present} already present; "
                f"{self.reviews_added} review(s) and {self.mocks_added} mock interview(s) added; "
                f"{self.cards_changed} card(s) updated")


# Location -------------------------------------------------------------------------------------
def data_dir() -> Path:
    """$INFRADRILL_DATA_DIR if set, else the platform's user data directory."""
    override = os.environ.get("INFRADRILL_DATA_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("infradrill", appauthor=False))


def store_path(directory: Path | str | None = None) -> Path:
    return Path(directory).expanduser() / FILE_NAME if directory is not None else data_dir() / FILE_NAME


def open_store(directory: Path | str | None = None) -> tuple[ProgressStore, list[str]]:
    """The store in `directory` (default: data_dir()), with any notices to show the user."""
    return ProgressStore.open(store_path(directory))


# Opening, checking, moving aside ------------------------------------------------------------
def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _is_corruption(error: sqlite3.Error) -> bool:
    return getattr(error, "sqlite_errorname", "") in _CORRUPT_CODES or "not a database" in str(error)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _problem(conn: sqlite3.Connection) -> str | None:
    """Why this file cannot be our store, or None if it is ours (or empty, to be created)."""
    conn.execute("BEGIN")  # one snapshot: another instance may be creating the store right now
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = _tables(conn)
    finally:
        with contextlib.suppress(sqlite3.Error):  # never mask the error that says what is wrong
            conn.execute("COMMIT")
    if app_id == 0 and version == 0 and not tables:
        return None  # a new (or empty) file
    if app_id != APPLICATION_ID:
        return "it is an SQLite database of another program (no infradrill schema marker)"
    if version > SCHEMA_VERSION:
        return (f"it was written by a newer infradrill (schema v{version}; this version reads up to "
                f"v{SCHEMA_VERSION}) — upgrade infradrill and move it back to keep that progress")
    check = conn.execute("PRAGMA quick_check").fetchall()
    if [row[0] for row in check] != ["ok"]:
        return "it is damaged (integrity check: " + "; ".join(str(r[0]) for r in check[:3]) + ")"
    return None


def _aside_name(path: Path, stamp: datetime) -> Path:
    base = f"{path.name}.corrupt-{stamp.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = path.with_name(base), 1
    while candidate.exists():
        candidate, n = path.with_name(f"{base}-{n}"), n + 1
    return candidate


def _move_aside(path: Path, reason: str) -> str:
    target = _aside_name(path, datetime.now())
    os.replace(path, target)
    # A stale write-ahead log must not be replayed into the fresh store: it travels along.
    for suffix in ("-wal", "-shm", "-journal"):
        companion = Path(f"{path}{suffix}")
        if companion.exists():
            os.replace(companion, Path(f"{target}{suffix}"))
    return (f"The progress file {path} could not be used: {reason}. It was moved aside to {target.name} "
            f"(nothing was deleted) and a fresh progress store was started.")


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema up to SCHEMA_VERSION in one transaction (re-checked under the lock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            if _tables(conn) or conn.execute("PRAGMA application_id").fetchone()[0] not in (0, APPLICATION_ID):
                raise _NotOurs("it has tables but no infradrill schema version")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version == 0:
            conn.execute("INSERT INTO meta (key, value) VALUES ('created', ?)", (to_text(now_utc()),))
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _sniff(path: Path) -> str | None:
    """Why the file is not SQLite at all, judged from its header before SQLite touches it
    (SQLite would delete a write-ahead log lying next to a file it cannot read)."""
    try:
        with open(path, "rb") as file:
            header = file.read(100)
    except FileNotFoundError:
        return None
    if header and (len(header) < 100 or not header.startswith(b"SQLite format 3\x00")):
        return "it is not an SQLite database"
    return None


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL mode (persistent). The switch takes an exclusive lock and fails at once,
    busy handler or not, while another instance holds the file: retry up to the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            raise


def _prepare(path: Path) -> sqlite3.Connection:
    """Open, check, migrate. Raises _NotOurs, or sqlite3.DatabaseError for a damaged file."""
    reason = _sniff(path)
    if reason is not None:
        raise _NotOurs(reason)
    conn = _connect(path)
    try:
        problem = _problem(conn)
        if problem is not None:
            raise _NotOurs(problem)
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn)
        return conn
    except BaseException:
        conn.close()
        raise


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
                return cls(_prepare(path), path), notices
            except _NotOurs as reason:
                notices.append(_move_aside(path, str(reason)))
            except sqlite3.DatabaseError as error:
                if not _is_corruption(error) or not path.exists():
                    raise StoreError(f"cannot open {path}: {error}") from error
                notices.append(_move_aside(path, f"it is not a readable SQLite database ({error})"))
        raise StoreError(f"cannot create a fresh progress store at {path}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ProgressStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
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

    # Settings (meta) -----------------------------------------------------------------------
    def setting(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (f"setting.{key}",))
        return rows[0][0] if rows else default

    def set_setting(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = "
                         "excluded.value", (f"setting.{key}", value))

    # Attempts --------------------------------------------------------------------------------
    def record_attempt(self, attempt: Attempt,
                       review: Review | Callable[[Card | None], Review] | None = None) -> str:
        """Write the attempt, its answers and its review and card in ONE transaction.

        `review` may be a function of the question's current card (None if it has none),
        called inside the transaction, so that two instances never schedule from a stale card."""
        if attempt.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {attempt.mode!r}")
        with self._write() as conn:
            self._insert_attempt(conn, attempt)
            if callable(review):
                review = review(self._card(conn, attempt.question_id))
            if review is not None:
                review = replace(review, attempt_uid=attempt.uid)
                self._insert_review(conn, review)
                self._put_card(conn, review.question_id, review.card_after)
        return attempt.uid

    def set_rating(self, uid: str, rating: int | Rating, reviews: Sequence[Review] = ()) -> None:
        """The rating the user chose, with the reviews (and so the card) it changes, at once."""
        with self._write() as conn:
            if conn.execute("UPDATE attempts SET rating = ? WHERE uid = ?", (int(rating), uid)).rowcount != 1:
                raise KeyError(f"no attempt {uid}")
            for review in reviews:
                self._replace_review(conn, review)

    def update_answers(self, uid: str, answers: Sequence[AnswerRecord], suggested: int | None = None,
                       reviews: Sequence[Review] = ()) -> None:
        """Regraded answers (a checklist ticked after the reveal), in one transaction."""
        with self._write() as conn:
            if conn.execute("UPDATE attempts SET suggested = COALESCE(?, suggested) WHERE uid = ?",
                            (suggested, uid)).rowcount != 1:
                raise KeyError(f"no attempt {uid}")
            conn.execute("DELETE FROM answers WHERE attempt_uid = ?", (uid,))
            self._insert_answers(conn, uid, answers)
            for review in reviews:
                self._replace_review(conn, review)

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
                "SELECT attempt_uid, key, typed, verdict, error, slip FROM answers "
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

    def save_card(self, question_id: str, card: Card) -> None:
        with self._write() as conn:
            self._put_card(conn, question_id, card)

    def log_review(self, review: Review | Callable[[Card | None], Review], question_id: str | None = None) -> Review:
        """A review without an attempt: the log entry and the card, in one transaction (a
        function of the current card, as in record_attempt, needs `question_id`)."""
        with self._write() as conn:
            if callable(review):
                if question_id is None:
                    raise TypeError("log_review(function) needs question_id")
                review = review(self._card(conn, question_id))
            self._insert_review(conn, review)
            self._put_card(conn, review.question_id, review.card_after)
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
        return [_review_from_row(row) for row in rows]

    def first_reviews(self) -> dict[str, datetime]:
        """When each question was first reviewed (for the daily cap on new questions)."""
        rows = self._read("SELECT question_id, MIN(reviewed) FROM reviews GROUP BY question_id")
        return {qid: from_text(first) for qid, first in rows}

    def latest_review_uid(self, question_id: str) -> str | None:
        rows = self._read("SELECT uid FROM reviews WHERE question_id = ? ORDER BY reviewed DESC, uid DESC LIMIT 1",
                          (question_id,))
        return rows[0][0] if rows else None

    def replace_reviews(self, question_id: str, reviews: Sequence[Review], card: Card) -> None:
        """Rewrite the cards before/after of a replayed review log, and the card, at once."""
        with self._write() as conn:
            for review in reviews:
                self._replace_review(conn, review)
            self._put_card(conn, question_id, card)

    # Mock interviews ------------------------------------------------------------------------
    def start_mock(self, planned: int, budget_seconds: float | None, started: datetime | None = None) -> str:
        mock_id = str(uuid.uuid4())
        with self._write() as conn:
            conn.execute("INSERT INTO mocks (id, started, planned, budget_seconds) VALUES (?, ?, ?, ?)",
                         (mock_id, to_text(started or now_utc()), planned, budget_seconds))
        return mock_id

    def finish_mock(self, mock_id: str, finished: datetime | None = None) -> None:
        with self._write() as conn:
            if conn.execute("UPDATE mocks SET finished = ? WHERE id = ?",
                            (to_text(finished or now_utc()), mock_id)).rowcount != 1:
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

    # Export and import ------------------------------------------------------------------------
    def export_json(self) -> dict[str, Any]:
        """Everything, as plain JSON data (see import_json)."""
        attempts = self.attempts()
        return {
            "format": EXPORT_FORMAT,
            "schema": EXPORT_SCHEMA,
            "exported": to_text(now_utc()),
            "attempts": [_attempt_to_json(a) for a in attempts],
            "mocks": [_mock_to_json(m) for m in self.mocks()],
            "reviews": [_review_to_json(r) for r in self.reviews()],
            "cards": [{"question_id": qid, "card": card.to_dict()} for qid, card in sorted(self.cards().items())],
        }

    def import_json(self, data: Any, scheduler: Scheduler | None = None) -> ImportResult:
        """Merge an export into this store, in one transaction: nothing twice (attempts and
        reviews by uid, mocks by id). A card whose question gained reviews from the file is
        the file's card if we had no reviews of it; otherwise, with a scheduler, it is
        rebuilt by replaying the merged review log, and without one the card reviewed last
        wins. Raises ProgressFormatError, writing nothing, for a file of another format."""
        attempts, mocks, reviews, cards = _parse_export(data)
        added = present = reviews_added = mocks_added = 0
        with self._write() as conn:
            had_reviews = {row[0] for row in conn.execute("SELECT DISTINCT question_id FROM reviews")}
            for mock in mocks:
                exists = conn.execute("SELECT 1 FROM mocks WHERE id = ?", (mock.id,)).fetchone()
                if exists:
                    if mock.finished is not None:
                        conn.execute("UPDATE mocks SET finished = COALESCE(finished, ?) WHERE id = ?",
                                     (to_text(mock.finished), mock.id))
                    continue
                conn.execute("INSERT INTO mocks (id, started, planned, budget_seconds, finished) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (mock.id, to_text(mock.started), mock.planned, mock.budget_seconds,
                              to_text(mock.finished) if mock.finished else None))
                mocks_added += 1
            for attempt in attempts:
                if conn.execute("SELECT 1 FROM attempts WHERE uid = ?", (attempt.uid,)).fetchone():
                    present += 1
                    if attempt.rating is not None:
                        conn.execute("UPDATE attempts SET rating = COALESCE(rating, ?) WHERE uid = ?",
                                     (attempt.rating, attempt.uid))
                    continue
                self._insert_attempt(conn, attempt)
                added += 1
            gained: set[str] = set()
            for review in reviews:
                if conn.execute("SELECT 1 FROM reviews WHERE uid = ?", (review.uid,)).fetchone():
                    continue
                if review.attempt_uid is not None and not conn.execute(
                        "SELECT 1 FROM attempts WHERE uid = ?", (review.attempt_uid,)).fetchone():
                    review = replace(review, attempt_uid=None)
                self._insert_review(conn, review)
                reviews_added += 1
                gained.add(review.question_id)
            changed = 0
            for question_id in sorted(set(cards) | gained):
                if question_id in had_reviews:
                    if question_id not in gained:
                        continue  # nothing new about it in the file: ours stands
                    if scheduler is not None:
                        self._replay(conn, question_id, scheduler)
                    elif question_id in cards and _later(cards[question_id], self._card(conn, question_id)):
                        self._put_card(conn, question_id, cards[question_id])
                    else:
                        continue
                elif question_id in cards:
                    self._put_card(conn, question_id, cards[question_id])
                elif scheduler is not None:
                    self._replay(conn, question_id, scheduler)
                else:
                    continue
                changed += 1
        return ImportResult(added, present, reviews_added, mocks_added, changed)

    # Internals -------------------------------------------------------------------------------
    def _insert_attempt(self, conn: sqlite3.Connection, a: Attempt) -> None:
        conn.execute("INSERT INTO attempts (uid, question_id, variant, mode, started, submitted, seconds, hints_used, "
                     "mock_id, suggested, rating) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (a.uid, a.question_id, a.variant, a.mode, to_text(a.started), to_text(a.submitted),
                      float(a.seconds), int(a.hints_used), a.mock_id,
                      None if a.suggested is None else int(a.suggested), None if a.rating is None else int(a.rating)))
        self._insert_answers(conn, a.uid, a.answers)

    @staticmethod
    def _insert_answers(conn: sqlite3.Connection, uid: str, answers: Sequence[AnswerRecord]) -> None:
        conn.executemany("INSERT INTO answers (attempt_uid, position, key, typed, verdict, error, slip) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(uid, i, a.key, a.typed, a.verdict, _finite(a.error), a.slip) for i, a in enumerate(answers)])

    @staticmethod
    def _insert_review(conn: sqlite3.Connection, r: Review) -> None:
        conn.execute("INSERT INTO reviews (uid, question_id, attempt_uid, rating, reviewed, duration_ms, card_before, "
                     "card_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (r.uid, r.question_id, r.attempt_uid, int(r.rating), to_text(r.reviewed), r.duration_ms,
                      r.card_before.to_json() if r.card_before else None, r.card_after.to_json()))

    def _replace_review(self, conn: sqlite3.Connection, r: Review) -> None:
        updated = conn.execute("UPDATE reviews SET rating = ?, card_before = ?, card_after = ? WHERE uid = ?",
                               (int(r.rating), r.card_before.to_json() if r.card_before else None,
                                r.card_after.to_json(), r.uid)).rowcount
        if updated != 1:
            self._insert_review(conn, r)
        latest = conn.execute("SELECT uid FROM reviews WHERE question_id = ? ORDER BY reviewed DESC, uid DESC LIMIT 1",
                              (r.question_id,)).fetchone()
        if latest is not None and latest[0] == r.uid:
            self._put_card(conn, r.question_id, r.card_after)

    @staticmethod
    def _card(conn: sqlite3.Connection, question_id: str) -> Card | None:
        row = conn.execute("SELECT card FROM cards WHERE question_id = ?", (question_id,)).fetchone()
        return card_from_json(row[0]) if row else None

    @staticmethod
    def _put_card(conn: sqlite3.Connection, question_id: str, card: Card) -> None:
        conn.execute("INSERT INTO cards (question_id, card, due) VALUES (?, ?, ?) ON CONFLICT (question_id) DO UPDATE "
                     "SET card = excluded.card, due = excluded.due", (question_id, card.to_json(), to_text(card.due)))

    def _replay(self, conn: sqlite3.Connection, question_id: str, scheduler: Scheduler) -> None:
        rows = conn.execute("SELECT uid, question_id, attempt_uid, rating, reviewed, duration_ms, card_before, "
                            "card_after FROM reviews WHERE question_id = ? ORDER BY reviewed, uid",
                            (question_id,)).fetchall()
        replayed = replay(scheduler, question_id, [_review_from_row(row) for row in rows])
        for review in replayed:
            self._replace_review(conn, review)


def replay(scheduler: Scheduler, question_id: str, reviews: Sequence[Review]) -> list[Review]:
    """The review log replayed from a new card: each review with its card before and after."""
    out: list[Review] = []
    card: Card | None = None
    for review in sorted(reviews, key=lambda r: (r.reviewed, r.uid)):
        if card is None:
            card = Card(card_id=card_id_for(question_id), due=review.reviewed)
        before = card
        card, _ = scheduler.review_card(card, Rating(review.rating), review.reviewed, review.duration_ms)
        out.append(replace(review, card_before=before, card_after=card))
    return out


def _later(theirs: Card, mine: Card | None) -> bool:
    """Whether the file's card was reviewed after ours."""
    if mine is None:
        return True
    return (theirs.last_review or theirs.due) > (mine.last_review or mine.due)


def _finite(value: float | None) -> float | None:
    import math

    return value if value is None or math.isfinite(value) else None


def _review_from_row(row: Sequence[Any]) -> Review:
    uid, question_id, attempt_uid, rating, reviewed, duration_ms, before, after = row
    return Review(question_id=question_id, rating=rating, reviewed=from_text(reviewed),
                  card_after=card_from_json(after), card_before=card_from_json(before) if before else None,
                  attempt_uid=attempt_uid, duration_ms=duration_ms, uid=uid)


def _mock_from_row(row: Sequence[Any]) -> Mock:
    mock_id, started, planned, budget, finished = row
    return Mock(mock_id, from_text(started), planned, budget, from_text(finished) if finished else None)


# JSON form -------------------------------------------------------------------------------------
def _attempt_to_json(a: Attempt) -> dict[str, Any]:
    return {"uid": a.uid, "question_id": a.question_id, "variant": a.variant, "mode": a.mode,
            "started": to_text(a.started), "submitted": to_text(a.submitted), "seconds": a.seconds,
            "hints_used": a.hints_used, "mock_id": a.mock_id, "suggested": a.suggested, "rating": a.rating,
            "answers": [{"key": x.key, "typed": x.typed, "verdict": x.verdict, "error": x.error, "slip": x.slip}
                        for x in a.answers]}


def _mock_to_json(m: Mock) -> dict[str, Any]:
    return {"id": m.id, "started": to_text(m.started), "finished": to_text(m.finished) if m.finished else None,
            "planned": m.planned, "budget_seconds": m.budget_seconds}


def _review_to_json(r: Review) -> dict[str, Any]:
    return {"uid": r.uid, "question_id": r.question_id, "attempt_uid": r.attempt_uid, "rating": r.rating,
            "reviewed": to_text(r.reviewed), "duration_ms": r.duration_ms,
            "card_before": r.card_before.to_dict() if r.card_before else None, "card_after": r.card_after.to_dict()}


class _Reader:
    """Typed field access with messages that name the record."""

    def __init__(self, record: Any, where: str) -> None:
        if not isinstance(record, Mapping):
            raise ProgressFormatError(f"{where} is not an object")
        self.record, self.where = record, where

    def get(self, name: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
        value = self.record.get(name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ProgressFormatError(f"{self.where}: field '{name}' is missing or of the wrong type")
        return value

    def time(self, name: str, optional: bool = False) -> datetime | None:
        text = self.get(name, str, optional)
        if text is None:
            return None
        try:
            return from_text(text)
        except ValueError as error:
            raise ProgressFormatError(f"{self.where}: field '{name}' is not a UTC timestamp") from error

    def card(self, name: str, optional: bool = False) -> Card | None:
        value = self.get(name, dict, optional)
        if value is None:
            return None
        try:
            return Card.from_dict(value)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as error:
            raise ProgressFormatError(f"{self.where}: field '{name}' is not an FSRS card") from error


def _parse_export(data: Any) -> tuple[list[Attempt], list[Mock], list[Review], dict[str, Card]]:
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise ProgressFormatError("not an infradrill progress export (no \"format\": \"infradrill-progress\")")
    if data.get("schema") != EXPORT_SCHEMA:
        raise ProgressFormatError(f"this export has progress schema {data.get('schema')!r}; this infradrill reads "
                                  f"schema {EXPORT_SCHEMA} only — export it again with a matching infradrill version")

    def records(name: str) -> list[Any]:
        value = data.get(name, [])
        if not isinstance(value, list):
            raise ProgressFormatError(f"'{name}' must be a list")
        return value

    number = (int, float)
    attempts = []
    for i, raw in enumerate(records("attempts")):
        r = _Reader(raw, f"attempts[{i}]")
        mode = r.get("mode", str)
        if mode not in MODES:
            raise ProgressFormatError(f"attempts[{i}]: mode {mode!r} is not one of {', '.join(MODES)}")
        answers = []
        for j, item in enumerate(r.get("answers", list)):
            x = _Reader(item, f"attempts[{i}].answers[{j}]")
            answers.append(AnswerRecord(x.get("key", str), x.get("typed", str), x.get("verdict", str),
                                        x.get("error", number, True), x.get("slip", str, True)))
        attempts.append(Attempt(question_id=r.get("question_id", str), variant=r.get("variant", str), mode=mode,
                                started=r.time("started"), submitted=r.time("submitted"),  # type: ignore[arg-type]
                                seconds=float(r.get("seconds", number)), hints_used=r.get("hints_used", int),
                                answers=tuple(answers), mock_id=r.get("mock_id", str, True),
                                suggested=_rating(r, "suggested", True), rating=_rating(r, "rating", True),
                                uid=r.get("uid", str)))
    mocks = []
    for i, raw in enumerate(records("mocks")):
        r = _Reader(raw, f"mocks[{i}]")
        mocks.append(Mock(r.get("id", str), r.time("started"), r.get("planned", int),  # type: ignore[arg-type]
                          r.get("budget_seconds", number, True), r.time("finished", True)))
    reviews = []
    for i, raw in enumerate(records("reviews")):
        r = _Reader(raw, f"reviews[{i}]")
        reviews.append(Review(question_id=r.get("question_id", str), rating=_rating(r, "rating"),  # type: ignore[arg-type]
                              reviewed=r.time("reviewed"), card_after=r.card("card_after"),  # type: ignore[arg-type]
                              card_before=r.card("card_before", True), attempt_uid=r.get("attempt_uid", str, True),
                              duration_ms=r.get("duration_ms", int, True), uid=r.get("uid", str)))
    cards = {}
    for i, raw in enumerate(records("cards")):
        r = _Reader(raw, f"cards[{i}]")
        cards[r.get("question_id", str)] = r.card("card")
    known_mocks = {m.id for m in mocks}
    for a in attempts:
        if a.mock_id is not None and a.mock_id not in known_mocks:
            raise ProgressFormatError(f"attempt {a.uid} names mock interview {a.mock_id}, which the file lacks")
    return attempts, mocks, reviews, cards  # type: ignore[return-value]


def _rating(r: _Reader, name: str, optional: bool = False) -> int | None:
    value = r.get(name, int, optional)
    if value is not None and not 1 <= value <= 4:
        raise ProgressFormatError(f"{r.where}: '{name}' must be 1 (Again) to 4 (Easy)")
    return value

