"""Functional tests of the app through Textual's Pilot, at 80x24."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from solvers.bank import load_bank
from solvers.report import answer_value, typed_key
from tests.old_shape import OLD, old_question, with_old_shape
from tests.pilot_helpers import (
    SIZE,
    interviewer_ready,
    notice_posted,
    notices,
    on_screen,
    open_default,
    open_what_if,
    palette_pick,
    push_showing,
    question_ready,
    reveal,
    running_app,
    step_what_if,
    submit_stage,
    text_of,
    wait_for,
)
from tui.app import InfradrillApp
from tui.modes import Mode
from tui.screens.browse import BrowseScreen
from tui.screens.question import QuestionScreen
from tui.screens.solution import SolutionScreen

pytestmark = pytest.mark.usefixtures("data_dir")  # each test's app has a progress store of its own


async def _answer_default_variant(answers):
    async with running_app() as (app, pilot):
        await pilot.press("b")
        assert isinstance(app.screen, BrowseScreen)
        table = app.screen.query_one(DataTable)
        row = [str(table.get_row_at(i)[2]) for i in range(table.row_count)].index("kv-bytes-per-token")
        table.move_cursor(row=row)
        await pilot.press("d")
        await wait_for(pilot, lambda: question_ready(app))
        screen = app.screen
        assert str(screen.solution.code) == "kv-bytes-per-token@default"
        while not screen.at_push:  # each stage typed as it comes; the push is skipped by reveal
            run = screen.current
            for key in run.ask:
                screen.query_one(f"#stage-{run.index} #answer-{key}", Input).focus()
                await pilot.press(*answers(run.solution, run.solution.question.answer(key)))
            await submit_stage(app, pilot)
        await reveal(app, pilot)
        screen = app.screen
        return screen.grades, len(screen.query(".step")), str(screen.query_one("#regime").content.title)


def test_expected_answers_grade_correct_and_steps_show():
    grades, steps, regime = asyncio.run(_answer_default_variant(lambda s, spec: list(typed_key(s, spec.key))))
    assert [g.verdict for g in grades] == ["correct"] * len(grades)
    assert steps >= 4
    assert regime == "Regime: capacity-limited"


def test_wrong_answer_is_graded_wrong_with_a_slip():
    def answers(solution, spec):
        if spec.key == "kv_per_token":
            return list(f"{answer_value(solution, spec.key) * 2} KiB")
        return list(typed_key(solution, spec.key))

    grades, _, _ = asyncio.run(_answer_default_variant(answers))
    by_key = {g.key: g for g in grades}
    assert by_key["kv_per_token"].verdict == "wrong" and by_key["kv_per_token"].slip.startswith("x2")
    assert by_key["users"].verdict == "correct"


async def _unreadable_answer_is_not_submitted():
    async with running_app() as (app, pilot):
        await open_default(app, pilot, "weight-read-intensity")
        await pilot.press(*"12 parsecs")
        await pilot.press("ctrl+s")
        await wait_for(pilot, notice_posted(app, "Answer 1 cannot be read"))  # refused, and says which
        assert isinstance(app.screen, QuestionScreen)
        note = app.screen.query_one("#field-crossover .note")
        assert "unknown unit" in str(note.render())
        await pilot.press("ctrl+t")
        assert app.screen.hints_shown == 1


def test_unreadable_answer_is_not_submitted():
    asyncio.run(_unreadable_answer_is_not_submitted())


async def _variant_code():
    async with running_app() as (app, pilot):
        await pilot.press("v")
        await pilot.press(*"weight-read-intensity@42", "enter")
        await wait_for(pilot, lambda: question_ready(app))
        assert str(app.screen.solution.code) == "weight-read-intensity@42"
        await pilot.press("escape")
        await pilot.press("v")
        await pilot.press(*"nonsense", "enter")
        await wait_for(pilot, lambda: any(n.title == "Cannot open" for n in app._notifications))
        assert not isinstance(app.screen, QuestionScreen)


def test_variant_code_opens_exactly_that_variant():
    asyncio.run(_variant_code())


async def _palette():
    async with running_app() as (app, pilot):
        await palette_pick(app, pilot, "block-count", "kv-cache-block-count")
        await wait_for(pilot, lambda: question_ready(app))
        return app.screen.solution.question.id


def test_command_palette_finds_a_question():
    assert asyncio.run(_palette()) == "kv-cache-block-count"


def test_command_palette_offers_the_apps_actions():
    async def scenario():
        async with running_app() as (app, pilot):
            await palette_pick(app, pilot, "statistics", "Statistics")
            await wait_for(pilot, on_screen(app, "StatsScreen"))

    asyncio.run(scenario())


async def _giving_up_needs_a_second_submit():
    async with running_app() as (app, pilot):
        await open_default(app, pilot, "kv-bytes-per-token")
        await pilot.press("ctrl+s")
        await wait_for(pilot, notice_posted(app, "press ctrl+s again to submit"))
        assert isinstance(app.screen, QuestionScreen)
        await reveal(app, pilot)
        assert {g.verdict for g in app.screen.grades} == {"unparsed"}
        await wait_for(pilot, lambda: "TPOT target" in str(app.screen.query_one("#chart").content))


def test_giving_up_needs_a_second_submit_and_the_chart_appears():
    asyncio.run(_giving_up_needs_a_second_submit())


def test_the_chart_fits_a_60_column_screen():
    """At 60x20 a chart of fixed width wrapped every row: its plot narrows to what the screen leaves."""
    async def scenario():
        app = InfradrillApp()
        async with app.run_test(size=(60, 20)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await open_default(app, pilot, "kv-bytes-per-token")
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            chart = app.screen.query_one("#chart")
            await wait_for(pilot, lambda: "TPOT target" in str(chart.content))
            return str(chart.content), chart.content_region.width

    drawn, room = asyncio.run(scenario())
    assert max(len(line) for line in drawn.splitlines() if "│" in line or "└" in line) <= room


def test_the_reveal_shows_the_real_systems_measurement_beside_the_model():
    """A question with a reality: entry solves its conditions in a worker and says both figures at the reveal."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "pd-transfer-bandwidth")
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            shown = app.screen.query_one("#reality")
            await wait_for(pilot, lambda: "model gives" in str(shown.content))
            return str(shown.content)

    said = asyncio.run(scenario())
    assert "This question's model gives" in said and "TensorRT-LLM" in said


