"""What-if explorer: step one parameter of a variant and watch the answers and the regime move.

Every number comes from re-solving through the engine (solve_values, sweep); this screen
only keeps the parameter values and renders.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from solvers.report import expected_text
from tui.chart import sweep_chart
from tui.render import plain

if TYPE_CHECKING:
    from solvers.bank import ParamSpec
    from solvers.data import Catalog
    from solvers.engine import Solution

LOG_STEP = math.sqrt(2)  # one press moves a log-uniform parameter by this factor


def stepped(spec: ParamSpec, value: float, direction: int) -> float:
    """The next value of a numeric parameter in `direction`, rounded as draws are, inside its range."""
    from solvers.sampling import round_value

    if spec.kind == "loguniform":
        proposed = value * LOG_STEP**direction
    else:
        proposed = value + direction * (spec.step or max((spec.high - spec.low) / 20, 1 if spec.kind == "int" else 0))
    moved = round_value(spec, min(max(proposed, spec.low), spec.high))
    if moved == value and spec.low < proposed < spec.high:  # rounding swallowed the step: take the next one
        moved = round_value(spec, min(max(value + direction * (spec.step or 1), spec.low), spec.high))
    return moved


class WhatIfScreen(Screen):
    DEFAULT_CSS = """
    #whatif-title { padding: 0 1; background: $boost; height: auto; }
    #whatif-body { padding: 0 1; }
    #whatif-params, #whatif-answers, #whatif-regime, #whatif-chart { margin-top: 1; }
    """
    BINDINGS = [
        Binding("up", "select(-1)", "Previous parameter"),
        Binding("down", "select(1)", "Next parameter"),
        Binding("left,minus", "step(-1)", "Step down"),
        Binding("right,plus,equals_sign", "step(1)", "Step up"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, solution: Solution, catalog: Catalog) -> None:
        super().__init__()
        self.solution = solution
        self.catalog = catalog
        question = solution.question
        self.numeric = [p for p in question.parameters if p.kind in ("int", "uniform", "loguniform")]
        self.selected = 0
        if question.chart:
            self.selected = next((i for i, p in enumerate(self.numeric) if p.name == question.chart[0]), 0)
        self.message = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"[b]What if[/b]: {self.solution.question.title}  (from {self.solution.code})", id="whatif-title")
        with VerticalScroll(id="whatif-body"):
            yield Static(id="whatif-params")
            yield Static(id="whatif-answers")
            yield Static(id="whatif-regime")
            yield Static(id="whatif-chart")
        yield Footer()

    def on_mount(self) -> None:
        if not self.numeric:
            self.message = "This question has no numeric parameter to move."
        self._show()

    def action_select(self, direction: int) -> None:
        if self.numeric:
            self.selected = (self.selected + direction) % len(self.numeric)
            self._show()

    def action_step(self, direction: int) -> None:
        from solvers.derivation import Reject
        from solvers.engine import revise

        if not self.numeric:
            return
        spec = self.numeric[self.selected]
        raw = {p.name: p.raw for p in self.solution.params}
        new_value = stepped(spec, raw[spec.name], direction)
        if new_value == raw[spec.name]:
            self.message = f"{spec.label or spec.name} is at the end of its range."
            self._show()
            return
        try:
            self.solution = revise(self.solution, self.catalog, {spec.name: new_value})
        except Reject as reason:
            self.message = f"No valid variant at {spec.name} = {new_value}: {reason}"
            self._show()
            return
        self.message = ""
        self._show()

    def _show(self) -> None:
        params = Table(show_header=False, box=None, pad_edge=False)
        for param in self.solution.params:
            chosen = self.numeric and param.name == self.numeric[self.selected].name
            params.add_row(*plain("▶" if chosen else " ", param.label, param.shown),
                           style="bold reverse" if chosen else "")
        self.query_one("#whatif-params", Static).update(params)
        answers = Table(show_header=False, box=None, pad_edge=False)
        for spec in self.solution.question.answers:
            if not spec.self_graded:
                answers.add_row(*plain(spec.label, expected_text(self.solution, spec.key)))
        self.query_one("#whatif-answers", Static).update(answers)
        regime = self.solution.sheet.regime
        text = "" if regime is None else (f"[b]Regime: {regime.name}[/b] — {regime.position.symbol} = "
                                          f"{regime.position.result}, boundary {regime.boundary.result} "
                                          f"({regime.margin_text})")
        if self.message:
            text += f"\n[$warning]{self.message}[/]"
        self.query_one("#whatif-regime", Static).update(text)
        self._chart()

    def _chart(self) -> None:
        from solvers.engine import sweep

        chart = self.query_one("#whatif-chart", Static)
        numeric_answers = [a for a in self.solution.question.answers if a.numeric]
        if not self.numeric or not numeric_answers:
            chart.update("")
            return
        spec = self.numeric[self.selected]
        answer = self.solution.question.chart[1] if self.solution.question.chart else numeric_answers[0].key
        points = sweep(self.solution, self.catalog, spec.name, answer, points=32)
        if points:
            chart.update(sweep_chart(points, self.solution.param(spec.name).raw, spec.label or spec.name,
                                     self.solution.question.answer(answer).label))
