"""Ask one variant: prompt, parameters, one input per answer, a timer, hints on demand."""
from __future__ import annotations

import time
from asyncio import gather
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Size
from textual.markup import escape
from textual.widgets import Header, Input, Static

from tui import messages
from tui.modes import Mode
from tui.render import plain
from tui.screens.base import AppScreen
from tui.widgets.answer_field import AnswerField
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from solvers.engine import Solution
    from solvers.followup import FollowUp
    from tui.app import FirstRound


def _params_table(solution: Solution) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for param in solution.problem_data():
        table.add_row(*plain(param.label, param.shown))
    return table


def _below_the_fold(prompt: str, params: Table, size: Size) -> bool:
    """Whether the first answer box is out of sight when the question opens. It starts at least the
    prompt's rows and a row a parameter (margins included) down a body no taller than the screen less
    the header, the title bar and the footer; a line of the prompt wraps to at least its length over
    the body's width (the screen's less its padding)."""
    width = max(1, size.width - 2)
    prompt_rows = sum(max(1, -(-cell_len(line) // width)) for line in prompt.rstrip("\n").splitlines())
    first_box = 1 + prompt_rows + 1 + params.row_count + 1
    return first_box >= size.height - 3


class QuestionScreen(AppScreen):
    # Textual's auto-focus would focus the first box with scrolling, before on_mount focuses it without:
    # the candidate must see the prompt first, the box comes into view when they type.
    AUTO_FOCUS = ""
    DEFAULT_CSS = """
    #question-bar { height: auto; background: $boost; }
    #question-title { width: 1fr; padding: 0 1; }
    #timer { width: auto; padding-right: 1; text-align: right; color: $accent; }
    #timer.-over { color: $error; text-style: bold; }
    #question-body { padding: 0 1; }
    #prompt { margin: 1 0; }
    #params { margin-bottom: 1; padding: 0 1; border-left: thick $accent; }
    #hints { color: $warning; margin-bottom: 1; }
    """

    BINDINGS = [
        Binding("ctrl+s", "submit", "Submit", priority=True, id="question.submit",
                tooltip="grade the answers (with a box empty, press it twice)"),
        Binding("ctrl+t", "hint", "Hint", priority=True, id="question.hint",
                tooltip="one more hint; a hint lowers the suggested rating a step"),
        Binding("ctrl+n", "new_variant", "New variant", priority=True, id="question.new",
                tooltip="another draw of this question"),
        Binding("ctrl+k", "skip_followup", "Skip follow-up", priority=True, id="question.skip-followup",
                tooltip="straight to the solution (the first round is saved)"),
        Binding("f1", "app.help", "Help", id="question.help", tooltip="the keys of this screen"),
        Binding("f2", "app.conventions", "Conventions", id="question.conventions",
                tooltip="the counting rules every question assumes"),
        Binding("escape", "back", "Back", id="question.back", tooltip="leave the question (a mock asks first)"),
    ]

    def __init__(self, solution: Solution, mode: Mode = Mode.PRACTICE, followup: FollowUp | None = None,
                 first: FirstRound | None = None, revealed: bool = False) -> None:
        super().__init__()
        self.solution = solution
        self.mode = mode  # practice, drill or mock: recorded with the attempt
        self.followup = followup  # the interviewer's push after the first round (with the round it follows)
        self.first = first
        self.revealed = revealed  # the key of this variant has been shown: saved, not scheduled
        self.started_at = datetime.now(UTC)
        self.started = time.monotonic()
        self.hints_shown = 0
        self.confirm_empty = False
        self.confirm_leave = False
        self.boxes_out_of_sight = False  # set in compose: the answer boxes are then built after the first frame

    def compose(self) -> ComposeResult:
        q = self.solution.question
        followup = self.followup
        kind = "[b $warning]Follow-up[/]  " if followup else ""
        mock = self.infradrill.mock if self.mode == Mode.MOCK else None
        if mock is not None:  # where the candidate is in the interview
            kind = f"[b]Mock {mock.index + 1} of {len(mock.questions)}[/b]  " + kind
        yield Header()
        with Horizontal(id="question-bar"):
            yield Static(f"{kind}[b]{escape(q.title)}[/b]  [dim]{q.group} · {q.topic}[/dim]  "
                         f"variant [b]{escape(str(self.solution.code))}[/b]", id="question-title")
            yield Static("0:00", id="timer")
        prompt = followup.prompt if followup else self.solution.prompt
        params = _params_table(self.solution)
        self.boxes_out_of_sight = _below_the_fold(prompt, params, self.app.size)
        with VerticalScroll(id="question-body", can_focus=False):
            yield Static(prompt, id="prompt", markup=False)
            yield Static(params, id="params")
            asked = [q.answer(k) for k in followup.ask] if followup else list(q.answers)
            for number, spec in enumerate(asked, 1):
                yield AnswerField(spec, number, self.solution.shown.get(spec.key, ()), pending=self.boxes_out_of_sight)
            yield Static("", id="hints")
        yield KeysFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A mock interview has no hints and keeps its questions: those keys are neither shown nor run
        there. Its follow-ups cannot be skipped, but ctrl+k stays bound (a refusal), or the answer box
        would take it as delete-to-end-of-line."""
        if self.mode == Mode.MOCK and action in ("hint", "new_variant"):
            return False
        if action == "skip_followup":
            return self.followup is not None
        if action == "new_variant":
            return self.followup is None
        return True

    def on_mount(self) -> None:
        self.set_interval(1, self._tick)
        if self.boxes_out_of_sight:  # built once the prompt is on screen, after this refresh's other callbacks
            self.call_after_refresh(self.call_later, self._build_boxes)
        else:
            self._focus_first_box()

    async def _build_boxes(self) -> None:
        await gather(*(field.build() for field in self.query(AnswerField)))
        self._focus_first_box()  # once every box is in: typing, enter and the tests find them all

    def _focus_first_box(self) -> None:
        boxes = self.query(Input)
        if boxes:  # none if the question was left before its boxes were built
            boxes.first().focus(scroll_visible=False)

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
        timer.update(f"{'-' if left < 0 else ''}{minutes}:{seconds:02d} left")
        timer.set_class(left < 0, "-over")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def on_input_submitted(self, event: Input.Submitted) -> None:
        inputs = list(self.query(Input))
        index = inputs.index(event.input)
        if index + 1 < len(inputs):
            inputs[index + 1].focus()
        else:
            self.action_submit()

    def answers(self) -> dict[str, str]:
        return {field.spec.key: field.value for field in self.query(AnswerField)}

    def action_submit(self) -> None:
        fields = list(self.query(AnswerField))
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
            self.notify(f"{len(empty)} answer(s) empty: press ctrl+s again to reveal the solution anyway.")
            return
        if self.followup is not None and self.first is not None:
            self.post_message(messages.FollowUpSubmitted(self.first, self.followup, self.answers()))
            return
        self.post_message(messages.RoundSubmitted(self.solution, self.answers(), elapsed=self.elapsed,
                                                  hints_used=self.hints_shown, started=self.started_at,
                                                  mode=self.mode, revealed=self.revealed))

    def action_back(self) -> None:
        """Back out; from a follow-up that is the same as skipping it (the first round is saved and
        its solution still shows), which a mock interview does not allow. Leaving a mock asks first."""
        if self.followup is not None and self.mode != Mode.MOCK:
            self.action_skip_followup()
        elif self.mode == Mode.MOCK and not self.confirm_leave:
            self.confirm_leave = True
            self.notify("Press Esc again to leave the mock interview (the answers given so far are kept).")
        else:
            if self.mode == Mode.MOCK:  # straight to the app: this screen closes before its own queue runs
                self.app.post_message(messages.MockLeft())
            self.app.pop_screen()

    def action_skip_followup(self) -> None:
        if self.followup is None or self.first is None:
            return
        if self.mode == Mode.MOCK:
            self.notify("A mock interview asks every follow-up.")
            return
        self.post_message(messages.FollowUpSkipped(self.first))

    def action_hint(self) -> None:
        hints = self.solution.question.hints
        if self.hints_shown >= len(hints):
            self.notify("No more hints for this question.")
            return
        self.hints_shown += 1
        text = "\n".join(f"[b]Hint {i}.[/b] {h}" for i, h in enumerate(hints[: self.hints_shown], 1))
        hint_box = self.query_one("#hints", Static)
        hint_box.update(text)
        hint_box.scroll_visible()

    def action_new_variant(self) -> None:
        self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=self.mode))
