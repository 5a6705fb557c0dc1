"""Spaced repetition: the rating table, FSRS due dates with fixed clocks, queues and the daily cap."""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from fsrs import Rating, State

from practice.review import (
    Reviewer,
    ReviewSettings,
    answers_from_grades,
    day_bounds,
    pick_mock,
    replay,
    suggest_rating,
)
from practice.schema import FILE_NAME
from practice.store import ProgressStore
from solvers.answers import CLOSE, CORRECT, MISMATCH, UNPARSED, WRONG, Grade
from solvers.groups import group_names

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # a Monday
A, H, G, E = Rating.Again, Rating.Hard, Rating.Good, Rating.Easy


@dataclass(frozen=True)
class Q:
    id: str
    group: str
    topic: str = "memory"
    difficulty: int = 1
    requires: tuple[str, ...] = ()


@pytest.fixture
def store(tmp_path):
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    yield store
    store.close()


def grades(*verdicts: str) -> list[Grade]:
    return [Grade(f"k{i}", v, "1", "1", 0.0 if v == CORRECT else 0.5) for i, v in enumerate(verdicts)]


# The rating suggestion ---------------------------------------------------------------------------
@pytest.mark.parametrize("verdicts, seconds, hints, expected", [
    ((CORRECT,), 30, 0, E),  # quick: at most 30 s per graded answer
    ((CORRECT,), 31, 0, G),
    ((CORRECT, CORRECT), 60, 0, E),
    ((CORRECT, CORRECT), 61, 0, G),
    ((CORRECT, CLOSE), 10, 0, H),  # close
    ((CLOSE, CLOSE), 10, 0, H),
    ((CORRECT, WRONG), 10, 0, H),  # partial: half correct
    ((CORRECT, CLOSE, WRONG), 10, 0, H),
    ((CORRECT, WRONG, WRONG), 10, 0, A),  # mostly missed: under half correct or close
    ((WRONG,), 10, 0, A),
    ((WRONG, UNPARSED, MISMATCH), 10, 0, A),  # nothing usable counts as wrong
    ((CORRECT,), 10, 1, G),  # hints lower it one step...
    ((CORRECT,), 100, 3, H),  # ...one step, however many
    ((CORRECT, CLOSE), 10, 1, A),
    ((WRONG,), 10, 2, A),  # never below Again
])
def test_rating_table(verdicts, seconds, hints, expected):
    assert suggest_rating(list(verdicts), seconds, hints) == expected
    assert suggest_rating(grades(*verdicts), seconds, hints) == expected  # Grade objects alike


def test_quick_threshold_counts_graded_answers_and_is_configurable():
    assert suggest_rating([CORRECT, CORRECT], 50, answer_count=1) == G  # 50 s for one graded answer
    assert suggest_rating([CORRECT], 50, quick_seconds_per_answer=60) == E
    with pytest.raises(ValueError):
        suggest_rating([], 10)


def test_answers_from_grades():
    g = [Grade("kv", WRONG, "640 KiB", "320 KiB", 1.0, "x2: one factor of 2 too many")]
    [record] = answers_from_grades(g, {"kv": "640KiB"})
    assert (record.key, record.typed, record.verdict, record.error, record.slip) == (
        "kv", "640KiB", WRONG, 1.0, "x2: one factor of 2 too many")


# FSRS with fuzzing off and fixed clocks ------------------------------------------------------------
def reviews_at_due(reviewer: Reviewer, question_id: str, ratings: list[Rating]) -> list[tuple[str, str]]:
    """Review each time the card falls due; the due dates and states that result."""
    when, out = T0, []
    for rating in ratings:
        card = reviewer.review(question_id, rating, when)
        out.append((card.due.isoformat(), card.state.name))
        when = card.due
    return out


def test_fuzzing_is_off_by_default(store):
    assert Reviewer(store).scheduler.enable_fuzzing is False
    assert Reviewer(store).scheduler.desired_retention == 0.9


def test_due_dates_after_good_sequence(store):
    assert reviews_at_due(Reviewer(store), "q", [G, G, G, G, G]) == [
        ("2025-03-03T09:10:00+00:00", "Learning"),  # learning steps 1 min, 10 min
        ("2025-03-05T09:10:00+00:00", "Review"),
        ("2025-03-16T09:10:00+00:00", "Review"),
        ("2025-05-01T09:10:00+00:00", "Review"),
        ("2025-10-11T09:10:00+00:00", "Review"),
    ]


