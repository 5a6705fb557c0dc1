"""floor and ceiling that settle an irrational argument fast. sympy's own, on a number that lands on an integer
(a log of 16 to base 2, a square root of 36 written as a product), proves it with `equals` and `simplify`:
150-700 ms, where a push search solves dozens of variants (and sympy 1.14 gives 11 for the ceiling of
log(6^11 + 1)/log(6)). These evaluate the argument to 40 digits past its integer part, then 200 for a value
within 10^-30 of an integer; one within 10^-190 is checked by expanding its logs (exact), and failing that
left to sympy. They print as sympy's floor and ceiling."""
from __future__ import annotations

import math

import sympy

_DIGITS = (40, 200)  # past the integer part: a second, finer look only for a value close to an integer


def _settled(arg: sympy.Expr, rounding: str) -> sympy.Integer | None:
    """The integer part of a number sympy would prove by simplify, or None to leave it to sympy."""
    if not arg.is_number or arg.is_Rational:
        return None  # symbols wait for their values; a rational is exact and quick already
    rough = arg.evalf(15)
    if not rough.is_Float or not math.isfinite(float(rough)):
        return None  # complex, infinite: sympy's own answer
    magnitude = max(int(math.log10(abs(float(rough)))) + 1, 0) if rough != 0 else 0
    for digits in _DIGITS:
        value = arg.evalf(digits + magnitude)
        nearest = sympy.Integer(int(sympy.Float(value).round()))
        if abs(value - nearest) > sympy.Float(10, digits) ** (10 - digits):  # decided, with digits to spare
            return sympy.Integer(math.floor(value) if rounding == "floor" else math.ceil(value))
    expanded = sympy.expand_log(arg, force=True)
    return expanded if expanded.is_Integer else None  # on an integer: exact, or sympy proves it its own way


class Floor(sympy.floor):
    @classmethod
    def eval(cls, arg):  # noqa: ANN001, ANN206 - sympy's signature
        settled = _settled(arg, "floor")
        return settled if settled is not None else super().eval(arg)


class Ceiling(sympy.ceiling):
    @classmethod
    def eval(cls, arg):  # noqa: ANN001, ANN206 - sympy's signature
        settled = _settled(arg, "ceiling")
        return settled if settled is not None else super().eval(arg)


Floor.__name__, Ceiling.__name__ = "floor", "ceiling"  # printed as sympy's
