"""The exact solve's fast paths against sympy's own: formulas evaluated in Python fractions
(solvers.rational) and printed from a template (solvers.formula_text) must give, on every step of
every question over the bank's seeds, the very numbers, decisions and text sympy gives."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import formula_text, nearsign, rational
from solvers.bank import load_bank
from solvers.derivation import Reject, Sheet
from solvers.engine import VariantCode, make_variant
from solvers.report import to_dict
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of

SEEDS = 6
IDS = sorted(load_bank().questions)


def _long_way(expr, shown):
    return formula_text.tidy(formula_text._ValuePrinter(shown).doprint(expr))


def _sheet_facts(solution):
    sheet = solution.sheet
    irrational = {sym: v for sym, v in sheet._values.items() if sym not in sheet._rationals}
    return {"params": [(p.name, p.raw) for p in solution.params], "numbers": dict(sheet._numbers),
            "rationals": dict(sheet._rationals), "irrational": irrational,
            "results": sheet.results, "expected": solution.expected, "json": to_dict(solution)}


@pytest.mark.parametrize("qid", IDS)
def test_the_fast_exact_solve_is_sympy_s_on_every_step(bank, catalog, qid, monkeypatch):
    fast = {seed: make_variant(bank, catalog, VariantCode(qid, seed)) for seed in [None, *range(SEEDS)]}
    for seed, solution in fast.items():
        for step in solution.sheet.steps:  # the template filled is the formula printed with its values
            assert step.substituted == _long_way(step.expr, step.shown_values), f"{qid}@{seed}: {step.symbol}"
    with monkeypatch.context() as patched:  # every formula through sympy's evaluation and printer
        patched.setattr(rational, "value", lambda expr, env: None)
        patched.setattr(formula_text, "substituted", _long_way)
        slow = {seed: _sheet_facts(make_variant(bank, catalog, VariantCode(qid, seed))) for seed in fast}
    for seed in fast:
        a, b = _sheet_facts(fast[seed]), slow[seed]
        for name in a:
            assert a[name] == b[name], f"{qid}@{seed}: {name} differs between the fast and the sympy path"


def test_the_fast_path_carries_most_steps(bank, catalog):
    """Not a vacuous comparison: most steps of the bank are rational and evaluated without sympy."""
    fast = total = 0
    for qid in IDS:
        sheet = make_variant(bank, catalog, VariantCode(qid, 0)).sheet
        env = dict(sheet._rationals)
        for step in sheet.steps:
            total += 1
            fast += rational.value(sympy.sympify(step.expr), env) is not None
    assert fast > 0.8 * total


X, Y, Z = sympy.symbols("X Y Z")


@pytest.mark.parametrize("expr, env, exact", [
    (X * Y / Z, {X: 3, Y: Fraction(1, 3), Z: 7}, Fraction(1, 7)),
    (X ** -2, {X: 4}, Fraction(1, 16)),
    (X ** (Y + 1), {X: Fraction(2, 3), Y: 2}, Fraction(8, 27)),
    (sympy.floor(X / Y), {X: 1023, Y: 2}, 511),
    (sympy.floor(X / Y), {X: 1024, Y: 2}, 512),  # a whole ratio floors to itself
    (sympy.ceiling(X / Y), {X: 1025, Y: 2}, 513),
    (max_of(X, Y), {X: Fraction(1, 3), Y: Fraction(2, 6)}, Fraction(1, 3)),  # a tie is a tie
    (min_of(X - Y, 0), {X: 1, Y: 2}, -1),
    (X - sympy.Rational(7, 20), {X: Fraction(7, 20)}, 0),
    (abs(X - Y) - Z, {X: Fraction(1, 3), Y: 1, Z: Fraction(2, 3)}, 0),  # a lever's gap to its share, a tie
])
def test_a_rational_formula_evaluates_exactly(expr, env, exact):
    assert rational.value(expr, env) == exact
    assert rational.to_sympy(rational.value(expr, env)) == expr.xreplace(
        {s: rational.to_sympy(v) for s, v in env.items()})


@pytest.mark.parametrize("expr, env", [
    (X / Y, {X: 1, Y: 0}),  # sympy's zoo: the sheet rejects it the way it always has
    (sympy.sqrt(X), {X: 2}),  # a radical
    (X ** Y, {X: 2, Y: Fraction(1, 2)}),  # a root by a power
    (sympy.log(X), {X: 8}),
    (X * sympy.Float(0.5), {X: 2}),  # a float in a formula
    (X + Y, {X: 1}),  # a value that is not rational (kept by sympy to 17 digits) or not there
])
def test_anything_else_is_left_to_sympy(expr, env):
    assert rational.value(expr, env) is None


def test_a_sheet_decides_ties_and_floors_exactly_on_either_path():
    sheet = Sheet()
    with sheet.solving():
        a = sheet.given("a", 0.1)
        b = sheet.given("b", 0.2)
        c = sheet.step("c", "sum", "c", a + b)
        assert sheet.compare(c, sheet.given("d", 0.3)) == 0  # 1/10 + 2/10 is 3/10, not 0.30000000000000004
        n = sheet.step("n", "whole tenths", "n", floor_of(c * 10))
        m = sheet.step("m", "whole tenths up", "m", ceil_of(c * 10))
    assert sheet.value(n) == sheet.value(m) == 3
    with pytest.raises(Reject):
        sheet.step("inf", "over nothing", "q", a / (c - sheet.symbol("d")))
    assert math.isclose(sheet.value(c), 0.3)


_LEAVES = st.one_of(st.fractions(min_value=-50, max_value=50, max_denominator=40).map(sympy.Rational),
                    st.sampled_from([X, Y, Z]))


def _formulas(children):
    return st.one_of(
        st.tuples(children, children).map(lambda p: p[0] + p[1]),
        st.tuples(children, children).map(lambda p: p[0] * p[1]),
        children.map(lambda e: sympy.sqrt(abs(e))),
        children.map(lambda e: sympy.log(abs(e) + 1)),
        children.map(sympy.Abs),
        children.map(lambda e: floor_of(e / 3)),
        st.tuples(children, children).map(lambda p: max_of(*p)))


@settings(max_examples=300, deadline=None)
@given(st.recursive(_LEAVES, _formulas, max_leaves=6), st.recursive(_LEAVES, _formulas, max_leaves=6),
       st.tuples(*[st.fractions(min_value=-9, max_value=9, max_denominator=12)] * 3))
def test_a_comparison_settled_at_50_digits_is_the_exact_one(a, b, xyz):
    """nearsign decides a sign only where 50 digits settle it, and then as sympy does exactly; a tie (√2·√2
    against 2), a floor at a whole number, are left to sympy."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    env = dict(zip((X, Y, Z), xyz, strict=True))
    sure = nearsign.sign(a, b, nearsign.Values(env, {}))
    if sure is not None:
        exact = {s: rational.to_sympy(v) for s, v in env.items()}
        assert sure == sympy.sign((a.xreplace(exact) - b.xreplace(exact)).evalf(80))


@pytest.mark.parametrize("a, b", [
    (sympy.sqrt(X) * sympy.sqrt(X), X),  # a tie sympy proves
    (sympy.log(X**2), 2 * sympy.log(X)),
    (floor_of(X * 3), 1),  # a floor at a whole number: a rounding error would move it
])
def test_a_tie_or_a_floor_at_a_whole_number_is_left_to_sympy(a, b):
    assert nearsign.sign(a, b, nearsign.Values({X: Fraction(1, 3)}, {})) is None


def test_a_square_root_is_compared_without_sympy_and_as_sympy_would():
    """training-compute-budget's lever at Young's interval, √(2·C/a), against the share asked."""
    sheet = Sheet()
    with sheet.solving():
        c = sheet.given("C", 0.1)
        a = sheet.given("a", 0.02)
        young = sheet.step("t", "interval", "tau", sympy.sqrt(2 * c / a))
        assert sheet.compare(young, sheet.given("s", 3.1622776601683795)) < 0  # √10 = 3.16227766016837933…
        assert sheet.compare(young * young, 10) == 0