async def _broken_file_notice(root):
    async with running_app(bank_loader=lambda: load_bank(root)) as (app, pilot):
        problems = app.session.problems + app.session.notices
        await wait_for(pilot, lambda: len(notices(app)) >= len(problems))  # each is posted as a message
        status = str(app.screen.query_one("#bank-status").content)
        return notices(app), status, sorted(app.session.bank.questions)


def test_a_broken_question_file_gives_a_notice_and_the_rest_loads(tmp_path):
    source = Path("questions/F/weight-read-intensity.yaml").read_text()
    (tmp_path / "weight-read-intensity.yaml").write_text(source)
    broken = source.replace("id: weight-read-intensity", "id: kv-bytes-per-token")
    (tmp_path / "kv-bytes-per-token.yaml").write_text(broken.replace("  batch:\n", "  batch:\n    fixed: [oops\n"))
    notices, status, loaded = asyncio.run(_broken_file_notice(tmp_path))
    assert loaded == ["weight-read-intensity"]
    assert any("kv-bytes-per-token.yaml" in n for n in notices)
    assert "could not be loaded" in status


async def _what_if_flips_the_regime():
    async with running_app() as (app, pilot):
        screen = await open_what_if(app, pilot, "weight-read-intensity")
        seen = [screen.solution.sheet.regime.name]
        for _ in range(12):  # decode batch: 32 -> x1.41 per press, past the ~455 where 512-token contexts cross
            await step_what_if(pilot, screen, "right")
            seen.append(screen.solution.sheet.regime.name)
        tokens = screen.solution.param("batch").raw
        return seen, tokens, str(screen.query_one("#whatif-regime").content)


def test_what_if_explorer_steps_a_parameter_across_the_regime_boundary():
    seen, tokens, regime_text = asyncio.run(_what_if_flips_the_regime())
    assert seen[0] == "memory-bound" and seen[-1] == "compute-bound"
    assert tokens > 455 and "compute-bound" in regime_text


def test_what_if_selects_every_parameter_and_steps_a_choice_through_its_options():
    """Up and down pick a parameter (the scroll container used to take them); a GPU, a model or a dtype
    moves to its next option, and the chart still sweeps the question's own parameter."""
    async def scenario():
        async with running_app() as (app, pilot):
            screen = await open_what_if(app, pilot, "weight-read-intensity")
            names = [spec.name for spec in screen.specs]
            assert names == [p.name for p in screen.solution.question.parameters]
            while screen.specs[screen.selected].name != "gpu":
                await step_what_if(pilot, screen, "up")
            await step_what_if(pilot, screen, "right")
            rows = text_of(screen.query_one("#whatif-params").content)
            return screen.solution.param("gpu").raw, screen.chart[1], rows

    gpu, points, rows = asyncio.run(scenario())
    assert gpu == "h200-sxm"  # the option after the default h100-sxm
    selected = [line for line in rows.splitlines() if line.startswith("▶")]
    assert points and len(selected) == 1 and "GPU" in selected[0] and "H200" in selected[0]


