"""Interviewer view: the variant's whole interview, stage by stage, for whoever asks it: the code large
enough to read out, each stage's words, its hints, and its keys with their why, the reasons of the options
that do not hold and the slips to listen for; a push with what it moved and its own code. The solution is
revealed one step at a time below during a live interview."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Header, Static

from solvers.report import given_line, key_notes, moved
from tui import messages
from tui.modes import Mode
from tui.render import practice_text, regime_panel, step_renderable
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from solvers.bank import Stage
    from solvers.engine import Solution
    from solvers.interview import StageRun


class InterviewerScreen(AppScreen):
    HELP_TITLE = "Interviewer view"
    DEFAULT_CSS = """
    #code-banner { height: auto; padding: 0 1; }
    #revealed { padding: 0 1; }
    .stage-words, .stage-keys { margin-top: 1; }
    .revealed-step { margin-top: 1; }
    """
    BINDINGS = [
        Binding("space,right", "reveal", "Reveal next step", id="interviewer.reveal",
                tooltip="one more step of the solution, then the regime"),
        Binding("left", "hide", "Hide last step", id="interviewer.hide", tooltip="take the last step back"),
        Binding("n", "new_variant", "New variant", id="interviewer.new", tooltip="another draw of this question"),
        Binding("w", "what_if", "What if", id="interviewer.what-if",
                tooltip="this variant in the what-if explorer: move a parameter, watch the answers and the regime"),
        Binding("escape", "app.pop_screen", "Back", id="interviewer.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, solution: Solution) -> None:
        super().__init__()
        self.solution = solution
        self.shown = 0  # steps revealed so far (the regime comes after the last one)
        self.practice: Text | None = None  # the published measurements, once solved (the last reveal)

    def compose(self) -> ComposeResult:
        from solvers.interview import stage_run

        solution = self.solution
        stages = solution.question.stages
        yield Header()
        yield Static(Panel(Text(str(solution.code), style="bold"), title="variant code — read it out",
                           title_align="left", border_style="bold cyan"), id="code-banner")
        with VerticalScroll(id="revealed"):
            for index, stage in enumerate(stages):
                if not solution.question.asks_on(index, solution.regime_name):
                    continue  # the other side's push of this turn
                # A push searches and solves: it is worded once the worker has found it (on_mount).
                run = None if stage.push else stage_run(solution, self.infradrill.loaded_session.catalog, index)
                words, keys = self._stage(index, stage, run)
                yield Static(words, id=f"stage-{index}-words", classes="stage-words")
                yield Static(keys, id=f"stage-{index}-keys", classes="stage-keys")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._find_pushes()

    @work(thread=True, exclusive=True)
    def _find_pushes(self) -> None:
        """Search each push, then solve the question's published measurements (revealed after the regime)."""
        from solvers.interview import stage_run

        solution, catalog = self.solution, self.infradrill.loaded_session.catalog
        for index, stage in enumerate(solution.question.stages):
            if stage.push and solution.question.asks_on(index, solution.regime_name):
                run = stage_run(self.solution, catalog, index)
                self.app.call_from_thread(self._show_push, index, stage, run)
        if solution.question.reality:
            self.app.call_from_thread(setattr, self, "practice", practice_text(solution.question, catalog))

    def _show_push(self, index: int, stage: Stage, run: StageRun | None) -> None:
        words, keys = self._stage(index, stage, run, searched=True)
        self.query_one(f"#stage-{index}-words", Static).update(words)
        self.query_one(f"#stage-{index}-keys", Static).update(keys)

    def _stage(self, index: int, stage: Stage, run: StageRun | None,
               searched: bool = False) -> tuple[RenderableType, RenderableType]:
        """A stage's words (its heading, what a push moved, the words and its hints) and its keys."""
        question = self.solution.question
        heading = Text(f"Stage {question.turn_number(index)} of {question.turn_count}: {stage.kind}", style="bold")
        if run is None:
            said = "none for this variant: nothing found to push" if searched else "finding the push…"
            return Group(Text.assemble(heading, f" — {said}")), Text("")
        lines: list[RenderableType] = [heading]
        if stage.push:
            heading.append(f" to {run.solution.code}", style="bold cyan")
            changes = moved(run, self.solution)
            lines.append(Text(f"Moved: {changes}." + (f" Regime now: {run.regime}." if run.regime else "")))
        if given := given_line(self.solution, index):
            lines.append(Text(given))
        if run.nudge_note:
            lines.append(Text(run.nudge_note, style="italic"))
        if run.cards_line:
            lines.append(Text(f"{run.cards_line}.", style="italic"))
        lines.append(Text(run.prompt))  # the words name user GPUs and models (`H100 [SXM5]`): text, never markup
        lines += [Text(f"Hint {n}: {hint}", style="dim") for n, hint in enumerate(run.hints, 1)]
        return Group(*lines), self._keys(run)

    def _keys(self, run: StageRun) -> Table:
        table = Table(show_header=False, expand=True, box=None, padding=(0, 1, 0, 0))
        table.add_column(ratio=1, style="bold")
        table.add_column(ratio=2, overflow="fold")
        for key, line in run.key_lines():
            notes = key_notes(run.solution, key)
            why = Text(line, style="green")
            if notes:
                why.append("\n" + "\n".join(notes), style="dim")
            table.add_row(Text(run.solution.question.answer(key).shown_label), why)
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
        elif self.practice is not None and not self.query(".practice"):
            widget = Static(Group(Text("In practice", style="bold"), self.practice), classes="revealed-step practice")
        else:
            self.notify("Everything is revealed.")
            return
        body.mount(widget)
        widget.scroll_visible()

    def action_hide(self) -> None:
        revealed = self.query(".revealed-step")
        if revealed:
            last = revealed.last()
            last.remove()
            self.shown -= 0 if last.has_class("practice") else 1

    def action_new_variant(self) -> None:
        self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=Mode.INTERVIEWER))

    def action_what_if(self) -> None:
        from tui.screens.whatif import WhatIfScreen

        self.app.push_screen(WhatIfScreen(self.solution, self.infradrill.loaded_session.catalog))
