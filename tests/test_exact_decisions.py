"""Floors, ceilings and comparisons are decided on exact values, not floats."""
from __future__ import annotations

import math

import pytest
import sympy

from solvers.bank import load_bank
from solvers.derivation import Sheet
from solvers.engine import VariantCode, make_variant

BANK = load_bank()
DIGITS = 50


def test_a_product_that_is_whole_floors_to_itself():
    s = Sheet()
    m = s.given("m", 0.3, "%")
    H = s.given("H", 45, "h")
    o = s.given("o", 2, "h")
    assert 4 * (45 * (1 - 0.3) - 2) < 118  # 117.99999999999999 in floats
    F = s.step("F", "focus", "F", 4 * (H * (1 - m) - o), "h")
    n = s.step("n", "whole", "n", sympy.floor(F / 2), "")
    assert s.value(F) == 118 and s.value(n) == 59
    assert s.compare(F, 118) == 0 and s.compare(F, 117.999) == 1


def test_compare_calls_a_tie_a_tie():
    s = Sheet()
    a = s.given("a", 0.3)
    b = s.given("b", 0.1)
    assert s.compare(a, 3 * b) == 0  # 0.1 * 3 != 0.3 in floats
    assert s.compare(sympy.sqrt(2) * sympy.sqrt(2), 2) == 0


def _snapped(x: sympy.Number, rounding) -> sympy.Integer:
    """At 50 digits an exact tie may land a hair either side: within 1e-30 of a whole number is it."""
    nearest = sympy.Integer(round(x))
    return nearest if abs(x - nearest) < 1e-30 else sympy.Integer(rounding(x))


class _Floor(sympy.Function):
    @classmethod
    def eval(cls, x):
        return _snapped(x, math.floor) if x.is_Number else None


class _Ceiling(sympy.Function):
    @classmethod
    def eval(cls, x):
        return _snapped(x, math.ceil) if x.is_Number else None


def _high_precision(sheet: Sheet) -> dict[sympy.Symbol, sympy.Float]:
    """Every given and step re-evaluated independently in 50-digit floats (no rationals), from
    the givens as decimals (35% is 0.35, not the 0.35000000000000003 that 35 x 0.01 gives)."""
    values = {sympy.Symbol(g.symbol): sympy.Float(f"{g.value:.15g}", DIGITS) for g in sheet.givens}
    for step in sheet.steps:
        if step.expr is not None:
            expr = sympy.sympify(step.expr).replace(sympy.floor, _Floor).replace(sympy.ceiling, _Ceiling)
            value = sympy.sympify(expr.xreplace(values)).evalf(DIGITS)
            # A helper that floats cannot take (an lcm) keeps the sheet's value: the floors after it still check.
            values[sympy.Symbol(step.symbol)] = value if value.is_real else sympy.Float(step.value, DIGITS)
    return values


def _decides(expr) -> bool:
    return bool(expr.atoms(sympy.floor, sympy.ceiling))


@pytest.mark.parametrize("qid", sorted(BANK.questions))
def test_every_floor_and_ceiling_of_the_bank_matches_a_50_digit_evaluation(bank, catalog, qid):
    for seed in [None, *range(40)]:
        solution = make_variant(bank, catalog, VariantCode(qid, seed))
        sheet = solution.sheet
        deciding = [s for s in sheet.steps if s.expr is not None and _decides(sympy.sympify(s.expr))]
        if not deciding:
            continue
        precise = _high_precision(sheet)
        for step in deciding:
            assert step.value == pytest.approx(float(precise[sympy.Symbol(step.symbol)]), rel=1e-12), \
                (f"{qid}@{seed}", step.key, step.value)


def test_at_an_exact_tie_ib_vs_roce_does_not_call_either_cheaper(bank, catalog):
    tie = "ib-vs-roce@default+gpus=1600+ib_switch=40000+eth_switch=20000+roce_extra=1+staff_cost=300000+years=5"
    solution = make_variant(bank, catalog, VariantCode.parse(tie))
    expected, regime = solution.expected, solution.sheet.regime
    assert expected["flip_fleet"] == 1600 and expected["ib_per_gpu"] == expected["roce_per_gpu"]
    assert regime.name == "small-fleet-infiniband" and "exactly the same" in regime.summary
    one_more = make_variant(bank, catalog, VariantCode.parse(tie.replace("gpus=1600", "gpus=1700")))
    assert one_more.sheet.regime.name == "large-fleet-roce"
