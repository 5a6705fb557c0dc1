"""An order-of-magnitude estimate, graded in decades (`log:` in a question file)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from solvers.answers.base import Grade, Shown
from solvers.answers.number import Number
from solvers.parse import ParseError
from solvers.units import format_number


@dataclass(frozen=True)
class Estimate(Number):
    kind = "estimate"
    fields = ("log",)
    close_factor = 2
    wrong_factor = 1e3  # three decades: beyond twice any tolerance below one decade

    def read(self, text: str, shown: Shown) -> float:
        value = super().read(text, shown)
        if value <= 0:  # decades from the key exist only for a positive figure
            raise ParseError("an estimate is a positive figure")
        return value

    def error_of(self, ratio: float) -> float:
        return abs(math.log10(ratio)) if ratio > 0 else math.inf

    def error_between(self, given: float, expected: float) -> float:
        # In logs: the ratio of a subnormal figure to the key underflows to 0, an infinite error.
        if given > 0 and expected > 0:
            return abs(math.log10(given) - math.log10(expected))
        return self.error_of(given / expected)

    def error_text(self, grade: Grade) -> str:
        if grade.error is None:
            return ""
        # As a factor, not in decades: "3.2x off" reads at a glance where "0.5 dec" needs explaining.
        factor = 10 ** grade.error
        return "<1.01x off" if factor < 1.005 else f"{format_number(factor, 3 if factor < 10 else 2)}x off"
