"""Statistics over the progress store, for the statistics screen and `infradrill stats`.

Pure functions of attempts and cards (and of the retrievability the reviewer computes):
reviews per day for a calendar heatmap, retention per week (share of attempts with every
answer correct), accuracy by group and topic (weakest first), the answers missed by interview
stage kind (the opening's numbers, the deeper asks, the recall, the push), the most frequent
slips counted by habit and whether they were put right since, the weakest questions in review,
the cards by state, and a forecast of the reviews due per day that counts each card when the
drill will ask it, as Anki shows them; and what to drill next (the weakest topic and kind of
stage). Days and weeks are local (a `tz` argument); no Textual here.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from fsrs import Card, State

from practice.records import Hold, Review
from practice.review import Reviewer, effective_due, next_due
from practice.store import Attempt
from solvers.answers.slips import slip_family
from solvers.bank import STAGE_KINDS
from solvers.groups import group_rank, spelled
from solvers.verdicts import Verdict

HEAT = " ░▒▓█"


@dataclass(frozen=True)
class Accuracy:
    attempts: int = 0
    all_correct: int = 0  # attempts with every answer correct
    answers: int = 0
    correct: int = 0  # answers correct

    @property
    def attempt_share(self) -> float | None:
        return self.all_correct / self.attempts if self.attempts else None

    @property
    def answer_share(self) -> float | None:
        return self.correct / self.answers if self.answers else None

    def add(self, attempt: Attempt) -> Accuracy:
        return Accuracy(self.attempts + 1, self.all_correct + attempt.all_correct, self.answers + len(attempt.answers),
                        self.correct + attempt.answers_correct)


@dataclass(frozen=True)
class WeekRetention:
    week: date  # the Monday that starts it (local)
    attempts: int
    all_correct: int

    @property
    def share(self) -> float | None:
        return self.all_correct / self.attempts if self.attempts else None


def local_day(moment: datetime, tz: tzinfo) -> date:
    return moment.astimezone(tz).date()


def reviews_per_day(attempts: Iterable[Attempt], tz: tzinfo) -> dict[date, int]:
    """Attempts submitted per local day (each one is a review of its question)."""
    return dict(sorted(Counter(local_day(a.submitted, tz) for a in attempts).items()))


def heatmap_weeks(per_day: Mapping[date, int], today: date, weeks: int = 26) -> list[list[tuple[date, int] | None]]:
    """Columns of a calendar heatmap: `weeks` weeks (Monday first) ending with this week;
    each column has 7 cells (day, count), None for days after `today`."""
    first = today - timedelta(days=today.weekday()) - timedelta(weeks=weeks - 1)
    columns = []
    for w in range(weeks):
        column: list[tuple[date, int] | None] = []
        for d in range(7):
            day = first + timedelta(weeks=w, days=d)
            column.append(None if day > today else (day, per_day.get(day, 0)))
        columns.append(column)
    return columns


def heatmap_text(per_day: Mapping[date, int], today: date, weeks: int = 26) -> str:
    """The heatmap as 7 text rows (Mon..Sun), one character per day, darker = more."""
    columns = heatmap_weeks(per_day, today, weeks)
    top = max((cell[1] for column in columns for cell in column if cell), default=0)

    def shade(cell: tuple[date, int] | None) -> str:
        if cell is None:
            return " "
        if cell[1] == 0:
            return "·"
        return HEAT[1 + (cell[1] - 1) * (len(HEAT) - 2) // max(top - 1, 1)]  # 1 -> lightest, top -> darkest

    names = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    return "\n".join(f"{names[d]} " + "".join(shade(column[d]) for column in columns) for d in range(7))


def retention_by_week(attempts: Iterable[Attempt], tz: tzinfo) -> list[WeekRetention]:
    """Share of attempts graded all-correct per local week, gaps filled with empty weeks."""
    counts: dict[date, list[int]] = {}
    for a in attempts:
        day = local_day(a.submitted, tz)
        tally = counts.setdefault(day - timedelta(days=day.weekday()), [0, 0])
        tally[0] += 1
        tally[1] += a.all_correct
    if not counts:
        return []
    out, week, last = [], min(counts), max(counts)
    while week <= last:
        total, right = counts.get(week, (0, 0))
        out.append(WeekRetention(week, total, right))
        week += timedelta(weeks=1)
    return out


def accuracy_by(attempts: Iterable[Attempt], key: Callable[[Attempt], str]) -> dict[str, Accuracy]:
    table: dict[str, Accuracy] = {}
    for a in attempts:
        k = key(a)
        table[k] = table.get(k, Accuracy()).add(a)
    return dict(sorted(table.items()))


def accuracy_by_group(attempts: Iterable[Attempt], questions: Mapping[str, Any]) -> dict[str, Accuracy]:
    """By the question's group ('?' for a question no longer in the bank), in learning order (groups.yaml)."""
    table = accuracy_by(attempts, lambda a: getattr(questions.get(a.question_id), "group", "?"))
    return dict(sorted(table.items(), key=lambda item: (group_rank(item[0]), item[0])))


