"""The progress file: where it lives, its schema and migrations, and opening it safely.

One file, `progress.sqlite3`, in the data directory ($INFRADRILL_DATA_DIR, else the
platform's user data directory). WAL mode, a busy timeout so that two instances can write
at once, `PRAGMA application_id` as the schema marker and `PRAGMA user_version` as the
schema version, upgraded in place by the migrations below (each in one transaction).

Nothing is deleted silently: a file that is not ours (not SQLite, SQLite without our
marker, a newer schema than this code knows, or corrupt) is moved aside to
`progress.sqlite3.corrupt-YYYYmmdd-HHMMSS` and a notice says so; rows the store cannot read are
removed from it and kept, as JSON, in `progress.sqlite3.damaged-rows-YYYYmmdd-HHMMSS.json`.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from practice.records import HOLD_KINDS, MODES, card_from_json, from_text, now_utc, to_text
from solvers.bank import STAGE_KINDS

FILE_NAME = "progress.sqlite3"
APPLICATION_ID = 0x49447231  # 'IDr1': marks a file as an infradrill progress store
BUSY_TIMEOUT_MS = 5000

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
    (  # v3: questions held out of the drill, as Anki's suspend (until released) and bury (until a time)
        """CREATE TABLE holds (
            question_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('suspended', 'buried')),
            until TEXT
        )""",
    ),
    (  # v4: the interview stage that asked each answer. Answers stored before stages came from one
        # opening and its follow-up (keys 'followup.' ..., 'followup2.' ...), the push after it:
        # records.default_stage says the same for what is written without a stage.
        "ALTER TABLE answers ADD COLUMN stage INTEGER NOT NULL DEFAULT 0 CHECK (stage >= 0)",
        "ALTER TABLE answers ADD COLUMN stage_kind TEXT NOT NULL DEFAULT 'opening' "
        "CHECK (stage_kind IN ('opening', 'ask', 'recall', 'push'))",
        "UPDATE answers SET stage = 1, stage_kind = 'push' WHERE key GLOB 'followup*'",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

# sqlite error codes that mean "this file is not a (sound) database", as opposed to
# "cannot open / busy / read-only", which are reported and never trigger a move.
_CORRUPT_CODES = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}


class StoreError(RuntimeError):
    """The store cannot be opened or written (permissions, disk, a lock held too long)."""


class NotOurs(Exception):
    """The file at the store's path is not a usable infradrill store (the message says why)."""


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


# Opening, checking, moving aside ------------------------------------------------------------
def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def is_corruption(error: sqlite3.Error) -> bool:
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
    # A row breaking a CHECK or NOT NULL is one bad row, which repair_rows removes; anything
    # else (a damaged page, a broken index) is the file's.
    check = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
    damage = [line for line in check if line != "ok" and not line.startswith(_ROW_FAULTS)]
    if damage:
        return "it is damaged (integrity check: " + "; ".join(damage[:3]) + ")"
    return None


_ROW_FAULTS = ("CHECK constraint failed in ", "NULL value in ")


def _aside_name(path: Path, stamp: datetime, what: str = "corrupt", suffix: str = "") -> Path:
    base = f"{path.name}.{what}-{stamp.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = path.with_name(base + suffix), 1
    while candidate.exists():
        candidate, n = path.with_name(f"{base}-{n}{suffix}"), n + 1
    return candidate


def move_aside(path: Path, reason: str) -> str:
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
        if 0 < version < SCHEMA_VERSION and _schema_problem(conn) is None:
            version = SCHEMA_VERSION  # the tables are already the latest, the number behind (restored by hand)
        if version == 0:
            if _tables(conn) or conn.execute("PRAGMA application_id").fetchone()[0] not in (0, APPLICATION_ID):
                raise NotOurs("it has tables but no infradrill schema version")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version == 0:
            conn.execute("INSERT INTO meta (key, value) VALUES ('created', ?)", (to_text(now_utc()),))
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
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


