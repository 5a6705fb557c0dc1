"""Statistics: reviews per day (heatmap), retention per week, accuracy, answers missed by stage, slips,
weakest questions."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone

from fsrs import Card, State
from hypothesis import given
from hypothesis import strategies as st

from practice.records import AnswerRecord, Attempt, Hold
from practice.review import DueSummary, Reviewer, effective_due, next_due
from practice.schema import FILE_NAME
from practice.stats import (
    SlipTally,
    accuracy_by_group,
    accuracy_by_topic,
    card_states,
    forecast,
    format_summary,
    heatmap_text,
    heatmap_weeks,
    lost_by_stage,
    lowest_retrievability,
    retention_by_week,
    reviews_per_day,
    summarize,
    summary_dict,
    top_slips,
    weakest_questions,
    weakest_topic,
)
from practice.store import ProgressStore
from solvers.answers import CLOSE, CORRECT, MISMATCH, UNPARSED, WRONG, Grade
from solvers.answers.slips import slip_family
from solvers.bank import STAGE_KINDS
from solvers.groups import group_names

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # a Monday
X2, X8 = "x2: one factor of 2 too many", "x8: bits and bytes mixed up"
X2_FAMILY = "x2: a factor of 2 left out or counted twice"


@dataclass(frozen=True)
class Q:
    id: str
    group: str
    topic: str


QUESTIONS = {"kv": Q("kv", "F", "memory"), "roof": Q("roof", "F", "roofline"), "batch": Q("batch", "S", "serving")}


def attempt(question_id: str, at: datetime, *answers: tuple[str, str | None]) -> Attempt:
    return Attempt(question_id=question_id, variant=f"{question_id}@1", mode="drill", started=at, submitted=at,
                   seconds=30.0, answers=tuple(AnswerRecord(f"k{i}", "1", v, None, slip)
                                               for i, (v, slip) in enumerate(answers)))


RIGHT, WRONG_X2, WRONG_X8 = ("correct", None), ("wrong", X2), ("wrong", X8)
ATTEMPTS = [
    attempt("kv", T0, RIGHT, RIGHT),
    attempt("kv", T0 + timedelta(hours=2), RIGHT, WRONG_X2),
    attempt("roof", T0 + timedelta(days=1), WRONG_X2, WRONG_X8),
    attempt("batch", T0 + timedelta(days=15), RIGHT),  # two weeks later
    attempt("gone", T0 + timedelta(days=15), WRONG_X2),  # no longer in the bank
]


def test_reviews_per_day_in_local_days():
    assert reviews_per_day(ATTEMPTS, UTC) == {date(2025, 3, 3): 2, date(2025, 3, 4): 1, date(2025, 3, 18): 2}
    east = timezone(timedelta(hours=14))  # 09:00 UTC is 23:00 there; 11:00 UTC is the next day
    assert reviews_per_day(ATTEMPTS[:2], east) == {date(2025, 3, 3): 1, date(2025, 3, 4): 1}


def test_heatmap_weeks():
    per_day = reviews_per_day(ATTEMPTS, UTC)
    today = date(2025, 3, 19)  # a Wednesday
    columns = heatmap_weeks(per_day, today, weeks=3)
    assert len(columns) == 3 and all(len(c) == 7 for c in columns)
    assert columns[0][0] == (date(2025, 3, 3), 2)  # the first Monday
    assert columns[0][1] == (date(2025, 3, 4), 1)
    assert columns[2][1] == (date(2025, 3, 18), 2) and columns[2][2] == (date(2025, 3, 19), 0)
    assert columns[2][3:] == [None] * 4  # after today
    rows = heatmap_text(per_day, today, weeks=3).splitlines()
    assert len(rows) == 7 and rows[0] == "Mon █··" and rows[1] == "Tue ░·█" and rows[6] == "Sun ·· "


def test_retention_by_week_fills_gaps():
    weeks = retention_by_week(ATTEMPTS, UTC)
    assert [(w.week, w.attempts, w.all_correct) for w in weeks] == [
        (date(2025, 3, 3), 3, 1), (date(2025, 3, 10), 0, 0), (date(2025, 3, 17), 2, 1)]
    assert weeks[0].share == 1 / 3 and weeks[1].share is None and weeks[2].share == 0.5
    assert retention_by_week([], UTC) == []


def test_accuracy_by_group_and_topic():
    groups = accuracy_by_group(ATTEMPTS, QUESTIONS)
    assert list(groups) == ["F", "S", "?"]  # catalogue order, the unknown last
    f = groups["F"]
    assert (f.attempts, f.all_correct, f.answers, f.correct) == (3, 1, 6, 3)
    assert f.answer_share == 0.5 and f.attempt_share == 1 / 3
    topics = accuracy_by_topic(ATTEMPTS, QUESTIONS)
    assert list(topics) == ["?", "memory", "roofline", "serving"]
    assert (topics["memory"].answers, topics["memory"].correct) == (4, 3)
    assert topics["serving"].attempt_share == 1.0


def test_top_slips_and_weakest():
    assert top_slips(ATTEMPTS) == [SlipTally(X2_FAMILY, 3, 3, 0, (X2,)), SlipTally(X8, 1, 1, 0, (X8,))]
    assert top_slips(ATTEMPTS, limit=1) == [SlipTally(X2_FAMILY, 3, 3, 0, (X2,))]
    later = [*ATTEMPTS, attempt("roof", T0 + timedelta(days=20), RIGHT, WRONG_X2)]  # k0 put right, k1 now slips
    assert top_slips(later)[0] == SlipTally(X2_FAMILY, 4, 4, 1, (X2,))
    assert lowest_retrievability({"a": 0.9, "b": 0.4, "c": 0.4, "d": 0.7}, limit=3) == [
        ("b", 0.4), ("c", 0.4), ("d", 0.7)]


def card(state: State, due: datetime) -> Card:
    return Card(state=state, due=due, stability=5.0, difficulty=5.0, step=0 if state != State.Review else None,
                last_review=due - timedelta(days=1))


def test_cards_by_state_and_the_forecast_of_reviews_due():
    now = T0 + timedelta(hours=3)
    cards = {"kv": card(State.Learning, now - timedelta(minutes=5)),  # overdue: counts today
             "roof": card(State.Review, now + timedelta(days=2)), "gone": card(State.Relearning, now)}
    assert card_states(cards, ["kv", "roof", "batch"]) == {"new": 1, "learning": 1, "review": 1, "relearning": 1}
    days = forecast(effective_due(cards, (), now), now, UTC, days=4)
    assert days == [(date(2025, 3, 3), 2), (date(2025, 3, 4), 0), (date(2025, 3, 5), 1), (date(2025, 3, 6), 0)]


def test_the_forecast_leaves_out_a_suspended_card_and_moves_a_buried_one_to_when_it_comes_back():
    """`stats` said 'Due now 0, today 6' over a forecast of 8 for today: a buried and a suspended card."""
    now = T0 + timedelta(hours=3)
    tomorrow = datetime(2025, 3, 4, tzinfo=UTC)
    cards = {"kv": card(State.Review, now - timedelta(hours=1)), "roof": card(State.Review, now - timedelta(hours=1)),
             "batch": card(State.Review, now + timedelta(days=2))}
    holds = [Hold("kv", "suspended"), Hold("roof", "buried", tomorrow)]
    due = effective_due(cards, holds, now)
    assert due == {"roof": tomorrow, "batch": now + timedelta(days=2)}
    assert forecast(due, now, UTC, days=3) == [(date(2025, 3, 3), 0), (date(2025, 3, 4), 1), (date(2025, 3, 5), 1)]
    assert next_due(due, now) == tomorrow
    summary = summarize(ATTEMPTS, QUESTIONS, {}, now, UTC, DueSummary(0, 0, 0, 0), cards=cards, holds=holds)
    assert summary.forecast[0] == (date(2025, 3, 3), summary.due_today) and summary.next_due == tomorrow
    assert "the next comes due Tue 04 Mar" in format_summary(summary)


@given(st.lists(st.sampled_from([X2, "x2: K and V counted once", "/2: half the bytes", X8,
                                 "x8: a quantum taken as 512 bytes, not bits", "/8: bits and bytes mixed up",
                                 *(f"GB and GiB mixed up (1.024^{k})" for k in (1, 2, 3, 4, -1, -2, -3, -4)),
                                 "the queue ignored"]), min_size=1, max_size=12))
def test_slips_are_counted_by_family_whatever_the_label(labels):
    """One habit took three of the five lines, one per exponent of 1.024, and pushed out bits and bytes."""
    made = [attempt("kv", T0 + timedelta(minutes=i), ("wrong", label)) for i, label in enumerate(labels)]
    tallies = top_slips(made, limit=10)
    families = {slip_family(label) for label in labels}
    assert {t.slip for t in tallies} == families and len(tallies) == len(families) <= 4
    assert sum(t.count for t in tallies) == len(labels)
    for tally in tallies:
        assert set(tally.labels) == {label for label in labels if slip_family(label) == tally.slip}


def test_topics_weakest_first_and_the_topic_to_drill():
    summary = summarize(ATTEMPTS, QUESTIONS, {}, T0 + timedelta(days=16), UTC)
    assert list(summary.by_topic) == ["?", "roofline", "memory", "serving"]  # 0%, 0%, 75%, 100% right
    assert weakest_topic(summary) == "roofline"  # '?' is a question no longer in the bank
    assert weakest_questions(ATTEMPTS, ["batch", "kv", "roof", "never"]) == ["roof", "kv", "batch", "never"]


def test_a_card_in_its_learning_steps_is_not_ranked_by_retrievability():
    """Seven cards due in their learning steps all read 100%: the ranking showed nothing but them."""
    now = T0 + timedelta(days=16)
    cards = {"kv": card(State.Learning, now), "roof": card(State.Review, now + timedelta(days=3))}
    summary = summarize(ATTEMPTS, QUESTIONS, {"kv": 0.9999, "roof": 0.62}, now, UTC, cards=cards)
    assert summary.weakest == [("roof", 0.62)]
    assert "roof   62.0%" in format_summary(summary) and "kv " not in format_summary(summary).split("(cards")[1]


def test_retention_bars_are_on_a_zero_to_hundred_percent_scale():
    """One week at 33% was drawn as a full-width block (a sparkline scales to its own range)."""
    week = [attempt("kv", T0, RIGHT), attempt("kv", T0, WRONG_X2), attempt("roof", T0, WRONG_X8)]
    text = format_summary(summarize(week, QUESTIONS, {}, T0, UTC))
    bar = next(line for line in text.splitlines() if "week of 2025-03-03" in line).split("of 3")[1].strip()
    assert bar.startswith("██████") and len(bar) == 7  # a third of 20 cells, in eighths: 6⅝


def test_summary_text_and_json():
    now = T0 + timedelta(days=16)
    summary = summarize(ATTEMPTS, QUESTIONS, {"kv": 0.8, "roof": 0.3}, now, UTC, DueSummary(2, 3, 4, 1), mocks=1,
                        cards={"kv": card(State.Review, now), "roof": card(State.Review, now)})
    assert (summary.attempts, summary.days, summary.first) == (5, 3, date(2025, 3, 3))
    text = format_summary(summary)
    for expected in ("5 attempt(s) on 3 day(s) since 2025-03-03; 1 mock interview(s)", "Due now 2, today 3",
                     "week of 2025-03-17", "Accuracy by group", "Accuracy by topic", f"3×  {X2_FAMILY}",
                     "roof   30.0%", "put right 0 of 3", "Cards: 1 new, 0 learning, 2 review",
                     "Reviews due, next 14 days", "Reviews per day"):
        assert expected in text, expected
    data = json.loads(json.dumps(summary_dict(summary)))
    assert data["attempts"] == 5 and data["due"] == {"now": 2, "today": 3, "new_today": 4, "next": None}
    assert data["by_group"]["F"] == {"attempts": 3, "all_correct": 1, "answers": 6, "correct": 3}
    groups = text.split("Accuracy by group")[1].split("\n\n")[0].splitlines()[1:]
    assert [line.split("  ")[1] for line in groups] == [f"F {group_names()['F']}", f"S {group_names()['S']}", "?"]
    assert data["weakest"][0] == {"question_id": "roof", "retrievability": 0.3}


def test_empty_summary():
    summary = summarize([], QUESTIONS, {}, T0, UTC, DueSummary(0, 0, 5, 0))
    assert format_summary(summary).startswith("No attempts yet") and summary_dict(summary)["attempts"] == 0


# Answers missed by stage kind -----------------------------------------------------------------------------
VERDICTS = (CORRECT, CLOSE, WRONG, UNPARSED, MISMATCH)
staged_answers = st.lists(st.tuples(st.sampled_from(STAGE_KINDS), st.sampled_from(VERDICTS)), max_size=12)


@given(st.lists(staged_answers, max_size=6))
def test_lost_by_stage_counts_every_answer_once_under_its_kind(answer_lists):
    attempts = [Attempt(question_id="q", variant="q@1", mode="drill", started=T0, submitted=T0, seconds=1.0,
                        answers=tuple(AnswerRecord(f"k{i}", "", v, stage=STAGE_KINDS.index(kind), stage_kind=kind)
                                      for i, (kind, v) in enumerate(answers)))
                for answers in answer_lists]
    lost = lost_by_stage(attempts)
    assert list(lost) == list(STAGE_KINDS)  # every kind, in the interview's order
    flat = [pair for answers in answer_lists for pair in answers]
    for kind, loss in lost.items():
        verdicts = [v for k, v in flat if k == kind]
        assert loss.asked == len(verdicts)
        assert loss.missed == sum(v not in (CORRECT, CLOSE) for v in verdicts)  # close is not a point lost
        assert loss.share == (loss.missed / loss.asked if verdicts else None)


def test_points_lost_by_stage_over_a_store_of_old_and_staged_attempts(tmp_path):
    """An attempt from before stages (its follow-up counts as the push) beside staged ones."""
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    with store:
        reviewer = Reviewer(store)

        def submit(verdicts: dict[str, str], stages=None) -> None:
            reviewer.submit(question_id="q", variant="q@1", mode="drill", started=T0, submitted=T0,
                            grades=[Grade(k, v, "1", "1") for k, v in verdicts.items()], typed={}, stages=stages)

        submit({"kv": CORRECT, "users": WRONG, "followup.users": UNPARSED})  # the old shape: no stages
        submit({"kv": CORRECT, "users": CLOSE, "why": WRONG, "followup.users": CORRECT},
               {"kv": (0, "opening"), "users": (1, "ask"), "why": (2, "recall"), "followup.users": (3, "push")})
        submit({"kv": MISMATCH, "users": CORRECT, "followup.users": WRONG, "followup2.kv": CORRECT},
               {"kv": (0, "opening"), "users": (1, "ask"), "followup.users": (2, "push"),
                "followup2.kv": (3, "push")})
        lost = lost_by_stage(store.attempts())
    assert {kind: (loss.asked, loss.missed) for kind, loss in lost.items()} == {
        "opening": (4, 2), "ask": (2, 0), "recall": (1, 1), "push": (4, 2)}


def test_the_stage_table_in_the_text_and_the_json():
    staged = [Attempt(question_id="kv", variant="kv@1", mode="drill", started=T0, submitted=T0, seconds=1.0,
                      answers=(AnswerRecord("a", "", CORRECT), AnswerRecord("b", "", WRONG, stage=1, stage_kind="ask"),
                               AnswerRecord("followup.c", "", WRONG, stage=2, stage_kind="push"),
                               AnswerRecord("followup.d", "", CORRECT, stage=2, stage_kind="push")))]
    summary = summarize(staged, QUESTIONS, {}, T0, UTC)
    lines = format_summary(summary).splitlines()
    at = lines.index("Answers missed by stage, most missed first (neither correct nor close):")
    table = lines[at + 1:at + 1 + len(STAGE_KINDS)]
    assert [line.split()[:4] for line in table] == [  # the weakest first, a kind never asked last
        ["ask", "100%", "of", "1"], ["push", "50%", "of", "2"], ["opening", "0%", "of", "1"],
        ["recall", "–", "of", "0"]]
    assert table[0].endswith("█" * 20) and table[1].endswith("█" * 10)  # bars on a 0-100% scale
    assert all(len(line) <= 76 for line in [lines[at], *table])  # inside the 80-column screen's padding
    assert summary_dict(summary)["by_stage"] == {"opening": {"asked": 1, "missed": 0}, "ask": {"asked": 1, "missed": 1},
                                                 "recall": {"asked": 0, "missed": 0}, "push": {"asked": 2, "missed": 1}}


def test_the_forecast_for_today_agrees_with_the_reviewers_due_today(tmp_path):
    """N7: `stats` said 'Due now 0, today 6' over a forecast of 8 for today (a buried and a suspended card)."""
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    with store:
        reviewer = Reviewer(store, tz=UTC)  # every card counts
        now = T0 + timedelta(hours=3)
        for qid in QUESTIONS:
            reviewer.review(qid, 1, now - timedelta(hours=1))  # Again: due a minute later, overdue now
        reviewer.suspend("kv")
        reviewer.bury("roof", now)
        summary = summarize([], QUESTIONS, {}, now, UTC, reviewer.summary(now), cards=store.cards(),
                            holds=store.holds())
    assert summary.due_today == summary.due_now == 1  # batch alone
    assert summary.forecast[0] == (date(2025, 3, 3), 1) and summary.forecast[1] == (date(2025, 3, 4), 1)  # roof
