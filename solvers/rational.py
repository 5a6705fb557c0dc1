"""A sheet's formulas evaluated exactly in Python's integers and fractions instead of sympy's objects.

Putting a variant's values into a formula with sympy (xreplace, then sympy's own evaluation)
builds and simplifies a new tree per step: most of an exact solve's time. Most formulas are
rational (sums, products, integer powers, max, min, absolute values, floor, ceiling of rationals), and on
rationals `fractions.Fraction` gives the very number sympy gives, so every floor, ceiling,
comparison and tie is decided as exactly as before. A formula with anything else in it (a
logarithm, a square root, a function of a topic's own, a float) or a value that is not
rational (a step sympy kept to 17 digits) is left to sympy: `value` returns None.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from functools import lru_cache

import sympy

from solvers.integer_part import Ceiling, Floor

Exact = int | Fraction
_Env = Mapping[sympy.Symbol, Exact]


class _NotRational(Exception):
    """This formula, or these values, leave the rationals: sympy evaluates it instead."""


def value(expr: sympy.Basic, env: _Env) -> Exact | None:
    """`expr` with the rational values of `env` put in, exactly; None where sympy must decide
    (a node or a value this module does not take, a division by zero)."""
    evaluate = _compiled(expr)
    if evaluate is None:
        return None
    try:
        return evaluate(env)
    except (_NotRational, KeyError, ZeroDivisionError, OverflowError):
        return None


def to_sympy(number: Exact) -> sympy.Rational:
    """The sympy number equal to `number`."""
    if isinstance(number, int):
        return sympy.Integer(number)
    return sympy.Rational(number.numerator, number.denominator)


def from_sympy(number: sympy.Basic) -> Exact | None:
    """A sympy value as an exact Python number where it is rational, else None."""
    if number.is_Integer:
        return int(number)
    if number.is_Rational:
        return Fraction(number.p, number.q)
    return None


# A formula is compiled once into nested closures: the same formula recurs in every variant of a
# question (sympy hashes it by its structure), so only the values change from one solve to the next.
@lru_cache(maxsize=8192)
def _compiled(expr: sympy.Basic) -> Callable[[_Env], Exact] | None:
    try:
        return _flat(expr)
    except _NotRational:
        return None
    except (RecursionError, SyntaxError, MemoryError):  # a formula too deep for Python's compiler: the closures
        return _compile(expr)


def _flat(expr: sympy.Basic) -> Callable[[_Env], Exact]:
    """The formula as one Python expression, compiled: the closures' arithmetic in the same order, without a
    call per node (sum() and prod() start from 0 and 1, which change no value and no type here)."""
    bound: dict[str, object] = {"_power": _raise_to, "_abs": _absolute, "_floor": math.floor, "_ceil": math.ceil}
    source = _source(expr, bound)
    return eval(f"lambda env: {source}", bound)  # noqa: S307 - our own text, from sympy nodes this module takes


def _source(expr: sympy.Basic, bound: dict[str, object]) -> str:
    if expr.is_Integer or expr.is_Rational or type(expr) is sympy.Symbol:
        name = f"_{len(bound)}"
        bound[name] = int(expr) if expr.is_Integer else Fraction(expr.p, expr.q) if expr.is_Rational else expr
        return f"env[{name}]" if type(expr) is sympy.Symbol else name
    parts = [_source(arg, bound) for arg in expr.args]
    kind = type(expr)
    if kind is sympy.Add:
        return f"({' + '.join(parts)})"
    if kind is sympy.Mul:
        return f"({' * '.join(parts)})"
    if kind is sympy.Pow:
        return f"_power({parts[0]}, {parts[1]})"
    if kind in (sympy.Max, sympy.Min):
        return f"{'max' if kind is sympy.Max else 'min'}({', '.join(parts)})"
    if kind is sympy.Abs:
        return f"_abs({parts[0]})"
    if kind in (sympy.floor, Floor, sympy.ceiling, Ceiling):
        return f"{'_floor' if kind in (sympy.floor, Floor) else '_ceil'}({parts[0]})"
    raise _NotRational


def _raise_to(b: Exact, n: Exact) -> Exact:
    """b^n exactly, for an integer power only (a root: sympy's radicals)."""
    if isinstance(n, Fraction):
        if n.denominator != 1:
            raise _NotRational
        n = n.numerator
    return Fraction(b) ** n if n < 0 else b ** n  # an int to a negative power would be a float


def _absolute(number: Exact) -> Exact:
    return -number if number < 0 else number


def _compile(expr: sympy.Basic) -> Callable[[_Env], Exact]:
    if expr.is_Integer:
        whole = int(expr)
        return lambda env: whole
    if expr.is_Rational:
        ratio = Fraction(expr.p, expr.q)
        return lambda env: ratio
    if type(expr) is sympy.Symbol:
        return lambda env: env[expr]
    maker = _NODES.get(type(expr))
    if maker is None:
        raise _NotRational
    return maker([_compile(arg) for arg in expr.args])


def _add(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    return lambda env: sum(part(env) for part in parts)


def _mul(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    return lambda env: math.prod(part(env) for part in parts)


def _pow(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    base, exponent = parts
    return lambda env: _raise_to(base(env), exponent(env))


def _max(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    return lambda env: max(part(env) for part in parts)


def _min(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    return lambda env: min(part(env) for part in parts)


def _abs(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    (arg,) = parts
    return lambda env: _absolute(arg(env))


def _floor(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    (arg,) = parts
    return lambda env: math.floor(arg(env))


def _ceiling(parts: list[Callable[[_Env], Exact]]) -> Callable[[_Env], Exact]:
    (arg,) = parts
    return lambda env: math.ceil(arg(env))


_NODES: dict[type, Callable[[list[Callable[[_Env], Exact]]], Callable[[_Env], Exact]]] = {
    sympy.Add: _add, sympy.Mul: _mul, sympy.Pow: _pow, sympy.Max: _max, sympy.Min: _min, sympy.Abs: _abs,
    sympy.floor: _floor, sympy.ceiling: _ceiling, Floor: _floor, Ceiling: _ceiling}
