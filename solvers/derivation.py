"""Derivation sheets: every number a solution shows is a sympy expression evaluated here.

A solver declares the givens (values from the variant), then steps (symbolic formula,
the same formula with the numbers put in, the result with its unit, one line of why),
then the regime analysis. Values are held in base units (bytes, FLOP, seconds); the
unit of a given or a step only says how to show it. Rational formulas are evaluated in
Python's fractions (solvers.rational), the rest by sympy; both give the same exact numbers.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import ClassVar, TypeAlias

import sympy

from solvers import formula_text, nearsign, rational
from solvers.answers.base import Slip
from solvers.sheetmath import _QUICK, Reject
from solvers.units import TIME, format_number, format_quantity, is_bit_rate, parse_unit


@dataclass(frozen=True)
class Step:
    """One derived number. Its printed forms are made when first shown: a draw the solver
    rejects part-way, or a sweep, never pays for printing."""

    key: str
    title: str
    symbol: str
    value: float
    unit: str
    why: str
    expr: sympy.Expr | None = field(default=None, compare=False, repr=False)  # None: a given standing in
    shown_values: Mapping[sympy.Symbol, str] = field(default_factory=dict, compare=False, repr=False)
    given_text: str = field(default="", compare=False, repr=False)  # a given's own value, when expr is None

    @cached_property
    def formula(self) -> str:
        return self.symbol if self.expr is None else formula_text.formula(self.expr)

    @cached_property
    def substituted(self) -> str:
        """The formula with every symbol printed as its value (same tree, same order)."""
        if self.expr is None:
            return self.given_text
        return formula_text.substituted(self.expr, self.shown_values)

    @property
    def latex(self) -> str:
        """'I = \\frac{F}{W}' for Markdown viewers that render math."""
        lhs = formula_text.latex(sympy.Symbol(self.symbol))
        return lhs if self.expr is None else f"{lhs} = {formula_text.latex(self.expr)}"

    @property
    def result(self) -> str:
        return format_quantity(self.value, self.unit)

    @property
    def equation(self) -> str:
        """'I = F/W'; just the symbol for a given, which has no formula of its own."""
        return self.symbol if self.formula == self.symbol else f"{self.symbol} = {self.formula}"


def reads(steps: list[Step], start: Iterable[Step]) -> list[Step]:
    """The steps whose results the formulas of `start` read, transitively, in the sheet's order (one of
    `start` only where another reads it)."""
    by_symbol = {sympy.Symbol(step.symbol): step for step in steps}
    found: set[str] = set()
    todo = list(start)
    while todo:
        step = todo.pop()
        if step.expr is None:
            continue
        for symbol in step.expr.free_symbols:
            read = by_symbol.get(symbol)
            if read is not None and read.symbol not in found:
                found.add(read.symbol)
                todo.append(read)
    return [step for step in steps if step.symbol in found]


# A time read off a rate in bits per second: the rate read as bytes makes it 8 times too short, a byte
# rate taken for bits 8 times too long (on top of the slips a question declares on the answer).
BIT_RATE_TIME_SLIPS = (Slip("/8: a bit rate read as bytes (Gb/s taken as GB/s)", 1 / 8),
                       Slip("x8: bits and bytes mixed up on the rate (GB/s taken as Gb/s)", 8.0))


@dataclass(frozen=True)
class Given:
    symbol: str
    label: str
    value: float
    unit: str

    @property
    def shown(self) -> str:
        return format_quantity(self.value, self.unit)


@dataclass(frozen=True)
class Regime:
    name: str  # the binding side; the expected choice where the question asks for it
    summary: str  # why this side binds for this variant
    boundary: Step  # the boundary as an expression and its value for this variant
    position: Step  # where the variant sits, in the boundary's unit
    other_side: str  # what changes across the boundary

    @property
    def margin(self) -> float:
        """position / boundary: above 1 the variant sits above the boundary."""
        if self.boundary.value == 0:
            return math.inf
        return self.position.value / self.boundary.value

    @property
    def near(self) -> bool:
        return 1 / NEAR_MARGIN <= self.margin <= NEAR_MARGIN

    @property
    def margin_text(self) -> str:
        ratio = self.margin
        if ratio == 0:  # a variant at zero is as far below a positive boundary as it can be, not at it
            return "at zero, below the boundary"
        if not math.isfinite(ratio) or ratio < 0:
            return "no finite boundary"
        if ratio >= 1:
            return f"{format_number(ratio, 3)}× above the boundary"
        return f"{format_number(1 / ratio, 3)}× below the boundary"


# What a sheet hands a solver for a given or a step: a sympy symbol on a Sheet, a number on a QuickSheet (the
# push scan's float solve). A solver writes the same arithmetic on either.
Value: TypeAlias = "sympy.Expr | float"

# A regime's boundary: a step's symbol, or a number stated by the question's model (a break-even of 1×).
Boundary: TypeAlias = "sympy.Symbol | int | Fraction | sympy.Rational"

NEAR_MARGIN = 1.25  # within this factor of its boundary a variant reads as near it


@dataclass(frozen=True)
class Side:
    """One side of a two-sided regime: its name, why it binds, what changes across, and the
    summary to give instead when the variant sits near the boundary (default: the summary
    with the margin and the other side named)."""

    name: str
    summary: str
    other_side: str
    near: str = ""


def exact(value: float) -> rational.Exact:
    """A parameter's value as the exact number a Sheet takes it for (10% is 1/10), for a solver that
    decides in fractions off the sheet."""
    return _to_exact(value)


def _to_exact(value: float) -> rational.Exact:
    """A value as an exact number: integers as integers, other floats as the decimal they
    stand for (0.9 is 9/10; 35% read as 0.35000000000000003 is 7/20): 15 significant figures,
    all a float carries, so that floors, ceilings and comparisons on them are exact."""
    if isinstance(value, bool) or (isinstance(value, (int,)) or float(value).is_integer()) and abs(value) < 2**62:
        return int(value)
    if not math.isfinite(float(value)):
        raise TypeError(f"invalid input: {value}")  # as sympy's Rational('inf') does
    return Fraction(f"{float(value):.15g}")


def _exact(value: sympy.Basic) -> sympy.Basic:
    """A step's value kept exact where it is rational, else to 17 digits."""
    return value if value.is_Rational else sympy.Float(value.evalf(17), 17)


