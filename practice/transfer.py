"""Progress as a JSON file: export everything, and merge an export into a store.

The layout is versioned (EXPORT_SCHEMA); a file of another format or schema is refused
with a message, writing nothing.
"""
from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from fsrs import Card, Scheduler

from practice.records import (
    HOLD_KINDS,
    MODES,
    AnswerRecord,
    Attempt,
    Hold,
    Mock,
    Review,
    card_from_dict,
    checked_stage,
    default_stage,
    from_text,
    now_utc,
    to_text,
)
from practice.review import replay
from practice.store import (
    ProgressStore,
    card_in,
    hold_from_row,
    insert_attempt,
    insert_review,
    put_card,
    put_hold,
    replace_review,
    review_from_row,
)

EXPORT_FORMAT = "infradrill-progress"
EXPORT_SCHEMA = 3  # the JSON layout of export_progress; bump it when the layout changes
READS_SCHEMAS = (1, 2, 3)  # 1 had no holds: such a file imports with none; before 3 answers had no stage


class ProgressFormatError(ValueError):
    """An import file that is not infradrill progress of the schema this code reads; `problems`
    names every refused record, one line each."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


@dataclass(frozen=True)
class ImportResult:
    attempts_added: int = 0
    attempts_present: int = 0
    reviews_added: int = 0
    mocks_added: int = 0
    cards_changed: int = 0
    holds_changed: int = 0

    def summary(self) -> str:
        return (f"{self.attempts_added} attempt(s) added, {self.attempts_present} already present; "
                f"{self.reviews_added} review(s) and {self.mocks_added} mock interview(s) added; "
                f"{self.cards_changed} card(s) and {self.holds_changed} hold(s) updated")



# Export and import ------------------------------------------------------------------------
def export_progress(store: ProgressStore) -> dict[str, Any]:
    """Everything, as plain JSON data (see import_progress)."""
    attempts = store.attempts()
    return {
        "format": EXPORT_FORMAT,
        "schema": EXPORT_SCHEMA,
        "exported": to_text(now_utc()),
        "attempts": [_attempt_to_json(a) for a in attempts],
        "mocks": [_mock_to_json(m) for m in store.mocks()],
        "reviews": [_review_to_json(r) for r in store.reviews()],
        "cards": [{"question_id": qid, "card": card.to_dict()} for qid, card in sorted(store.cards().items())],
        "holds": [_hold_to_json(h) for h in store.holds()],
    }

def import_progress(store: ProgressStore, data: Any, scheduler: Scheduler | None = None) -> ImportResult:
    """Merge an export into this store, in one transaction: nothing twice (attempts and
    reviews by uid, mocks by id). A card whose question gained reviews from the file is
    the file's card if we had no reviews of it; otherwise, with a scheduler, it is
    rebuilt by replaying the merged review log, and without one the card reviewed last
    wins. A hold (suspended, buried) in the file is taken where it holds longer than ours: a
    suspension over a burial, a later burial over an earlier one. Raises ProgressFormatError,
    writing nothing, for a file of another format."""
    attempts, mocks, reviews, cards, holds = _parse_export(data)
    added = present = reviews_added = mocks_added = 0
    with store.transaction() as conn:
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
            insert_attempt(conn, attempt)
            added += 1
        gained: set[str] = set()
        for review in reviews:
            if conn.execute("SELECT 1 FROM reviews WHERE uid = ?", (review.uid,)).fetchone():
                continue
            if review.attempt_uid is not None and not conn.execute(
                    "SELECT 1 FROM attempts WHERE uid = ?", (review.attempt_uid,)).fetchone():
                review = replace(review, attempt_uid=None)
            insert_review(conn, review)
            reviews_added += 1
            gained.add(review.question_id)
        changed = 0
        for question_id in sorted(set(cards) | gained):
            if question_id in had_reviews:
                if question_id not in gained:
                    continue  # nothing new about it in the file: ours stands
                if scheduler is not None:
                    _replay(conn, question_id, scheduler)
                elif question_id in cards and _later(cards[question_id], card_in(conn, question_id)):
                    put_card(conn, question_id, cards[question_id])
                else:
                    continue
            elif question_id in cards:
                put_card(conn, question_id, cards[question_id])
            elif scheduler is not None:
                _replay(conn, question_id, scheduler)
            else:
                continue
            changed += 1
        holds_changed = sum(_merge_hold(conn, hold) for hold in holds)
    return ImportResult(added, present, reviews_added, mocks_added, changed, holds_changed)


def _merge_hold(conn: sqlite3.Connection, hold: Hold) -> bool:
    """Keep `hold` if it holds the question out longer than the store's own; whether it did."""
    row = conn.execute("SELECT question_id, kind, until FROM holds WHERE question_id = ?",
                       (hold.question_id,)).fetchone()
    if row is not None and _reach(hold_from_row(row)) >= _reach(hold):
        return False
    put_hold(conn, hold)
    return True


