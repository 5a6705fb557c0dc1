"""What the progress store holds: attempts with their answers, FSRS reviews, mock interviews,
and the UTC timestamps they carry (stored as ISO text of one width, so text order is time order)."""
from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fsrs import Card, State

from solvers.bank import PUSH_PREFIX, STAGE_KINDS
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


# Every time the app writes is now, a start a little before it, or a due date at most the
# scheduler's 100 years ahead: a stored or imported time outside these years is damage, and
# refused before date arithmetic (stats' day ranges, time zones) overflows on it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)


def sane_time(moment: datetime) -> datetime:
    """`moment` in UTC; ValueError for a naive time or one outside EARLIEST..LATEST."""
    try:
        moment = utc(moment)
    except OverflowError as error:  # year 1 with a positive offset is before year 1 in UTC
        raise ValueError("timestamp out of range") from error
    if not EARLIEST <= moment < LATEST:
        raise ValueError(f"timestamp {moment:%Y-%m-%d} is not between {EARLIEST:%Y} and {LATEST:%Y}")
    return moment


def from_text(text: str) -> datetime:
    """A stored timestamp; ValueError for one that is not ISO, naive, or out of range."""
    return sane_time(datetime.fromisoformat(text))


def card_id_for(question_id: str) -> int:
    """A card id derived from the question id: the same on every machine, so merges agree."""
    return int(hashlib.sha1(question_id.encode()).hexdigest()[:12], 16)


# The widest stability (days) and difficulty range FSRS writes: its intervals stop at 100 years,
# difficulty is clamped to 1..10. A card outside them (NaN, -1e300) would fail every review.
MAX_STABILITY = 1e7


def sound_card(card: Card) -> Card:
    """`card` if the scheduler can review it; ValueError naming the field that it cannot."""
    if not isinstance(card.state, State):
        raise ValueError("state is not an FSRS state")
    if card.step is not None and (isinstance(card.step, bool) or not isinstance(card.step, int)
                                  or not 0 <= card.step < 1000):
        raise ValueError("step must be a small whole number or null")
    if card.stability is not None and not 0 < card.stability <= MAX_STABILITY:  # NaN fails too
        raise ValueError(f"stability {card.stability!r} is not above 0 and at most {MAX_STABILITY:g} days")
    if card.difficulty is not None and not 1 <= card.difficulty <= 10:
        raise ValueError(f"difficulty {card.difficulty!r} is not between 1 and 10")
    card.due = sane_time(card.due)
    if card.last_review is not None:
        card.last_review = sane_time(card.last_review)
    return card


def card_from_dict(data: object) -> Card:
    """A card as the store writes it; ValueError for anything else."""
    if not isinstance(data, dict):
        raise ValueError("a card is a JSON object")
    try:
        return sound_card(Card.from_dict(data))  # type: ignore[arg-type]
    except (KeyError, TypeError, OverflowError) as error:
        raise ValueError(f"not an FSRS card ({type(error).__name__}: {error})") from error


def card_from_json(text: str) -> Card:
    """A card as the store keeps it (JSON text); ValueError for anything else."""
    try:
        data = json.loads(text)
    except (TypeError, RecursionError) as error:  # not text; nested past the parser's depth
        raise ValueError(f"not card JSON ({type(error).__name__})") from error
    return card_from_dict(data)


# Records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerRecord:
    key: str
    typed: str
    verdict: str
    error: float | None = None  # relative error (decades for log answers)
    slip: str | None = None
    stage: int = 0  # the index of the interview stage that asked it
    stage_kind: str = "opening"  # that stage's kind, one of STAGE_KINDS


def default_stage(key: str) -> tuple[int, str]:
    """The stage of an answer kept without one (before stages, or written without them): a push's
    key (followup.<key>, followup2.<key>) the push after the opening, any other the opening. The
    store's migration v4 backfills the same."""
    return (1, "push") if key.startswith(PUSH_PREFIX) else (0, "opening")


def checked_stage(stage: object) -> tuple[int, str]:
    """`stage` as (index, kind); ValueError for anything the store would refuse."""
    if not (isinstance(stage, tuple) and len(stage) == 2):
        raise ValueError(f"a stage is (index, kind), not {stage!r}")
    index, kind = stage
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"a stage index is a whole number, zero or more, not {index!r}")
    if kind not in STAGE_KINDS:
        raise ValueError(f"a stage kind is one of {', '.join(STAGE_KINDS)}, not {kind!r}")
    return index, kind


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

    @property
    def ahead(self) -> bool:
        """Made before the card was due (a review ahead, as Anki's log marks an early review): FSRS
        schedules it from the days actually elapsed, so its interval grows less than on time."""
        return self.card_before is not None and self.card_before.last_review is not None \
            and self.reviewed < self.card_before.due


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

    def answers_by_stage_kind(self) -> dict[str, tuple[int, int]]:
        """(answers right, asked) per kind of stage that asked them, in the interview's order."""
        tally = {kind: [0, 0] for kind in STAGE_KINDS}
        for attempt in self.attempts:
            for answer in attempt.answers:
                counts = tally.setdefault(answer.stage_kind, [0, 0])
                counts[0] += answer.verdict == Verdict.CORRECT
                counts[1] += 1
        return {kind: (right, asked) for kind, (right, asked) in tally.items() if asked}
