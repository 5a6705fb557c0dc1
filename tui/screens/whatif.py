"""What-if explorer: step one parameter of a variant and watch the answers and the regime move.

Every number comes from re-solving through the engine (revise, sweep) in a worker; this screen
only keeps the parameter values and renders.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Header, Static
from textual.worker import get_current_worker

from solvers.report import expected_text
from tui.chart import sweep_chart
from tui.render import plain
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from solvers.data import Catalog
    from solvers.engine import Solution, SweepPoint



class WhatIfScreen(Screen):
    """Every parameter of the variant, one selected; left/right move it (a choice steps through its
    options) and a worker re-solves the variant and sweeps its chart, so a key press never waits
    on sympy. `solved` counts the moves whose result is on screen (tests wait on it). Opened from a
    solution, the interviewer view or Browse: it records nothing."""

    HELP_TITLE = "What if"

    DEFAULT_CSS = """
    #whatif-title { padding: 0 1; background: $boost; height: auto; }
    #whatif-body { padding: 0 1; }
    #whatif-params, #whatif-answers, #whatif-regime, #whatif-chart { margin-top: 1; }
    """
    BINDINGS = [  # priority: the scroll container would take up and down for itself
        Binding("up", "select(-1)", "Previous parameter", priority=True, id="what-if.previous",
                tooltip="select the parameter above"),
        Binding("down", "select(1)", "Next parameter", priority=True, id="what-if.next",
                tooltip="select the parameter below"),
        Binding("left,minus", "step(-1)", "Step down", priority=True, id="what-if.down",
                tooltip="the selected parameter one step down, or the option before"),
        Binding("right,plus,equals_sign", "step(1)", "Step up", priority=True, id="what-if.up",
                tooltip="the selected parameter one step up, or the option after"),
        Binding("escape", "app.pop_screen", "Back", id="what-if.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, solution: Solution, catalog: Catalog) -> None:
        super().__init__()
        self.base = solution  # the variant opened; every move is solved as changes to it
        self.solution = solution  # what is on screen
        self.catalog = catalog
        question = solution.question
        self.specs = list(question.parameters)
        self.selected = next((i for i, p in enumerate(self.specs) if question.chart and p.name == question.chart[0]),
                             next((i for i, p in enumerate(self.specs) if p.movable), 0))
        self.raw = {p.name: p.raw for p in solution.params}  # the values asked for, ahead of the solver
        self.asked = 0  # moves asked for
        self.solved = 0  # moves whose result is on screen
        self.message = ""
        self.chart: tuple[tuple[str, str] | None, list[SweepPoint]] = (None, [])  # (axes, points) on screen
        self.swept: dict[str, SweepPoint | None] = {}  # every chart point solved so far: a step re-sweeps the same grid

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="whatif-title")
        with VerticalScroll(id="whatif-body"):
            yield Static(id="whatif-params")
            yield Static(id="whatif-answers")
            yield Static(id="whatif-regime")
            yield Static(id="whatif-chart")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._solve()

    def action_select(self, direction: int) -> None:
        self.selected = (self.selected + direction) % len(self.specs)
        self.message = ""
        self._show()
        self._solve()  # the chart follows the selected parameter

    def action_step(self, direction: int) -> None:
        spec = self.specs[self.selected]
        label = spec.label or spec.name
        self.message = spec.what_if_note(label)
        if not self.message:
            current = self.raw[spec.name]
            moved = spec.step(current, direction)
            if moved == current:
                self.message = f"{label} is at the end of its range."
            else:
                self.raw[spec.name] = moved
                self._solve()
                return
        self._show()

    def _solve(self) -> None:
        self.asked += 1
        changes = {name: value for name, value in self.raw.items() if value != self.base.param(name).raw}
        self._solve_in_worker(self.asked, changes, self._chart_axes())

    def _chart_axes(self) -> tuple[str, str] | None:
        """(parameter, answer) the chart sweeps: the selected parameter if it is a range, else the
        question's own chart parameter; the question's chart answer, else its first number."""
        question = self.base.question
        numbers = [a.key for a in question.answers if a.numeric]
        spec = self.specs[self.selected]
        if not spec.ranged and question.chart:
            spec = question.parameter(question.chart[0])
        if not spec.ranged or not numbers:
            return None
        return spec.name, question.chart[1] if question.chart else numbers[0]

    @work(thread=True, exclusive=True, group="whatif")
    def _solve_in_worker(self, asked: int, changes: dict[str, Any], axes: tuple[str, str] | None) -> None:
        from solvers.derivation import Reject
        from solvers.engine import revise, sweep

        message = ""
        solution: Solution | None = self.base
        if changes:
            try:
                solution = revise(self.base, self.catalog, changes)
            except Reject as reason:
                shown = ", ".join(f"{name} = {value}" for name, value in changes.items())
                message, solution = f"No valid variant at {shown}: {reason}", None
        points = sweep(solution or self.solution, self.catalog, *axes, points=32, solved=self.swept) if axes else []
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._solved, asked, solution, message, axes, points)

    def _solved(self, asked: int, solution: Solution | None, message: str, axes: tuple[str, str] | None,
                points: list[SweepPoint]) -> None:
        if asked != self.asked:
            return  # a later move is being solved: its result replaces this one
        if solution is None:  # no variant there: back to the last one that solved
            self.raw = {p.name: p.raw for p in self.solution.params}
        else:
            self.solution = solution
        self.message, self.chart = message, (axes, points)
        self.solved = asked
        self._show()

    def _show(self) -> None:
        # The variant on screen by its own code, which a candidate types to be asked exactly it (v).
        moved = f"  (from {escape(str(self.base.code))})" if self.solution.code != self.base.code else ""
        self.query_one("#whatif-title", Static).update(
            f"[b]What if[/b]: {escape(self.solution.question.title)}\nvariant [b]{escape(str(self.solution.code))}[/b]"
            f"{moved}")
        params = Table(show_header=False, box=None, pad_edge=False)
        for index, spec in enumerate(self.specs):
            chosen = index == self.selected
            param = self.solution.param(spec.name)
            how = spec.what_if_tag or ("◀ ▶" if spec.movable else "")
            params.add_row(*plain("▶" if chosen else " ", param.label, param.shown, how),
                           style="bold reverse" if chosen else "")
        self.query_one("#whatif-params", Static).update(params)
        answers = Table(show_header=False, box=None, pad_edge=False)
        for answer_spec in self.solution.question.answers:
            if not answer_spec.self_graded:
                answers.add_row(*plain(answer_spec.shown_label, expected_text(self.solution, answer_spec.key)))
        self.query_one("#whatif-answers", Static).update(answers)
        regime = self.solution.sheet.regime
        text = "" if regime is None else (f"[b]Regime: {escape(regime.name)}[/b] — {escape(regime.position.symbol)} = "
                                          f"{escape(regime.position.result)}, boundary "
                                          f"{escape(regime.boundary.result)} ({escape(regime.margin_text)})")
        if self.message:
            text += f"\n[$warning]{escape(self.message)}[/]"
        self.query_one("#whatif-regime", Static).update(text)
        chart = self.query_one("#whatif-chart", Static)
        axes, points = self.chart
        if axes is None or not points:
            chart.update("")
            return
        name, answer = axes
        question = self.solution.question
        chart.update(sweep_chart(points, self.solution.param(name).raw, question.parameter(name).label or name,
                                 question.answer(answer).shown_label))
