"""A small text chart of a sweep: the answer against one parameter, coloured by regime,
with this variant's point and the regime changes marked."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.text import Text

from solvers.units import format_number

if TYPE_CHECKING:
    from solvers.engine import SweepPoint

REGIME_STYLES = ("cyan", "magenta", "yellow", "green")


def _scale(value: float, low: float, high: float, size: int, log: bool) -> int:
    if high == low:
        return 0
    if log:
        value, low, high = math.log(value), math.log(low), math.log(high)
    return min(size - 1, max(0, round((value - low) / (high - low) * (size - 1))))


def sweep_chart(points: list[SweepPoint], variant_x: float, x_label: str, y_label: str,
                width: int = 56, height: int = 8) -> Text:
    xs, ys = [p.x for p in points], [p.y for p in points]
    log_x = min(xs) > 0 and max(xs) / min(xs) > 50
    log_y = min(ys) > 0 and max(ys) / min(ys) > 50
    styles: dict[str, str] = {}
    for point in points:
        styles.setdefault(point.regime, REGIME_STYLES[len(styles) % len(REGIME_STYLES)])
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * width for _ in range(height)]
    for before, after in zip(points, points[1:]):
        if before.regime != after.regime:  # a regime change: a dotted line between the two samples
            column = (_scale(before.x, xs[0], xs[-1], width, log_x) + _scale(after.x, xs[0], xs[-1], width, log_x)) // 2
            for row in grid:
                row[column] = ("┆", "dim")
    for point in points:
        column = _scale(point.x, xs[0], xs[-1], width, log_x)
        line = height - 1 - _scale(point.y, min(ys), max(ys), height, log_y)
        grid[line][column] = ("•", styles[point.regime])
    mine = next((p for p in points if p.x == variant_x), None)
    if mine is not None:
        column = _scale(mine.x, xs[0], xs[-1], width, log_x)
        grid[height - 1 - _scale(mine.y, min(ys), max(ys), height, log_y)][column] = ("◆", "bold red")
    top, bottom = format_number(max(ys), 3), format_number(min(ys), 3)
    margin = max(len(top), len(bottom)) + 1
    text = Text(f"{y_label}{'  (log scale)' if log_y else ''}\n", style="bold")
    for index, row in enumerate(grid):
        label = top if index == 0 else bottom if index == height - 1 else ""
        text.append(label.rjust(margin - 1) + "│")
        for char, style in row:
            text.append(char, style=style)
        text.append("\n")
    text.append(" " * margin + "└" + "─" * (width - 1) + "\n")
    left, right = format_number(xs[0], 3), format_number(xs[-1], 3)
    text.append(" " * margin + left + right.rjust(width - len(left)) + "\n")
    text.append(" " * margin + f"{x_label}{'  (log scale)' if log_x else ''}\n", style="bold")
    text.append(" " * margin + "◆ this variant  ", style="bold red")
    for regime, style in styles.items():
        text.append(f"• {regime}  ", style=style)
    return text
