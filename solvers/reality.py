"""A question's model beside a real system: each `reality:` entry's published figure, and the figure this
question's model gives for the same conditions, solved on the entry's variant (never typed)."""
from __future__ import annotations

from dataclasses import dataclass

from solvers.bank import Measured, Question
from solvers.data import Catalog
from solvers.engine import Solution, VariantCode, question_variant
from solvers.units import format_quantity, parse_unit, significant_digits

# Within this factor either way the model is "close enough" for a back-of-envelope answer (REALITY.md's
# fair); an entry further off says why in its `why`.
TOLERANCE = 1.5


@dataclass(frozen=True)
class Comparison:
    measured: Measured
    code: str  # the variant that puts the measured conditions into the question
    bank: float  # the model's figure, in the measurement's unit

    @property
    def ratio(self) -> float:
        """The model's figure over the measured one (above 1 on a time: the model is slower than reality)."""
        return self.bank / self.measured.measured

    @property
    def within(self) -> bool:
        return 1 / TOLERANCE <= self.ratio <= TOLERANCE

    def parts(self) -> tuple[str, str, str]:
        """The sentence in three: what was measured and on what, its source, and the model's figure beside it
        (with why it is off where it says) — so a screen can set the source apart."""
        m, unit = self.measured, parse_unit(self.measured.unit)
        real = format_quantity(unit.to_base(m.measured), m.unit, sig=significant_digits(m.measured))
        model = (f"This question's model gives {format_quantity(unit.to_base(self.bank), m.unit, sig=3)} for those "
                 f"conditions ({self.ratio:.2f}× the measurement).")
        return f"{real} on {m.system}", m.source, f"{model} {m.why}" if m.why else model

    def sentence(self) -> str:
        """'In practice: … on … (source). This question's model gives … for those conditions (ratio).'"""
        claim, source, model = self.parts()
        return f"In practice: {claim} ({source}). {model}"


def compare(question: Question, catalog: Catalog) -> tuple[Comparison, ...]:
    """Every entry of the question solved on its own variant (a few solves: call it once per question)."""
    return tuple(comparison(entry, question_variant(question, catalog, VariantCode.parse(code_of(question, entry))))
                 for entry in question.reality)


def code_of(question: Question, entry: Measured) -> str:
    return f"{question.id}@{entry.variant}"


def comparison(entry: Measured, solution: Solution) -> Comparison:
    """The entry beside the model's figure on `solution`, the entry's own variant solved."""
    bank = parse_unit(entry.unit).from_base(float(solution.expected[entry.answer]))
    return Comparison(entry, str(solution.code), bank)
