"""Spaced repetition over questions with FSRS (the `fsrs` package): one card per question.

Each review draws a fresh variant of a due question; its grade suggests the rating
(suggest_rating), which the user accepts or overrides (Reviewer.rate). The card is
scheduled at once with the suggestion, in the same transaction as the attempt, so a crash
right after submitting loses nothing; a different rating chosen later replaces that review.

New users meet the bank in a sensible order (group F first, then the catalogue's group
order) with a daily cap on new questions, counted from questions first reviewed today.
No Textual here: the screens call this module from their workers.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any, Protocol

from fsrs import Card, Rating, Scheduler

from practice.config import Setting, SettingsError, read_table, write_table
from practice.records import (
    AnswerRecord,
    Attempt,
    Hold,
    Review,
    card_id_for,
    checked_stage,
    default_stage,
    now_utc,
    utc,
)
from practice.store import ProgressStore
from solvers.groups import group_rank
from solvers.verdicts import Verdict

QUICK_SECONDS_PER_ANSWER = 30.0  # "quick": at most this many seconds per graded answer
NEW_PER_DAY = 5
DESIRED_RETENTION = 0.9


class QuestionLike(Protocol):
    """What scheduling reads of a question (solvers.bank.Question, frozen): read-only fields."""

    @property
    def id(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def difficulty(self) -> int: ...
    @property
    def requires(self) -> tuple[str, ...]: ...


# Replaying a review log -------------------------------------------------------------------------
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


# Rating suggestion ------------------------------------------------------------------------------
def suggest_rating(grades: Sequence[Any], seconds: float, hints_used: int = 0, answer_count: int | None = None,
                   quick_seconds_per_answer: float = QUICK_SECONDS_PER_ANSWER) -> Rating:
    """The rating a grade suggests.

    all correct and quick (at most `quick_seconds_per_answer` per graded answer) -> Easy;
    all correct -> Good; at least half correct or close -> Hard; less (a question mostly given up,
    two right of fifteen) -> Again, as an Anki user would press it.
    Hints used lower it one step, never below Again. `grades` are solvers.answers.Grade
    objects or their verdict strings; `answer_count` defaults to their number.
    """
    verdicts = [getattr(g, "verdict", g) for g in grades]
    if not verdicts:
        raise ValueError("no grades to suggest a rating from")
    count = len(verdicts) if answer_count is None else answer_count
    if all(v == Verdict.CORRECT for v in verdicts):
        rating = Rating.Easy if seconds <= quick_seconds_per_answer * max(count, 1) else Rating.Good
    elif 2 * sum(v in (Verdict.CORRECT, Verdict.CLOSE) for v in verdicts) >= len(verdicts):
        rating = Rating.Hard
    else:
        rating = Rating.Again
    if hints_used > 0 and rating > Rating.Again:
        rating = Rating(rating - 1)
    return rating


Stages = Mapping[str, tuple[int, str]]  # stored key -> (stage index, stage kind): solvers.interview.stored_stages


def answers_from_grades(grades: Sequence[Any], typed: Mapping[str, str],
                        stages: Stages | None = None) -> tuple[AnswerRecord, ...]:
    """Store records from solvers.answers.Grade objects, the text typed for each key and the stage
    that asked it (a key `stages` lacks: records.default_stage). ValueError for a stage the store refuses."""
    stages = stages or {}
    return tuple(AnswerRecord(g.key, typed.get(g.key, ""), g.verdict, g.error, g.slip,
                              *checked_stage(stages.get(g.key, default_stage(g.key)))) for g in grades)


# Settings ------------------------------------------------------------------------------------------
REVIEW_TABLE = "review"  # their table in the settings file (practice.config)
REVIEW_SETTINGS = (
    Setting("new_per_day", "New questions per day", NEW_PER_DAY, 0, 1000,
            help="new questions the drill brings in a day, besides the reviews due"),
    Setting("desired_retention", "Desired retention", DESIRED_RETENTION, 0.7, 0.99,
            help="the recall FSRS aims for: higher means shorter intervals"),
    Setting("quick_seconds_per_answer", "Quick answer (seconds)", QUICK_SECONDS_PER_ANSWER, 1, 3600,
            help="all correct this fast, per answer, suggests Easy, not Good"),
)


@dataclass(frozen=True)
class ReviewSettings:
    desired_retention: float = DESIRED_RETENTION
    new_per_day: int = NEW_PER_DAY
    quick_seconds_per_answer: float = QUICK_SECONDS_PER_ANSWER
    enable_fuzzing: bool = False
    learning_steps: tuple[timedelta, ...] = (timedelta(minutes=1), timedelta(minutes=10))
    relearning_steps: tuple[timedelta, ...] = (timedelta(minutes=10),)

    def scheduler(self) -> Scheduler:
        return Scheduler(desired_retention=self.desired_retention, learning_steps=self.learning_steps,
                         relearning_steps=self.relearning_steps, enable_fuzzing=self.enable_fuzzing)

    @classmethod
    def load(cls, store: ProgressStore | None = None, path: Path | None = None) -> tuple[ReviewSettings, list[str]]:
        """The settings in the settings file (a missing or invalid value keeps its default), and a
        notice for each problem. With `store`, a setting an older infradrill kept in the store, for
        which the file holds no valid value, is moved to the file first (once: the store forgets it)."""
        notices = cls._migrate(store, path) if store is not None else []
        values, problems = read_table(REVIEW_TABLE, REVIEW_SETTINGS, path)
        return replace(cls(), **values), notices + problems

    def save(self, path: Path | None = None) -> Path:
        """Write these settings to the settings file; raises practice.config.SettingsError."""
        return write_table(REVIEW_TABLE, {s.name: getattr(self, s.name) for s in REVIEW_SETTINGS}, path)

    @staticmethod
    def _migrate(store: ProgressStore, path: Path | None) -> list[str]:
        legacy = store.legacy_settings()
        if not legacy:
            return []
        in_file, _ = read_table(REVIEW_TABLE, REVIEW_SETTINGS, path)
        moved: dict[str, Any] = {}
        for setting in REVIEW_SETTINGS:
            text = legacy.get(setting.name)
            if text is None or setting.name in in_file:
                continue
            try:
                moved[setting.name] = setting.parse(text)
            except ValueError:
                continue  # never valid: the default it had all along stands
        try:
            target = write_table(REVIEW_TABLE, moved, path) if moved else None
        except SettingsError as error:
            return [f"settings stay in the progress store for now: {error}"]
        store.drop_legacy_settings()
        return [f"moved {', '.join(moved)} from the progress store to {target}"] if target else []


# Results -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submitted:
    attempt: Attempt
    suggested: Rating
    card: Card | None  # the card as scheduled with the suggestion (None: not scheduled)


@dataclass(frozen=True)
class DueSummary:
    due_now: int  # cards due at this moment
    due_today: int  # cards due before the end of the local day (includes due_now)
    new_today: int  # new questions still allowed today (under the daily cap)
    introduced_today: int  # questions first reviewed today


def local_tz() -> tzinfo:
    return datetime.now().astimezone().tzinfo  # type: ignore[return-value]


def day_bounds(now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """Start and end (UTC) of the local day that contains `now`."""
    day = now.astimezone(tz).date()
    start = datetime.combine(day, time(0), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return utc(start), utc(end)


def introduction_key(question: QuestionLike) -> tuple[int, int, str]:
    """Group F first, then the groups' learning order (groups.yaml); easier first within a group."""
    return group_rank(question.group), question.difficulty, question.id


