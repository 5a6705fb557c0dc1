"""The sign of a − b for formulas the rationals cannot take (a root, a logarithm, a value sympy keeps to 17
digits), read off a 50-digit evaluation in mpmath instead of sympy's substituted and simplified tree.

A comparison on a sheet is exact: sympy puts the values in and decides the sign of the difference, which
for a formula with a square root (Young's checkpoint interval, √(2·C/a)) builds algebraic numbers and costs
milliseconds a comparison. At 50 digits the evaluation's own error is many orders below a gap wider than
1e-30 of the larger side, so such a gap's sign is the exact one. Where the formula reads a value sympy keeps
to 17 digits (an irrational step, Φ), the gap must pass 1e-12 of the larger side instead: closer than that,
sympy's own 17-digit arithmetic may round it to a tie (√10 kept to 17 digits, squared, is 10 to sympy) and
its answer is the sheet's. A closer pair, a tie above all, is left to sympy (`sign` returns None), as is a
formula with a node this module does not take, and a floor or ceiling whose argument lies that close to a
whole number (where a rounding error would move it).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from functools import lru_cache

import mpmath
import sympy

from solvers.integer_part import Ceiling, Floor

DIGITS = 50
SURE = mpmath.mpf(10) ** -30  # a gap at least this share of the larger side has the sign evaluated
SURE_OF_FLOATS = mpmath.mpf(10) ** -12  # the same, where a 17-digit value was read

_Eval = Callable[["Values"], mpmath.mpf]


class _Unsure(Exception):
    """The evaluation cannot vouch for this formula or these values: sympy decides."""


def sign(a: sympy.Basic, b: sympy.Basic, env: Values) -> int | None:
    """-1 or 1 as a < b or a > b where 50 digits settle it, else None."""
    first, second = _compiled(sympy.sympify(a)), _compiled(sympy.sympify(b))
    if first is None or second is None:
        return None
    with mpmath.workdps(DIGITS):
        try:
            x, y = first(env), second(env)
        except (_Unsure, KeyError, ZeroDivisionError, ValueError, TypeError, OverflowError):
            return None
        if not (mpmath.isfinite(x) and mpmath.isfinite(y)) or isinstance(x, mpmath.mpc) or isinstance(y, mpmath.mpc):
            return None
        gap = x - y
        if abs(gap) <= (SURE_OF_FLOATS if env.inexact else SURE) * max(abs(x), abs(y)) or gap == 0:
            return None
        return 1 if gap > 0 else -1


class Values(Mapping[sympy.Symbol, mpmath.mpf]):
    """A sheet's values as mpf, each converted when a formula first reads it (at the evaluation's precision):
    the rationals exactly, the others (sympy's 17-digit Floats) as the binary numbers they are."""

    def __init__(self, rationals: Mapping[sympy.Symbol, int | Fraction], others: Mapping[sympy.Symbol, sympy.Basic]):
        self._rationals, self._others = rationals, others
        self._converted: dict[sympy.Symbol, mpmath.mpf] = {}
        self.inexact = False  # a value read was kept to 17 digits: the wider margin

    def __getitem__(self, sym: sympy.Symbol) -> mpmath.mpf:
        if sym not in self._converted:
            exact = self._rationals.get(sym)
            if exact is None:
                self.inexact = True
                self._converted[sym] = to_mp(self._others[sym])
            else:
                self._converted[sym] = mpmath.mpf(exact.numerator) / exact.denominator
        return self._converted[sym]

    def __iter__(self) -> Iterator[sympy.Symbol]:
        return iter({**self._others, **self._rationals})

    def __len__(self) -> int:
        return len(set(self._others) | set(self._rationals))


def to_mp(number: sympy.Basic) -> mpmath.mpf:
    """A sympy number (Integer, Rational, Float) as the mpf it equals, at the current precision."""
    if number.is_Integer:
        return mpmath.mpf(int(number))
    if number.is_Rational:
        return mpmath.mpf(number.p) / number.q
    if number.is_Float:
        return mpmath.mpf(number._mpf_)
    return mpmath.mpf(number.evalf(DIGITS + 10)._mpf_)  # a constant: π, e


@lru_cache(maxsize=8192)
def _compiled(expr: sympy.Basic) -> _Eval | None:
    try:
        return _compile(expr)
    except _Unsure:
        return None


def _compile(expr: sympy.Basic) -> _Eval:
    if type(expr) is sympy.Symbol:
        return lambda env: env[expr]
    if expr.is_Number or expr.is_NumberSymbol:
        constant = expr
        return lambda env: to_mp(constant)  # at the precision of the evaluation, not of the compile
    node = _NODES.get(type(expr))
    parts = [_compile(arg) for arg in expr.args]
    if node is not None:
        return node(parts)
    if isinstance(expr, sympy.Function):
        return _function(expr.func, parts)
    raise _Unsure


def _function(func: type, parts: list[_Eval]) -> _Eval:
    """A function of the sheet's own (Φ, a power kept in floats) or sympy's (log, exp): sympy's evaluation of
    it on 50-digit numbers, which is the value sympy would put in."""
    def evaluate(env: Values) -> mpmath.mpf:
        result = func(*(sympy.Float(part(env), DIGITS) for part in parts))
        if not result.is_Number:
            raise _Unsure
        if result.is_Float and result._prec < mpmath.mp.prec:
            env.inexact = True  # Φ and its kind evaluate in Python's floats
        return to_mp(result)

    return evaluate


def _add(parts: list[_Eval]) -> _Eval:
    return lambda env: mpmath.fsum(part(env) for part in parts)


def _mul(parts: list[_Eval]) -> _Eval:
    def product(env: Values) -> mpmath.mpf:
        out = mpmath.mpf(1)
        for part in parts:
            out *= part(env)
        return out

    return product


def _pow(parts: list[_Eval]) -> _Eval:
    base, exponent = parts

    def power(env: Values) -> mpmath.mpf:
        b, n = base(env), exponent(env)
        if b < 0 and n != int(n):
            raise _Unsure  # a complex root
        return b ** n

    return power


def _max(parts: list[_Eval]) -> _Eval:
    return lambda env: max(part(env) for part in parts)


def _min(parts: list[_Eval]) -> _Eval:
    return lambda env: min(part(env) for part in parts)


def _abs(parts: list[_Eval]) -> _Eval:
    (arg,) = parts
    return lambda env: abs(arg(env))


def _whole(arg: _Eval, env: Values, rounding: Callable[[mpmath.mpf], mpmath.mpf]) -> mpmath.mpf:
    x = arg(env)
    if abs(x - mpmath.nint(x)) <= SURE_OF_FLOATS * max(1, abs(x)):
        raise _Unsure  # at a whole number, or a rounding error away from one
    return rounding(x)


def _floor(parts: list[_Eval]) -> _Eval:
    (arg,) = parts
    return lambda env: _whole(arg, env, mpmath.floor)


def _ceiling(parts: list[_Eval]) -> _Eval:
    (arg,) = parts
    return lambda env: _whole(arg, env, mpmath.ceil)


_NODES: dict[type, Callable[[list[_Eval]], _Eval]] = {
    sympy.Add: _add, sympy.Mul: _mul, sympy.Pow: _pow, sympy.Max: _max, sympy.Min: _min, sympy.Abs: _abs,
    sympy.floor: _floor, sympy.ceiling: _ceiling, Floor: _floor, Ceiling: _ceiling}
