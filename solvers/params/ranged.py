"""A figure drawn from a range (`int:`, `uniform:`, `loguniform:` [low, high]) and rounded as a person
says it (`round: {sig: 2, step: 256}`): what a sweep, a chart and a push can step."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from solvers.answers.base import SpecError
from solvers.params.base import NUMBER, FieldReader, ParameterError, ParamSpec, distance, number, relative_factor

if TYPE_CHECKING:
    import numpy as np

    from solvers.data import Catalog

MAX_BOUND = 1e300  # a range's bounds: finite, with room for arithmetic on them
MAX_STEPS = 1e9  # the finest rounding step, as a share of its range
LOG_STEP = math.sqrt(2)  # one what-if key press moves a log-uniform parameter by this factor


@dataclass(frozen=True)
class Ranged(ParamSpec):
    low: float = 0.0
    high: float = 0.0
    sig: int | None = None  # round to this many significant figures,
    grain: float | None = None  # then to a multiple of this (the file's round.step)

    ranged = True
    whole: ClassVar[bool] = False  # whole numbers (counts, which may be zero) however they round

    @classmethod
    def from_fields(cls, name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
        default = cls.required_default(fields)
        bounds = read(cls.kind, list)
        if len(bounds) != 2 or not all(number(b) for b in bounds):
            raise SpecError(cls.kind, "expected [low, high]")
        low, high = bounds
        if not all(math.isfinite(b) and abs(b) <= MAX_BOUND for b in bounds):
            raise SpecError(cls.kind, f"expected finite bounds within ±{MAX_BOUND:g}")
        if not cls.spans(low, high):
            raise SpecError(cls.kind, "expected 0 < low < high (for int, whole numbers with 0 <= low < high)")
        sig, grain = cls._rounding(read("round", (dict, int, float), required=False, default=None), high - low)
        if not number(default) or not low <= default <= high:
            raise SpecError("default", f"{default!r} is outside [{low}, {high}]")
        return cls(name, default, label, unit, float(low), float(high), sig, grain)

    @classmethod
    def spans(cls, low: float, high: float) -> bool:
        """Whether [low, high] is a range of this kind: positive, as an override must be (read_number),
        so that every value drawn can be named in a variant code."""
        return 0 < low < high

    @classmethod
    def _rounding(cls, rounding: Any, width: float) -> tuple[int | None, float | None]:
        """(sig, step) from the file's `round:` ({step: .., sig: ..}, or a bare step)."""
        step = sig = None
        if isinstance(rounding, dict):
            step, sig = rounding.get("step"), rounding.get("sig")
        elif rounding is not None:
            step = rounding
        # A step finer than a billionth of the range (1e-320) rounds to nothing a person says, and overflows.
        bad_step = step is not None and (isinstance(step, bool) or not isinstance(step, NUMBER)
                                         or not math.isfinite(step) or not width / MAX_STEPS <= step <= width)
        bad_sig = sig is not None and (isinstance(sig, bool) or not isinstance(sig, int) or not 1 <= sig <= 15)
        if rounding is not None and ((step is None and sig is None) or bad_step or bad_sig):
            raise SpecError("round", f"expected {{step: positive, at most the range and at least 1/{MAX_STEPS:g} of "
                                     "it}, {sig: 1 to 15} or both")
        if not cls.whole and step is None and sig is None:
            raise SpecError("round", "continuous parameters must be rounded (round: {step: ..} or {sig: ..})")
        return sig, step

    # Drawing and rounding -------------------------------------------------------------------
    def draw(self, rng: np.random.Generator, drawn: Mapping[str, Any]) -> Any:
        return self.rounded(self._draw(rng))

    def _draw(self, rng: np.random.Generator) -> float:
        raise NotImplementedError

    def rounded(self, value: float) -> float | int:
        """`value` rounded as a draw is: to `sig` significant figures, then to a multiple of the grain,
        inside the range."""
        if self.sig is not None:
            value = min(max(float(f"{value:.{self.sig - 1}e}"), self.low), self.high)
        if self.grain is not None:
            value = round(value / self.grain) * self.grain
            # Rounding must not leave the range: fall back to the nearest multiple inside it.
            if value < self.low:
                value += self.grain
            if value > self.high:
                value -= self.grain
        if self.whole or (self.grain is not None and float(self.grain).is_integer()) or float(value).is_integer():
            return int(round(value))
        return round(value, 12)

    def parse_override(self, text: str, catalog: Catalog) -> Any:
        return self.read_number(text, self.low, self.high, self.whole)

    def pushed_value(self, text: str, current: Any, catalog: Catalog) -> Any:
        """A factor of `current` ("÷4") rounded as draws are, where it stays inside the drawn range (a push
        past it would show a system the question never draws); else a value as --set takes it."""
        factor = relative_factor(text)
        if factor is None:
            return self.parse_override(text, catalog)
        value = float(current) * factor if isinstance(factor, float) else float(Fraction(current) * factor)
        if not self.low <= value <= self.high:
            raise ParameterError(f"{self.name}: {text.strip()} of {current} leaves the drawn range "
                                 f"{self.low:g} to {self.high:g}")
        return self.rounded(value)

    # The what-if explorer, the chart and the follow-up --------------------------------------
    @property
    def movable(self) -> bool:
        return True

    def step(self, value: Any, direction: int) -> Any:
        """A step rounded as draws are, inside the range."""
        stride = self.grain or max((self.high - self.low) / 20, 1 if self.whole else 0)
        proposed = value
        while True:
            proposed = self._stepped(proposed, direction, stride)
            moved = self.rounded(min(max(proposed, self.low), self.high))
            # Rounding may swallow a step (10 at one significant figure, the range's top 16): go on to the
            # next value a draw could give, or to the end of the range.
            if moved != value or not self.low < proposed < self.high:
                return moved

    def _stepped(self, value: float, direction: int, stride: float) -> float:
        return value + direction * stride

    def grid(self, points: int) -> set[float | int]:
        return {self.rounded(float(x)) for x in self._spaced(points)}

    def _spaced(self, points: int) -> Any:
        import numpy as np  # not loaded with the bank

        return np.linspace(self.low, self.high, points)

    def pushes(self, current: Any, points: int) -> list:
        """The grid, nearest `current` first."""
        return sorted(self.grid(points) - {float(current)}, key=lambda x: distance(x, float(current)))

    def said(self, x: Any) -> list:
        """One significant figure, two, then x itself; each kept on the grain and in the range."""
        values: list = []
        for value in self._figures(x):
            value = self.rounded(min(max(value, self.low), self.high))
            if value not in values:
                values.append(value)
        return values

    def _figures(self, x: float) -> list[float]:
        return [float(f"{x:.0e}"), float(f"{x:.1e}"), x] if x > 0 else [x]

    def nearby(self, current: Any) -> list:
        """The value doubled and halved, rounded as a person would say it."""
        said = [self.said(x)[0] for x in (2 * float(current), float(current) / 2) if x > 0]
        return [value for value in dict.fromkeys(said) if value != current]