def prerequisites_first(questions: Iterable[QuestionLike]) -> list[QuestionLike]:
    """The questions in introduction order, each after the prerequisites it declares (those in
    the bank): the earliest question whose prerequisites are all placed goes next."""
    pending = sorted(questions, key=introduction_key)
    ids = {q.id for q in pending}
    placed: list[QuestionLike] = []
    done: set[str] = set()
    while pending:
        ready = next((q for q in pending if all(r in done or r not in ids for r in q.requires)), pending[0])
        pending.remove(ready)  # pending[0]: a cycle (validate reports it) must not stall the drill
        placed.append(ready)
        done.add(ready.id)
    return placed


def pick_mock(questions: Iterable[QuestionLike], count: int = 5, rng: random.Random | None = None) -> list[str]:
    """`count` question ids across topics: one topic after another, a random question from each."""
    rng = rng or random.Random()
    by_topic: dict[str, list[str]] = {}
    for q in sorted(questions, key=lambda q: q.id):
        by_topic.setdefault(q.topic, []).append(q.id)
    for ids in by_topic.values():
        rng.shuffle(ids)
    topics = sorted(by_topic)
    rng.shuffle(topics)
    picked: list[str] = []
    while len(picked) < count and any(by_topic.values()):
        for topic in topics:
            if by_topic[topic] and len(picked) < count:
                picked.append(by_topic[topic].pop())
    return picked


