"""The interview in stages through the app, at 80x24: each stage graded on its own key as it is submitted,
its keys shown before the next stage (and nothing of a stage still to come), a push asked on its own
variant, a mock that runs every stage, the reveal grouped by stage, and a stage asked again."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest

import solvers.interview
from practice.store import open_store
from solvers.bank import Bank
from solvers.interview import asked_keys, key_line
from solvers.report import answer_value, typed_key
from tests.pilot_helpers import (
    on_screen,
    open_default,
    push_showing,
    question_ready,
    reveal,
    running_app,
    stage_ready,
    start_mock,
    submit_stage,
    text_of,
    through_stages,
    wait_for,
)
from tui.modes import BetweenStages
from tui.screens.question import QuestionScreen
from tui.screens.solution import SolutionScreen

pytestmark = pytest.mark.usefixtures("data_dir")  # each test's app has a progress store of its own

STAGED = "kv-bytes-per-token"


def type_stage(screen: QuestionScreen, slip: bool = False) -> None:
    """The stage being asked typed with its own variant's key; with `slip`, its first number doubled."""
    run = screen.current
    assert run is not None
    for number, key in enumerate(run.ask):
        typed = typed_key(run.solution, key)
        if slip and number == 0:
            typed = f"{answer_value(run.solution, key) * 2}"
        screen.query_one(f"#stage-{run.index} #answer-{key}").insert_text_at_cursor(typed)


def stage_keys(screen: QuestionScreen, index: int) -> str:
    return str(screen.query_one(f"#stage-{index} .keys").content)