def test_due_dates_with_again(store):
    assert reviews_at_due(Reviewer(store), "q", [A, A, G, G, G, A, G, G]) == [
        ("2025-03-03T09:01:00+00:00", "Learning"),
        ("2025-03-03T09:02:00+00:00", "Learning"),
        ("2025-03-03T09:12:00+00:00", "Learning"),
        ("2025-03-04T09:12:00+00:00", "Review"),
        ("2025-03-05T09:12:00+00:00", "Review"),
        ("2025-03-05T09:22:00+00:00", "Relearning"),  # a lapse: the 10-minute relearning step
        ("2025-03-06T09:22:00+00:00", "Review"),
        ("2025-03-07T09:22:00+00:00", "Review"),
    ]


def test_due_dates_easy_and_hard(store):
    reviewer = Reviewer(store)
    assert reviews_at_due(reviewer, "easy", [E, G]) == [
        ("2025-03-11T09:00:00+00:00", "Review"), ("2025-04-19T09:00:00+00:00", "Review")]
    assert reviews_at_due(reviewer, "hard", [H, H, G]) == [
        ("2025-03-03T09:05:30+00:00", "Learning"), ("2025-03-03T09:11:00+00:00", "Learning"),
        ("2025-03-03T09:21:00+00:00", "Learning")]


def test_desired_retention_is_configurable(tmp_path):
    lower, _ = ProgressStore.open(tmp_path / "a.sqlite3")
    higher, _ = ProgressStore.open(tmp_path / "b.sqlite3")
    low = reviews_at_due(Reviewer(lower, settings=ReviewSettings(desired_retention=0.8)), "q", [G, G, G])
    high = reviews_at_due(Reviewer(higher, settings=ReviewSettings(desired_retention=0.95)), "q", [G, G, G])
    assert low[-1][0] > high[-1][0]  # asking for less retention spaces reviews further
    lower.close()
    higher.close()


def test_review_log_keeps_every_review(store):
    reviewer = Reviewer(store)
    reviews_at_due(reviewer, "q", [G, A, G])
    log = store.reviews(question_id="q")
    assert [r.rating for r in log] == [3, 1, 3]
    assert log[0].card_before.state == State.Learning and log[0].card_before.last_review is None
    assert all(b.card_before == a.card_after for a, b in zip(log, log[1:]))  # one chain
    assert store.card("q") == log[-1].card_after


# Submitting, rating, regrading --------------------------------------------------------------------------
def submit(reviewer: Reviewer, question_id="q", at=T0, verdicts=(CORRECT, CLOSE), seconds=50.0, **extra):
    return reviewer.submit(question_id=question_id, variant=f"{question_id}@1", mode=extra.pop("mode", "drill"),
                           grades=grades(*verdicts), typed={"k0": "1", "k1": "2"},
                           started=at - timedelta(seconds=seconds), submitted=at, **extra)


def test_submit_records_the_attempt_and_schedules_with_the_suggestion(store):
    done = submit(Reviewer(store))
    assert done.suggested == H
    stored = store.attempt(done.attempt.uid)
    assert stored.suggested == 2 and stored.rating is None and stored.seconds == 50.0
    assert [a.typed for a in stored.answers] == ["1", "2"]
    assert done.card == store.card("q") and done.card.last_review == T0
    assert store.review_of(done.attempt.uid).rating == H


def test_submit_without_scheduling(store):
    done = submit(Reviewer(store), schedule=False, mode="practice")
    assert done.card is None and store.card("q") is None and store.reviews() == []


def test_a_chosen_rating_replaces_the_suggested_review(store, tmp_path):
    reviewer = Reviewer(store)
    done = submit(reviewer)
    card = reviewer.rate(done.attempt.uid, E)
    assert store.attempt(done.attempt.uid).rating == 4
    [review] = store.reviews()  # replaced, not added
    assert review.rating == 4 and review.card_after == card == store.card("q")
    other, _ = ProgressStore.open(tmp_path / "other.sqlite3")  # as if Easy had been picked at once
    with other:
        assert Reviewer(other).review("q", E, T0, 50_000) == card


def test_rating_an_older_attempt_replays_the_log(store):
    reviewer = Reviewer(store)
    first = submit(reviewer, at=T0)
    submit(reviewer, at=T0 + timedelta(minutes=20), verdicts=(CORRECT, CORRECT))  # Easy: 50 s for 2 answers
    reviewer.rate(first.attempt.uid, A)
    log = store.reviews(question_id="q")
    assert [r.rating for r in log] == [1, 4]
    expected = replay(reviewer.scheduler, "q", log)
    assert store.card("q") == expected[-1].card_after
    assert all(b.card_before == a.card_after for a, b in zip(log, log[1:]))


