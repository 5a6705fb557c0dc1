"""The candidate's drill beyond the schedule, through the app: a review ahead before an interview, the
weakest topic drilled from the statistics, Anki's counters on the question bar, and a mock left half
way resumed or deleted."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from fsrs import Rating

from practice.records import now_utc
from practice.review import Reviewer
from practice.store import open_store
from solvers.answers import CORRECT, WRONG, Grade
from solvers.bank import load_bank
from tests.pilot_helpers import (
    notice_posted,
    on_screen,
    open_default,
    question_ready,
    reveal,
    running_app,
    start_mock,
    through_stages,
    wait_for,
)


def _reviewed_ahead_of_time(data_dir, due_in: dict[str, timedelta]) -> None:
    """Cards in review, each due `due_in` from now."""
    store, _ = open_store(data_dir)
    with store:
        reviewer = Reviewer(store, load_bank().questions.values())
        for qid, delta in due_in.items():
            start = now_utc() - timedelta(days=30)
            reviewer.review(qid, Rating.Good, start)
            reviewer.review(qid, Rating.Good, start + timedelta(minutes=10))
            store.save_card(qid, replace(store.card(qid), due=now_utc() + delta))


def test_review_ahead_drills_the_cards_due_in_the_next_days_and_logs_each_as_early(data_dir):
    _reviewed_ahead_of_time(data_dir, {"users-per-gpu": timedelta(days=1), "kv-bytes-per-token": timedelta(days=2),
                                       "hidden-memory-budget": timedelta(days=9)})

    async def scenario():
        async with running_app() as (app, pilot):
            await pilot.press("a")
            await wait_for(pilot, on_screen(app, "AheadScreen"))
            await pilot.press("enter")  # the 3 days it offers
            await wait_for(pilot, lambda: question_ready(app))
            first = (app.screen.solution.question.id, app.screen.mode,
                     str(app.screen.query_one("#question-title").content))
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            rating_line = str(app.screen.query_one("#rating").content)
            await pilot.press("n")
            await wait_for(pilot, lambda: question_ready(app) and app.screen.solution.question.id != first[0])
            second = (app.screen.solution.question.id, str(app.screen.query_one("#question-title").content))
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            await pilot.press("n")
            await wait_for(pilot, notice_posted(app, "Ahead 3d: done."))
            await wait_for(pilot, on_screen(app, "HomeScreen"))
            return first, rating_line, second

    (qid, mode, title), rating_line, (second, second_title) = asyncio.run(scenario())
    assert (qid, mode, second) == ("users-per-gpu", "drill", "kv-bytes-per-token")  # soonest due first
    assert "Ahead 3d: 2 left" in title and "Ahead 3d: 1 left" in second_title  # this card included, as Anki
    assert "Reviewed ahead: it was due" in rating_line
    store, _ = open_store(data_dir)
    with store:
        early = [r for r in store.reviews() if r.ahead]
        assert {r.question_id for r in early} == {"users-per-gpu", "kv-bytes-per-token"}  # not the one 9 days out


def test_nothing_due_says_when_the_next_card_comes_due(data_dir):
    _reviewed_ahead_of_time(data_dir, {"users-per-gpu": timedelta(days=2)})
    store, _ = open_store(data_dir)
    with store:
        due = store.card("users-per-gpu").due.astimezone()

    async def scenario():
        async with running_app() as (app, pilot):
            app.loaded_session.apply_settings(replace(app.loaded_session.settings, new_per_day=0))
            await pilot.press("d")
            await wait_for(pilot, notice_posted(app, "Nothing due now"))
            return [n.message for n in app._notifications]

    said = asyncio.run(scenario())
    assert any(f"the next comes due {due:%a %d %b %H:%M}. Press a to review ahead" in n for n in said)


def _three_attempts(data_dir) -> None:
    store, _ = open_store(data_dir)
    with store:
        reviewer = Reviewer(store, load_bank().questions.values())
        for qid, verdict in (("users-per-gpu", WRONG), ("kv-bytes-per-token", CORRECT),  # memory: half right
                             ("weight-read-intensity", CORRECT)):  # roofline: right
            reviewer.submit(question_id=qid, variant=f"{qid}@1", mode="drill", grades=[Grade("a", verdict, "1", "1")],
                            typed={"a": "1"}, started=now_utc() - timedelta(minutes=2), schedule=False)


async def _drill_from_the_statistics(key: str):
    async with running_app() as (app, pilot):
        await pilot.press("s")
        await wait_for(pilot, on_screen(app, "StatsScreen"))
        offer = str(app.screen.query_one("#drill-these").content)
        await pilot.press(key)
        await wait_for(pilot, lambda: question_ready(app))
        title = str(app.screen.query_one("#question-title").content)
        return offer, app.screen.solution.question, app.screen.mode, title


def test_the_statistics_drill_the_weakest_topic_with_the_counters_on_the_bar(data_dir):
    _three_attempts(data_dir)
    offer, question, mode, title = asyncio.run(_drill_from_the_statistics("t"))
    topic = load_bank().questions["users-per-gpu"].topic
    assert f"t drills {topic}, your weakest topic (50% of answers right)" in offer
    assert question.topic == topic and mode == "drill"
    in_topic = sum(q.topic == topic for q in load_bank().questions.values())
    assert f"Topic {topic}: {in_topic} left" in title


def test_the_statistics_drill_the_kind_of_stage_missed_most(data_dir):
    _three_attempts(data_dir)  # one of three opening answers missed
    offer, question, mode, title = asyncio.run(_drill_from_the_statistics("k"))
    assert "k the questions with a stage of kind opening (33% of its answers missed)" in offer
    assert question.id == "users-per-gpu" and mode == "drill"  # the one answered wrong first
    assert f"Stage opening: {len(load_bank().questions)} left" in title


def test_a_mock_left_half_way_is_resumed_where_it_stopped_then_another_is_deleted(data_dir):
    async def scenario():
        async with running_app() as (app, pilot):
            app.mock_questions = 2
            await start_mock(app, pilot)
            mock_id, first = app.mock.id, app.screen.solution.question.id
            await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)
            await wait_for(pilot, lambda: question_ready(app) and app.screen.solution.question.id != first)
            await pilot.press("escape", "escape")  # left on the second question
            await wait_for(pilot, on_screen(app, "HomeScreen"))
            await pilot.press("p")
            await wait_for(pilot, on_screen(app, "PastMocksScreen"))
            await pilot.press("r")
            await wait_for(pilot, lambda: question_ready(app))
            resumed = (app.mock.id == mock_id, app.screen.mode, app.screen.solution.question.id != first,
                       "Mock 2 of 2" in str(app.screen.query_one("#question-title").content))
            await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)
            await wait_for(pilot, on_screen(app, "MockSheetScreen"))
            finished = app.screen.sheet
            await pilot.press("escape")
            await start_mock(app, pilot)  # another, left at once
            await pilot.press("escape", "escape")
            await wait_for(pilot, on_screen(app, "HomeScreen"))
            await pilot.press("p")
            await wait_for(pilot, on_screen(app, "PastMocksScreen"))
            await pilot.press("x")
            await wait_for(pilot, notice_posted(app, "Press delete again"))
            await pilot.press("x")
            await wait_for(pilot, notice_posted(app, "Mock interview deleted."))
            rows = app.screen.query_one("#mocks").row_count
            await pilot.press("x")  # on the finished one: not offered, nothing happens
            await pilot.pause()
            offered = [b.binding.action for b in app.screen.active_bindings.values()]
            return mock_id, resumed, finished, rows, offered

    mock_id, resumed, finished, rows, offered = asyncio.run(scenario())
    assert "resume" not in offered and "delete" not in offered
    assert resumed == (True, "mock", True, True)
    assert finished.mock.id == mock_id and finished.mock.finished is not None and len(finished.attempts) == 2
    store, _ = open_store(data_dir)
    with store:
        assert [m.id for m in store.mocks()] == [mock_id] and rows == 1


def test_a_prompt_goes_once_answered_and_a_notice_is_never_stacked(data_dir):
    """The 'press ctrl+s again' toast sat over the next stage and the mock's score sheet (N4)."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            screen = app.screen
            opening = screen.current
            await pilot.press("ctrl+s")
            await wait_for(pilot, notice_posted(app, "press ctrl+s again"))
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: screen.current is not opening)
            after_submit = [n.message for n in app._notifications]
            for _ in range(4):
                app.notify("No more hints for this stage.")
            await pilot.pause()
            return after_submit, [n.message for n in app._notifications]

    after_submit, later = asyncio.run(scenario())
    assert not any("press ctrl+s again" in n for n in after_submit)
    assert later.count("No more hints for this stage.") == 1


def test_a_prompt_goes_when_another_screen_covers_its_own(data_dir):
    """'press ctrl+s again' asks for a key on the question screen: the help over it takes it down, and a
    notice that is no prompt stays for its time (N4)."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            app.notify("No more hints for this stage.")
            await pilot.press("ctrl+s")
            await wait_for(pilot, notice_posted(app, "press ctrl+s again"))
            before = [n.message for n in app._notifications]
            await pilot.press("f1")
            await wait_for(pilot, on_screen(app, "HelpScreen"))
            return before, [n.message for n in app._notifications]

    before, covered = asyncio.run(scenario())
    assert any("press ctrl+s again" in n for n in before)
    assert not any("press ctrl+s again" in n for n in covered) and "No more hints for this stage." in covered


def test_a_mock_cancelled_before_it_starts_leaves_nothing(data_dir):
    async def scenario():
        async with running_app() as (app, pilot):
            await pilot.press("m")
            await wait_for(pilot, on_screen(app, "MockStartScreen"))
            await pilot.press("escape")
            await wait_for(pilot, on_screen(app, "HomeScreen"))
            return app.mock

    assert asyncio.run(scenario()) is None
    store, _ = open_store(data_dir)
    with store:
        assert store.mocks() == []