async def _interviewer_runs_the_interview(code: str):
    async with running_app() as (app, pilot):
        await pilot.press("b")
        await pilot.press("i")
        await wait_for(pilot, on_screen(app, "InterviewerScreen"))
        banner = app.screen.query_one("#code-banner").content.renderable
        shown_code = str(app.screen.solution.code)
        await pilot.press("escape")
        app._make_variant(lambda session: session.variant_from_code(code), replace=False, mode=Mode.INTERVIEWER)
        await wait_for(pilot, lambda: on_screen(app, "InterviewerScreen")() and str(app.screen.solution.code) == code)
        screen = app.screen
        await wait_for(pilot, lambda: interviewer_ready(screen))
        wide = 2000  # a cell's text on one line, to find each line whole (a select's reasons run past 1,000)
        said = [(text_of(w.content, wide), text_of(k.content, wide))
                for w, k in zip(screen.query(".stage-words"), screen.query(".stage-keys"))]
        steps = len(screen.solution.sheet.steps)
        await pilot.press("space", "space")
        two = len(screen.query(".revealed-step"))
        await pilot.press("left")
        one = len(screen.query(".revealed-step"))
        for _ in range(steps + 1):
            await pilot.press("space")
        return (shown_code, banner), screen.solution, said, (two, one, len(screen.query(".revealed-step")), steps)


@pytest.mark.parametrize("code", ["kv-bytes-per-token@default", "kv-bytes-per-token@12", "weight-read-intensity@3"])
def test_interviewer_view_shows_every_stage_and_reveals_one_step_at_a_time(catalog, code):
    """Each stage in order: its words, hints and what a push moved, and its keys with their why, the reasons of the
    options that do not hold and the slips, on the variant the stage is asked on (a push's own)."""
    from solvers.report import key_notes
    from solvers.script import script

    (shown_code, banner), solution, said, (two, one, everything, steps) = asyncio.run(
        _interviewer_runs_the_interview(code))
    assert shown_code in banner
    made = script(solution, catalog)
    assert len(said) == len(made.stages) == made.stages[-1].turns  # one push a turn: this side's
    for stage, (words, keys) in zip(made.stages, said):
        assert f"Stage {stage.turn} of {stage.turns}: {stage.kind}" in words
        if stage.run is None:
            assert "none for this variant" in words
            continue
        assert " ".join(stage.run.say.split()) in " ".join(words.split())
        assert all(hint in words for hint in stage.run.hints)
        if stage.stage.push:
            assert str(stage.run.solution.code) in words and "Moved:" in words
        for key, line in stage.run.key_lines():
            assert line in keys and all(note in keys for note in key_notes(stage.run.solution, key))
    assert (two, one) == (2, 1)
    assert everything == steps + 1 + bool(solution.question.reality)  # every step, the regime, any measurements


def test_the_interviewer_reveals_the_published_measurements_after_the_regime():
    """One press past the regime shows the real system beside the model; one press back takes it away again."""
    async def scenario():
        async with running_app() as (app, pilot):
            app._make_variant(lambda session: session.variant_from_code("pd-transfer-bandwidth@default"), replace=False,
                              mode=Mode.INTERVIEWER)
            await wait_for(pilot, on_screen(app, "InterviewerScreen"))
            screen = app.screen
            await wait_for(pilot, lambda: interviewer_ready(screen))
            for _ in range(len(screen.solution.sheet.steps) + 1):
                await pilot.press("space")
            before = len(screen.query(".revealed-step"))
            await pilot.press("space")
            shown = text_of(screen.query(".practice").last().content, 1000)
            await pilot.press("left")
            return before, shown, len(screen.query(".revealed-step")), screen.shown

    before, shown, after, steps_shown = asyncio.run(scenario())
    assert "In practice" in shown and "model gives" in shown and "TensorRT-LLM" in shown
    assert after == before == steps_shown  # taken back without un-revealing a step


async def _escape_from_a_follow_up():
    async with running_app(bank_loader=with_old_shape) as (app, pilot):
        await open_default(app, pilot, OLD)
        await pilot.press("ctrl+s", "ctrl+s")
        await wait_for(pilot, lambda: push_showing(app))
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))
        return [done.run.kind for done in app.screen.answered], len(app.screen.grades)


def test_escape_from_a_follow_up_skips_it_and_still_reveals_the_first_round():
    asked, graded = asyncio.run(_escape_from_a_follow_up())
    assert asked == ["opening"] and graded == len(old_question().answers)


MENU = {"drill": "QuestionScreen", "browse": "BrowseScreen", "random_question": "QuestionScreen",
        "enter_code": "CodeScreen", "mock": "MockStartScreen", "past_mocks": "PastMocksScreen",
        "stats": "StatsScreen", "settings": "SettingsScreen", "help": "HelpScreen", "review_ahead": "AheadScreen"}