def test_each_rating_previews_the_interval_it_gives_and_the_preview_does_not_move_with_the_choice(store):
    reviewer = Reviewer(store)
    done = submit(reviewer)
    intervals = reviewer.intervals(done.attempt.uid)
    assert intervals[1] == timedelta(minutes=1) and intervals[3] == timedelta(minutes=10)  # the learning steps
    assert intervals[1] < intervals[2] < intervals[3] < intervals[4] and intervals[4] >= timedelta(days=1)
    for rating in (A, H, G, E):
        reviewer.rate(done.attempt.uid, rating)
        assert store.card("q").due - T0 == intervals[int(rating)]  # what the key said is what it gave
        assert reviewer.intervals(done.attempt.uid) == intervals
    assert reviewer.intervals(submit(reviewer, schedule=False).attempt.uid) == {}


@pytest.mark.parametrize("delta, text", [
    (timedelta(seconds=20), "1m"), (timedelta(minutes=10), "10m"), (timedelta(hours=3), "3h"),
    (timedelta(days=4), "4d"), (timedelta(days=75), "2.5mo"), (timedelta(days=60), "2mo"),
    (timedelta(days=438), "1.2y")])
def test_intervals_read_as_anki_prints_them(delta, text):
    from tui.render import interval_text

    assert interval_text(delta) == text


def test_rating_an_attempt_that_was_not_scheduled(store):
    done = submit(Reviewer(store), schedule=False)
    assert Reviewer(store).rate(done.attempt.uid, G) is None
    assert store.attempt(done.attempt.uid).rating == 3


def test_regrade_before_and_after_rating(store):
    reviewer = Reviewer(store)
    done = submit(reviewer, verdicts=(CORRECT, UNPARSED))  # a checklist not yet ticked
    assert done.suggested == H
    assert reviewer.regrade(done.attempt.uid, grades(CORRECT, CORRECT), {"k1": "1,2"}) == E  # 50 s, 2 answers
    attempt = store.attempt(done.attempt.uid)
    assert attempt.suggested == 4 and [a.verdict for a in attempt.answers] == [CORRECT, CORRECT]
    assert [a.typed for a in attempt.answers] == ["", "1,2"]
    assert store.review_of(done.attempt.uid).rating == E  # not rated yet: the card follows
    reviewer.rate(done.attempt.uid, G)
    card = store.card("q")
    reviewer.regrade(done.attempt.uid, grades(CORRECT, WRONG), {})
    assert store.card("q") == card  # the user's rating stands


# Queues, the introduction order, the daily cap ---------------------------------------------------------
BANK = [Q("s-one", "S"), Q("f-two", "F", difficulty=2), Q("k1-one", "K1"), Q("f-one", "F"), Q("odd", "ZZ"),
        Q("p-one", "P"), Q("t-one", "T")]


def test_introduction_order_is_group_f_first_then_the_catalogue(store):
    assert list(group_names()) == ["F", "S", "K1", "K2", "M", "T", "N", "D", "P"]
    reviewer = Reviewer(store, BANK, tz=UTC)
    assert reviewer.introduction_order() == ["f-one", "f-two", "s-one", "k1-one", "t-one", "p-one", "odd"]


def test_a_question_is_introduced_after_its_prerequisites(store):
    bank = [Q("f-easy", "F", requires=("s-base",)), Q("s-base", "S", requires=("k1-root",)), Q("k1-root", "K1"),
            Q("f-other", "F", difficulty=2), Q("f-outside", "F", requires=("not-in-bank",))]
    reviewer = Reviewer(store, bank, tz=UTC)
    assert reviewer.introduction_order() == ["f-outside", "f-other", "k1-root", "s-base", "f-easy"]
    loop = [Q("a", "F", requires=("b",)), Q("b", "F", requires=("a",))]
    assert Reviewer(store, loop, tz=UTC).introduction_order() == ["a", "b"]  # a cycle still drills


