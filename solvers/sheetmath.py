"""The math a solver may use on a sheet, in one place: each helper builds the exact sympy form a Sheet
evaluates and prints, and computes in Python floats inside a QuickSheet's solve (the push scan), where sympy's
objects would cost milliseconds a step. Prefer these to sympy's own functions: sympy's max, floor, sqrt, log
or sum of an exact expression simplifies or searches first (milliseconds each), and some print oddly.

  max_of, min_of          max / min, left unevaluated until the values are in
  floor_of, ceil_of       integer parts, exact (solvers.integer_part)
  log_of, exp_of          natural log (or to a base) and exp; a log of no positive number is a Reject
  sqrt_of                 a square root left as written
  lcm_of                  least common multiple of two integers
  normal_cdf              the standard normal CDF Φ
  miss_power              (1 − k/E)^B, in floats once the numbers are in (the exact power has thousands of digits)
  rank_sum, rank_ceiling  Σ over a few ranks, term by term in floats, and a ceiling inside one
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar

import sympy

from solvers.integer_part import Ceiling, Floor


class Reject(Exception):
    """Raised by a solver for a draw that makes no sense (the sampler redraws)."""


class NotAskable(Reject):
    """A draw whose figures make sense but where an answer it would ask cannot be graded fairly (a select
    with nothing to pick, a margin too fine): refused where that answer is asked, not where a push asks others."""


def max_of(*args: sympy.Expr) -> sympy.Expr:
    """max(...) left unevaluated: sympy's own simplification of Max over positive symbols
    costs milliseconds per call, and the sheet evaluates it numerically anyway. On a
    QuickSheet's numbers it is Python's max."""
    numbers = [n for a in args if (n := _quick_number(a)) is not None]
    if len(numbers) == len(args):
        return max(numbers)
    return sympy.Max(*args, evaluate=False)


def min_of(*args: sympy.Expr) -> sympy.Expr:
    """min(...) left unevaluated, for the same reason as max_of."""
    numbers = [n for a in args if (n := _quick_number(a)) is not None]
    if len(numbers) == len(args):
        return min(numbers)
    return sympy.Min(*args, evaluate=False)


# Set while a QuickSheet's solver runs: the helpers below then compute on floats, however the
# number reached them (a float times a sympy Rational constant is a sympy Float).
_QUICK: ContextVar[bool] = ContextVar("quick_sheet", default=False)


def _near_integer(x: float) -> int | None:
    """x as a whole number where it is one up to float rounding (a QuickSheet's 511.99999999...)."""
    nearest = round(x)
    return nearest if abs(x - nearest) <= 1e-9 * max(1.0, abs(x)) else None


def _quick_number(x: object) -> float | None:
    """x as a float inside a QuickSheet's solve, where it is a number at all; else None."""
    if not _QUICK.get() or not isinstance(x, (int, float, sympy.Number)):
        return None
    return float(x)


def _is_number(x: object) -> bool:
    """Whether a floor or ceiling of x can be evaluated now. One of symbols is left as written: the
    sheet evaluates it exactly once the values are put in, and sympy's attempt to simplify it first
    asks the assumptions system (25 of the 42 ms of a first kv-bytes-per-token solve)."""
    return not getattr(x, "free_symbols", None)


def floor_of(x: sympy.Expr) -> sympy.Expr:
    """floor(x): sympy's on a Sheet (exact), Python's on a QuickSheet's floats (sympy's floor of
    a float costs a millisecond)."""
    number = _quick_number(x)
    if number is None:
        return x.p // x.q if isinstance(x, sympy.Rational) else Floor(x, evaluate=_is_number(x))
    whole = _near_integer(number)
    return whole if whole is not None else math.floor(number)


def ceil_of(x: sympy.Expr) -> sympy.Expr:
    """ceil(x), as floor_of."""
    number = _quick_number(x)
    if number is None:
        return -(-x.p // x.q) if isinstance(x, sympy.Rational) else Ceiling(x, evaluate=_is_number(x))
    whole = _near_integer(number)
    return whole if whole is not None else math.ceil(number)


def log_of(x: sympy.Expr, base: int | None = None) -> sympy.Expr:
    """log(x) (to `base`): sympy's on a Sheet, Python's on a QuickSheet's numbers (sympy's log of a
    float, and the expression around it, cost a millisecond a step); a log of no positive number is
    a Reject, as sympy's complex or infinite one is on a Sheet."""
    number = _quick_number(x)
    if number is None:
        return sympy.log(x) if base is None else sympy.log(x, base)
    if number <= 0:
        raise Reject(f"log of {number}")
    return math.log(number) if base is None else math.log(number) / math.log(base)


def exp_of(x: sympy.Expr) -> sympy.Expr:
    """exp(x), as log_of."""
    number = _quick_number(x)
    return sympy.exp(x) if number is None else math.exp(number)


class SquareRoot(sympy.Function):
    """√x left as written: sympy's sqrt of an exact rational looks for square factors (milliseconds)."""

    def _sympystr(self, printer) -> str:
        return f"sqrt({printer._print(self.args[0])})"

    def _eval_evalf(self, prec):
        number = self.args[0].evalf(prec)
        return sympy.Float(math.sqrt(number), prec) if number.is_Number else None


def sqrt_of(x: sympy.Expr) -> sympy.Expr:
    """√x: a SquareRoot on a Sheet, Python's on a QuickSheet's numbers."""
    return math.sqrt(x) if isinstance(x, (int, float)) else SquareRoot(x)


class lcm(sympy.Function):  # lower case: it prints as the familiar lcm(a, b)
    """Least common multiple, left symbolic until both arguments are integers (sympy's own lcm
    treats symbols as polynomials and returns their product)."""

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(math.lcm(int(a), int(b)))
        return None


def lcm_of(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    """lcm(a, b): an lcm on a Sheet, Python's on a QuickSheet's whole numbers."""
    first, second = _quick_number(a), _quick_number(b)
    if first is None or second is None:
        return lcm(a, b)
    whole = _near_integer(first), _near_integer(second)
    if whole[0] is None or whole[1] is None:
        raise Reject(f"lcm of {first} and {second}: not whole numbers")
    return math.lcm(whole[0], whole[1])


class NormalCDF(sympy.Function):
    """Φ(x), evaluated at once on a number: sympy's own erf costs milliseconds per step on a sheet."""

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sympy.Float(0.5 * math.erfc(-float(x) / math.sqrt(2)), 17)
        return None

    def _sympystr(self, printer) -> str:
        return f"Φ({printer.doprint(self.args[0])})"


def normal_cdf(x: sympy.Expr) -> sympy.Expr:
    """Φ(x): a NormalCDF on a Sheet, Python's on a QuickSheet's numbers."""
    number = _quick_number(x)
    return NormalCDF(x) if number is None else 0.5 * math.erfc(-number / math.sqrt(2))


class miss_power(sympy.Function):
    """(1 − k/E)^B evaluated in floating point once its arguments are numbers: the exact rational power of
    a batch of thousands has tens of thousands of digits. Prints as the power it is."""

    @classmethod
    def eval(cls, base, exponent):
        if base.is_number and exponent.is_number:
            return sympy.Float(float(base) ** float(exponent), 17)
        return None

    def _sympystr(self, printer) -> str:
        return f"({printer._print(self.args[0])})**{printer._print(self.args[1])}"

    def _latex(self, printer) -> str:
        return f"\\left({printer._print(self.args[0])}\\right)^{{{printer._print(self.args[1])}}}"


class FiniteSum(sympy.Sum):
    """A sum over a few ranks, evaluated term by term in floats: sympy's Sum.evalf runs Euler-Maclaurin on
    exact radicals, several times slower for twenty terms."""

    def _eval_evalf(self, prec):
        (index, low, high), = self.limits
        if not (low.is_number and high.is_number and float(low).is_integer() and float(high).is_integer()):
            return None  # bounds not yet known; a whole float (20.0) counts
        # Each term in Python floats (math.ceil for a ceiling): sympy's ceiling of a float, built per term,
        # costs a millisecond, and an exact radical inside one more.
        ranks = range(int(low), int(high) + 1)
        return sympy.Float(math.fsum(_float_term(self.function, index, float(k)) for k in ranks), prec)


class RankCeiling(sympy.Function):
    """ceiling(x) inside a rank sum, left as written: sympy's ceiling of an expression in the rank index
    works through the index's assumptions each time the sheet puts values in (milliseconds a sum)."""

    def _sympystr(self, printer) -> str:
        return f"ceiling({printer._print(self.args[0])})"

    def _eval_evalf(self, prec):
        number = self.args[0].evalf(prec)
        return sympy.Float(math.ceil(number), prec) if number.is_Number else None


def rank_ceiling(x: sympy.Expr) -> sympy.Expr:
    """ceil(x) for a rank sum's term: a RankCeiling on a Sheet, Python's on a QuickSheet's numbers."""
    return ceil_of(x) if isinstance(x, (int, float)) else RankCeiling(x)


_FLOAT_OPS = {sympy.Add: math.fsum, sympy.Mul: math.prod, sympy.Pow: lambda a: a[0] ** a[1],
              RankCeiling: lambda a: math.ceil(a[0]), sympy.exp: lambda a: math.exp(a[0])}


def _float_term(expr: sympy.Expr, index: sympy.Symbol, k: float) -> float:
    """A sum's term at rank k in floats: the few node kinds a rank sum holds (numbers, +, ×, powers, ceilings,
    exponentials)."""
    if expr == index:
        return k
    if expr.is_Number:
        return float(expr)
    return _FLOAT_OPS[expr.func]([_float_term(arg, index, k) for arg in expr.args])


def rank_sum(term: Callable[[sympy.Expr], sympy.Expr], low, high) -> sympy.Expr:
    """Σ term(i) over the ranks low..high: a FiniteSum the sheet prints as one; on a QuickSheet's numbers
    (the follow-up scan) a plain sum of floats, since a sympy Sum built per scan point costs milliseconds."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return sum((term(k) for k in range(round(low), round(high) + 1)), 0.0)
    i = sympy.Symbol("i", integer=True, positive=True)
    return FiniteSum(term(i), (i, low, high))