def _reach(hold: Hold) -> tuple[bool, datetime]:
    """How long a hold keeps its question out: a suspension beyond any burial."""
    return hold.kind == "suspended", hold.until or datetime.min.replace(tzinfo=UTC)


def _replay(conn: sqlite3.Connection, question_id: str, scheduler: Scheduler) -> None:
    rows = conn.execute("SELECT uid, question_id, attempt_uid, rating, reviewed, duration_ms, card_before, "
                        "card_after FROM reviews WHERE question_id = ? ORDER BY reviewed, uid",
                        (question_id,)).fetchall()
    replayed = replay(scheduler, question_id, [review_from_row(row) for row in rows])
    for review in replayed:
        replace_review(conn, review)


def _later(theirs: Card, mine: Card | None) -> bool:
    """Whether the file's card was reviewed after ours."""
    if mine is None:
        return True
    return (theirs.last_review or theirs.due) > (mine.last_review or mine.due)


# JSON form -------------------------------------------------------------------------------------
def _attempt_to_json(a: Attempt) -> dict[str, Any]:
    return {"uid": a.uid, "question_id": a.question_id, "variant": a.variant, "mode": a.mode,
            "started": to_text(a.started), "submitted": to_text(a.submitted), "seconds": a.seconds,
            "hints_used": a.hints_used, "mock_id": a.mock_id, "suggested": a.suggested, "rating": a.rating,
            "answers": [{"key": x.key, "typed": x.typed, "verdict": x.verdict, "error": x.error, "slip": x.slip,
                         "stage": x.stage, "stage_kind": x.stage_kind} for x in a.answers]}


def _mock_to_json(m: Mock) -> dict[str, Any]:
    return {"id": m.id, "started": to_text(m.started), "finished": to_text(m.finished) if m.finished else None,
            "planned": m.planned, "budget_seconds": m.budget_seconds}


def _hold_to_json(h: Hold) -> dict[str, Any]:
    return {"question_id": h.question_id, "kind": h.kind, "until": to_text(h.until) if h.until else None}


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
        # Every number kept is a count, a duration or an error: finite, not negative, and within
        # what SQLite and a float hold exactly.
        if isinstance(value, (int, float)) and not (math.isfinite(value) and 0 <= value < 2**53):
            raise ProgressFormatError(f"{self.where}: field '{name}' must be a finite number, zero or more")
        return value

    def time(self, name: str, optional: bool = False) -> datetime | None:
        text = self.get(name, str, optional)
        if text is None:
            return None
        try:
            return from_text(text)
        except ValueError as error:
            raise ProgressFormatError(f"{self.where}: field '{name}' is not a UTC timestamp ({error})") from error

    def card(self, name: str, optional: bool = False) -> Card | None:
        value = self.get(name, dict, optional)
        if value is None:
            return None
        try:
            return card_from_dict(value)
        except ValueError as error:
            raise ProgressFormatError(f"{self.where}: field '{name}' is not a sound FSRS card: {error}") from error