async def _enter_on_every_menu_entry():
    from textual.widgets import OptionList

    from tui.screens.home import HomeScreen

    opened = {}
    async with running_app() as (app, pilot):
        home = app.screen
        menu = home.query_one("#menu", OptionList)
        for index in range(menu.option_count):
            option_id = menu.get_option_at_index(index).id
            if option_id == "quit":
                continue
            menu.focus()
            menu.highlighted = index
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.screen is not home and (
                not isinstance(app.screen, QuestionScreen) or question_ready(app)))
            opened[option_id] = type(app.screen).__name__
            while not isinstance(app.screen, HomeScreen):
                await app.pop_screen()
    return opened


def test_enter_on_every_home_menu_entry_opens_it():
    assert asyncio.run(_enter_on_every_menu_entry()) == MENU


async def _typing_brings_the_box_into_view():
    async with running_app() as (app, pilot):
        await open_default(app, pilot, "loss-plateau-triage")  # prompt, log and options fill 24 rows
        body = app.screen.query_one("#question-body")
        await wait_for(pilot, lambda: body.scroll_y == 0)  # the screen opens at its prompt
        box = app.screen.focused
        hidden_before = box.region.height == 0 or box.region.bottom > SIZE[1]
        await pilot.press("1")
        await wait_for(pilot, lambda: box.region.height > 0 and box.region.bottom <= SIZE[1])
        return hidden_before, body.can_focus


def test_typing_brings_the_focused_box_into_view_at_80x24():
    hidden_before, body_takes_focus = asyncio.run(_typing_brings_the_box_into_view())
    assert hidden_before  # the prompt fills the screen at first: the box starts below the fold
    assert not body_takes_focus  # tab moves between answer boxes, never to the scroll container


def test_a_question_opens_at_its_prompt_with_the_first_answer_box_focused():
    """At 80x24 a prompt, its options and its parameters fill the screen: Textual scrolled the body to
    the focused box, so the candidate saw parameters and boxes but not the question."""
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            body = app.screen.query_one("#question-body")
            await wait_for(pilot, lambda: body.scroll_y == 0 and body.max_scroll_y > 0)
            assert isinstance(app.screen.focused, Input) and app.screen.focused.id == "answer-kv_per_token"

    asyncio.run(scenario())


@pytest.mark.parametrize(("size", "out_of_sight"), [(SIZE, True), ((80, 60), False)])
def test_answer_boxes_out_of_sight_are_built_after_the_first_frame(monkeypatch, size, out_of_sight):
    """Below the fold the fields hold their rows empty for the first frame (the body as tall, so the same
    scrollbar), then get their boxes and the first takes focus; fields on screen are built with it."""
    first_frame = []
    mounted = QuestionScreen.on_mount

    def on_mount(self):
        mounted(self)
        self.call_after_refresh(lambda: first_frame.append(
            ([f.pending for f in self.query("AnswerField")], self.query_one("#question-body").virtual_size)))

    monkeypatch.setattr(QuestionScreen, "on_mount", on_mount)

    async def scenario():
        app = InfradrillApp()
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await open_default(app, pilot, "b200-h100-roles")  # a long table, then 2 boxes
            screen = app.screen
            fields = list(screen.query("AnswerField"))
            assert not any(f.pending for f in fields) and len(screen.query(Input)) == len(fields)
            assert screen.focused is screen.query_one("#answer-prefill_B")
            await wait_for(pilot, lambda: first_frame)  # the first frame's record: the question can be ready first
            pending, body_size = first_frame[0]
            assert pending == [out_of_sight] * len(fields)
            assert body_size == screen.query_one("#question-body").virtual_size

    asyncio.run(scenario())


def test_a_key_pressed_while_the_bank_loads_opens_its_screen_once_it_is_in():
    """`r` pressed right after launch used to say "still loading" and do nothing: the key was lost."""
    release = threading.Event()

    def slow_load():
        release.wait(30)
        return load_bank()

    async def scenario():
        app = InfradrillApp(bank_loader=slow_load)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("r")
            assert app.session is None and not isinstance(app.screen, QuestionScreen)
            release.set()
            await wait_for(pilot, lambda: question_ready(app))

    asyncio.run(scenario())


def test_help_lists_the_keys_of_the_screen_it_opens_over():
    """The help page was a hand-kept text, the same on every screen."""
    async def scenario():
        async with running_app() as (app, pilot):
            pages = []
            for opened in ("home", "question"):
                if opened == "question":
                    await open_default(app, pilot, "kv-bytes-per-token")
                await pilot.press("f1")
                await wait_for(pilot, on_screen(app, "HelpScreen"))
                pages.append(text_of(app.screen.body()))
                await pilot.press("escape")
            return pages

    home, question = asyncio.run(scenario())
    assert "Drill" in home and "Mock" in home and "Submit" not in home
    assert "Submit" in question and "Hint" in question and "Mock" not in question
    assert "Copy selected text" not in home + question
