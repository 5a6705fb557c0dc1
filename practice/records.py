"""What the progress store holds: attempts with their answers, FSRS reviews, mock interviews,
and the UTC timestamps they carry (stored as ISO text of one width, so text order is time order)."""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fsrs import Card

from solvers.verdicts import Verdict

MODES = ("practice", "drill", "mock")


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
        return bool(self.answers) and self.answers_correct == len(self.answers)

    @property
    def answers_correct(self) -> int:
        return sum(a.verdict == Verdict.CORRECT for a in self.answers)

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


HOLD_KINDS = ("suspended", "buried")  # the holds table's CHECK (practice.schema)


@dataclass(frozen=True)
class Hold:
    """A question kept out of the drill: suspended (until released) or buried (until `until`)."""

    question_id: str
    kind: str
    until: datetime | None = None


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