@dataclass
class Sheet:
    # Whether anyone reads this sheet's givens and reasons: a scan's QuickSheet keeps only answers and the
    # regime, so a solver may skip there work that only they show (a seeded simulation quoted as a check).
    shown: ClassVar[bool] = True
    givens: list[Given] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    regime: Regime | None = None
    assumptions: list[str] = field(default_factory=list)
    results: dict[str, object] = field(default_factory=dict)
    slips: dict[str, list[Slip]] = field(default_factory=dict)  # by the answer they diagnose
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)  # select answers: option -> why
    choice_whys: dict[str, str] = field(default_factory=dict)  # a decided choice's one line of why
    facts: dict[str, set[str]] = field(default_factory=dict)  # select answers: options declared fixed facts
    # Refusals that bind only where one of their answers is asked (a push re-solves a variant and asks a few).
    refusals_if_asked: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    prerequisites: set[str] = field(default_factory=set)  # questions whose results stand here as givens
    cards: list[str] = field(default_factory=list)  # conventions cards the solver read, in order (engine.run_solver)
    # The question's parameters as the solver sees them: name -> (value, display unit, label).
    parameters: Mapping[str, tuple[float, str, str]] = field(default_factory=dict)
    _numbers: dict[sympy.Symbol, float] = field(default_factory=dict)  # every given and step, as a float
    _rationals: dict[sympy.Symbol, rational.Exact] = field(default_factory=dict)  # those that are rational, exactly
    # As sympy numbers, for sympy's own evaluation: the others at once, the rationals once needed (_sympy_values).
    _values: dict[sympy.Symbol, sympy.Basic] = field(default_factory=dict)
    _shown: dict[sympy.Symbol, str] = field(default_factory=dict)
    _units: dict[sympy.Symbol, str] = field(default_factory=dict)  # the unit each was declared in
    _bit_rates: set[sympy.Symbol] = field(default_factory=set)  # those given or derived in bits per second
    bit_rate_times: set[str] = field(default_factory=set)  # keyed steps that are times read off a bit rate

    def given(self, symbol: str, value: float, unit: str = "", label: str = "") -> Value:
        """A number the variant supplies (parameter, datasheet figure, assumption).

        Shared helpers may state the same fact again: the same value returns the same symbol."""
        sym = sympy.Symbol(symbol)
        exact = _to_exact(value)
        if sym in self._numbers:
            if self._rationals.get(sym) == exact or sym not in self._rationals and self._values[sym] == exact:
                return sym
            raise ValueError(f"symbol {symbol} declared twice with different values")
        self._remember(sym, exact, unit)
        self.givens.append(Given(symbol, label or symbol, float(value), unit))
        return sym

    def param(self, symbol: str, name: str) -> Value:
        """A given that is a parameter of the question: its value, unit and label come from the
        question file, so the solver does not retype them."""
        value, unit, label = self.parameters[name]
        return self.given(symbol, value, unit, label)

    def prerequisite(self, question_id: str, symbol: str, value: float, unit: str, label: str) -> Value:
        """A result of an earlier question (declared in `requires:`), taken as a given rather than
        derived again: the candidate has drilled it, the solution names where it comes from."""
        self.prerequisites.add(question_id)
        return self.given(symbol, value, unit, f"{label} (from {question_id})")

    def step(self, key: str, title: str, symbol: str, expr: Value, unit: str = "", why: str = "") -> Value:
        """Evaluate `expr` on the values known so far and record it as a step."""
        expr = sympy.sympify(expr)  # a Python number where a formula was meant would break the steps' reads
        sym = sympy.Symbol(symbol)
        if sym in self._numbers:
            raise ValueError(f"symbol {symbol} declared twice")
        exact = self._evaluate_exact(expr)
        value = float(exact)
        # _shown only ever gains symbols, and expr names only earlier ones: printing later is the same.
        step = Step(key, title, symbol, value, unit, why, expr=expr, shown_values=self._shown)
        self._remember(sym, exact, unit)
        self.steps.append(step)
        if key:
            self.results[key] = value
            if self._bit_rates and parse_unit(unit).dim == TIME and self._bit_rates & self._read_by(step):
                self.bit_rate_times.add(key)
        return sym

    def slip_bit_rate_times(self, answers: Iterable[str]) -> None:
        """Those of `answers` that are times read off a bit rate invite its slips (BIT_RATE_TIME_SLIPS)."""
        for key in sorted(self.bit_rate_times.intersection(answers)):
            self.slips.setdefault(key, []).extend(BIT_RATE_TIME_SLIPS)

    def _read_by(self, step: Step) -> set[sympy.Symbol]:
        """Every given and step `step`'s formula reads, through the steps it reads."""
        return {symbol for read in (step, *reads(self.steps, [step])) if read.expr is not None
                for symbol in read.expr.free_symbols}

    def _evaluate_exact(self, expr: sympy.Expr) -> rational.Exact | sympy.Float:
        """`expr` on the values so far: a rational as a Python int or Fraction, else a 17-digit sympy Float."""
        expr = sympy.sympify(expr)
        fast = rational.value(expr, self._rationals)  # the same number sympy gives, without its objects
        if fast is not None:
            try:
                float(fast)
            except OverflowError:  # sympy's float of it is inf
                raise Reject(f"non-finite result in {expr}") from None
            return fast
        value = expr.xreplace(self._sympy_values())
        try:
            exact = _exact(value) if value.is_number else None
        except TypeError:  # zoo, nan: sympy's division by zero
            exact = None
        if exact is None or not math.isfinite(float(exact)):
            raise Reject(f"non-finite result in {expr}")
        number = rational.from_sympy(exact)
        return exact if number is None else number

    def _sympy_values(self) -> dict[sympy.Symbol, sympy.Basic]:
        """Every value so far as a sympy number, for what sympy evaluates itself."""
        if len(self._values) < len(self._numbers):
            for sym, number in self._rationals.items():
                if sym not in self._values:
                    self._values[sym] = rational.to_sympy(number)
        return self._values

    def evaluate(self, expr: Value) -> float:
        return float(self._evaluate_exact(expr))

    def symbol(self, name: str) -> sympy.Symbol:
        """An earlier given or step by its symbol: a shared helper's result (the engine's KV heads per
        GPU) that a solver writes into its own formulas."""
        sym = sympy.Symbol(name)
        if sym not in self._numbers:
            raise KeyError(f"no given or step named {name} on this sheet")
        return sym

    def integer(self, n: int) -> sympy.Expr:
        """A whole number written into a formula (a layout's TP degree), kept exact in its arithmetic."""
        return sympy.Integer(n)

    @contextmanager
    def solving(self) -> Iterator[None]:
        """Around the solver's run: a Sheet needs nothing; a QuickSheet switches the helpers to floats."""
        yield

    def value(self, sym: Value) -> float:
        return self._numbers[sym]

    def text(self, sym: Value, digits: int | None = None) -> str:
        """A given's or step's value as the solution shows it: in the unit it was declared in, to
        `digits` significant figures (the sheet's 4 by default)."""
        return format_quantity(self._numbers[sym], self._units[sym], 4 if digits is None else digits)

    def number(self, key: str) -> float:
        """A step's number by its answer key (`results` also holds choices and judgements)."""
        value = self.results[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"result {key} is {value!r}, not a step's number")
        return float(value)

    def judged(self, key: str) -> dict[str, bool | None]:
        """A select answer's options judged so far: option -> whether it holds (None: not listed here)."""
        value = self.results[key]
        if not isinstance(value, dict):
            raise TypeError(f"result {key} is {value!r}, not a select answer's judgements")
        return value

    def compare(self, a: Value, b: Value) -> int:
        """-1, 0 or 1 as a < b, a = b or a > b, decided on exact values: a tie is a tie."""
        a, b = sympy.sympify(a), sympy.sympify(b)
        exact_a, exact_b = rational.value(a, self._rationals), rational.value(b, self._rationals)
        if exact_a is not None and exact_b is not None:
            return (exact_a > exact_b) - (exact_a < exact_b)
        sure = nearsign.sign(a, b, nearsign.Values(self._rationals, self._values))
        if sure is not None:
            return sure
        values = self._sympy_values()
        difference = a.xreplace(values) - b.xreplace(values)
        if difference.is_Rational:
            return int(sympy.sign(difference))
        return int(sympy.sign(difference.evalf(40)))

    def choose(self, key: str, choice: object, why: str = "") -> None:
        """A non-numeric answer (a choice, an ordering) the solver decided; `why`, the interviewer's one
        line for it, shows beside the key between stages."""
        self.results[key] = choice
        if why:
            self.choice_whys[key] = why

    def judge(self, key: str, option: str, holds: bool | None, why: str, *, fact: bool = False) -> None:
        """One option of a select answer: whether it holds for this variant, and why. `fact`: the
        option is a conceptual anchor whose truth is the same in every variant on purpose, and
        `why` is the reason it holds or not (validate --strict checks that it never varies).
        `holds` None: the option cannot be decided in this variant (it asks about something the
        variant does not have), and `why` says why; it is judged but never listed."""
        self.results.setdefault(key, {})[option] = None if holds is None else bool(holds)  # type: ignore[index]
        self.reasons.setdefault(key, {})[option] = why
        if fact:
            self.facts.setdefault(key, set()).add(option)

    def refuse_if_asked(self, keys: Sequence[str], reason: str) -> None:
        """Refuse this variant wherever one of `keys` is asked (a draw asks them all): a margin that grading those
        answers needs, and a push that asks none of them does not."""
        self.refusals_if_asked.append((tuple(keys), reason))

    def assume(self, text: str) -> None:
        self.assumptions.append(text)

    def slip(self, label: str, factor: float, *, on: str | Sequence[str]) -> None:
        """A mistake this question invites, on the answer(s) it shows in: `factor` is the ratio
        of what the mistake gives to the key for that answer (one layer's KV: 1/layers)."""
        if factor in (0, 1) or not math.isfinite(factor):
            return
        for key in (on,) if isinstance(on, str) else on:
            self.slips.setdefault(key, []).append(Slip(label, float(factor)))

    def set_regime(self, name: str, summary: str, boundary: Boundary, position: sympy.Symbol,
                   other_side: str, key: str = "regime", boundary_label: str = "") -> None:
        """The regime analysis. `position` is a step symbol; `boundary` a step symbol in its unit, or a number
        (a break-even of 1×) named by `boundary_label`, which then stands in no Given table."""
        self.regime = Regime(name, summary, self._boundary_step(boundary, position, boundary_label),
                             self._as_step(position.name), other_side)
        self.results[key] = name

    def _boundary_step(self, boundary: Boundary, position: sympy.Symbol, label: str) -> Step:
        if isinstance(boundary, sympy.Symbol):
            return self._as_step(boundary.name)
        if not label:
            raise ValueError("a numeric boundary needs a boundary_label to show it by")
        unit = self._units[position]
        return Step("", label, label, float(boundary), unit, "", given_text=format_quantity(float(boundary), unit))

    def _as_step(self, symbol: str) -> Step:
        """The step of this symbol, or its given standing in as one."""
        step = next((s for s in self.steps if s.symbol == symbol), None)
        if step is not None:
            return step
        g = next(g for g in self.givens if g.symbol == symbol)
        return Step("", g.label, g.symbol, g.value, g.unit, "", given_text=g.shown)

    def regime_by(self, position: sympy.Symbol, boundary: Boundary, *, above: Side, below: Side,
                  tie: str = "above", key: str = "regime", boundary_label: str = "") -> None:
        """A two-sided regime: the side follows the exact comparison of position and boundary
        (a tie goes to `tie`), and the text follows the margin (near the boundary or far). A numeric
        `boundary` is named by `boundary_label` ("break-even")."""
        order = self.compare(position, boundary)
        side, other = (above, below) if order > 0 or (order == 0 and tie == "above") else (below, above)
        self.set_regime(side.name, side.summary, boundary, position, side.other_side, key, boundary_label)
        regime = self.regime
        if regime is not None and regime.near:  # the same analysis, in words for a variant near the boundary
            self.regime = replace(regime, summary=side.near or (
                f"{side.summary} It sits only {regime.margin_text}: a modest change tips it to {other.name}."))

    def _remember(self, sym: sympy.Symbol, exact: rational.Exact | sympy.Float, unit: str) -> None:
        number = self._numbers[sym] = float(exact)
        self._units[sym] = unit
        if is_bit_rate(unit):
            self._bit_rates.add(sym)
        if isinstance(exact, (int, Fraction)):
            self._rationals[sym] = exact
        else:
            self._values[sym] = exact
        shown = format_quantity(number, unit)
        if "/" in unit or " " in shown and "×" in shown:
            shown = f"({shown})"
        self._shown[sym] = shown


