"""SVG snapshots of every screen at 80x24 (pytest-textual-snapshot), so that a layout regression shows
as a picture: a failure writes snapshot_report.html with the old and new screens side by side.
After a change you meant, `pytest tests/test_snapshots.py --snapshot-update` rewrites them (look at the
diff before committing). They are compared against Textual's rendering: .ci/constraints.txt pins it.

Every snapshot is deterministic: a bank of three questions (so a question added elsewhere changes
nothing here), default variants and a seeded drill, a fixed "now" and time zone for dates, a clock
that stands still for timers, no notices and no blinking cursor.
"""
from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

import practice.records
import practice.review
import practice.store
import tui.screens.question
from practice.review import Reviewer
from practice.store import open_store
from solvers.bank import Bank
from solvers.report import answer_value, typed_key
from tests.pilot_helpers import (
    SIZE,
    interviewer_ready,
    on_screen,
    open_default,
    open_what_if,
    push_showing,
    question_ready,
    reveal,
    start_mock,
    step_what_if,
    submit_stage,
    through_stages,
    wait_for,
)
from tui.app import InfradrillApp
from tui.modes import Mode
from tui.screens.question import QuestionScreen

QUESTIONS = ("kv-bytes-per-token", "loss-plateau-triage", "weight-read-intensity")  # three topics, a chart
NOW = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)  # a Friday
SEED = 7  # the drill's random draws (mock questions and their variants)