def test_daily_cap_on_new_questions(store):
    reviewer = Reviewer(store, BANK, ReviewSettings(new_per_day=2), tz=UTC)
    assert reviewer.new_questions(T0) == ["f-one", "f-two"]
    reviewer.review("f-one", G, T0)
    assert reviewer.new_questions(T0) == ["f-two"]
    reviewer.review("s-one", G, T0 + timedelta(hours=1))  # out of order still counts
    assert reviewer.new_questions(T0 + timedelta(hours=2)) == []
    assert reviewer.introduced_today(T0) == 2
    tomorrow = T0 + timedelta(days=1)
    assert reviewer.new_questions(tomorrow) == ["f-two", "k1-one"]  # a new day, a new allowance
    assert reviewer.summary(T0 + timedelta(hours=2)).new_today == 0


def test_due_now_today_and_next(store):
    reviewer = Reviewer(store, BANK, ReviewSettings(new_per_day=1), tz=UTC)
    reviewer.review("f-one", G, T0)  # due 09:10
    reviewer.review("s-one", E, T0 - timedelta(days=8))  # due 2025-03-03 09:00 (8 days after)
    assert store.card("s-one").due == T0
    at = T0 + timedelta(minutes=5)
    assert reviewer.due_now(at) == ["s-one"]
    assert reviewer.due_today(at) == ["s-one", "f-one"]
    assert reviewer.next_question(at) == "s-one"  # due first
    summary = reviewer.summary(at)
    assert (summary.due_now, summary.due_today, summary.introduced_today) == (1, 2, 1)
    assert summary.new_today == 0  # the cap of one is used by f-one
    reviewer.review("s-one", G, at)
    assert reviewer.next_question(at) is None  # nothing due, the day's new allowance spent
    assert reviewer.next_question(T0 + timedelta(days=1)) == "f-one"


def test_new_question_when_nothing_is_due(store):
    reviewer = Reviewer(store, BANK, tz=UTC)
    assert reviewer.next_question(T0) == "f-one"


def test_due_today_follows_the_local_day(tmp_path):
    west = timezone(timedelta(hours=-8))
    for tz, expected in ((west, []), (UTC, ["f-one"])):
        store, _ = ProgressStore.open(tmp_path / f"{tz.utcoffset(None)}.sqlite3")
        with store:
            reviewer = Reviewer(store, BANK, tz=tz)
            reviewer.review("f-one", E, T0 - timedelta(days=8))  # due 2025-03-03 09:00 UTC
            # 07:00 UTC on the 3rd is still the 2nd (23:00) eight hours west: due tomorrow there.
            assert reviewer.due_today(T0 - timedelta(hours=2)) == expected
            assert reviewer.due_today(T0 + timedelta(hours=1)) == ["f-one"]
    assert day_bounds(T0, west) == (datetime(2025, 3, 3, 8, tzinfo=UTC), datetime(2025, 3, 4, 8, tzinfo=UTC))
    assert day_bounds(T0 - timedelta(hours=2), west) == (datetime(2025, 3, 2, 8, tzinfo=UTC), T0 - timedelta(hours=1))


def test_questions_outside_the_bank_are_not_due(store):
    Reviewer(store, tz=UTC).review("retired-question", A, T0)
    assert Reviewer(store, tz=UTC).due_now(T0 + timedelta(days=1)) == ["retired-question"]  # no bank: all
    assert Reviewer(store, BANK, tz=UTC).due_now(T0 + timedelta(days=1)) == []


def test_retrievability(store):
    reviewer = Reviewer(store, tz=UTC)
    reviewer.review("weak", A, T0)
    reviewer.review("strong", E, T0)
    later = reviewer.retrievability(T0 + timedelta(days=10))
    assert set(later) == {"weak", "strong"} and 0 < later["weak"] < later["strong"] < 1
    assert reviewer.retrievability(T0)["strong"] == pytest.approx(1.0)


def test_pick_mock_spreads_across_topics():
    bank = [Q(f"{topic}-{i}", "F", topic) for topic in ("memory", "roofline", "serving") for i in range(4)]
    picked = pick_mock(bank, 3, random.Random(1))
    assert len(set(picked)) == 3 and len({p.split("-")[0] for p in picked}) == 3
    assert picked == pick_mock(bank, 3, random.Random(1))  # seeded: reproducible
    assert len(pick_mock(bank, 5, random.Random(2))) == 5
    assert sorted(pick_mock(bank, 50, random.Random(3))) == sorted(q.id for q in bank)


