"""Progress through the app: a drill review is saved and rated; a SIGKILL right after
submitting loses nothing."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace

from rich.text import Text

from practice.records import now_utc
from practice.store import open_store
from solvers.bank import load_bank
from solvers.data import load_catalog
from solvers.engine import VariantCode, make_variant
from solvers.interview import asked_keys, stage_run
from solvers.report import typed_key
from tests.pilot_helpers import (
    notice_posted,
    on_screen,
    push_showing,
    question_ready,
    reveal,
    running_app,
    start_mock,
    submit_stage,
    through_stages,
    wait_for,
)
from tui.modes import MockAnswers
from tui.screens.question import QuestionScreen
from tui.screens.solution import SolutionScreen


async def _drill_and_rate():
    async with running_app() as (app, pilot):
        await pilot.press("d")
        await wait_for(pilot, lambda: question_ready(app))
        question = app.screen.solution.question
        assert app.screen.mode == "drill" and question.group == "F"  # new users start with group F
        await reveal(app, pilot, ("ctrl+s", "ctrl+s"))  # give up: reveal with empty answers
        suggested = int(app.screen.submitted.suggested)
        keys = str(app.screen.query_one("#rating").content)
        assert "1 Again 1m" in keys and "3 Good 10m" in keys  # each key shows the interval it gives
        await pilot.press("2", "u")  # Hard, then undone: back to the suggestion
        assert (app.screen.rating, app.screen.rated) == (suggested, False)
        assert app.screen.infradrill.loaded_session.reviewer.store.attempt(app.screen.submitted.attempt.uid).rating \
            == suggested
        await pilot.press("3")
        return question.id, suggested, app.screen.submitted.attempt.uid


def test_a_drill_review_is_saved_rated_and_scheduled(data_dir):
    question_id, suggested, uid = asyncio.run(_drill_and_rate())
    store, notices = open_store(data_dir)
    assert notices == []
    attempt = store.attempt(uid)
    assert attempt.question_id == question_id and attempt.mode == "drill"
    assert suggested == 1 and attempt.rating == 3  # all unanswered suggests Again; the user chose Good
    assert store.card(question_id) is not None


KILLED_AFTER_SUBMIT = textwrap.dedent("""
    import asyncio, os, signal
    from tests.pilot_helpers import question_ready, reveal, running_app, wait_for

    async def main():
        async with running_app() as (app, pilot):
            app.open_question("kv-bytes-per-token", default=True)
            await wait_for(pilot, lambda: question_ready(app))
            app.screen.query_one("#answer-kv_per_token").insert_text_at_cursor("320 KiB")
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            print(app.screen.submitted.attempt.uid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
""")


def test_sigkill_right_after_submitting_loses_nothing(data_dir):
    result = subprocess.run([sys.executable, "-c", KILLED_AFTER_SUBMIT], env=dict(os.environ), capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == -9, result.stderr[-4000:]
    uid = result.stdout.split()[-1]
    store, _ = open_store(data_dir)
    attempt = store.attempt(uid)
    assert attempt is not None and attempt.question_id == "kv-bytes-per-token"
    assert {a.key: a.verdict for a in attempt.answers}["kv_per_token"] == "correct"
    assert store.card("kv-bytes-per-token") is not None


async def _two_question_mock(answers: MockAnswers = MockAnswers.PRACTICE):
    async with running_app() as (app, pilot):
        app.app_settings = replace(app.app_settings, mock_answers=answers)
        app.mock_questions = 2
        await pilot.press("m")
        await wait_for(pilot, on_screen(app, "MockStartScreen"))
        said = [str(label.content) for label in app.screen.query("Label")]  # before it starts
        await pilot.press("enter")
        await wait_for(pilot, lambda: question_ready(app))
        first = app.screen.solution.question.id
        assert app.screen.mode == "mock" and "Mock 1 of 2" in str(app.screen.query_one("#question-title").content)
        await pilot.press("ctrl+t")  # no hints in a mock
        assert app.screen.hints_shown == 0
        # 24.5 s past the 5-minute budget, counted from now: the time the screen took to open (seconds on a
        # loaded machine) must not move the clock.
        app.screen.started = time.monotonic() - (5 * 60 + 24.5)
        app.screen._tick()
        clock = str(app.screen.query_one("#timer").content)
        await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)  # every stage, given up
        await wait_for(pilot, lambda: question_ready(app) and app.screen.solution.question.id != first)
        second = app.screen.solution.question.id
        await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)
        await wait_for(pilot, on_screen(app, "MockSheetScreen"))
        sheet_screen = app.screen
        rows = app.screen.query_one("#sheet").row_count
        sheet = app.screen.sheet
        table = app.screen.query_one("#sheet")
        headline = Text.from_markup(str(app.screen.query_one("#sheet-title").content)).plain
        assert sum(column.get_render_width(table) for column in table.columns.values()) <= 80  # fits 80x24
        table.focus()
        await pilot.press("3")  # Good for the first question, where the mock was scheduled
        ratings = [str(table.get_row_at(i)[3]) for i in range(table.row_count)]
        await pilot.press("enter")  # review the first answer against its solution
        await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
        reviewed = (app.screen.mode, {g.key: g.verdict for g in app.screen.grades},
                    str(app.screen.query_one("#rating").content))
        first_review = app.screen
        await pilot.press("n")  # the mock's next answer, not a fresh practice variant
        await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen) and app.screen is not first_review)
        following = (app.screen.mode, str(app.screen.solution.code))
        await pilot.press("n")  # after the last: back to the sheet
        await wait_for(pilot, lambda: app.screen is sheet_screen)
        await wait_for(pilot, notice_posted(app, "the mock's last answer"))
        return first, second, rows, sheet, reviewed, (said, clock, headline, ratings, following)


def test_a_two_question_mock_ends_on_a_saved_score_sheet(data_dir):
    first, second, rows, sheet, reviewed, (said, clock, headline, ratings, following) = \
        asyncio.run(_two_question_mock())
    assert rows == 2 and [a.question_id for a in sheet.attempts] == [first, second]
    assert any("saved as practice: your schedule and the day's new questions are untouched" in n for n in said)
    assert clock == "0:24 over"
    store, _ = open_store(data_dir)
    (mock,) = store.mocks()
    assert mock.finished is not None and mock.planned == 2
    assert all(a.mode == "mock" and a.mock_id == mock.id for a in store.attempts())
    assert store.cards() == {} and store.reviews() == []  # no card scheduled, no new question spent
    assert ratings == ["—", "—"]
    right = sum(a.answers_correct for a in sheet.attempts)
    asked = sum(len(a.answers) for a in sheet.attempts)
    assert f"{right}/{asked} answers right (opening " in headline and "0/2 questions all right" in headline
    mode, verdicts, rating = reviewed  # the score sheet shows the saved answers, records nothing new
    saved = {a.key: a.verdict for a in sheet.attempts[0].answers if not a.key.startswith("followup.")}
    assert mode == "regrade" and verdicts == saved and "records nothing" in rating
    assert following == ("regrade", sheet.attempts[1].variant)
    assert len(store.attempts()) == 2
    bank, catalog = load_bank(), load_catalog()
    for attempt in store.attempts():  # a mock asks every stage and every push, and its score counts them
        solution = make_variant(bank, catalog, VariantCode.parse(attempt.variant))
        runs = [stage_run(solution, catalog, i) for i in range(len(solution.question.stages))]
        assert [a.key for a in attempt.answers] == asked_keys(run for run in runs if run is not None)


async def _stats_after_a_review():
    async with running_app() as (app, pilot):
        await pilot.press("d")
        await wait_for(pilot, lambda: question_ready(app))
        await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
        await pilot.press("escape")
        await pilot.press("s")
        await wait_for(pilot, on_screen(app, "StatsScreen"))
        return list(app.screen.query_one("#per-day").data), str(app.screen.query_one("#stats").content)


def test_stats_screen_counts_todays_review(data_dir):
    per_day, text = asyncio.run(_stats_after_a_review())
    assert per_day[-1] == 1 and sum(per_day) == 1
    assert "1 attempt(s) on 1 day(s)" in text


async def _follow_up_round():
    async with running_app() as (app, pilot):
        app.open_question("weight-read-intensity", default=True)
        await wait_for(pilot, lambda: question_ready(app))
        first = app.screen
        while not first.at_push:  # each stage before the push answered with its key
            for key in first.current.ask:  # "×10^" cannot be pressed through Pilot: insert it
                first.query_one(f"#answer-{key}").insert_text_at_cursor(typed_key(first.solution, key))
            await submit_stage(app, pilot)
        await wait_for(pilot, lambda: push_showing(app))  # the push below the earlier stages' keys
        screen = app.screen
        followup = screen.current
        stage = screen.query_one(f"#stage-{followup.index}")
        boxes = [f.spec.key for f in stage.query("AnswerField")]
        assert boxes == list(followup.ask) and str(followup.solution.code) in str(stage.query_one(".push-code")
                                                                                  .content)
        await wait_for(pilot, lambda: stage.query_one("AnswerField Input").region.bottom <= 24)  # on screen
        right, wrong = followup.ask[0], followup.ask[-1]
        stage.query_one(f"#answer-{right}").insert_text_at_cursor(typed_key(followup.solution, right))
        if wrong != right:
            stage.query_one(f"#answer-{wrong}").insert_text_at_cursor(
                typed_key(first.solution, wrong))  # the first round's answer, unchanged by the push
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
        solution = app.screen
        pushed = next(done for done in solution.answered if done.run.stage.push)
        return (followup, list(pushed.grades), str(solution.query_one("#solution-title").content),
                solution.submitted.attempt.uid)


def test_a_follow_up_round_is_asked_graded_shown_and_saved(data_dir):
    followup, grades, title, uid = asyncio.run(_follow_up_round())
    assert [g.key for g in grades] == list(followup.ask) and len(grades) == 2
    assert grades[0].verdict == "correct" and grades[1].verdict != "correct"
    assert "follow-up 1/2" in title
    store, _ = open_store(data_dir)
    saved = {a.key: a.verdict for a in store.attempt(uid).answers}
    assert saved[f"followup.{followup.ask[0]}"] == "correct" and saved[f"followup.{followup.ask[1]}"] != "correct"
    assert all(v == "correct" for k, v in saved.items() if not k.startswith("followup."))


async def _answer_again():
    async with running_app() as (app, pilot):
        app.open_question("kv-bytes-per-token", default=True)
        await wait_for(pilot, lambda: question_ready(app))
        await reveal(app, pilot, ("ctrl+s", "ctrl+s"))  # give up: the key is shown
        first_uid = app.screen.submitted.attempt.uid
        card = app.session.reviewer.card("kv-bytes-per-token")
        await pilot.press("a")
        await wait_for(pilot, lambda: question_ready(app))
        screen = app.screen
        for key in screen.current.ask:  # the key just read, typed back into the stage asked again
            screen.query_one(f"#answer-{key}").insert_text_at_cursor(typed_key(screen.solution, key))
        await reveal(app, pilot)
        await pilot.press("4")  # Easy: ignored, this was not a review
        solution = app.screen
        return (first_uid, solution.submitted.attempt.uid, card, app.session.reviewer.card("kv-bytes-per-token"),
                str(solution.query_one("#rating").content), [g.verdict for g in solution.grades])


def test_answering_a_revealed_variant_again_is_saved_but_never_scheduled(data_dir):
    first_uid, again_uid, card_before, card_after, rating, verdicts = asyncio.run(_answer_again())
    assert set(verdicts) == {"correct"} and "schedule does not move" in rating
    assert card_after == card_before  # a half-failed card is not moved to days away by a copied key
    store, _ = open_store(data_dir)
    assert store.attempt(again_uid) is not None and store.review_of(again_uid) is None
    assert store.review_of(first_uid) is not None


async def _leaving_a_mock():
    from tui.screens.home import HomeScreen

    async with running_app() as (app, pilot):
        app.mock_questions = 2
        await start_mock(app, pilot)
        await pilot.press("escape")
        await wait_for(pilot, notice_posted(app, "Press Esc again"))
        asked = isinstance(app.screen, QuestionScreen) and app.mock is not None
        notices = [n.message for n in app._notifications]
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        return asked, notices, app.mock, [n.message for n in app._notifications]


def test_a_mock_set_to_schedule_rates_its_questions_and_the_sheet_changes_a_rating(data_dir):
    first, second, _, sheet, _, (said, _, _, ratings, _) = asyncio.run(_two_question_mock(MockAnswers.SCHEDULE))
    assert any("rated and scheduled as reviews: they spend the day's new questions" in n for n in said)
    store, _ = open_store(data_dir)
    assert store.card(first) is not None and store.card(second) is not None
    assert ratings[0] == "Good" and store.attempt(sheet.attempts[0].uid).rating == 3
    assert store.review_of(sheet.attempts[0].uid).rating == 3  # the card rescheduled with it
    assert ratings[1] == "Again"  # given up: the suggestion stands


def test_leaving_a_mock_asks_first_and_the_question_goes_with_its_screen(data_dir):
    asked, notices, mock, at_home = asyncio.run(_leaving_a_mock())
    assert asked and any("Press Esc again to leave the mock" in n for n in notices)
    assert mock is None and not any("Press Esc again" in n for n in at_home)  # it stood over home (N4)


def test_browse_suspends_and_releases_the_question_under_the_cursor(data_dir):

    async def scenario():
        async with running_app() as (app, pilot):
            await pilot.press("b")
            await wait_for(pilot, on_screen(app, "BrowseScreen"))
            table = app.screen.query_one("#bank")
            qid = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            store = app.loaded_session.reviewer.store
            await pilot.press("s")
            suspended = (dict(store.held(now_utc())), str(table.get_row(qid)[1]))
            await wait_for(pilot, notice_posted(app, f"{qid} suspended"))  # `s` says what it did
            await pilot.press("s")
            await wait_for(pilot, notice_posted(app, f"{qid} released"))
            return qid, suspended, dict(store.held(now_utc())), str(table.get_row(qid)[1])

    qid, (held, cell), released, cleared = asyncio.run(scenario())
    assert held == {qid: "suspended"} and cell == "suspended"
    assert released == {} and cleared == "new"  # never reviewed: back as a new question


async def _mock_keys():
    from textual.widgets import Static
    from textual.widgets._footer import FooterKey

    async with running_app() as (app, pilot):
        app.mock_questions = 2
        await start_mock(app, pilot)
        keys = [str(k.description) for k in app.screen.query(FooterKey)]
        screen, code = app.screen, app.screen.solution.code
        await pilot.press("ctrl+t", "ctrl+n")
        await pilot.pause()
        hints = str(screen.query_one("#hints", Static).content)
        return keys, hints, app.screen is screen and app.screen.solution.code == code


def test_a_mock_shows_no_hint_or_new_variant_key_and_runs_neither(data_dir):
    keys, hints, same_question = asyncio.run(_mock_keys())
    assert "Submit" in keys and "Hint" not in keys and "New variant" not in keys and "Skip follow-up" not in keys
    assert hints == "" and same_question