def _parse_export(data: Any) -> tuple[list[Attempt], list[Mock], list[Review], dict[str, Card], list[Hold]]:
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise ProgressFormatError("not an infradrill progress export (no \"format\": \"infradrill-progress\")")
    schema = data.get("schema")
    if isinstance(schema, bool) or schema not in READS_SCHEMAS:
        raise ProgressFormatError(f"this export has progress schema {schema!r}; this infradrill reads schemas "
                                  f"{', '.join(map(str, READS_SCHEMAS))} — export it again with a matching "
                                  "infradrill version")

    def records(name: str) -> list[Any]:
        value = data.get(name, [])
        if not isinstance(value, list):
            raise ProgressFormatError(f"'{name}' must be a list")
        return value

    problems: list[str] = []

    def each(name: str, parse: Callable[[Any, str], Any]) -> list[Any]:
        """Every record of one list that reads, and a line in `problems` for each that does not."""
        parsed = []
        for i, raw in enumerate(records(name)):
            try:
                parsed.append(parse(raw, f"{name}[{i}]"))
            except ProgressFormatError as error:
                problems.append(str(error))
        return parsed

    attempts = each("attempts", partial(_attempt, staged=schema >= 3))
    mocks = each("mocks", _mock)
    reviews = each("reviews", _review)
    cards = dict(each("cards", _card))
    holds = each("holds", _hold)
    known_mocks = {m.id for m in mocks}
    problems += [f"attempt {a.uid} names mock interview {a.mock_id}, which the file lacks"
                 for a in attempts if a.mock_id is not None and a.mock_id not in known_mocks]
    if problems:  # nothing is half-imported: every refused record is named, and none is written
        raise ProgressFormatError(f"{len(problems)} record(s) refused, nothing imported", problems)
    return attempts, mocks, reviews, cards, holds


_NUMBER = (int, float)


def _attempt(raw: Any, where: str, staged: bool = True) -> Attempt:
    """An attempt; `staged`: its answers carry their stage (schema 3 on), else each takes default_stage."""
    r = _Reader(raw, where)
    mode = r.get("mode", str)
    if mode not in MODES:
        raise ProgressFormatError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    answers = []
    for j, item in enumerate(r.get("answers", list)):
        x = _Reader(item, f"{where}.answers[{j}]")
        key = x.get("key", str)
        answers.append(AnswerRecord(key, x.get("typed", str), x.get("verdict", str), x.get("error", _NUMBER, True),
                                    x.get("slip", str, True), *(_stage(x) if staged else default_stage(key))))
    keys = [a.key for a in answers]
    if len(set(keys)) != len(keys):
        raise ProgressFormatError(f"{where}: an answer key appears twice")
    return Attempt(question_id=r.get("question_id", str), variant=r.get("variant", str), mode=mode,
                   started=r.time("started"), submitted=r.time("submitted"),  # type: ignore[arg-type]
                   seconds=float(r.get("seconds", _NUMBER)), hints_used=r.get("hints_used", int),
                   answers=tuple(answers), mock_id=r.get("mock_id", str, True),
                   suggested=_rating(r, "suggested", True), rating=_rating(r, "rating", True), uid=r.get("uid", str))


def _mock(raw: Any, where: str) -> Mock:
    r = _Reader(raw, where)
    return Mock(r.get("id", str), r.time("started"), r.get("planned", int),  # type: ignore[arg-type]
                r.get("budget_seconds", _NUMBER, True), r.time("finished", True))


def _review(raw: Any, where: str) -> Review:
    r = _Reader(raw, where)
    return Review(question_id=r.get("question_id", str), rating=_rating(r, "rating"),  # type: ignore[arg-type]
                  reviewed=r.time("reviewed"), card_after=r.card("card_after"),  # type: ignore[arg-type]
                  card_before=r.card("card_before", True), attempt_uid=r.get("attempt_uid", str, True),
                  duration_ms=r.get("duration_ms", int, True), uid=r.get("uid", str))


def _card(raw: Any, where: str) -> tuple[str, Card]:
    r = _Reader(raw, where)
    return r.get("question_id", str), r.card("card")  # type: ignore[return-value]


def _hold(raw: Any, where: str) -> Hold:
    r = _Reader(raw, where)
    kind = r.get("kind", str)
    if kind not in HOLD_KINDS:
        raise ProgressFormatError(f"{where}: kind {kind!r} is not one of {', '.join(HOLD_KINDS)}")
    until = r.time("until", True)
    if kind == "buried" and until is None:
        raise ProgressFormatError(f"{where}: a buried question needs 'until'")
    return Hold(r.get("question_id", str), kind, until)


def _stage(r: _Reader) -> tuple[int, str]:
    try:
        return checked_stage((r.get("stage", int), r.get("stage_kind", str)))
    except ValueError as error:
        raise ProgressFormatError(f"{r.where}: {error}") from error


def _rating(r: _Reader, name: str, optional: bool = False) -> int | None:
    value = r.get(name, int, optional)
    if value is not None and not 1 <= value <= 4:
        raise ProgressFormatError(f"{r.where}: '{name}' must be 1 (Again) to 4 (Easy)")
    return value