def test_a_suspended_question_leaves_the_drill_until_released_and_a_buried_one_until_tomorrow(store):
    reviewer = Reviewer(store, [Q("f-one", "F"), Q("f-two", "F"), Q("f-three", "F")], tz=UTC)
    for qid in ("f-one", "f-two"):
        submit(reviewer, question_id=qid, verdicts=(WRONG, WRONG))  # Again: due in a minute
    later = T0 + timedelta(minutes=5)
    assert reviewer.due_now(later) == ["f-one", "f-two"]
    reviewer.suspend("f-one")
    assert reviewer.bury("f-two", later) == datetime(2025, 3, 4, tzinfo=UTC)  # the next local midnight
    reviewer.suspend("f-three")  # never reviewed: not introduced either
    assert reviewer.due_now(later) == [] and reviewer.due_today(later) == []
    assert "f-three" not in reviewer.introduction_order(later)
    assert reviewer.due_now(datetime(2025, 3, 4, 1, tzinfo=UTC)) == ["f-two"]  # the bury ran out; suspend did not
    reviewer.release("f-one")
    assert reviewer.due_now(later) == ["f-one"] and store.card("f-one") is not None  # its schedule kept


def test_each_questions_state_is_what_the_drill_does_with_it(store):
    """Browse shows these: a held question says how it is held, whatever its card; "due" is exactly what the
    drill asks now, "new" a question never reviewed, "later" a card scheduled ahead."""
    bank = [Q(qid, "F") for qid in ("f-again", "f-easy", "f-never", "f-suspended", "f-buried", "f-held-new")]
    reviewer = Reviewer(store, bank, tz=UTC)
    for qid in ("f-again", "f-suspended", "f-buried"):
        reviewer.review(qid, A, T0)  # due in a minute
    reviewer.review("f-easy", E, T0)
    at = T0 + timedelta(minutes=5)
    reviewer.suspend("f-suspended")
    reviewer.bury("f-buried", at)
    reviewer.suspend("f-held-new")
    states = reviewer.states(at)
    assert states == {"f-again": "due", "f-easy": "later", "f-never": "new", "f-suspended": "suspended",
                      "f-buried": "buried", "f-held-new": "suspended"}
    assert [qid for qid, state in states.items() if state == "due"] == reviewer.due_now(at)
    assert reviewer.states(datetime(2025, 3, 4, 1, tzinfo=UTC))["f-buried"] == "due"  # the bury ran out


# Review ahead ---------------------------------------------------------------------------------------
def test_review_ahead_asks_the_cards_due_in_the_next_days_soonest_first_none_held(store):
    reviewer = Reviewer(store, [Q("f-one", "F"), Q("f-two", "F"), Q("f-three", "F"), Q("f-four", "F")], tz=UTC)
    reviewer.review("f-one", E, T0 - timedelta(days=8))  # due T0: due already
    for qid, days in (("f-two", 2), ("f-three", 5), ("f-four", 1)):
        reviewer.review(qid, G, T0)
        store.save_card(qid, replace(store.card(qid), due=T0 + timedelta(days=days)))
    at = T0 + timedelta(minutes=5)
    assert reviewer.due_ahead(1, at) == ["f-one", "f-four"]  # by the end of tomorrow
    assert reviewer.due_ahead(2, at) == ["f-one", "f-four", "f-two"]
    reviewer.suspend("f-four")
    reviewer.bury("f-one", at)  # back at midnight: still inside two days
    assert reviewer.due_ahead(2, at) == ["f-one", "f-two"]
    assert reviewer.next_due(at) == datetime(2025, 3, 4, tzinfo=UTC)  # the bury's end, before f-two's due


def test_a_review_ahead_is_logged_as_early_and_grows_the_interval_less_than_on_time(store, tmp_path):
    """FSRS reads the days actually elapsed: reviewed two days early, the card's stability grows less than
    reviewed on its due date, and the log entry says it was early (Anki's log marks an early review)."""
    reviewer = Reviewer(store, [Q("f-one", "F")], tz=UTC)
    for _ in range(3):
        reviewer.review("f-one", G, store.card("f-one").due if store.card("f-one") else T0)
    card = store.card("f-one")
    assert card.state == State.Review and not any(r.ahead for r in store.reviews())
    other, _ = ProgressStore.open(tmp_path / "other" / FILE_NAME)
    with other:
        other.save_card("f-one", card)
        on_time = Reviewer(other, [Q("f-one", "F")], tz=UTC).review("f-one", G, card.due)
    early = reviewer.review("f-one", G, card.due - timedelta(days=2))
    assert store.reviews()[-1].ahead and early.stability < on_time.stability
    assert early.due - (card.due - timedelta(days=2)) < on_time.due - card.due