def test_a_slip_in_one_stage_does_not_fail_the_next_and_its_key_shows_between():
    """The opening's first number doubled: that answer is wrong, the second stage (typed from the key)
    is right, and between them the opening's keys show with their why, none of a later stage's."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, STAGED)
            screen = app.screen
            opening = screen.current
            type_stage(screen, slip=True)
            await submit_stage(app, pilot)
            shown = stage_keys(screen, 0)
            second = screen.current
            focused = screen.focused.id
            type_stage(screen)
            await submit_stage(app, pilot)
            return screen.solution, opening, second, shown, focused, screen.answered

    solution, opening, second, shown, focused, answered = asyncio.run(scenario())
    assert [g.verdict for g in answered[0].grades] == ["wrong", "correct"]
    assert (second.index, answered[1].run) == (1, second) and all(g.correct for g in answered[1].grades)
    assert focused == f"answer-{second.ask[0]}"  # the first new box takes the focus
    flat = " ".join(shown.split())
    for key in opening.ask:  # each key with its why, as the derivation gives it
        assert " ".join(key_line(solution, key).split()) in flat
    later = [key for stage in solution.question.stages[1:] for key in stage.ask if key not in opening.ask]
    for key in later:  # nothing of an answer still to come
        assert " ".join(key_line(solution, key).split()) not in flat


def test_a_push_shows_its_variant_and_what_it_moved_and_grades_on_its_own_key(data_dir):
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, STAGED)
            screen = app.screen
            while not push_showing(app):
                type_stage(screen)
                await submit_stage(app, pilot)
            push = screen.current
            stage = screen.query_one(f"#stage-{push.index}")
            code = str(stage.query_one(".push-code").content)
            table = text_of(stage.query_one(".params").content)
            type_stage(screen)
            await submit_stage(app, pilot)
            await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
            shown = app.screen
            return (screen.solution, push, code, table, shown, str(shown.query_one("#solution-title").content),
                    bool(shown.query(f"#regime-{push.index}")))

    solution, push, code, table, reveal_screen, title, regime = asyncio.run(scenario())
    assert push.moved and str(push.solution.code) in code
    for name in push.moved:  # each moved figure at its new value, with what it was
        row = next(line for line in table.splitlines() if push.solution.param(name).label in line)
        assert push.solution.param(name).shown in row and f"(was {solution.param(name).shown})" in row
    pushed = reveal_screen.answered[-1]
    assert pushed.run is push and all(g.correct for g in pushed.grades)
    assert f"follow-up {len(push.ask)}/{len(push.ask)}" in title and regime  # the push's own regime closes it
    store, _ = open_store(data_dir)
    (attempt,) = store.attempts()
    assert [a.key for a in attempt.answers] == asked_keys(done.run for done in reveal_screen.answered)


def test_the_reveal_is_grouped_by_stage_with_each_steps_under_it():
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, STAGED)
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))  # every stage given up, the push skipped
            screen = app.screen
            under: list[int] = []  # the steps under each stage's title, in order
            for widget in screen.query_one("#solution-body").children:
                if "stage-title" in widget.classes:
                    under.append(0)
                elif "step" in widget.classes:
                    under[-1] += 1
            return screen.solution, [str(t.content) for t in screen.query(".stage-title")], under

    solution, titles, under = asyncio.run(scenario())
    asked = [i for i, stage in enumerate(solution.question.stages) if not stage.push]
    assert len(titles) == len(asked) and titles[0].startswith("Opening")
    by_stage = solvers.interview.steps_by_stage(solution)  # what each stage's answers first need
    assert under == [len(by_stage[i]) for i in asked] and sum(under) == len(solution.sheet.steps)


def test_a_reveal_whose_first_stages_need_no_step_shows_the_givens_once():
    """pause-storm-origin's opening and recall need no step of the derivation: the givens table went under
    each of them and the solution screen raised on a second widget id 'givens' (a fresh clone's mock hit it)."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "pause-storm-origin")
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            return app.screen.solution, len(app.screen.query("#givens"))

    solution, givens = asyncio.run(scenario())
    assert solvers.interview.steps_by_stage(solution)[0] == [] and givens == 1


def test_verdict_only_hides_the_keys_between_stages_until_the_reveal():
    async def scenario():
        async with running_app() as (app, pilot):
            app.app_settings = replace(app.app_settings, between_stages=BetweenStages.VERDICT_ONLY)
            await open_default(app, pilot, STAGED)
            screen = app.screen
            type_stage(screen, slip=True)
            await submit_stage(app, pilot)
            shown = stage_keys(screen, 0)
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            revealed = str(app.screen.query(".keys").first().content)
            return screen.solution, shown, revealed

    solution, shown, revealed = asyncio.run(scenario())
    assert "wrong" in shown and "correct" in shown
    key = solution.question.stages[0].ask[0]
    assert " ".join(key_line(solution, key).split()) not in " ".join(shown.split())
    assert " ".join(key_line(solution, key).split()) in " ".join(revealed.split())


def test_pushes_are_solved_off_the_ui_thread_before_they_are_needed(monkeypatch):
    """A submit never searches: every push is solved in the worker the question starts as it opens."""
    real, threads = solvers.interview.stage_run, []

    def recording(solution, catalog, index):
        if solution.question.stages[index].push:
            threads.append(threading.current_thread() is threading.main_thread())
        return real(solution, catalog, index)

    monkeypatch.setattr(solvers.interview, "stage_run", recording)

    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, STAGED)
            # solved before the first submit: a turn of one push a side, the other side's solved to None
            await wait_for(pilot, lambda: len(app.screen.pushes) == 2)
            await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)

    asyncio.run(scenario())
    assert threads == [False, False]