@dataclass
class QuickSheet(Sheet):
    """The same solver run on floats, for scans (the follow-up search, the sweep chart): it keeps
    each answer's value and the regime's side and margin, and none of the printed derivation.
    Its decisions are float comparisons, so a scan point at an exact tie may fall either way;
    whatever a scan finds is solved again on a Sheet before anyone sees it."""

    shown: ClassVar[bool] = False
    _named: dict[str, float] = field(default_factory=dict)  # values by symbol name, for solvers that name one again

    def given(self, symbol: str, value: float, unit: str = "", label: str = "") -> Value:
        # A number where a Sheet gives a symbol: whole numbers stay integers, as a Sheet keeps them.
        number = float(value)
        kept = int(number) if number.is_integer() and abs(number) < 2**62 else number
        self._named[symbol] = kept
        return kept

    def step(self, key: str, title: str, symbol: str, expr: Value, unit: str = "", why: str = "") -> Value:
        value = self.evaluate(expr)
        if key:
            self.results[key] = value
        self._named[symbol] = value
        return value

    def evaluate(self, expr: Value) -> float:
        try:
            value = float(expr)
        except TypeError:  # a symbol an earlier step declared, named again by the solver: its value
            value = self._by_name(expr)
        except ValueError:
            raise Reject(f"non-finite result in {expr}") from None
        if not math.isfinite(value):
            raise Reject(f"non-finite result in {expr}")
        return value

    def _by_name(self, expr: sympy.Expr) -> float:
        """`expr` with the symbols earlier givens and steps declared put in; Reject as a Sheet would
        for what is still not a finite number (zoo, nan, a symbol never declared)."""
        free = getattr(expr, "free_symbols", None)
        if free and all(s.name in self._named for s in free):
            try:
                return float(expr.xreplace({s: self._named[s.name] for s in free}))
            except (TypeError, ValueError):
                pass
        raise Reject(f"non-finite result in {expr}")

    def value(self, sym: Value) -> float:
        return self.evaluate(sym)

    def text(self, sym: Value, digits: int | None = None) -> str:
        return ""  # a scan prints nothing: the text goes only into what a Sheet shows

    def symbol(self, name: str) -> sympy.Symbol:
        if name not in self._named:
            raise KeyError(f"no given or step named {name} on this sheet")
        return self._named[name]

    def integer(self, n: int) -> sympy.Expr:
        return int(n)

    @contextmanager
    def solving(self) -> Iterator[None]:
        token = _QUICK.set(True)
        try:
            yield
        except (ZeroDivisionError, OverflowError) as error:  # floats raise where sympy gives zoo, a Sheet's Reject
            raise Reject(f"non-finite result: {error}") from None
        finally:
            _QUICK.reset(token)

    def compare(self, a: Value, b: Value) -> int:
        """As Sheet.compare, on floats: two values equal up to float rounding are a tie, as the exact solve
        finds them (a refusal at an exact boundary must not fire in a scan and not in the solve)."""
        x, y = self.evaluate(a), self.evaluate(b)
        if abs(x - y) <= 1e-12 * max(abs(x), abs(y)):
            return 0
        return (x > y) - (x < y)

    def set_regime(self, name: str, summary: str, boundary: Boundary, position: sympy.Symbol,
                   other_side: str, key: str = "regime", boundary_label: str = "") -> None:
        def point(value: Boundary) -> Step:
            return Step("", "", "", float(value), "", "")

        self.regime = Regime(name, summary, point(boundary), point(position), other_side)
        self.results[key] = name