def accuracy_by_topic(attempts: Iterable[Attempt], questions: Mapping[str, Any]) -> dict[str, Accuracy]:
    return accuracy_by(attempts, lambda a: getattr(questions.get(a.question_id), "topic", "?"))


@dataclass(frozen=True)
class StageLoss:
    asked: int = 0  # answers asked in stages of this kind
    missed: int = 0  # of those, neither correct nor close (wrong, blank, unread, a wrong unit)

    @property
    def share(self) -> float | None:
        return self.missed / self.asked if self.asked else None


def lost_by_stage(attempts: Iterable[Attempt]) -> dict[str, StageLoss]:
    """Answers asked and missed by the kind of stage that asked them, every kind in the interview's
    order: whether a candidate misses the opening's numbers or the reasoning the later stages ask."""
    asked: Counter[str] = Counter()
    missed: Counter[str] = Counter()
    for attempt in attempts:
        for answer in attempt.answers:
            asked[answer.stage_kind] += 1
            missed[answer.stage_kind] += answer.verdict not in (Verdict.CORRECT, Verdict.CLOSE)
    return {kind: StageLoss(asked[kind], missed[kind]) for kind in STAGE_KINDS}


@dataclass(frozen=True)
class SlipTally:
    slip: str  # the family (solvers.answers.slips.slip_family): one habit, whatever the question
    count: int  # times it was diagnosed
    places: int  # (question, answer) pairs it was made on
    fixed: int  # of those, the ones whose latest answer since is correct
    labels: tuple[str, ...] = ()  # the slips as diagnosed, most frequent first


def top_slips(attempts: Iterable[Attempt], limit: int = 5) -> list[SlipTally]:
    """The slip families diagnosed most often, and on how many of the answers they were made on the
    latest attempt since got it right (a slip that keeps coming back is the one to drill)."""
    ordered = sorted(attempts, key=lambda a: a.submitted)
    counts: Counter[str] = Counter()
    labels: dict[str, Counter[str]] = {}
    places: dict[str, set[tuple[str, str]]] = {}
    latest: dict[tuple[str, str], str] = {}  # (question, answer key) -> its latest verdict
    for attempt in ordered:
        for answer in attempt.answers:
            place = (attempt.question_id, answer.key)
            latest[place] = answer.verdict
            if answer.slip:
                family = slip_family(answer.slip)
                counts[family] += 1
                labels.setdefault(family, Counter())[answer.slip] += 1
                places.setdefault(family, set()).add(place)
    return [SlipTally(family, n, len(places[family]),
                      sum(latest[place] == Verdict.CORRECT for place in places[family]),
                      tuple(label for label, _ in labels[family].most_common()))
            for family, n in counts.most_common(limit)]


def lowest_retrievability(retrievability: Mapping[str, float], limit: int = 5) -> list[tuple[str, float]]:
    """The questions most likely forgotten now (from Reviewer.retrievability)."""
    return sorted(retrievability.items(), key=lambda item: (item[1], item[0]))[:limit]


STATES = ("new", "learning", "review", "relearning")
_STATE_NAMES = {State.Learning: "learning", State.Review: "review", State.Relearning: "relearning"}


def card_states(cards: Mapping[str, Card], questions: Iterable[str]) -> dict[str, int]:
    """Questions by FSRS state, a question never reviewed being new."""
    tally = Counter(_STATE_NAMES[card.state] for card in cards.values())
    tally["new"] = sum(1 for qid in questions if qid not in cards)
    return {state: tally[state] for state in STATES}


def forecast(due: Mapping[str, datetime], now: datetime, tz: tzinfo, days: int = 14) -> list[tuple[date, int]]:
    """Reviews due on each of the next `days` local days, today first (what is overdue counts today).
    `due`: when each card is next asked (effective_due)."""
    today = local_day(now, tz)
    per_day = Counter(max(local_day(when, tz), today) for when in due.values())
    return [(today + timedelta(days=d), per_day.get(today + timedelta(days=d), 0)) for d in range(days)]


def reviews_ahead(reviews: Iterable[Review]) -> int:
    """Reviews made before their card was due (a review ahead, or a question practised by hand): the
    log keeps the card before each review, so this is read off it, never guessed."""
    return sum(review.ahead for review in reviews)