def test_a_staged_mock_runs_every_stage_with_keys_but_no_hints_and_reviews_each_stage(bank):
    async def scenario():
        async with running_app(bank_loader=lambda: Bank({STAGED: bank.questions[STAGED]})) as (app, pilot):
            app.mock_questions = 1
            await start_mock(app, pilot)
            screen = app.screen
            await pilot.press("ctrl+t")
            hints = screen.hints_shown
            type_stage(screen, slip=True)
            await submit_stage(app, pilot)
            keys = stage_keys(screen, 0)
            while not push_showing(app):
                await submit_stage(app, pilot, ("ctrl+s", "ctrl+s"))
            await pilot.press("ctrl+k")  # a mock asks every push
            await wait_for(pilot, lambda: any("asks every follow-up" in n.message for n in app._notifications))
            still = push_showing(app)
            await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)
            await wait_for(pilot, on_screen(app, "MockSheetScreen"))
            attempt = app.screen.sheet.attempts[0]
            app.screen.query_one("#sheet").focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
            review = app.screen
            return (screen.solution, hints, keys, still, attempt, [d.run.index for d in review.answered], review.mode,
                    review.grades)

    solution, hints, keys, still, attempt, stages, mode, grades = asyncio.run(scenario())
    first = solution.question.stages[0].ask[0]
    assert hints == 0 and " ".join(key_line(solution, first).split()) in " ".join(keys.split())  # keys, not hints
    turns = [solution.question.turn_of(index) for index in stages]  # the push of this side's turn: 3 or 4
    assert still and turns == [0, 1, 2, 3] and mode == "regrade"
    saved = {a.key: a.verdict for a in attempt.answers}
    assert {g.key: g.verdict for g in grades} == {k: v for k, v in saved.items() if not k.startswith("followup.")}
    assert any(k.startswith("followup.") for k in saved)


def test_answer_again_asks_the_first_stage_that_went_wrong_with_the_ones_before_given():
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, STAGED)
            screen = app.screen
            type_stage(screen)
            await submit_stage(app, pilot)  # the opening right
            type_stage(screen, slip=True)
            await submit_stage(app, pilot)  # the second stage with a slip
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            card = app.session.reviewer.card(STAGED)
            await pilot.press("a")
            await wait_for(pilot, lambda: question_ready(app))
            again = app.screen
            asked, given = again.current.index, [run.index for run in again.given]
            given_keys = str(again.query_one("#stage-0 .keys").content)
            type_stage(again)
            await submit_stage(app, pilot)
            await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
            shown = app.screen
            return (asked, given, given_keys, card, app.session.reviewer.card(STAGED), shown,
                    str(shown.query_one("#rating").content), len(shown.query(".stage-title")))

    asked, given, given_keys, card_before, card_after, solution, rating, titles = asyncio.run(scenario())
    assert (asked, given) == (1, [0]) and "320 KiB" in given_keys
    assert card_after == card_before and "schedule does not move" in rating
    assert [d.run.index for d in solution.answered] == [1] and all(g.correct for g in solution.grades)
    assert titles == 3  # the opening given, the stage asked, the third's steps (the push not asked)


def test_a_push_that_brings_a_convention_lists_it_under_its_words_and_f2_opens_it(data_dir):
    """model-runner-v2@1's push moves onto a TP group: its all-reduce latency card joins the conventions,
    named under the push (not before it: the pushes are solved ahead) and opened by F2 with the opening's."""
    async def scenario():
        async with running_app() as (app, pilot):
            app.open_code("model-runner-v2@1")
            await wait_for(pilot, lambda: question_ready(app))
            screen = app.screen
            before = None
            while not push_showing(app):
                if before is None:
                    await pilot.press("f2")
                    await wait_for(pilot, on_screen(app, "ConventionsScreen"))
                    before = app.screen.cards
                    await pilot.press("escape")
                    await wait_for(pilot, lambda: stage_ready(app, screen))
                type_stage(screen)
                await submit_stage(app, pilot)
            stage = screen.query_one(f"#stage-{screen.current.index}")
            said = [str(s.content) for s in stage.query(".conventions")]
            await pilot.press("f2")
            await wait_for(pilot, on_screen(app, "ConventionsScreen"))
            return before, said, app.screen.cards, screen.current.cards_added

    before, said, after, added = asyncio.run(scenario())
    assert "all-reduce-latency-nvlink" in added and "all-reduce-latency-nvlink" not in before
    assert said == [f"Conventions now also in play: {', '.join(added)} (F2)"]
    assert list(after) == [*before, *added]