class IntRange(Ranged):
    """A count drawn uniformly from the whole numbers of [low, high]."""

    kind = "int"
    fields = ("int", "round")
    whole = True

    @classmethod
    def spans(cls, low: float, high: float) -> bool:
        return 0 <= low < high and isinstance(low, int) and isinstance(high, int)  # a count may be zero

    def _draw(self, rng: np.random.Generator) -> float:
        return float(rng.integers(int(self.low), int(self.high) + 1))

    def _figures(self, x: float) -> list[float]:
        """A power of two first: counts of GPUs, batches and blocks go by twos."""
        return ([2 ** round(math.log2(x))] if x >= 1 else []) + super()._figures(x)


class Uniform(Ranged):
    kind = "uniform"
    fields = ("uniform", "round")

    def _draw(self, rng: np.random.Generator) -> float:
        return rng.uniform(self.low, self.high)


class LogUniform(Ranged):
    """Uniform in the logarithm: a figure that spans orders of magnitude (a context, a rate)."""

    kind = "loguniform"
    fields = ("loguniform", "round")

    def _draw(self, rng: np.random.Generator) -> float:
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))

    def _stepped(self, value: float, direction: int, stride: float) -> float:
        return value * LOG_STEP**direction

    def _spaced(self, points: int) -> Any:
        import numpy as np  # not loaded with the bank

        return np.geomspace(self.low, self.high, points)
