"""The infradrill Textual application: screens, commands and the workers that call the engine.

Nothing here computes an answer: variants are made by solvers.engine in thread workers
(sympy is imported there, after first paint) and the screens only render them.
"""
from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.notifications import Notify, SeverityLevel

from tui import messages
from tui.app_settings import APP_SETTINGS, APP_TABLE, AppSettings
from tui.modes import MockAnswers, Mode
from tui.screens.home import HomeScreen

# Everything not needed for the first paint (other screens, the bank, the engine) is
# imported where it is first used, so that start-up costs little more than Textual itself.
if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path

    from textual.screen import Screen

    from practice.config import Setting, Value
    from practice.review import Reviewer, Submitted
    from practice.store import ProgressStore
    from solvers.bank import Bank
    from solvers.engine import Solution
    from solvers.interview import StageRun
    from solvers.transcript import Answered
    from tui.service import Session


class QuestionCommands(Provider):
    """Command palette: find a question by id, title, group or topic; open it to answer, as the
    interviewer, or in the what-if explorer."""

    WAYS = ((Mode.PRACTICE, "", "open a fresh variant"),
            (Mode.INTERVIEWER, "as interviewer: ", "a fresh variant with its key beside it"),
            (Mode.WHAT_IF, "what if: ", "a fresh variant in the what-if explorer; nothing is recorded"))

    async def search(self, query: str) -> Hits:
        app = self.app
        if not isinstance(app, InfradrillApp) or app.session is None:
            return
        matcher = self.matcher(query)
        for question in app.session.questions():
            for mode, way, help_text in self.WAYS:
                text = f"{way}{question.id} — {question.title} ({question.group}, {question.topic})"
                score = matcher.match(text)
                if score > 0:
                    yield Hit(score, matcher.highlight(text), partial(app.open_question, question.id, mode=mode),
                              help=help_text)


class ActionCommands(Provider):
    """Command palette: the app's own actions, as posting's palette offers them."""

    ACTIONS = (
        ("Drill what is due", "action_drill", "the next due review, else a new question"),
        ("Browse the bank", "action_browse", "every question, by group and topic"),
        ("Random question", "action_random_question", "a fresh variant of any question"),
        ("Enter a variant code", "action_enter_code", "exactly the variant a code names"),
        ("Review ahead", "action_review_ahead", "cards due in the next days, before an interview"),
        ("Mock interview", "action_mock", "questions across topics against the clock"),
        ("Past mock interviews", "action_past_mocks", "score sheets of earlier mocks"),
        ("Statistics", "action_stats", "reviews, retention, slips, the forecast"),
        ("Settings", "action_settings", "new questions a day, retention, theme, follow-ups"),
        ("Conventions card", "action_conventions", "the counting rules every question assumes"),
        ("Help", "action_help", "keys and how grading works"),
    )

    async def discover(self) -> Hits:
        """Listed as soon as the palette opens, before anything is typed."""
        for title, action, help_text in self.ACTIONS:
            yield DiscoveryHit(title, getattr(self.app, action), text=title, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in self.ACTIONS:
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), getattr(self.app, action), text=title, help=help_text)


@dataclass
class MockRun:
    """A mock interview under way: its questions, where we are, the per-question budget, and the
    store it is saved in (a mock starts only when progress can be saved)."""

    id: str
    questions: list[str]
    budget_seconds: float
    store: ProgressStore
    index: int = 0


@dataclass
class DrillQueue:
    """A drill over chosen questions, asked in order (a review ahead, the weakest topic), each
    reviewed and scheduled as the drill's are; `name` says what it is on the question bar."""

    name: str
    questions: list[str]


TERMINAL_CHECK_SECONDS = 2.0  # how often the app checks that its terminal is still there


