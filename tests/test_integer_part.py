"""The fast floor and ceiling give the integer part that 80 digits give, and exactly an integer a value lands on.
(sympy 1.14's own ceiling of log(6^11 + 1)/log(6) is 11, not 12: it is not the oracle here.)"""
from __future__ import annotations

import mpmath
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.integer_part import Ceiling, Floor


def _parts(value: sympy.Expr) -> tuple[int, int]:
    with mpmath.workdps(80):
        number = mpmath.mpf(sympy.N(value, 80))
        return int(mpmath.floor(number)), int(mpmath.ceil(number))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(2, 40), st.integers(-1, 3))
def test_a_log_that_lands_on_an_integer_is_that_integer(base, power, shift):
    """log(base^power ± a little)/log(base): on the power exactly, the power; just off it, either side of it."""
    x = sympy.Integer(base) ** power + shift
    ratio = sympy.log(x) / sympy.log(base)
    if shift == 0:
        assert Floor(ratio) == Ceiling(ratio) == power
    else:
        assert (Floor(ratio), Ceiling(ratio)) == _parts(ratio)


@settings(max_examples=60, deadline=None)
@given(st.fractions(-10**6, 10**6, max_denominator=1000), st.integers(2, 50))
def test_a_surd_gives_sympys_integer_part(scale, radicand):
    """A rational times a square root (a perfect square among them) on both sides of zero."""
    value = sympy.Rational(scale.numerator, scale.denominator) * sympy.sqrt(radicand)
    assert (Floor(value), Ceiling(value)) == _parts(value)


def test_they_wait_for_symbols_and_print_as_sympys():
    n = sympy.Symbol("n")
    held = Ceiling(sympy.log(n) / sympy.log(2), evaluate=False)
    assert str(held) == "ceiling(log(n)/log(2))" and sympy.latex(Floor(n)) == sympy.latex(sympy.floor(n))
    assert held.xreplace({n: sympy.Integer(4096)}) == 12 and held.xreplace({n: sympy.Integer(4097)}) == 13