# The summary (CLI and the top of the statistics screen) -----------------------------------------
@dataclass(frozen=True)
class Summary:
    today: date
    attempts: int
    days: int  # distinct days with an attempt
    first: date | None
    per_day: dict[date, int]
    retention: list[WeekRetention]
    by_group: dict[str, Accuracy]
    by_topic: dict[str, Accuracy]
    slips: list[SlipTally]
    by_stage: dict[str, StageLoss]
    weakest: list[tuple[str, float]]  # cards in review only: a card in its learning steps is not yet at risk
    states: dict[str, int]
    forecast: list[tuple[date, int]]
    due_now: int = 0
    due_today: int = 0
    new_today: int = 0
    mocks: int = 0
    next_due: datetime | None = None  # the next card to come due after now (held cards left out)
    ahead: int = 0  # reviews made before their card was due


def summarize(attempts: Sequence[Attempt], questions: Mapping[str, Any], retrievability: Mapping[str, float],
              now: datetime, tz: tzinfo, due: Any = None, mocks: int = 0,
              cards: Mapping[str, Card] | None = None, holds: Iterable[Hold] = (),
              reviews: Iterable[Review] = ()) -> Summary:
    """Everything the statistics screen shows. `due` is a review.DueSummary (or None); `cards` the
    FSRS cards by question (Store.cards), `holds` the questions held out (Store.holds), `reviews` the
    review log (Store.reviews)."""
    cards = {} if cards is None else {qid: card for qid, card in cards.items() if not questions or qid in questions}
    per_day = reviews_per_day(attempts, tz)
    # A card in (re)learning has a stability of days and a due time of minutes: its retrievability reads
    # 100% while it is due. Only cards in review are ranked by it.
    in_review = {qid: r for qid, r in retrievability.items() if qid in cards and cards[qid].state == State.Review}
    asked = effective_due(cards, holds, now)
    return Summary(
        today=local_day(now, tz), attempts=len(attempts), days=len(per_day), first=min(per_day, default=None),
        per_day=per_day, retention=retention_by_week(attempts, tz), by_group=accuracy_by_group(attempts, questions),
        by_topic=weakest_first(accuracy_by_topic(attempts, questions)), slips=top_slips(attempts),
        by_stage=lost_by_stage(attempts), weakest=lowest_retrievability(in_review),
        states=card_states(cards, questions), forecast=forecast(asked, now, tz),
        due_now=getattr(due, "due_now", 0), due_today=getattr(due, "due_today", 0),
        new_today=getattr(due, "new_today", 0), mocks=mocks, next_due=next_due(asked, now),
        ahead=reviews_ahead(reviews))


def summarize_progress(reviewer: Reviewer, questions: Mapping[str, Any], now: datetime) -> Summary:
    """The summary of everything in the reviewer's store (the statistics screen and `infradrill stats`)."""
    store = reviewer.store
    return summarize(store.attempts(), questions, reviewer.retrievability(now), now, reviewer.tz,
                     reviewer.summary(now), mocks=len(store.mocks()), cards=store.cards(), holds=store.holds(),
                     reviews=store.reviews())


def weakest_first(table: Mapping[str, Accuracy]) -> dict[str, Accuracy]:
    """Lowest share of answers correct first (what to drill next), ties by name."""
    return dict(sorted(table.items(), key=lambda item: (item[1].answer_share if item[1].answers else 2.0, item[0])))


def weakest_stages(by_stage: Mapping[str, StageLoss]) -> list[tuple[str, StageLoss]]:
    """The stage kinds, the most missed first; kinds never asked last, in the interview's order."""
    order = list(by_stage)
    return sorted(by_stage.items(), key=lambda item: (-(item[1].missed / item[1].asked) if item[1].asked else 1.0,
                                                      order.index(item[0])))


def weakest_questions(attempts: Iterable[Attempt], question_ids: Iterable[str]) -> list[str]:
    """These questions, the lowest share of answers right first; those never attempted last."""
    table = accuracy_by(attempts, lambda a: a.question_id)
    return sorted(question_ids, key=lambda qid: (table[qid].answer_share if qid in table and table[qid].answers
                                                 else 2.0, qid))


def weakest_stage(s: Summary) -> str | None:
    """The kind of stage to drill next: the one whose answers are missed most, if any is."""
    return next((kind for kind, loss in weakest_stages(s.by_stage) if loss.missed), None)


def weakest_topic(s: Summary) -> str | None:
    """The topic to drill next: the weakest with an answer missed ('?' is a question no longer in the bank)."""
    return next((topic for topic, a in s.by_topic.items()
                 if topic != "?" and a.answers and a.correct < a.answers), None)


