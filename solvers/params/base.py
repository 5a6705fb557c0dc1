"""What every parameter kind shares, and its interface.

A parameter kind (choice, int, uniform, loguniform, fixed, generate) owns everything about one
way of drawing a figure: the fields it takes from a question file, how it draws and rounds,
how it reads an override (`--set name=value`, a variant code's `+name=value`) and writes one
back, the what-if explorer's step and note, the sweep chart's grid, and the values the
follow-up's push search tries. Adding a kind is one module here and one line in `KINDS`.

Nothing here imports numpy: the bank loads the kinds, and listing the bank stays fast. For the same
reason a kind with no fields of its own is a plain subclass, not a @dataclass (a millisecond each).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from solvers.answers.base import SpecError
from solvers.parse import ParseError, parse_quantity
from solvers.units import format_number, parse_unit

if TYPE_CHECKING:
    import numpy as np

    from solvers.data import Catalog, Record

# An override may leave the drawn range (an interviewer's "what if"), by up to this factor either way:
# beyond it a figure is a typo (1e-300 tokens), not a system.
OVERRIDE_REACH = 100
NUMBER = (int, float)
_IN_A_CODE = re.compile(r"[^+\s]+")  # what a variant code's '+name=value' holds (bank.VARIANT_TAIL)
# A declared push may move a figure by a factor of its own value ("÷4": a quarter of the context drawn),
# so that the push moves with the variant instead of landing on one value in every draw.
_RELATIVE = re.compile(r"\s*([×x*/÷])\s*([0-9]+(?:\.[0-9]+)?)\s*")

# A field of the parameter's mapping, type-checked: read(name, type, required=True, default=None)
# (bank._Reader.field, which names the file, the field and the line of a wrong one).
FieldReader = Callable[..., Any]


class ParameterError(ValueError):
    """An override or a data reference that cannot be used (one clear line)."""


def in_a_code(text: str) -> bool:
    """Whether a variant code can hold this override text as it is."""
    return _IN_A_CODE.fullmatch(text) is not None


def relative_factor(text: Any) -> Fraction | float | None:
    """The factor a push's relative value moves by ("×2" → 2, "÷4" → 1/4, exactly, so that a value divided by
    it is the quotient a person works out, rounded once; "÷0" infinite), or None for a value as --set takes it.
    The loader refuses a factor that is not positive, finite and other than 1."""
    match = _RELATIVE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    operator, figure = match.groups()
    factor = Fraction(figure)
    return factor if operator in "×x*" else (1 / factor if factor else math.inf)


def number(value: Any) -> bool:
    return isinstance(value, NUMBER) and not isinstance(value, bool)


def distance(x: float, current: float) -> float:
    """How far apart two values are as a person hears them: by ratio where both are positive."""
    return abs(math.log(x / current)) if x > 0 and current > 0 else abs(x - current)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter as a question file declares it. Subclasses are the kinds."""

    name: str
    default: Any
    label: str = ""
    unit: str = ""

    kind: ClassVar[str] = ""  # the question-file field that names this kind
    fields: ClassVar[tuple[str, ...]] = ()  # the question-file fields this kind reads, its name first
    ranged: ClassVar[bool] = False  # a numeric range: what a sweep, a chart or a push can step
    what_if_tag: ClassVar[str] = ""  # how the what-if table marks a parameter no key press moves

    @classmethod
    def from_fields(cls, name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
        """Build from the kind's own fields of a question file (raises SpecError, or the reader's error)."""
        raise NotImplementedError

    @staticmethod
    def required_default(fields: Mapping[str, Any]) -> Any:
        if "default" not in fields:
            raise SpecError("default", "missing (every parameter needs a default)")
        return fields["default"]

    # Drawing ------------------------------------------------------------------------------
    def draw(self, rng: np.random.Generator, drawn: Mapping[str, Any]) -> Any:
        """This parameter's value for a variant, from its generator; `drawn`: the parameters before it."""
        raise NotImplementedError

    @property
    def reads(self) -> tuple[tuple[str, str], ...]:
        """(argument, parameter) for each parameter this one is drawn from: drawn again when one moves."""
        return ()

    def shown_as(self, value: Any) -> str:
        """How a value that is no number nor data entry reads in the prompt and the table."""
        return str(value)

    def entry(self, value: Any, catalog: Catalog) -> Record | None:
        """The data entry (a GPU, a model) a value names; None where the parameter names none."""
        return None

    # Overrides ----------------------------------------------------------------------------
    def parse_override(self, text: str, catalog: Catalog) -> Any:
        """The value of `--set name=text` for this parameter, or ParameterError. A figure the question
        states or draws from a generator can be set where it is a number."""
        if not isinstance(self.default, NUMBER):
            raise ParameterError(f"{self.name}: this parameter cannot be set")
        return self.read_number(text)

    def pushed_value(self, text: str, current: Any, catalog: Catalog) -> Any:
        """The value a declared push's `text` sets from `current`: a value as --set takes it, or a factor of
        `current` where a drawn range allows it (Ranged)."""
        if relative_factor(text) is not None:
            raise ParameterError(f"{self.name}: only a drawn range moves by a factor ({text})")
        return self.parse_override(text, catalog)

    def override_text(self, value: Any) -> str:
        """`value` as a variant code writes it, read back by parse_override: a number plainly, its
        exponent unsigned (1e20, not 1e+20)."""
        return (repr(value) if isinstance(value, float) else str(value)).replace("e+", "e")

    def read_number(self, text: str, low: float = 0.0, high: float = 0.0, whole: bool = False,
                    drawn: str = "") -> float | int:
        """`text` as a figure in this parameter's unit; within OVERRIDE_REACH of [low, high] where
        that is a range (`drawn`: how the refusal says it, "draws 1 to 8" by default). Counts (`whole`)
        may be zero; sizes, rates and lengths must be positive."""
        try:
            quantity = parse_quantity(text)
        except ParseError as error:
            raise ParameterError(f"{self.name}: {error}") from None
        unit = parse_unit(self.unit)
        if quantity.unit is None:
            value = quantity.value
        elif quantity.unit.dim != unit.dim:
            raise ParameterError(f"{self.name}: '{quantity.unit.text}' does not fit this parameter's unit "
                                 f"'{self.unit}'")
        else:
            value = unit.from_base(quantity.value)
        if not math.isfinite(value) or value < 0 or (value == 0 and not whole):
            raise ParameterError(f"{self.name}: must be a positive number" + (" or zero" if whole else ""))
        if whole and not float(value).is_integer():
            raise ParameterError(f"{self.name}: must be a whole number")
        lowest, highest = low / OVERRIDE_REACH, high * OVERRIDE_REACH
        if high > 0 and not lowest <= value <= highest:
            drawn = drawn or f"draws {format_number(low)} to {format_number(high)}"
            raise ParameterError(f"{self.name}: {format_number(value)} is out of range: this question {drawn} and "
                                 f"takes overrides from {format_number(lowest)} to {format_number(highest)}")
        return int(value) if whole or float(value).is_integer() else value

    # The what-if explorer and the follow-up ------------------------------------------------
    @property
    def movable(self) -> bool:
        """Whether a key press in the what-if explorer, or a push, can move it."""
        return False

    def what_if_note(self, label: str) -> str:
        """Why a key press does not move this parameter ('' where it does)."""
        return ""

    def step(self, value: Any, direction: int) -> Any:
        """The next value in `direction` (the what-if explorer's key press); the same value at either end."""
        return value

    def grid(self, points: int) -> set[float | int]:
        """About `points` values across the range, as draws round them: the sweep chart's x values."""
        return set()

    def pushes(self, current: Any, points: int) -> list:
        """Values the push search tries, nearest `current` first (`points`: the fineness of a range's grid)."""
        return []

    def said(self, x: Any) -> list:
        """Values near `x` a person would say, roundest first."""
        return [x]

    def nearby(self, current: Any) -> list:
        """Moves an interviewer makes without a boundary to cross, nearest first."""
        return []
