"""A number with a unit, graded by relative error (`rel:` in a question file)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.answers.base import (
    CLOSE,
    CORRECT,
    MISMATCH,
    UNPARSED,
    WRONG,
    Answer,
    Grade,
    Shown,
    Slip,
    SpecError,
    TestInputs,
    UnitMismatch,
)
from solvers.answers.slips import diagnose, generic_slips
from solvers.parse import ParseError, parse_quantity
from solvers.units import dim_name, format_number, format_quantity, is_multiplier, parse_unit

DEFAULT_REL = 0.02
PIN_REL = 1e-3  # a golden figure with decimals, where its entry gives no rel:
PIN_EXACT = 1e-9  # a golden whole number: exact, but for the float rounding of a unit conversion


@dataclass(frozen=True)
class Number(Answer):
    tolerance: float = DEFAULT_REL

    kind = "number"
    fields = ("rel",)
    numeric = True
    close_factor = 3  # close within this many tolerances

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        name = cls.fields[0]
        tolerance = fields.get(name, DEFAULT_REL)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
            raise SpecError(name, "tolerance must lie in (0, 1)")
        return cls(key, label, unit, float(tolerance))

    def check_result(self, result: Any) -> str | None:
        if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result):
            return f"not a finite number ({result!r})"
        return None

    def key_text(self, key: Any, shown: Shown) -> str:
        return format_quantity(float(key), self.unit)

    def display_value(self, key: Any) -> Any:
        return parse_unit(self.unit).from_base(float(key))

    def typed(self, key: Any, shown: Shown) -> str:
        return format_quantity(float(key), self.unit, sig=6)

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        wrong = 1.0 if key == 0 else float(key) * self.wrong_factor
        return TestInputs(self.typed(key, shown), format_quantity(wrong, self.unit, sig=6), "about three fifty")

    @property
    def wrong_factor(self) -> float:
        """A typed answer this many times the key must grade wrong: twice the key (the classic
        slip) where the tolerance is tight enough to tell, else ten times."""
        return 2.0 if self.close_factor * self.tolerance < 1 else 10.0

    def pin(self, value: Any) -> Any:
        """A figure in the answer's unit, as a bare number typed in its box reads."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            hint = ""
            if isinstance(value, str):
                try:
                    float(value)
                    hint = " (YAML reads an exponent without its sign as text: write 2.4e+25)"
                except ValueError:
                    pass
            raise SpecError("golden", f"expected a number in {self.unit or 'no unit'}, got {value!r}{hint}")
        return value

    def pin_mismatch(self, pinned: Any, result: Any, rel: float | None) -> tuple[str, str] | None:
        """A whole number pins the key exactly, any other figure to a relative PIN_REL, unless the
        entry gives its own rel: (then every figure of the entry, whole or not)."""
        unit = parse_unit(self.unit)
        value = unit.from_base(float(result))
        tolerance = rel if rel is not None else PIN_EXACT if isinstance(pinned, int) else PIN_REL
        if math.isclose(value, pinned, rel_tol=tolerance, abs_tol=1e-12):
            return None
        return format_quantity(float(result), self.unit, sig=7), format_quantity(unit.to_base(pinned), self.unit, sig=7)

    def read(self, text: str, shown: Shown) -> float:
        """The value in base units. A bare number is in the answer's unit ("0.4" in a % box
        is 0.4%), a bare magnitude ("4.5T") scales the base unit."""
        quantity = parse_quantity(text)
        unit = parse_unit(self.unit)
        if quantity.unit is None:
            value = unit.to_base(quantity.value)
        elif is_multiplier(quantity.unit.text):
            value = quantity.value
        elif quantity.unit.dim != unit.dim:
            given, wanted = dim_name(quantity.unit.dim), dim_name(unit.dim)
            raise UnitMismatch(f"'{quantity.unit.text}' is {given}; this answer is {wanted}")
        else:
            value = quantity.value
        # "1e299 billion" in a us box: finite in seconds, infinite in the unit it is shown in.
        if not math.isfinite(value) or not math.isfinite(unit.from_base(value)):
            raise ParseError("too large to grade")
        return value

    def describe(self, reading: float, shown: Shown) -> str:
        return format_quantity(reading, self.unit)

    def error_of(self, ratio: float) -> float:
        return abs(ratio - 1)

    def tells_apart(self, factor: float) -> bool:
        return self.error_of(factor) > self.tolerance

    def error_between(self, given: float, expected: float) -> float:
        """The error of `given` against a non-zero `expected` (error_of their ratio)."""
        return self.error_of(given / expected)

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        expected = float(key)
        key_text = self.key_text(expected, shown)
        try:
            given = self.read(text, shown)
        except ParseError as error:
            return Grade(self.key, UNPARSED, text, key_text, message=str(error))
        except UnitMismatch as error:
            return Grade(self.key, MISMATCH, text.strip(), key_text, message=str(error))
        given_text = format_quantity(given, self.unit)
        if expected == 0:
            return Grade(self.key, CORRECT if given == 0 else WRONG, given_text, key_text)
        ratio = given / expected
        relative = self.error_between(given, expected)
        if not math.isfinite(relative):  # 1e300 against a key of 1e-10: the ratio overflows
            return Grade(self.key, UNPARSED, text, key_text, message="too large to grade")
        verdict = (CORRECT if relative <= self.tolerance else CLOSE if relative <= self.close_factor * self.tolerance
                   else WRONG)
        near = max(0.01, min(self.tolerance, 0.05))
        # The answer's own slips first: on a tie (1/8 is also bits vs bytes) they say more.
        candidates = [*slips, *generic_slips(parse_unit(self.unit))]
        slip = None if verdict == CORRECT else diagnose(ratio, candidates, near)
        return Grade(self.key, verdict, given_text, key_text, error=relative, slip=slip)

    def error_text(self, grade: Grade) -> str:
        if grade.error is None:
            return ""
        if 0 < grade.error < 1e-4:
            return "<0.01%"
        return f"{format_number(grade.error * 100, 2)}%"

    @property
    def box_label(self) -> str:
        return f"{self.shown_label} [{self.unit}]" if self.unit else self.shown_label

    def placeholder(self, shown: Shown) -> str:
        return self.unit or "a number"