def _bar(share: float, width: int) -> str:
    """A bar `width` cells wide at 100%, in eighths of a cell."""
    eighths = round(max(0.0, min(share, 1.0)) * width * 8)
    return "█" * (eighths // 8) + (" ▏▎▍▌▋▊▉"[eighths % 8] if eighths % 8 else "")


def _pct(share: float | None) -> str:
    return "  –" if share is None else f"{share:4.0%}"


def format_summary(s: Summary, weeks: int = 8) -> str:
    if not s.attempts:
        return (f"No attempts yet. Due now {s.due_now}, today {s.due_today}; "
                f"{s.new_today} new question(s) to meet today.\n")
    upcoming = f"; the next comes due {s.next_due.astimezone():%a %d %b %H:%M}" if s.next_due else ""
    ahead = f"; {s.ahead} review(s) made ahead of their due date" if s.ahead else ""
    lines = [f"{s.attempts} attempt(s) on {s.days} day(s) since {s.first}; {s.mocks} mock interview(s)",
             f"Due now {s.due_now}, today {s.due_today}; {s.new_today} new question(s) left today{upcoming}{ahead}",
             "Cards: " + ", ".join(f"{n} {state}" for state, n in s.states.items()), "",
             "Retention (attempts with every answer correct), by week (a full bar is 100%):"]
    for w in s.retention[-weeks:]:
        lines.append(f"  week of {w.week}  {_pct(w.share)} of {w.attempts:<3} {_bar(w.share or 0, 20)}")
    lines += ["", "Answers missed by stage, most missed first (neither correct nor close):"]
    lines += [f"  {kind:<7}  {_pct(loss.share)} of {loss.asked:<4} {_bar(loss.share or 0, 20)}".rstrip()
              for kind, loss in weakest_stages(s.by_stage)]
    if s.forecast:
        top = max(n for _, n in s.forecast)
        lines += ["", f"Reviews due, next {len(s.forecast)} days (what is overdue counts today):"]
        lines += [f"  {day:%a %d %b}  {n:>3}  {_bar(n / top if top else 0, 20)}" for day, n in s.forecast]
    for title, table, name in (("group", s.by_group, spelled), ("topic, weakest first", s.by_topic, str)):
        lines += ["", f"Accuracy by {title} (answers correct; attempts all correct):"]
        width = max(len(name(k)) for k in table)
        lines += [f"  {name(k):<{width}}  {_pct(a.answer_share)} of {a.answers:<4} {_pct(a.attempt_share)} of "
                  f"{a.attempts}" for k, a in table.items()]
    if s.slips:
        lines += ["", "Most frequent slips by habit (put right: its latest answer since is correct):"]
        lines += [f"  {t.count:>3}×  {t.slip}  (put right {t.fixed} of {t.places})" for t in s.slips]
    if s.weakest:
        width = max(len(q) for q, _ in s.weakest)
        lines += ["", "Lowest retrievability now (cards in review):"]
        lines += [f"  {q:<{width}}  {r:6.1%}" for q, r in s.weakest]
    lines += ["", "Reviews per day, last 26 weeks:", heatmap_text(s.per_day, s.today)]
    return "\n".join(lines) + "\n"


def summary_dict(s: Summary) -> dict[str, Any]:
    """The summary as JSON data (`infradrill stats --json`)."""
    def accuracy(table: Mapping[str, Accuracy]) -> dict[str, Any]:
        return {k: {"attempts": a.attempts, "all_correct": a.all_correct, "answers": a.answers, "correct": a.correct}
                for k, a in table.items()}

    return {"today": s.today.isoformat(), "attempts": s.attempts, "days": s.days,
            "first": s.first.isoformat() if s.first else None, "mocks": s.mocks,
            "due": {"now": s.due_now, "today": s.due_today, "new_today": s.new_today,
                    "next": s.next_due.isoformat() if s.next_due else None},
            "reviews_ahead": s.ahead,
            "per_day": {d.isoformat(): n for d, n in s.per_day.items()},
            "retention": [{"week": w.week.isoformat(), "attempts": w.attempts, "all_correct": w.all_correct}
                          for w in s.retention],
            "by_group": accuracy(s.by_group), "by_topic": accuracy(s.by_topic),
            "by_stage": {kind: {"asked": loss.asked, "missed": loss.missed} for kind, loss in s.by_stage.items()},
            "slips": [{"slip": t.slip, "count": t.count, "places": t.places, "fixed": t.fixed, "labels": list(t.labels)}
                      for t in s.slips],
            "weakest": [{"question_id": q, "retrievability": r} for q, r in s.weakest],
            "states": s.states, "forecast": [{"day": d.isoformat(), "due": n} for d, n in s.forecast]}
