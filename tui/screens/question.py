"""Ask one variant as an interview in stages: the opening (its text, the conventions in play, the
parameters, its boxes); on each submit the stage's verdicts and keys with their why, then the next stage
below (a push with its own variant code and what it moved). A timer runs throughout; hints are the
stage's own. The pushes are solved in a worker as the question opens: a submit never searches."""
from __future__ import annotations

import time
from asyncio import gather
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.markup import escape
from textual.widget import Widget
from textual.widgets import Header, Input, Static
from textual.worker import get_current_worker

from solvers.interview import StageRun, opening
from solvers.transcript import Answered, answer
from tui import messages
from tui.modes import BetweenStages, FollowUps, Mode
from tui.render import VERDICT_STYLE, plain
from tui.screens.base import AppScreen
from tui.widgets.answer_field import AnswerField
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from solvers.engine import Solution
    from solvers.sampling import Param


def _params_table(params: Sequence[Param], before: Solution | None = None, moved: Sequence[str] = ()) -> Table:
    """The given figures; for a push, those it moved stand out with what they were `before`."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for param in params:
        if before is not None and param.name in moved:
            table.add_row(*plain(param.label, f"{param.shown}  (was {before.param(param.name).shown})"),
                          style="bold yellow")
        else:
            table.add_row(*plain(param.label, param.shown))
    return table


def _below_the_fold(prompt: str, params: Table, size: Size) -> bool:
    """Whether the first answer box is out of sight when the question opens. It starts at least the
    prompt's rows (the conventions line with them) and a row a parameter (margins included) down a body
    no taller than the screen less the header, the title bar and the footer; a line of the prompt wraps
    to at least its length over the body's width (the screen's less its padding)."""
    width = max(1, size.width - 2)
    prompt_rows = sum(max(1, -(-cell_len(line) // width)) for line in prompt.rstrip("\n").splitlines())
    first_box = 1 + prompt_rows + 1 + params.row_count + 1
    return first_box >= size.height - 3


def keys_text(done: Answered, show_keys: bool) -> Text:
    """A graded stage as the interviewer answers it: each answer's verdict, then its key with its why
    (or, with `show_keys` off, the verdict alone). A checklist is ticked at the reveal."""
    question = done.run.solution.question
    lines = dict(done.run.key_lines()) if show_keys else {}
    text = Text()
    for grade in done.grades:
        spec = question.answer(grade.key)
        if text:
            text.append("\n")
        if spec.self_graded:
            text.append("· ", style="bold")
            text.append(spec.shown_label, style="bold")
            text.append(": you tick what your answer covered at the reveal")
            continue
        text.append("✓ " if grade.correct else "✗ ", style=VERDICT_STYLE.get(grade.verdict, "bold red"))
        text.append(spec.shown_label, style="bold")
        text.append(f"  {lines[grade.key]}" if show_keys else f": {grade.verdict}")
    return text


def given_text(run: StageRun) -> Text:
    """A stage answered before a re-ask: its keys with their why, nothing to grade."""
    text = Text()
    for key, line in run.key_lines():
        if text:
            text.append("\n")
        text.append(run.solution.question.answer(key).shown_label, style="bold")
        text.append(f"  {line}")
    return text


class QuestionScreen(AppScreen):
    HELP_TITLE = "Question"

    # Textual's auto-focus would focus the first box with scrolling, before on_mount focuses it without:
    # the candidate must see the prompt first, the box comes into view when they type.
    AUTO_FOCUS = ""
    DEFAULT_CSS = """
    #question-bar { height: auto; background: $boost; }
    #question-title { width: 1fr; padding: 0 1; }
    #timer { width: auto; padding-right: 1; text-align: right; color: $accent; }
    #timer.-over { color: $error; text-style: bold; }
    #question-body { padding: 0 1; }
    #prompt { margin: 1 0 0 0; }
    #conventions, .conventions { color: $text-muted; }
    #params, .stage .params { margin-top: 1; padding: 0 1; border-left: thick $accent; }
    .stage { height: auto; margin-top: 1; }
    .stage .say { margin-top: 1; }
    .stage .push-code { color: $warning; }
    .stage .keys { margin-top: 1; padding: 0 1; border-left: thick $success; }
    #waiting { margin-top: 1; color: $text-muted; }
    #hints { color: $warning; margin: 1 0; }
    """

    BINDINGS = [
        Binding("ctrl+s", "submit", "Submit", priority=True, id="question.submit",
                tooltip="grade this stage's answers (with a box empty, press it twice)"),
        Binding("ctrl+t", "hint", "Hint", priority=True, id="question.hint",
                tooltip="one more hint for this stage; a hint lowers the suggested rating a step"),
        Binding("ctrl+n", "new_variant", "New variant", priority=True, id="question.new",
                tooltip="another draw of this question"),
        Binding("ctrl+k", "skip_followup", "Skip follow-up", priority=True, id="question.skip-followup",
                tooltip="skip this push (the stages before it are kept)"),
        # A mock keeps its pushes: ctrl+k is not offered there, but it is still taken (and refused), or the
        # answer box would take it as delete-to-end-of-line.
        Binding("ctrl+k", "keep_push", show=False, priority=True, id="question.mock-keeps-push",
                tooltip="a mock interview asks every follow-up"),
        Binding("f1", "app.help", "Help", id="question.help", tooltip="the keys of this screen"),
        Binding("f2", "conventions", "Conventions", id="question.conventions",
                tooltip="the conventions cards this question uses"),
        Binding("escape", "back", "Back", id="question.back", tooltip="leave the question (a mock asks first)"),
    ]

    def __init__(self, solution: Solution, mode: Mode = Mode.PRACTICE, revealed: bool = False,
                 given: Sequence[StageRun] = (), only: StageRun | None = None) -> None:
        """`only` asks that one stage again after the reveal, the stages `given` shown before it with
        their keys; without it the whole interview is asked from the opening."""
        super().__init__()
        self.solution = solution
        self.mode = mode  # practice, drill or mock: recorded with the attempt
        self.revealed = revealed  # the key of this variant has been shown: saved, not scheduled
        self.given = tuple(given)
        self.current: StageRun | None = only or opening(solution)  # the stage being asked; None between
        stages = solution.question.stages
        self.plan = [] if only else list(range(1, len(stages)))  # the stages still to come, in order
        self.pushes: dict[int, StageRun | None] = {}  # pushes solved so far (None: nothing to push)
        self.waiting: int | None = None  # the push the interview waits for, still being solved
        self.answered: list[Answered] = []
        self.started_at = datetime.now(UTC)
        self.started = time.monotonic()
        self.hints_shown = 0  # over every stage: a hint lowers the suggestion
        self.stage_hints = 0  # of the stage being asked
        self.confirm_empty = False
        self.confirm_leave = False
        self.boxes_out_of_sight = False  # set in compose: the answer boxes are then built after the first frame

    @property
    def show_keys(self) -> bool:
        return self.infradrill.app_settings.between_stages == BetweenStages.KEY

    def compose(self) -> ComposeResult:
        q = self.solution.question
        kind = "[b $warning]Again[/]  " if self.revealed and self.given else ""
        mock = self.infradrill.mock if self.mode == Mode.MOCK else None
        if mock is not None:  # where the candidate is in the interview
            kind = f"[b]Mock {mock.index + 1} of {len(mock.questions)}[/b]  " + kind
        elif self.mode == Mode.DRILL and (left := self.infradrill.counters()):  # Anki's counters
            kind = f"[b $accent]{escape(left)}[/]  " + kind
        yield Header()
        with Horizontal(id="question-bar"):
            yield Static(f"{kind}[b]{escape(q.title)}[/b]  [dim]{q.group} · {q.topic}[/dim]  "
                         f"variant [b]{escape(str(self.solution.code))}[/b]", id="question-title")
            yield Static("0:00", id="timer")
        first = opening(self.solution)
        params = _params_table(self.solution.problem_data(0))
        cards = self.solution.cards()
        conventions = f"Conventions in play: {', '.join(cards)} (F2)" if cards else ""
        asked_first = self.current is not None and self.current.index == 0
        self.boxes_out_of_sight = asked_first and _below_the_fold(f"{first.prompt}\n{conventions}".rstrip(), params,
                                                                  self.app.size)
        with VerticalScroll(id="question-body", can_focus=False):
            yield Static(first.prompt, id="prompt", markup=False)
            if conventions:
                yield Static(conventions, id="conventions", markup=False)
            yield Static(params, id="params")
            for run in self.given:
                yield Vertical(*self._stage_parts(run), Static(given_text(run), classes="keys"),
                               id=f"stage-{run.index}", classes="stage")
            if self.current is not None:
                yield self._stage(self.current, pending=self.boxes_out_of_sight)
            yield Static("", id="hints")
        yield KeysFooter()

    def _stage_parts(self, run: StageRun) -> list[Widget]:
        """What a stage after the opening says: a push its variant and the figures it moved first."""
        if run.index == 0:
            return []  # the opening's words are the prompt above
        parts: list[Widget] = []
        if run.stage.push:
            parts.append(Static(f"Push: variant {run.solution.code}", classes="push-code", markup=False))
        parts.append(Static(run.prompt, classes="say", markup=False))
        if run.stage.push:
            parts.append(Static(_params_table(run.solution.problem_data(run.index), self.solution, run.moved),
                                classes="params"))
        elif given := self.solution.newly_given(run.index):
            parts.append(Static(_params_table(given), classes="params"))
        if run.cards_line:
            parts.append(Static(f"{run.cards_line} (F2)", classes="conventions", markup=False))
        return parts

    def _stage(self, run: StageRun, pending: bool = False) -> Vertical:
        """A stage to answer: its words, then a box per answer it asks."""
        fields = [AnswerField(run.solution.question.answer(key), number, run.solution.shown.get(key, ()), pending)
                  for number, key in enumerate(run.ask, 1)]
        return Vertical(*self._stage_parts(run), *fields, id=f"stage-{run.index}", classes="stage")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A mock interview has no hints, keeps its questions and asks every push: those keys are neither
        shown nor run there (ctrl+k is refused at a push). A new variant is drawn only before the first
        submit."""
        if self.mode == Mode.MOCK and action in ("hint", "new_variant", "skip_followup"):
            return False
        if action == "keep_push":
            return self.mode == Mode.MOCK and self.at_push
        if action == "skip_followup":
            return self.at_push
        if action == "new_variant":
            return not self.answered  # once a stage is answered the interview is under way
        return True

    @property
    def at_push(self) -> bool:
        """A push is being asked, or solved for asking."""
        return self.waiting is not None or (self.current is not None and self.current.stage.push)

    def on_mount(self) -> None:
        self.set_interval(1, self._tick)
        pushes = [i for i in self.plan if self.solution.question.stages[i].push]
        if pushes and (self.mode == Mode.MOCK or self.infradrill.app_settings.followups != FollowUps.SKIP):
            self._solve_pushes(pushes)
        if self.boxes_out_of_sight:  # built once the prompt is on screen, after this refresh's other callbacks
            self.call_after_refresh(self.call_later, self._build_boxes)
        else:
            self._focus_first_box()

    @work(thread=True, exclusive=True, group="pushes")
    def _solve_pushes(self, indices: list[int]) -> None:
        """Solve the pushes ahead of need (each a search of dozens of solves), in order of asking."""
        from solvers.interview import stage_run

        catalog = self.infradrill.loaded_session.catalog
        worker = get_current_worker()
        for index in indices:
            try:
                run = stage_run(self.solution, catalog, index)
            except Exception as error:  # a solver bug in a push must not cost the candidate the interview
                self.app.call_from_thread(self.notify, f"No follow-up: {type(error).__name__}: {error}",
                                          severity="warning")
                run = None
            if worker.is_cancelled:
                return
            self.app.call_from_thread(self._push_solved, index, run)

    def _push_solved(self, index: int, run: StageRun | None) -> None:
        self.pushes[index] = run
        if self.waiting == index and self.is_attached:
            self.call_later(self._resume)

    async def _resume(self) -> None:
        """The push the interview waited for is solved: ask it (or what comes after it)."""
        if self.waiting is None:
            return  # skipped meanwhile
        self.waiting = None
        await self.query_one("#waiting").remove()
        await self._advance()

    async def _build_boxes(self) -> None:
        await gather(*(field.build() for field in self.query(AnswerField)))
        self._focus_first_box()  # once every box is in: typing, enter and the tests find them all

    def _focus_first_box(self) -> None:
        boxes = self._boxes()
        if boxes:  # none if the question was left before its boxes were built
            boxes[0].focus(scroll_visible=False)

    def _stage_widget(self) -> Widget | None:
        return None if self.current is None else self.query_one(f"#stage-{self.current.index}")

    def _fields(self) -> list[AnswerField]:
        stage = self._stage_widget()
        return [] if stage is None else list(stage.query(AnswerField))

    def _boxes(self) -> list[Input]:
        stage = self._stage_widget()
        return [] if stage is None else list(stage.query(Input))

    def _tick(self) -> None:
        timer = self.query_one("#timer", Static)
        mock = self.infradrill.mock if self.mode == Mode.MOCK else None
        budget = mock.budget_seconds if mock else None
        if budget is None:
            minutes, seconds = divmod(int(self.elapsed), 60)
            timer.update(f"{minutes}:{seconds:02d}")
            return
        left = budget - self.elapsed
        minutes, seconds = divmod(int(abs(left)), 60)
        timer.update(f"{minutes}:{seconds:02d} {'over' if left < 0 else 'left'}")
        timer.set_class(left < 0, "-over")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        inputs = self._boxes()
        if event.input not in inputs:
            return
        index = inputs.index(event.input)
        if index + 1 < len(inputs):
            inputs[index + 1].focus()
        else:
            await self.action_submit()

    def answers(self) -> dict[str, str]:
        """The boxes of the stage being asked, as typed."""
        return {field.spec.key: field.value for field in self._fields()}

    async def action_submit(self) -> None:
        """Grade the stage being asked on its own variant's key; show its verdicts (and keys), then the
        next stage below, or end the interview."""
        run = self.current
        if run is None:
            return  # a push is still being solved: the submit waits for it to be asked
        fields = self._fields()
        unreadable = [f for f in fields if not f.readable]
        if unreadable:
            # Nothing is graded until every answer can be read; say which one to fix.
            unreadable[0].query_one(Input).focus()
            self.notify(f"Answer {unreadable[0].number} cannot be read: fix it or clear it.", severity="warning")
            return
        empty = [f for f in fields if not f.value.strip()]
        if empty and not self.confirm_empty:
            # Revealing with blanks is allowed (to give up), but not by accident.
            self.confirm_empty = True
            self.infradrill.prompt(f"{len(empty)} answer(s) empty: press ctrl+s again to submit them anyway.")
            return
        self.infradrill.withdraw_prompts()  # answered: it would sit over the next stage or screen
        done = answer(run, self.answers())
        self.answered.append(done)
        stage = self.query_one(f"#stage-{run.index}")
        self.current = None
        for box in stage.query(Input):
            box.disabled = True
        if self.plan:  # the last stage's keys wait for the reveal, just after
            await stage.mount(Static(keys_text(done, self.show_keys), classes="keys"))
        self.refresh_bindings()
        await self._advance()

    async def _advance(self) -> None:
        """Ask the next stage the plan holds: a push only as the setting says, and only once solved."""
        question = self.solution.question
        while self.plan:
            index = self.plan[0]
            push = question.stages[index].push
            if push and not self._asks_push():
                self.plan.pop(0)
                continue
            if push and index not in self.pushes:
                self.waiting = index
                await self.query_one("#question-body").mount(
                    Static("The interviewer is preparing the next question…", id="waiting"), before="#hints")
                self.refresh_bindings()
                return
            self.plan.pop(0)
            run = self.pushes[index] if push else self._run(index)
            if run is not None:
                await self._ask(run)
                return
        self.post_message(messages.InterviewDone(self.solution, tuple(self.answered), self.given,
                                                 elapsed=self.elapsed, hints_used=self.hints_shown,
                                                 started=self.started_at, mode=self.mode, revealed=self.revealed))

    def _run(self, index: int) -> StageRun | None:
        from solvers.interview import stage_run

        return stage_run(self.solution, self.infradrill.loaded_session.catalog, index)  # not a push: no search

    def _asks_push(self) -> bool:
        """Whether the push comes: always in a mock, else as the setting says."""
        policy = self.infradrill.app_settings.followups
        if self.mode == Mode.MOCK or policy == FollowUps.ASK:
            return True
        return policy == FollowUps.IF_CORRECT and all(done.all_correct for done in self.answered)

    async def _ask(self, run: StageRun) -> None:
        """Put the next stage below the last one's keys, its first box focused."""
        self.current, self.stage_hints, self.confirm_empty = run, 0, False
        self.query_one("#hints", Static).update("")
        body = self.query_one("#question-body")
        stage = self._stage(run)
        await body.mount(stage, before="#hints")
        self.refresh_bindings()
        self._focus_first_box()
        self.call_after_refresh(self._bring_into_view, self.query(".keys").last(), self._boxes()[0])

    def _bring_into_view(self, keys: Widget, box: Widget) -> None:
        """The last stage's keys at the top, then as little further down as shows the new first box."""
        body = self.query_one("#question-body")
        body.scroll_to_widget(keys, top=True, animate=False, immediate=True)
        body.scroll_to_widget(box, animate=False, immediate=True)

    async def action_back(self) -> None:
        """Back out; from a push that is the same as skipping it (the stages before it are kept and
        the solution shows), which a mock interview does not allow. Leaving a mock asks first."""
        if self.at_push and self.mode != Mode.MOCK:
            await self.action_skip_followup()
        elif self.mode == Mode.MOCK and not self.confirm_leave:
            self.confirm_leave = True
            self.infradrill.prompt("Press Esc again to leave the mock interview (the answers given so far are kept).")
        else:
            if self.mode == Mode.MOCK:  # straight to the app: this screen closes before its own queue runs
                self.app.post_message(messages.MockLeft())
            self.app.pop_screen()

    def action_keep_push(self) -> None:
        self.notify("A mock interview asks every follow-up.")

    async def action_skip_followup(self) -> None:
        """Skip the push being asked (or solved): the interview goes on after it."""
        if not self.at_push or self.mode == Mode.MOCK:
            return
        if self.waiting is not None:
            self.waiting = None
            self.plan.pop(0)
            await self.query_one("#waiting").remove()
        elif self.current is not None:
            await self.query_one(f"#stage-{self.current.index}").remove()
            self.current = None
        await self._advance()

    def action_hint(self) -> None:
        hints = self.current.hints if self.current is not None else ()
        if self.stage_hints >= len(hints):
            self.notify("No more hints for this stage.")
            return
        self.stage_hints += 1
        self.hints_shown += 1
        text = "\n".join(f"[b]Hint {i}.[/b] {escape(h)}" for i, h in enumerate(hints[: self.stage_hints], 1))
        hint_box = self.query_one("#hints", Static)
        hint_box.update(text)
        hint_box.scroll_visible()

    def action_conventions(self) -> None:
        from tui.screens.dialogs import ConventionsScreen

        asked = [done.run for done in self.answered] + ([self.current] if self.current is not None else [])
        added = [card for run in asked for card in run.cards_added]  # pushes solved ahead stay unsaid
        self.app.push_screen(ConventionsScreen(tuple(dict.fromkeys([*self.solution.cards(), *added]))))

    def action_new_variant(self) -> None:
        self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=self.mode))
