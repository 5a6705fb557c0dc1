"""Interviewer view: the variant and its answer key side by side, the code large enough to read
out, and the solution revealed one step at a time during a live interview."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Header, Static

from solvers.report import expected_text
from tui import messages
from tui.modes import Mode
from tui.render import plain, regime_panel, step_renderable
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from solvers.engine import Solution


class InterviewerScreen(AppScreen):
    DEFAULT_CSS = """
    #code-banner { height: auto; padding: 0 1; }
    #sides { height: auto; }
    #candidate-side, #key-side { width: 1fr; height: auto; padding: 0 1; }
    #revealed { padding: 0 1; }
    .revealed-step { margin-top: 1; }
    """
    BINDINGS = [
        Binding("space,right", "reveal", "Reveal next step", id="interviewer.reveal",
                tooltip="one more step of the solution, then the regime"),
        Binding("left", "hide", "Hide last step", id="interviewer.hide", tooltip="take the last step back"),
        Binding("n", "new_variant", "New variant", id="interviewer.new", tooltip="another draw of this question"),
        Binding("escape", "app.pop_screen", "Back", id="interviewer.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, solution: Solution) -> None:
        super().__init__()
        self.solution = solution
        self.shown = 0  # steps revealed so far (the regime comes after the last one)

    def compose(self) -> ComposeResult:
        solution = self.solution
        yield Header()
        yield Static(Panel(Text(str(solution.code), style="bold"), title="variant code — read it out",
                           title_align="left", border_style="bold cyan"), id="code-banner")
        with VerticalScroll(id="revealed"):
            with Horizontal(id="sides"):
                # The prompt names user GPUs and models (`H100 [SXM5]`): text, never markup.
                yield Static(solution.prompt, id="candidate-side", markup=False)
                yield Static(self._key(), id="key-side")
        yield KeysFooter()

    def _key(self) -> Table:
        table = Table(title="Answer key", show_header=False, expand=True)
        table.add_column(ratio=1)
        table.add_column(ratio=1, overflow="fold")
        for spec in self.solution.question.answers:
            table.add_row(*plain(spec.shown_label, expected_text(self.solution, spec.key)))
        return table

    def action_reveal(self) -> None:
        steps = self.solution.sheet.steps
        body = self.query_one("#revealed", VerticalScroll)
        if self.shown < len(steps):
            self.shown += 1
            widget = Static(step_renderable(self.shown, steps[self.shown - 1]), classes="revealed-step")
        elif self.shown == len(steps) and self.solution.sheet.regime is not None:
            self.shown += 1
            widget = Static(regime_panel(self.solution), classes="revealed-step")
        else:
            self.notify("Everything is revealed.")
            return
        body.mount(widget)
        widget.scroll_visible()

    def action_hide(self) -> None:
        revealed = self.query(".revealed-step")
        if revealed:
            revealed.last().remove()
            self.shown -= 1

    def action_new_variant(self) -> None:
        self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=Mode.INTERVIEWER))