def _columns(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    return {table: tuple(row[1] for row in conn.execute(f"PRAGMA table_info('{table}')"))
            for table in sorted(_tables(conn))}


def _expected_columns() -> dict[str, tuple[str, ...]]:
    """The tables and columns the migrations make, from a scratch database in memory."""
    scratch = sqlite3.connect(":memory:")
    try:
        for statements in MIGRATIONS:
            for statement in statements:
                scratch.execute(statement)
        return _columns(scratch)
    finally:
        scratch.close()


def _schema_problem(conn: sqlite3.Connection) -> str | None:
    """Why the tables are not the ones this schema version has (a table dropped, a column renamed)."""
    have, want = _columns(conn), _expected_columns()
    missing = [table for table in want if table not in have]
    if missing:
        return f"table(s) {', '.join(missing)} are missing"
    changed = [table for table in want if have[table] != want[table]]
    if changed:
        return f"the columns of {', '.join(changed)} are not schema v{SCHEMA_VERSION}'s"
    return None


def _is_time(text: object) -> bool:
    try:
        return isinstance(text, str) and from_text(text) is not None
    except ValueError:
        return False


def _is_card(text: object) -> bool:
    try:
        return isinstance(text, str) and card_from_json(text) is not None
    except (ValueError, KeyError, TypeError):
        return False


def _is_rating(value: object) -> bool:
    return isinstance(value, int) and 1 <= value <= 4


def _is_text(value: object) -> bool:
    return isinstance(value, str)


# Rows a store needs readable: (table, what a row is, key column, checks of its columns). The
# CHECK constraints are here too: a row written past them (another tool, a bit flip) is removed
# as one damaged row, not taken as damage to the whole file.
_ROW_CHECKS = (
    ("attempts", "attempt", "uid", (("question_id", _is_text), ("variant", _is_text), ("mode", MODES.__contains__),
                                    ("started", _is_time), ("submitted", _is_time))),
    ("reviews", "review", "uid", (("question_id", _is_text), ("rating", _is_rating), ("reviewed", _is_time),
                                  ("card_after", _is_card), ("card_before", lambda v: v is None or _is_card(v)))),
    ("cards", "card", "question_id", (("card", _is_card), ("due", _is_time))),
    ("mocks", "mock interview", "id", (("started", _is_time), ("finished", lambda v: v is None or _is_time(v)))),
    ("holds", "suspended or buried question", "question_id",
     (("kind", HOLD_KINDS.__contains__),
      # A burial needs its end (as an import does): read as the text 'no end', which is no time.
      ("COALESCE(until, CASE kind WHEN 'buried' THEN 'no end' END)", lambda v: v is None or _is_time(v)))),
)
# A rating out of range is forgotten (the attempt stays, as one not rated yet).
_RATING_RESETS = tuple(f"UPDATE attempts SET {column} = NULL WHERE {column} IS NOT NULL AND "
                       f"NOT (typeof({column}) = 'integer' AND {column} BETWEEN 1 AND 4)"
                       for column in ("rating", "suggested"))
# A figure an import would refuse (every number kept is finite, not negative and under 2^53: a duration, an
# error, a count) is set again from what it counts, or cleared where it is optional: the record stays.
_NUMBER_RESETS = tuple(
    f"UPDATE {table} SET {column} = {value} WHERE {column} IS NOT NULL AND NOT (typeof({column}) IN ({kinds}) "
    f"AND {column} >= 0 AND {column} < 9007199254740992)"
    for table, column, kinds, value in (
        ("attempts", "seconds", "'integer', 'real'",
         "COALESCE(MAX(0, ROUND((julianday(submitted) - julianday(started)) * 86400, 3)), 0)"),
        ("attempts", "hints_used", "'integer'", "0"),
        ("answers", "error", "'integer', 'real'", "NULL"),
        ("mocks", "planned", "'integer'", "(SELECT COUNT(*) FROM attempts WHERE attempts.mock_id = mocks.id)"),
        ("mocks", "budget_seconds", "'integer', 'real'", "NULL"),
        ("reviews", "duration_ms", "'integer'", "NULL")))
# An answer's stage out of range is set again from its key, as migration v4 (records.default_stage) sets it.
_STAGE_RESET = ("UPDATE answers SET stage = CASE WHEN key GLOB 'followup*' THEN 1 ELSE 0 END, "
                "stage_kind = CASE WHEN key GLOB 'followup*' THEN 'push' ELSE 'opening' END "
                "WHERE NOT (typeof(stage) = 'integer' AND stage >= 0) OR stage_kind IS NULL "
                f"OR stage_kind NOT IN ({', '.join(repr(kind) for kind in STAGE_KINDS)})")


def _rows(conn: sqlite3.Connection, table: str, column: str, keys: list) -> list[dict]:
    """The rows of `table` whose `column` is one of `keys` (NULL too: a damaged key may be), as dicts."""
    rows = []
    for key in keys:
        cursor = conn.execute(f"SELECT * FROM {table} WHERE {column} IS ?", (key,))
        names = [d[0] for d in cursor.description]
        rows += [dict(zip(names, row, strict=True)) for row in cursor]
    return rows


def _keep(conn: sqlite3.Connection, removed: dict[str, list[dict]]) -> str:
    """Write the rows about to be removed beside the store (before the removal commits): the
    name of the file, or why it could not be written (the rows go all the same: unreadable,
    they would stop every command)."""
    path = Path(conn.execute("PRAGMA database_list").fetchone()[2])
    target = _aside_name(path, datetime.now(), "damaged-rows", ".json")
    text = json.dumps(removed, indent=1, default=lambda v: v.hex() if isinstance(v, bytes) else repr(v))
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return f"they could not be kept ({error.strerror or error})"
    return f"they are kept in {target.name}"


def repair_rows(conn: sqlite3.Connection) -> list[str]:
    """Remove rows the store could not read (bad timestamps, cards that are not sound FSRS
    cards, values past the schema's CHECKs), in one transaction, with one notice per kind of row
    removed; the rest of the progress stays, and the removed rows (an attempt's answers with it)
    are kept as JSON beside the store."""
    notices = []
    removed: dict[str, list[dict]] = {}
    said: list[tuple[str, str]] = []  # (what, shown) of each kind of row removed, for its notice
    conn.execute("BEGIN IMMEDIATE")
    try:
        reset = sum(conn.execute(statement).rowcount for statement in _RATING_RESETS)
        if reset:
            notices.append(f"The progress store had {reset} rating(s) out of range; they were cleared and the "
                           "attempts kept.")
        refigured = sum(conn.execute(statement).rowcount for statement in _NUMBER_RESETS)
        if refigured:
            notices.append(f"The progress store had {refigured} figure(s) out of range (a duration, an error or a "
                           "count); they were set again from what they count, or cleared, and the records kept.")
        restaged = conn.execute(_STAGE_RESET).rowcount
        if restaged:
            notices.append(f"The progress store had {restaged} answer(s) with a stage out of range; their stage "
                           "was taken from the answer's key and the answers kept.")
        for table, what, key, checks in _ROW_CHECKS:
            names = [column for column, _ in checks]
            bad = [row[0] for row in conn.execute(f"SELECT {key}, {', '.join(names)} FROM {table}")
                   if not all(check(value) for (_, check), value in zip(checks, row[1:], strict=True))]
            if bad:
                removed[table] = _rows(conn, table, key, bad)
                if table == "attempts":  # the delete cascades to their answers
                    removed["answers"] = _rows(conn, "answers", "attempt_uid", bad)
                if table == "mocks":  # its attempts stay, as practice outside a mock
                    conn.executemany("UPDATE attempts SET mock_id = NULL WHERE mock_id = ?", [(k,) for k in bad])
                conn.executemany(f"DELETE FROM {table} WHERE {key} IS ?", [(k,) for k in bad])
                said.append((f"{len(bad)} damaged {what} row(s)",
                             ", ".join(str(k) for k in bad[:3]) + (" ..." if len(bad) > 3 else "")))
        if said:
            kept = _keep(conn, removed)
            notices += [f"The progress store had {count} ({shown}); they were removed from it, {kept}, and the "
                        "rest of your progress kept." for count, shown in said]
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return notices


def prepare(path: Path) -> tuple[sqlite3.Connection, list[str]]:
    """Open, check, migrate, repair damaged rows. Returns the connection and notices of repairs;
    raises NotOurs, or sqlite3.DatabaseError for a damaged file."""
    if path.exists() and not path.is_file():  # a FIFO would block the first read for ever
        raise StoreError(f"{path} is not a regular file")
    reason = _sniff(path)
    if reason is not None:
        raise NotOurs(reason)
    conn = _connect(path)
    try:
        problem = _problem(conn)
        if problem is not None:
            raise NotOurs(problem)
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn)
        problem = _schema_problem(conn)
        if problem is not None:
            raise NotOurs(problem)
        return conn, repair_rows(conn)
    except BaseException:
        conn.close()
        raise