def effective_due(cards: Mapping[str, Card], holds: Iterable[Hold], now: datetime) -> dict[str, datetime]:
    """When each card is next asked: its due time, a buried card's no earlier than its bury ends; a
    suspended card is never asked, so it is left out (the drill skips both: the counts must agree)."""
    due = {qid: card.due for qid, card in cards.items()}
    for hold in holds:
        if hold.question_id not in due:
            continue
        if hold.kind == "suspended":
            del due[hold.question_id]
        elif hold.until is not None and hold.until > now:
            due[hold.question_id] = max(due[hold.question_id], hold.until)
    return due


def next_due(due: Mapping[str, datetime], now: datetime) -> datetime | None:
    """When the next card not due yet comes due (what Anki says once nothing is left)."""
    return min((when for when in due.values() if when > now), default=None)


# The reviewer -------------------------------------------------------------------------------------
class Reviewer:
    """FSRS over the store. `questions` (the bank) fixes the introduction order and which
    cards count as due (a card of a question no longer in the bank is kept, not shown)."""

    def __init__(self, store: ProgressStore, questions: Iterable[QuestionLike] = (),
                 settings: ReviewSettings | None = None, tz: tzinfo | None = None) -> None:
        self.store = store
        self.questions = {q.id: q for q in questions}
        self.apply(settings or ReviewSettings())
        self.tz = tz or local_tz()

    def apply(self, settings: ReviewSettings) -> None:
        """Schedule with these settings from now on (cards already scheduled keep their due dates)."""
        self.settings = settings
        self.scheduler = settings.scheduler()

    # Reviewing --------------------------------------------------------------------------------
    def _review_from(self, question_id: str, rating: Rating, when: datetime, duration_ms: int | None,
                     attempt_uid: str | None = None) -> Callable[[Card | None], Review]:
        def review(current: Card | None) -> Review:
            before = current if current is not None else Card(card_id=card_id_for(question_id), due=when)
            after, _ = self.scheduler.review_card(before, rating, when, duration_ms)
            return Review(question_id, int(rating), when, after, before, attempt_uid, duration_ms)

        return review

    def submit(self, *, question_id: str, variant: str, mode: str, grades: Sequence[Any], typed: Mapping[str, str],
               started: datetime, submitted: datetime | None = None, seconds: float | None = None,
               hints_used: int = 0, mock_id: str | None = None, schedule: bool = True,
               stages: Stages | None = None) -> Submitted:
        """Record a submitted attempt and (with `schedule`) review its card with the suggested
        rating, all in one transaction. Returns the attempt, the suggestion and the new card.
        `grades` are every stage's; `stages` says which stage asked each key."""
        submitted = utc(submitted or now_utc())
        started = utc(started)
        if seconds is None:
            seconds = max(0.0, (submitted - started).total_seconds())
        suggested = suggest_rating(grades, seconds, hints_used,
                                   quick_seconds_per_answer=self.settings.quick_seconds_per_answer)
        attempt = Attempt(question_id=question_id, variant=variant, mode=mode, started=started, submitted=submitted,
                          seconds=seconds, hints_used=hints_used, answers=answers_from_grades(grades, typed, stages),
                          mock_id=mock_id, suggested=int(suggested))
        review = self._review_from(question_id, suggested, submitted, int(seconds * 1000)) if schedule else None
        self.store.record_attempt(attempt, review)
        card = self.store.card(question_id) if schedule else None
        return Submitted(attempt, suggested, card)

    def rate(self, uid: str, rating: Rating | int) -> Card | None:
        """The user's rating for an attempt: the attempt's review is redone with it."""
        rating = Rating(int(rating))
        review = self.store.review_of(uid)
        if review is None:
            self.store.set_rating(uid, rating)
            return None
        self.store.set_rating(uid, rating, self._rescheduled(review, rating))
        return self.store.card(review.question_id)

    def intervals(self, uid: str) -> dict[int, timedelta]:
        """What each rating would give an attempt's card: the time from its review to the next, as
        Anki prints on its buttons. Empty for an attempt that was not scheduled."""
        review = self.store.review_of(uid)
        if review is None:
            return {}
        before = review.card_before or Card(card_id=card_id_for(review.question_id), due=review.reviewed)
        return {int(rating): self.scheduler.review_card(before, rating, review.reviewed, review.duration_ms)[0].due
                - review.reviewed for rating in Rating}

    def regrade(self, uid: str, grades: Sequence[Any], typed: Mapping[str, str],
                stages: Stages | None = None) -> Rating:
        """New grades for an attempt (a checklist ticked after the reveal): the answers and
        the suggestion are updated and, unless the user has rated it, so is the card. Without
        `stages`, each key keeps the stage it was stored with."""
        attempt = self.store.attempt(uid)
        if attempt is None:
            raise KeyError(f"no attempt {uid}")
        if stages is None:
            stages = {a.key: (a.stage, a.stage_kind) for a in attempt.answers}
        suggested = suggest_rating(grades, attempt.seconds, attempt.hints_used,
                                   quick_seconds_per_answer=self.settings.quick_seconds_per_answer)
        review = self.store.review_of(uid)
        reviews = self._rescheduled(review, suggested) if review is not None and attempt.rating is None else []
        self.store.update_answers(uid, answers_from_grades(grades, typed, stages), int(suggested), reviews)
        return suggested

    def _rescheduled(self, review: Review, rating: Rating) -> list[Review]:
        """The reviews to rewrite when `review` takes another rating."""
        if self.store.latest_review_uid(review.question_id) == review.uid and review.card_before is not None:
            after, _ = self.scheduler.review_card(review.card_before, rating, review.reviewed, review.duration_ms)
            return [replace(review, rating=int(rating), card_after=after)]
        log = [replace(r, rating=int(rating)) if r.uid == review.uid else r
               for r in self.store.reviews(question_id=review.question_id)]
        return replay(self.scheduler, review.question_id, log)

    def review(self, question_id: str, rating: Rating | int, when: datetime | None = None,
               duration_ms: int | None = None) -> Card:
        """Review a question's card without an attempt (and log it)."""
        when = utc(when or now_utc())
        made = self.store.log_review(self._review_from(question_id, Rating(int(rating)), when, duration_ms),
                                     question_id=question_id)
        return made.card_after

    def card(self, question_id: str) -> Card | None:
        return self.store.card(question_id)

    # Queues -------------------------------------------------------------------------------------
    def _known(self, question_id: str) -> bool:
        return not self.questions or question_id in self.questions

    def due_now(self, now: datetime | None = None) -> list[str]:
        """Question ids due at `now`, most overdue first (none suspended or buried)."""
        now = utc(now or now_utc())
        held = self.held(now)
        return [qid for qid, _ in self.store.due_cards(now) if self._known(qid) and qid not in held]

    def due_today(self, now: datetime | None = None) -> list[str]:
        """Question ids due before the end of the local day (those due now included)."""
        now = utc(now or now_utc())
        _, end = day_bounds(now, self.tz)
        held = self.held(now)
        return [qid for qid, _ in self.store.due_cards(end - timedelta(microseconds=1))
                if self._known(qid) and qid not in held]

    def due_ahead(self, days: int, now: datetime | None = None) -> list[str]:
        """What a review ahead asks (Anki's "study ahead"): the question ids due by the end of the local
        day `days` days from today, those due already first, soonest first (none held). Each is reviewed
        at the time it is answered, so FSRS sees the days actually elapsed and grows its interval less."""
        now = utc(now or now_utc())
        _, end = day_bounds(now, self.tz)
        asked = effective_due({qid: card for qid, card in self.store.due_cards(end + timedelta(days=days))},
                              self.store.holds(), now)
        last = end + timedelta(days=days) - timedelta(microseconds=1)
        return [qid for qid, when in sorted(asked.items(), key=lambda item: (item[1], item[0]))
                if when <= last and self._known(qid)]

    def next_due(self, now: datetime | None = None) -> datetime | None:
        """When the next card not due yet comes due (held cards as the drill will ask them)."""
        now = utc(now or now_utc())
        cards = {qid: card for qid, card in self.store.cards().items() if self._known(qid)}
        return next_due(effective_due(cards, self.store.holds(), now), now)

    def suspend(self, question_id: str) -> None:
        """Out of the drill until released (its card and history are kept)."""
        self.store.hold(question_id, "suspended")

    def bury(self, question_id: str, now: datetime | None = None) -> datetime:
        """Out of the drill until the start of the next local day; returns that time."""
        _, end = day_bounds(utc(now or now_utc()), self.tz)
        self.store.hold(question_id, "buried", end)
        return end

    def release(self, question_id: str) -> None:
        self.store.release(question_id)

    def start_mock(self, planned: int, budget_seconds: float | None) -> str:
        """A mock interview of `planned` questions begun now; returns its id."""
        return self.store.start_mock(planned, budget_seconds)

    def finish_mock(self, mock_id: str) -> None:
        self.store.finish_mock(mock_id)

    def forget_mock(self, mock_id: str) -> None:
        """A mock left half way forgotten; its answers stay in the history."""
        self.store.delete_mock(mock_id)

    def held(self, now: datetime | None = None) -> dict[str, str]:
        """Questions held out of the drill now: suspended, or buried till later."""
        return self.store.held(utc(now or now_utc()))

    def states(self, now: datetime | None = None) -> dict[str, str]:
        """Each question of the bank as the drill sees it now: held (suspended, buried), due, new (never
        reviewed) or later (scheduled, not due yet). Held comes first: the drill skips a held card however due."""
        now = utc(now or now_utc())
        held, cards = self.held(now), self.store.cards()
        return {qid: held.get(qid) or ("new" if qid not in cards else "due" if cards[qid].due <= now else "later")
                for qid in self.questions}

    def introduced_today(self, now: datetime | None = None) -> int:
        start, end = day_bounds(utc(now or now_utc()), self.tz)
        return sum(start <= first < end for qid, first in self.store.first_reviews().items() if self._known(qid))

    def introduction_order(self, now: datetime | None = None) -> list[str]:
        """Every question of the bank never reviewed nor held out, in the order new users meet them."""
        seen = set(self.store.first_reviews()) | set(self.held(now))
        return [q.id for q in prerequisites_first(self.questions.values()) if q.id not in seen]

    def new_questions(self, now: datetime | None = None) -> list[str]:
        """New questions still allowed today, under the daily cap, in introduction order."""
        left = max(0, self.settings.new_per_day - self.introduced_today(now))
        return self.introduction_order(now)[:left]

    def next_question(self, now: datetime | None = None) -> str | None:
        """What a drill session asks next: the most overdue card, else a new question, else None."""
        due = self.due_now(now)
        if due:
            return due[0]
        new = self.new_questions(now)
        return new[0] if new else None

    def summary(self, now: datetime | None = None) -> DueSummary:
        now = utc(now or now_utc())
        introduced = self.introduced_today(now)
        return DueSummary(len(self.due_now(now)), len(self.due_today(now)),
                          min(max(0, self.settings.new_per_day - introduced), len(self.introduction_order(now))),
                          introduced)

    def retrievability(self, now: datetime | None = None) -> dict[str, float]:
        """The probability of recall now, per reviewed question (FSRS)."""
        now = utc(now or now_utc())
        return {qid: self.scheduler.get_card_retrievability(card, now)
                for qid, card in self.store.cards().items() if card.last_review is not None and self._known(qid)}
