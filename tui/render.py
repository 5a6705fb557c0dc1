"""Rich renderables for a solved variant: grade table, derivation steps, regime panel."""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from solvers.answers import CLOSE, CORRECT, Grade
from solvers.report import grade_rows, judgements

if TYPE_CHECKING:
    from collections.abc import Sequence

    from solvers.bank import Question
    from solvers.data import Catalog
    from solvers.derivation import Step
    from solvers.engine import Solution
    from solvers.reality import Comparison

VERDICT_STYLE = {CORRECT: "bold green", CLOSE: "bold yellow"}


def plain(*cells: object) -> tuple[Text, ...]:
    """Text as text: what a person typed or a data file says is never read as Rich markup
    (Rich tables and Textual's DataTable parse plain strings as markup, and `[/x]` raises)."""
    return tuple(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells)


def grade_table(solution: Solution, grades: list[Grade]) -> Table:
    table = Table(expand=True, show_edge=False, pad_edge=False)
    # Long choice names and orderings fold onto more lines rather than being cut off.
    for column, kwargs in (("answer", {"ratio": 3}), ("yours", {"ratio": 2, "overflow": "fold"}),
                           ("expected", {"ratio": 2, "overflow": "fold"}),
                           ("err", {"no_wrap": True}), ("verdict", {"no_wrap": True})):
        table.add_column(column, **kwargs)
    for label, yours, expected, error, verdict, note in grade_rows(solution, grades):
        style = VERDICT_STYLE.get(verdict, "bold red")
        table.add_row(*plain(label, yours, expected, error), Text(verdict, style=style))
        if note:
            table.add_row("", Text(f"↳ {note}", style="italic"), "", "", "")
    return table


def judgement_table(solution: Solution, key: str) -> Table:
    """A select answer at the reveal: every listed option, whether it holds here, and why."""
    table = Table(show_header=False, box=None, pad_edge=False, expand=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for mark, option, holds, why in judgements(solution, key):
        tick = Text("✓" if holds else "✗", style="bold green" if holds else "bold red")
        table.add_row(Text.assemble(f"{mark} ", tick), Text.assemble((option, "bold"), f": {why}"))
    return table


def givens_table(solution: Solution) -> Table:
    """What the derivation starts from: parameters, datasheet figures, assumptions, measurements."""
    table = Table(show_header=False, box=None, pad_edge=False, expand=True)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(ratio=1)
    table.add_column(no_wrap=True, justify="right")
    for given in solution.sheet.givens:
        table.add_row(*plain(given.symbol, given.label, given.shown))
    return table


def step_renderable(number: int, step: Step) -> Group:
    lines = [
        Text.assemble((f"{number}. {step.title}", "bold")),
        Text.assemble("   ", (f"{step.symbol} = {step.formula}", "cyan")),
        Text(f"     = {step.substituted}"),
        Text.assemble("     = ", (step.result, "bold green")),
    ]
    if step.why:
        lines.append(Text(f"   {step.why}", style="dim italic"))
    return Group(*lines)


def regime_panel(solution: Solution) -> Panel:
    """The sheet's regime; callers show it only where the sheet has one."""
    regime = solution.sheet.regime
    if regime is None:
        raise ValueError(f"{solution.code} has no regime to show")
    body = Group(
        Text(regime.summary),
        Text(""),
        Text.assemble(("Boundary  ", "bold"), (regime.boundary.equation, "cyan"),
                      f" = {regime.boundary.result}"),
        Text.assemble(("Variant   ", "bold"), f"{regime.position.symbol} = {regime.position.result}  ",
                      (regime.margin_text, "bold")),
        Text(""),
        Text.assemble(("Other side  ", "bold"), regime.other_side),
    )
    return Panel(body, title=Text(f"Regime: {regime.name}"), title_align="left", border_style="magenta")


def notes(solution: Solution) -> Group:
    lines = [Text("Assumptions", style="bold")]
    lines += [Text(f" • {a}") for a in solution.sheet.assumptions]
    lines += [Text(""), Text("References", style="bold")]
    lines += [Text(f" • {r}") for r in solution.question.references]
    return Group(*lines)


def practice_text(question: Question, catalog: Catalog) -> Text:
    """The question's published measurements solved and worded (reality_text); a file edited since validate
    says so here, as a worker's error would end the app. Solves: call it from a worker."""
    from solvers.engine import VariantError
    from solvers.reality import compare  # the engine (sympy) stays off the start-up path

    try:
        return reality_text(compare(question, catalog))
    except VariantError as error:
        return Text(f"The measured conditions do not solve in this question: {error}")


def reality_text(comparisons: Sequence[Comparison]) -> Text:
    """Each published measurement beside the model: what was measured and on what, the model's figure in bold
    with its ratio (and why it is off, where it says), then the source dimmed."""
    said = Text()
    for number, comparison in enumerate(comparisons):
        claim, source, model = comparison.parts()
        said.append("\n\n" if number else "").append(f"{claim}. ").append(model, "bold")
        said.append(f"\n{source}", "dim")
    return said


def interval_text(delta: timedelta) -> str:
    """A review interval as Anki prints it on a rating key: 1m, 10m, 3h, 4d, 2.5mo, 1.2y."""
    minutes = delta.total_seconds() / 60
    if minutes < 60:
        return f"{max(1, round(minutes))}m"
    if minutes < 24 * 60:
        return f"{round(minutes / 60)}h"
    days = minutes / (24 * 60)
    if days < 30:
        return f"{round(days)}d"
    if days < 365:
        return f"{days / 30:.1f}".rstrip("0").rstrip(".") + "mo"
    return f"{days / 365:.1f}".rstrip("0").rstrip(".") + "y"