class InfradrillApp(App):
    TITLE = "infradrill"
    COMMANDS = App.COMMANDS | {ActionCommands, QuestionCommands}
    BINDINGS = [
        Binding("f1", "help", "Help", id="app.help", tooltip="the keys of this screen"),
        Binding("ctrl+q", "quit", "Quit", priority=True, show=False,  # the footer's 80 columns go to the screen
                id="app.quit", tooltip="leave infradrill; progress is already saved"),
    ]

    mock_questions = 5
    mock_budget_seconds = 5 * 60

    def __init__(self, bank_loader: Callable[[], Bank] | None = None) -> None:
        """`bank_loader` loads the bank after first paint, in a worker: the shipped bank unless it is
        given (tests give a small, fixed or broken one)."""
        super().__init__()
        self.bank_loader = bank_loader
        self.session: Session | None = None
        self.mock: MockRun | None = None  # the mock interview in progress
        self.queue: DrillQueue | None = None  # the chosen questions a drill is going through
        self._prompts: set[str] = set()  # the notices showing that ask for a key again (prompt)
        self._pending: Callable[[], None] | None = None  # an action asked for while the bank loads
        self.app_settings, self._setting_notices = AppSettings.load()
        self.theme = self.app_settings.theme  # before the first paint: no flash of the default theme

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.push_screen(HomeScreen())
        for notice in self._setting_notices:
            self.notify(notice, title="Settings", severity="warning", timeout=20)
        if not self.is_headless and sys.__stdin__ is not None and sys.__stdin__.isatty():
            self.set_interval(TERMINAL_CHECK_SECONDS, partial(self.leave_if_terminal_gone, sys.__stdin__.fileno()))

    def leave_if_terminal_gone(self, fd: int) -> None:
        """Leave once the terminal is gone. A session dropped without a SIGHUP (an SSH link that dies, a
        multiplexer killed under a child) deletes the terminal under the app: Textual's input thread then
        reads nothing at once, forever, at most of a core (Textualize/textual#6690). Progress is saved as
        it is made, so leaving loses nothing."""
        if not os.isatty(fd):
            self.exit()

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every notice is plain text: they quote file names, problems in user files and typed
        answers, and a `[/x]` in any of them would raise a MarkupError (screens pass markup=True)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def _on_notify(self, event: Notify) -> None:
        """One already showing is not shown again: a key pressed twice does not stack its toasts. (Textual
        runs App's own handler after this one, unless the default is prevented.)"""
        if any(n.message == event.notification.message and n.title == event.notification.title
               for n in self._notifications):
            event.prevent_default()

    def prompt(self, message: str) -> None:
        """A notice that asks for a key again ("press Esc again to leave"): it stands only while its
        screen does and until it is answered (withdraw_prompts), never over the next screen."""
        self._prompts.add(message)
        self.notify(message)

    def withdraw_prompts(self) -> None:
        """Take down the prompts showing: answered, or their screen left or covered."""
        for notification in [n for n in self._notifications if n.message in self._prompts]:
            self._unnotify(notification, refresh=False)
        self._prompts.clear()
        self._refresh_notifications()

    def after_first_paint(self) -> None:
        """Called by the home screen once it is on screen: only now load bank and engine."""
        self._load()

    @work(thread=True, exclusive=True, group="load")
    def _load(self) -> None:
        from tui.service import Session, warm_up

        # The load creates some 100,000 objects that stay (sympy, the engine, the bank), and the collector would
        # walk them and the app's own again and again as they come (~60 ms of CPU between the first paint and the
        # first question) to find a few hundred of garbage. It pauses for the load, and what is alive after it is
        # frozen: left out of every later collection, until the app exits.
        gc.disable()
        try:
            session = Session.load(self.bank_loader)
            self.call_from_thread(self._loaded, session)
            warm_up()
        finally:
            if self.is_running:  # (else on_unmount has thawed them already)
                gc.freeze()
            gc.enable()

    def on_unmount(self) -> None:
        gc.unfreeze()  # another app in this process (a test's) collects what this one left

    def _loaded(self, session: Session) -> None:
        self.session = session
        pending, self._pending = self._pending, None
        if isinstance(self.screen, HomeScreen):
            self.screen.refresh_status()
            if pending is not None:  # asked for during the load, from this screen
                pending()
        for problem in session.problems:
            self.notify(problem, title="Not loaded", severity="warning", timeout=15)
        for notice in session.notices:
            self.notify(notice, title="Progress", severity="warning", timeout=20)
        for notice in session.setting_notices:
            if notice not in self._setting_notices:  # a line that is not TOML was told once, at start
                self.notify(notice, title="Settings", severity="warning", timeout=20)

    @property
    def loaded_session(self) -> Session:
        """The loaded bank, for the screens and workers that only run once it is (see _bank_ready)."""
        if self.session is None:
            raise RuntimeError("the bank is not loaded yet")
        return self.session

    def _bank_ready(self, then: Callable[[], None] | None = None) -> Session | None:
        """The drill once loaded; before that None, and `then` (the action asked for) runs when
        the bank is in, so a key pressed during the load is not lost."""
        if self.session is None:
            if then is not None:
                self._pending = then
                self.notify("Loading the bank: this opens as soon as it is in.")
            else:
                self.notify("Still loading the bank…")
        return self.session

    # Settings ----------------------------------------------------------------------------------
    @property
    def settings_file(self) -> Path:
        from practice.config import settings_path

        return settings_path()

    def current_settings(self) -> list[tuple[str, Setting, Value]]:
        """Every setting with its table in the settings file and the value in force (the review
        settings are the loaded drill's, so the bank must be in)."""
        from practice.review import REVIEW_SETTINGS, REVIEW_TABLE

        review = self.loaded_session.settings
        return ([(REVIEW_TABLE, s, getattr(review, s.name)) for s in REVIEW_SETTINGS]
                + [(APP_TABLE, s, str(getattr(self.app_settings, s.name))) for s in APP_SETTINGS])

    def change_setting(self, table: str, name: str, value: Value) -> str | None:
        """Apply one setting at once and save it; what went wrong saving it, if anything (it is
        applied for the session all the same)."""
        from practice.config import SettingsError

        change: dict[str, Any] = {name: value}  # a Setting checked it is of the field's kind
        try:
            if table == APP_TABLE:
                self.app_settings = replace(self.app_settings, **change)
                self.theme = self.app_settings.theme  # applied for the session even if the save fails
                self.app_settings.save()
            else:
                session = self.loaded_session
                session.apply_settings(replace(session.settings, **change))
                session.settings.save()
        except SettingsError as error:
            return str(error)
        return None

    def _theme_changed(self, _theme: object) -> None:
        """A theme picked elsewhere (the palette's own Theme command) is kept as well."""
        from practice.config import SettingsError

        if self.theme == self.app_settings.theme:
            return  # set from the settings (at start, or on the settings screen, which saved it)
        self.app_settings = replace(self.app_settings, theme=self.theme)
        try:
            self.app_settings.save()
        except SettingsError as error:
            self.notify(f"The theme is not saved: {error}", title="Settings", severity="error", timeout=15)

    # Actions bound on the screens ------------------------------------------------------
    def action_browse(self) -> None:
        from tui.screens.browse import BrowseScreen

        if (session := self._bank_ready(then=self.action_browse)) is not None:
            states = session.reviewer.states() if session.reviewer is not None else {}
            self.push_screen(BrowseScreen(session.questions(), states))

    def action_random_question(self) -> None:
        if (session := self._bank_ready(then=self.action_random_question)) is not None and session.bank.questions:
            self.open_question(session.rng.choice(sorted(session.bank.questions)))

    def action_enter_code(self) -> None:
        from tui.screens.dialogs import CodeScreen

        def opened(code: str | None) -> None:
            if code:
                self.open_code(code)

        self.push_screen(CodeScreen(), opened)

    def open_code(self, code: str) -> None:
        """Open exactly the variant a code names (practice mode)."""
        if self._bank_ready() is not None:
            self._make_variant(lambda session: session.variant_from_code(code), replace=False)

    def action_drill(self, replace: bool = False) -> None:
        """The next question the schedule wants: due reviews first, then new ones."""
        self.queue = None  # the plain drill, whatever was chosen before
        self._drill_next(replace)

    def _drill_next(self, replace: bool = False) -> None:
        """The next question of the queue being drilled, else the one the schedule wants."""
        if (session := self._bank_ready(then=self.action_drill)) is None:
            return
        reviewer = session.reviewer
        if reviewer is None:
            self.notify("Drilling needs the progress store, which could not be opened.", severity="error")
            return
        if self.queue is not None:
            queue = self.queue
            held = reviewer.held()
            while queue.questions and queue.questions[0] in held:
                queue.questions.pop(0)  # held out since the queue was made (buried on its solution)
            if not queue.questions:
                self.queue = None
                self.notify(f"{queue.name}: done.")
                if replace:
                    self.pop_screen()
                return
            self.open_question(queue.questions.pop(0), replace=replace, mode=Mode.DRILL)
            return
        question_id = reviewer.next_question()
        if question_id is None:
            self.notify(self._nothing_due(reviewer))
            if replace:
                self.pop_screen()
            return
        self.open_question(question_id, replace=replace, mode=Mode.DRILL)

    @staticmethod
    def _nothing_due(reviewer: Reviewer) -> str:
        """What the drill says once nothing is left: when the next card comes due, as Anki does."""
        summary, upcoming = reviewer.summary(), reviewer.next_due()
        later = f" ({summary.due_today} more later today)" if summary.due_today else ""
        when = f"; the next comes due {upcoming.astimezone():%a %d %b %H:%M}" if upcoming else ""
        return f"Nothing due now{later}{when}. Press a to review ahead, or browse and practise."

    def drill_queue(self, name: str, questions: list[str]) -> None:
        """Drill these questions in order, each reviewed as the drill reviews (a review ahead, a topic)."""
        if not questions:
            self.notify(f"{name}: no questions to drill.")
            return
        self.queue = DrillQueue(name, list(questions))
        self._drill_next()

    def counters(self) -> str:
        """What is left of this drill, as Anki's counters show it while reviewing (this card included)."""
        if self.queue is not None:
            return f"{self.queue.name}: {len(self.queue.questions) + 1} left"
        reviewer = self.session.reviewer if self.session is not None else None
        if reviewer is None:
            return ""
        summary = reviewer.summary()
        return f"{summary.due_now} due · {summary.new_today} new"

    def action_review_ahead(self) -> None:
        """Anki's "study ahead": the cards due in the next days, each reviewed now (FSRS counts the days
        actually elapsed: an early review grows the interval less, and the log shows it was early)."""
        from tui.screens.dialogs import AheadScreen

        if (session := self._bank_ready(then=self.action_review_ahead)) is None or session.reviewer is None:
            return
        reviewer = session.reviewer

        def chosen(days: int | None) -> None:
            if days is not None:
                ahead = reviewer.due_ahead(days)
                if not ahead:
                    self.notify(f"Nothing is due in the next {days} day(s).")
                    return
                self.drill_queue(f"Ahead {days}d", ahead)

        self.push_screen(AheadScreen(), chosen)

    def action_mock(self) -> None:
        """A mock interview: questions across topics, a clock per question, no hints, a score sheet. What it
        does with its answers is said first (a line, enter to start)."""
        from tui.screens.dialogs import MockStartScreen

        if (session := self._bank_ready(then=self.action_mock)) is None or session.reviewer is None:
            return
        counts = ("rated and scheduled as reviews: they spend the day's new questions"
                  if self.app_settings.mock_answers == MockAnswers.SCHEDULE
                  else "saved as practice: your schedule and the day's new questions are untouched")
        said = (f"Mock interview: {self.mock_questions} questions across topics, {self.mock_budget_seconds // 60} "
                f"minutes each, no hints, every follow-up asked; the solutions wait for the score sheet. Its answers "
                f"are {counts} (Settings, Mock answers).")

        def chosen(start: bool | None) -> None:
            if start:
                self._start_mock()

        self.push_screen(MockStartScreen(said), chosen)

    def _start_mock(self) -> None:
        from practice.review import pick_mock

        session = self.loaded_session
        if session.reviewer is None:
            return
        held = session.reviewer.held()  # a suspended question stays out of mocks too
        questions = pick_mock([q for q in session.bank.questions.values() if held.get(q.id) != "suspended"],
                              self.mock_questions, session.rng)
        mock_id = session.reviewer.start_mock(len(questions), self.mock_budget_seconds)
        self.mock = MockRun(mock_id, questions, self.mock_budget_seconds, session.reviewer.store)
        self.open_question(questions[0], mode=Mode.MOCK)

    def resume_mock(self, mock_id: str) -> None:
        """Go on with a mock left half way: as many questions as it has left, across topics, none it asked."""
        from practice.review import pick_mock
        from tui.screens.mock import MockSheetScreen

        if (session := self._bank_ready()) is None or session.reviewer is None:
            return
        store = session.reviewer.store
        sheet = store.mock_sheet(mock_id)
        asked = [a.question_id for a in sheet.attempts]
        held = session.reviewer.held()
        rest = [q for q in session.bank.questions.values() if q.id not in asked and held.get(q.id) != "suspended"]
        picked = pick_mock(rest, max(0, sheet.mock.planned - len(asked)), session.rng)
        if not picked:
            session.reviewer.finish_mock(mock_id)
            self.push_screen(MockSheetScreen(store, mock_id, session.bank.questions))
            return
        budget = sheet.mock.budget_seconds or self.mock_budget_seconds
        self.mock = MockRun(mock_id, asked + picked, budget, store, index=len(asked))
        self.notify(f"Mock interview resumed: {len(picked)} question(s) left.")
        self.open_question(picked[0], mode=Mode.MOCK)

    def action_past_mocks(self) -> None:
        from tui.screens.mock import PastMocksScreen

        if (session := self._bank_ready(then=self.action_past_mocks)) is not None and session.reviewer is not None:
            self.push_screen(PastMocksScreen(session.reviewer, session.bank.questions))

    def _next_mock_question(self, mock: MockRun) -> None:
        from tui.screens.mock import MockSheetScreen

        mock.index += 1
        if mock.index < len(mock.questions):
            self.open_question(mock.questions[mock.index], replace=True, mode=Mode.MOCK)
            return
        if (reviewer := self.loaded_session.reviewer) is not None:  # a mock runs only where progress is saved
            reviewer.finish_mock(mock.id)
        self.mock = None
        self.switch_screen(MockSheetScreen(mock.store, mock.id, self.loaded_session.bank.questions))

    def action_stats(self) -> None:
        from tui.screens.stats import StatsScreen

        if (session := self._bank_ready(then=self.action_stats)) is not None and session.reviewer is not None:
            self.push_screen(StatsScreen(session.reviewer, session.bank.questions))

    def action_settings(self) -> None:
        from tui.screens.settings import SettingsScreen

        if self._bank_ready(then=self.action_settings) is not None:
            self.push_screen(SettingsScreen())

    def action_help(self) -> None:
        from tui.screens.dialogs import HelpScreen

        self.push_screen(HelpScreen(self.screen))

    def action_conventions(self) -> None:
        from tui.screens.dialogs import ConventionsScreen

        self.push_screen(ConventionsScreen())

    # Flow between screens ----------------------------------------------------------------
    def open_question(self, question_id: str, default: bool = False, replace: bool = False,
                      mode: Mode = Mode.PRACTICE) -> None:
        if self._bank_ready() is None:
            return
        self._make_variant(lambda session: session.variant(question_id, None if default else session.new_seed()),
                           replace=replace, mode=mode)

    @work(thread=True, exclusive=True, group="variant")
    def _make_variant(self, make: Callable[[Session], Solution], replace: bool, mode: Mode = Mode.PRACTICE) -> None:
        from solvers.engine import VariantError

        try:
            solution = make(self.loaded_session)
        except VariantError as error:
            self.call_from_thread(self.notify, str(error), title="Cannot open", severity="error")
            return
        except Exception as error:  # a solver bug must not take the app down
            self.call_from_thread(self.notify, f"{type(error).__name__}: {error}", title="Solver failed",
                                  severity="error", timeout=15)
            return
        self.call_from_thread(self._show_question, solution, replace, mode)

    def _show_question(self, solution: Solution, replace: bool, mode: Mode) -> None:
        from tui.screens.interviewer import InterviewerScreen
        from tui.screens.question import QuestionScreen
        from tui.screens.whatif import WhatIfScreen

        # The interviewer sees the variant with its key, the what-if explores it; everyone else is asked it.
        screen: Screen = (InterviewerScreen(solution) if mode == Mode.INTERVIEWER
                          else WhatIfScreen(solution, self.loaded_session.catalog) if mode == Mode.WHAT_IF
                          else QuestionScreen(solution, mode))
        if replace:
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    def finish_interview(self, done: messages.InterviewDone) -> None:
        """Every stage is graded: save the attempt (a push's answers under its prefix), then reveal."""
        scheduled = done.mode != Mode.MOCK or self.app_settings.mock_answers == MockAnswers.SCHEDULE
        submitted = self._record(done.solution, done.answered, done.elapsed, done.hints_used, done.started,
                                 done.mode, schedule=scheduled and not done.revealed)
        if done.mode == Mode.MOCK and self.mock is not None:
            self._next_mock_question(self.mock)  # solutions wait for the score sheet
            return
        self.switch_screen(self._solution_screen(done.solution, done.answered, done.elapsed, done.hints_used,
                                                 submitted, done.mode, done.revealed, done.given))

    @staticmethod
    def _solution_screen(solution: Solution, answered: Sequence[Answered], elapsed: float, hints_used: int,
                         submitted: Submitted | None, mode: Mode, revealed: bool = False,
                         given: Sequence[StageRun] = ()) -> Screen:
        from tui.screens.solution import SolutionScreen

        return SolutionScreen(solution, answered, elapsed, hints_used, submitted, mode, revealed, given)

    def _record(self, solution: Solution, answered: Sequence[Answered], elapsed: float, hints_used: int,
                started: datetime, mode: Mode, schedule: bool = True) -> Submitted | None:
        """Write the attempt, every stage's answers in it (and, with `schedule`, its review) before the
        solution shows: a crash now loses nothing."""
        from solvers.interview import stored_stages
        from solvers.transcript import stored

        reviewer = self.session.reviewer if self.session else None
        if reviewer is None:
            return None
        grades, typed = stored(answered)
        try:
            mock_id = self.mock.id if mode == Mode.MOCK and self.mock is not None else None
            return reviewer.submit(question_id=solution.question.id, variant=str(solution.code), mode=mode,
                                   grades=grades, typed=typed, started=started, seconds=elapsed,
                                   hints_used=hints_used, mock_id=mock_id, schedule=schedule,
                                   stages=stored_stages(done.run for done in answered))
        except Exception as error:  # the store failing must not cost the user the solution
            self.notify(f"This attempt was not saved: {error}", title="Progress", severity="error", timeout=15)
            return None

    def review_attempt(self, variant: str, typed: dict[str, str], seconds: float, hints_used: int) -> None:
        """A saved attempt again, as it was answered (a mock's score sheet): the same variant, its
        stages regraded, the pushes as asked. Nothing is recorded or scheduled."""
        if self._bank_ready() is not None:
            self._review_attempt(variant, typed, seconds, hints_used)

    @work(thread=True, exclusive=True, group="variant")
    def _review_attempt(self, variant: str, typed: dict[str, str], seconds: float, hints_used: int) -> None:
        from solvers.engine import VariantError
        from solvers.transcript import rebuild

        session = self.loaded_session
        try:
            solution = session.variant_from_code(variant)
            answered = rebuild(solution, session.catalog, typed)  # the pushes as asked: solved again, off the UI
        except VariantError as error:
            self.call_from_thread(self.notify, str(error), title="Cannot open", severity="error")
            return
        screen = self._solution_screen(solution, answered, seconds, hints_used, None, Mode.REGRADE)
        self.call_from_thread(self.push_screen, screen)

    def reopen(self, solution: Solution, mode: Mode, given: tuple[StageRun, ...], stage: StageRun) -> None:
        """One stage of the same variant again, after its key was shown: practice that does not move the
        schedule."""
        from tui.screens.question import QuestionScreen

        self.switch_screen(QuestionScreen(solution, mode, revealed=True, given=given, only=stage))

    # What the screens ask (tui.messages) -------------------------------------------------
    def on_open_question(self, message: messages.OpenQuestion) -> None:
        self.open_question(message.question_id, default=message.default, replace=message.replace, mode=message.mode)

    def on_interview_done(self, message: messages.InterviewDone) -> None:
        self.finish_interview(message)

    def on_mock_left(self, _message: messages.MockLeft) -> None:
        self.mock = None

    def on_resume_mock(self, message: messages.ResumeMock) -> None:
        self.resume_mock(message.mock_id)

    def on_review_next(self, _message: messages.ReviewNext) -> None:
        """The next answer of the mock whose score sheet the review was opened from."""
        from tui.screens.mock import MockSheetScreen

        sheet = next((s for s in reversed(self.screen_stack) if isinstance(s, MockSheetScreen)), None)
        self.pop_screen()
        if sheet is None or not sheet.review_next():
            self.notify("That was the mock's last answer.")

    def on_review_attempt(self, message: messages.ReviewAttempt) -> None:
        self.review_attempt(message.variant, message.typed, message.seconds, message.hints_used)

    def on_next_in_drill(self, _message: messages.NextInDrill) -> None:
        self._drill_next(replace=True)

    def on_reopen(self, message: messages.Reopen) -> None:
        self.reopen(message.solution, message.mode, message.given, message.stage)


def run() -> int:
    InfradrillApp().run()
    return 0