class Clock:
    """The time the app reads: it stands still at NOW until a test moves it (a candidate's minutes on a
    question), so timers, durations and dates come out the same on every run."""

    def __init__(self) -> None:
        self.now = NOW

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def utc(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return 1000.0 + (self.now - NOW).total_seconds()


@pytest.fixture
def clock(monkeypatch, data_dir):
    """The clock of the progress store, the statistics and the question timer; UTC for local dates."""
    clock = Clock()
    for module in (practice.records, practice.review, practice.store):
        monkeypatch.setattr(module, "now_utc", clock.utc)

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return clock.now if tz is None else clock.now.astimezone(tz)

    monkeypatch.setattr(tui.screens.question, "datetime", Frozen)
    monkeypatch.setattr(tui.screens.question, "time", SimpleNamespace(monotonic=clock.monotonic))
    zone = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield clock
    if zone is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = zone
    time.tzset()


@pytest.fixture
def small_bank(bank):
    return Bank({qid: bank.questions[qid] for qid in QUESTIONS})


@pytest.fixture
def app(clock, small_bank):
    """The app over the small bank, its store in the test's own data directory."""
    return InfradrillApp(bank_loader=lambda: small_bank)


async def loaded(pilot: Pilot) -> InfradrillApp:
    """Wait for the bank, then seed the drill's random draws."""
    app = pilot.app
    assert isinstance(app, InfradrillApp)
    await wait_for(pilot, lambda: app.session is not None)
    app.loaded_session.rng.seed(SEED)
    return app


async def settle(pilot: Pilot) -> None:
    """What would differ between two runs goes: notices (they time out), the cursor's blink phase,
    a timer that has not ticked yet."""
    app = pilot.app
    await pilot.pause()
    app.clear_notifications()
    for box in app.screen.query(Input):
        box.cursor_blink = False
    if isinstance(app.screen, QuestionScreen):
        app.screen._tick()


UPDATE = ("the screen differs from its snapshot: snapshot_report.html shows both; if the change is meant, "
          "run `pytest tests/test_snapshots.py --snapshot-update` and commit the new SVG")


def snapshot(snap_compare, app: InfradrillApp, steps) -> None:
    """Run `steps(app, pilot)` once the bank is in, settle the screen, compare it with its SVG."""
    async def run_before(pilot: Pilot) -> None:
        await steps(await loaded(pilot), pilot)
        await settle(pilot)

    assert snap_compare(app, run_before=run_before, terminal_size=SIZE), UPDATE


async def type_the_key(app: InfradrillApp, pilot: Pilot, slip: bool = False) -> None:
    """Every box of the stage being asked filled with its expected answer (the first doubled: a slip)."""
    screen = app.screen
    assert isinstance(screen, QuestionScreen) and screen.current is not None
    run = screen.current
    for number, key in enumerate(run.ask):
        typed = f"{answer_value(run.solution, key) * 2}" if slip and number == 0 else typed_key(run.solution, key)
        screen.query_one(f"#stage-{run.index} #answer-{key}", Input).insert_text_at_cursor(typed)
    await pilot.pause()


async def stage_shown(app: InfradrillApp, pilot: Pilot) -> None:
    """Wait until the stage just asked is scrolled to: the last keys at the top, its first box in sight."""
    body = app.screen.query_one("#question-body")
    box = app.screen.focused
    await wait_for(pilot, lambda: box.region.height > 0 and box.region.bottom <= SIZE[1] and body.scroll_y > 0)


class TestHomeAndBank:
    def test_home(self, snap_compare, app):
        async def steps(app, pilot):
            await wait_for(pilot, lambda: "Due now" in str(app.screen.query_one("#bank-status").content))

        snapshot(snap_compare, app, steps)

    def test_drill_with_its_counters(self, snap_compare, app):
        async def steps(app, pilot):
            await pilot.press("d")
            await wait_for(pilot, lambda: question_ready(app))

        snapshot(snap_compare, app, steps)

    def test_browse(self, snap_compare, app):
        async def steps(app, pilot):
            await pilot.press("b")
            await wait_for(pilot, on_screen(app, "BrowseScreen"))

        snapshot(snap_compare, app, steps)


    def test_browse_filtered_with_held_questions(self, snap_compare, app):
        async def steps(app, pilot):
            reviewer = app.loaded_session.reviewer
            reviewer.suspend("loss-plateau-triage")
            reviewer.bury("weight-read-intensity")
            await pilot.press("b")
            await wait_for(pilot, on_screen(app, "BrowseScreen"))
            await pilot.press("slash", *"in", "down")
            await wait_for(pilot, lambda: app.screen.query_one("#bank").row_count == 2)

        snapshot(snap_compare, app, steps)

    def test_what_if_from_browse_one_step_on(self, snap_compare, app):
        """No attempt made: the header names the explored variant by its own code."""
        async def steps(app, pilot):
            await pilot.press("b")
            await wait_for(pilot, on_screen(app, "BrowseScreen"))
            await pilot.press("down", "w")
            await wait_for(pilot, on_screen(app, "WhatIfScreen"))
            screen = app.screen
            await wait_for(pilot, lambda: screen.asked > 0 and screen.solved == screen.asked)
            await step_what_if(pilot, screen, "right")

        snapshot(snap_compare, app, steps)


class TestQuestion:
    def test_question_as_opened(self, snap_compare, app):
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")

        snapshot(snap_compare, app, steps)

    def test_question_answered(self, snap_compare, app):
        """The key typed into every box, scrolled to the boxes: each note says how its box will be read."""
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            await type_the_key(app, pilot)
            body = app.screen.query_one("#question-body")
            body.scroll_end(animate=False)
            await wait_for(pilot, lambda: body.scroll_y == body.max_scroll_y > 0)

        snapshot(snap_compare, app, steps)

    def test_follow_up(self, snap_compare, app):
        """A declared push (this side's, `when:`): what it moved, below the keys of the stages before it."""
        async def steps(app, pilot):
            await open_default(app, pilot, "weight-read-intensity")
            while not app.screen.at_push:
                await type_the_key(app, pilot)
                await submit_stage(app, pilot)
            await wait_for(pilot, lambda: push_showing(app))
            await stage_shown(app, pilot)

        snapshot(snap_compare, app, steps)

    def test_second_stage_after_the_first_stages_keys(self, snap_compare, app):
        """The opening answered with a slip: its verdicts and keys, then the second stage's words and boxes."""
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            await type_the_key(app, pilot, slip=True)
            await submit_stage(app, pilot)
            await stage_shown(app, pilot)

        snapshot(snap_compare, app, steps)

    def test_push(self, snap_compare, app):
        """A staged question's push: its variant code, the figure it moved (with what it was), its boxes."""
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            while not push_showing(app):
                await type_the_key(app, pilot)
                await submit_stage(app, pilot)
            await stage_shown(app, pilot)

        snapshot(snap_compare, app, steps)


async def solved(app: InfradrillApp, pilot: Pilot, question_id: str, push: bool = False) -> None:
    """The solution of a default variant, the first answer doubled (a slip), the rest right (the push
    answered right too with `push`, else skipped), its chart drawn and its published measurements solved."""
    await open_default(app, pilot, question_id)
    screen = app.screen
    await type_the_key(app, pilot, slip=True)
    await submit_stage(app, pilot)
    while app.screen is screen and (push or not screen.at_push):
        await type_the_key(app, pilot)
        await submit_stage(app, pilot)
    if app.screen is screen:
        await reveal(app, pilot)  # skips the push
    await wait_for(pilot, lambda: "Sweeping" not in str(app.screen.query_one("#chart").content))
    if app.screen.solution.question.reality:  # the measurements beside the model, solved in a worker too
        await wait_for(pilot, lambda: "model gives" in str(app.screen.query_one("#reality").content))


class TestSolution:
    def test_solution_grades(self, snap_compare, app):
        async def steps(app, pilot):
            await solved(app, pilot, "kv-bytes-per-token")

        snapshot(snap_compare, app, steps)

    def test_solution_steps_and_regime(self, snap_compare, app):
        async def steps(app, pilot):
            await solved(app, pilot, "kv-bytes-per-token")
            body = app.screen.query_one("#solution-body")
            body.scroll_to_widget(app.screen.query_one("#regime"), animate=False, top=True)
            await wait_for(pilot, lambda: body.scroll_y > 0)

        snapshot(snap_compare, app, steps)

    def test_solution_push_closes_with_its_regime(self, snap_compare, app):
        async def steps(app, pilot):
            await solved(app, pilot, "kv-bytes-per-token", push=True)
            body = app.screen.query_one("#solution-body")
            body.scroll_to_widget(app.screen.query_one(".stage-title.-push"), animate=False, top=True)
            await wait_for(pilot, lambda: body.scroll_y > 0)

        snapshot(snap_compare, app, steps)

    def test_what_if(self, snap_compare, app):
        async def steps(app, pilot):
            await open_what_if(app, pilot, "weight-read-intensity")

        snapshot(snap_compare, app, steps)


class TestStatistics:
    @pytest.fixture
    def reviewed(self, data_dir, small_bank, variant):
        """Three weeks of drill before NOW: right, a x2 slip, given up."""
        store, _ = open_store(data_dir)
        reviewer = Reviewer(store, small_bank.questions.values(), tz=UTC)
        history = [(20, "kv-bytes-per-token", "right"), (19, "weight-read-intensity", "x2"),
                   (12, "kv-bytes-per-token", "right"), (11, "loss-plateau-triage", "blank"),
                   (5, "weight-read-intensity", "right"), (4, "loss-plateau-triage", "right"),
                   (1, "kv-bytes-per-token", "x2")]
        for days_ago, qid, how in history:
            solution = variant(f"{qid}@{days_ago}")
            typed = {a.key: typed_key(solution, a.key) if how != "blank" else "" for a in solution.question.answers}
            if how == "x2":
                key = next(a.key for a in solution.question.answers if a.numeric)
                typed[key] = str(answer_value(solution, key) * 2)
            when = NOW - timedelta(days=days_ago, hours=2)
            reviewer.submit(question_id=qid, variant=str(solution.code), mode=Mode.DRILL,
                            grades=solution.grade(typed), typed=typed, started=when - timedelta(minutes=3),
                            submitted=when)
        store.close()

    def test_statistics(self, snap_compare, app, reviewed):
        async def steps(app, pilot):
            await pilot.press("s")
            await wait_for(pilot, on_screen(app, "StatsScreen"))

        snapshot(snap_compare, app, steps)

    def test_statistics_scrolled_to_the_end(self, snap_compare, app, reviewed):
        async def steps(app, pilot):
            await pilot.press("s")
            await wait_for(pilot, on_screen(app, "StatsScreen"))
            body = app.screen.query_one("#stats-body")
            body.scroll_end(animate=False)
            await wait_for(pilot, lambda: body.scroll_y == body.max_scroll_y > 0)

        snapshot(snap_compare, app, steps)

    def test_review_ahead_dialog(self, snap_compare, app, reviewed):
        async def steps(app, pilot):
            await pilot.press("s")
            await wait_for(pilot, on_screen(app, "StatsScreen"))
            await pilot.press("a")
            await wait_for(pilot, on_screen(app, "AheadScreen"))

        snapshot(snap_compare, app, steps)

    def test_reviewing_ahead(self, snap_compare, app, reviewed):
        async def steps(app, pilot):
            await pilot.press("a")
            await wait_for(pilot, on_screen(app, "AheadScreen"))
            await pilot.press("enter")
            await wait_for(pilot, lambda: question_ready(app))

        snapshot(snap_compare, app, steps)


async def mock_started(app: InfradrillApp, pilot: Pilot) -> None:
    app.mock_questions = 2
    await start_mock(app, pilot)


async def mock_finished(app: InfradrillApp, pilot: Pilot, clock: Clock) -> None:
    """Both questions given up on after two and then six minutes (over the budget); a mock asks every
    stage and every push: given up too."""
    await mock_started(app, pilot)
    for minutes in (2, 6):
        clock.advance(60 * minutes)
        screen = app.screen
        await through_stages(app, pilot, ("ctrl+s", "ctrl+s"), skip_pushes=False)
        await wait_for(pilot, lambda asked=screen: app.screen is not asked and (
            question_ready(app) or type(app.screen).__name__ == "MockSheetScreen"))
    await wait_for(pilot, on_screen(app, "MockSheetScreen"))


class TestMock:
    def test_what_a_mock_does_said_before_it_starts(self, snap_compare, app):
        async def steps(app, pilot):
            await pilot.press("m")
            await wait_for(pilot, on_screen(app, "MockStartScreen"))

        snapshot(snap_compare, app, steps)

    def test_mock_running(self, snap_compare, app):
        async def steps(app, pilot):
            await mock_started(app, pilot)

        snapshot(snap_compare, app, steps)

    def test_mock_over_its_budget(self, snap_compare, app, clock):
        async def steps(app, pilot):
            await mock_started(app, pilot)
            clock.advance(5 * 60 + 24)

        snapshot(snap_compare, app, steps)

    def test_a_mock_left_half_way_in_past_mocks(self, snap_compare, app, clock):
        async def steps(app, pilot):
            await mock_started(app, pilot)
            await pilot.press("escape", "escape")
            await wait_for(pilot, on_screen(app, "HomeScreen"))
            await pilot.press("p")
            await wait_for(pilot, on_screen(app, "PastMocksScreen"))

        snapshot(snap_compare, app, steps)

    def test_mock_score_sheet(self, snap_compare, app, clock):
        async def steps(app, pilot):
            await mock_finished(app, pilot, clock)

        snapshot(snap_compare, app, steps)

    def test_past_mocks(self, snap_compare, app, clock):
        async def steps(app, pilot):
            await mock_finished(app, pilot, clock)
            await pilot.press("escape")
            await pilot.press("p")
            await wait_for(pilot, on_screen(app, "PastMocksScreen"))

        snapshot(snap_compare, app, steps)


class TestInterviewer:
    async def _opened(self, app, pilot):
        """The interviewer view of kv-bytes-per-token@default, its push found by the worker."""
        app.open_question("kv-bytes-per-token", default=True, mode=Mode.INTERVIEWER)
        await wait_for(pilot, on_screen(app, "InterviewerScreen"))
        await wait_for(pilot, lambda: interviewer_ready(app.screen))

    def test_interviewer_opening_stage(self, snap_compare, app):
        snapshot(snap_compare, app, self._opened)

    def test_interviewer_push_stage(self, snap_compare, app):
        async def steps(app, pilot):
            await self._opened(app, pilot)
            app.screen.query_one("#stage-3-words").scroll_visible(animate=False, top=True)
            await pilot.pause()

        snapshot(snap_compare, app, steps)

    def test_interviewer_two_steps_revealed(self, snap_compare, app):
        async def steps(app, pilot):
            await self._opened(app, pilot)
            await pilot.press("space", "space")
            await wait_for(pilot, lambda: len(app.screen.query(".revealed-step")) == 2)

        snapshot(snap_compare, app, steps)


class TestDialogs:
    def test_help_over_home(self, snap_compare, app):
        async def steps(app, pilot):
            await pilot.press("f1")
            await wait_for(pilot, on_screen(app, "HelpScreen"))

        snapshot(snap_compare, app, steps)

    def test_help_over_a_question(self, snap_compare, app):
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            await pilot.press("f1")
            await wait_for(pilot, on_screen(app, "HelpScreen"))

        snapshot(snap_compare, app, steps)

    def test_variant_code(self, snap_compare, app):
        async def steps(app, pilot):
            await pilot.press("v")
            await wait_for(pilot, on_screen(app, "CodeScreen"))
            await pilot.press(*"kv-bytes-per-token@42")

        snapshot(snap_compare, app, steps)

    def test_conventions_card(self, snap_compare, app):
        async def steps(app, pilot):
            await open_default(app, pilot, "kv-bytes-per-token")
            await pilot.press("f2")
            await wait_for(pilot, on_screen(app, "ConventionsScreen"))

        snapshot(snap_compare, app, steps)


SETTINGS_DIR = "/tmp/infradrill-snapshot-config"  # the screen prints the file's path: one that never varies


@pytest.fixture
def settings_app(monkeypatch, clock, small_bank):
    """The app with its settings file in a fixed, empty directory (defaults on screen)."""
    import shutil

    shutil.rmtree(SETTINGS_DIR, ignore_errors=True)
    monkeypatch.setenv("INFRADRILL_CONFIG_DIR", SETTINGS_DIR)
    yield InfradrillApp(bank_loader=lambda: small_bank)
    shutil.rmtree(SETTINGS_DIR, ignore_errors=True)


class TestSettings:
    def test_settings(self, snap_compare, settings_app):
        async def steps(app, pilot):
            await pilot.press("comma")
            await wait_for(pilot, lambda: on_screen(app, "SettingsScreen")() and app.screen.focused is not None)

        snapshot(snap_compare, settings_app, steps)
