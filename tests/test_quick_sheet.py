"""QuickSheet (the scans' float solve) against Sheet (the exact one) on every question of the bank:
a scan may only decide what the exact solve would decide, or the follow-up it finds is not the one
a full search would find."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

from solvers import engine
from solvers.bank import load_bank
from solvers.derivation import QuickSheet, Reject, Sheet
from solvers.engine import VariantCode, draw_values, make_variant, run_solver, solve_values
from solvers.sheetmath import ceil_of, floor_of
from tests.by_hand import param_values

SEEDS = 8
IDS = sorted(load_bank().questions)


def _values(solution):
    return param_values(solution)


@pytest.mark.parametrize("qid", IDS)
def test_quick_and_exact_solves_agree_on_every_answer_and_the_regime(bank, catalog, qid):
    question = bank.get(qid)
    for seed in [None, *range(SEEDS)]:
        exact = make_variant(bank, catalog, VariantCode(qid, seed)).sheet
        quick = run_solver(question, _values(make_variant(bank, catalog, VariantCode(qid, seed))), QuickSheet)
        assert quick.results.keys() == exact.results.keys(), f"{qid}@{seed}"
        for key, value in exact.results.items():
            if isinstance(value, float):
                assert math.isclose(quick.results[key], value, rel_tol=1e-9, abs_tol=1e-12), f"{qid}@{seed}: {key}"
            else:
                assert quick.results[key] == value, f"{qid}@{seed}: {key}"
        assert (quick.regime is None) == (exact.regime is None)
        if exact.regime is not None:
            assert math.isclose(quick.regime.margin, exact.regime.margin, rel_tol=1e-9), f"{qid}@{seed}"
        assert not quick.steps and not quick.givens, "a scan builds no derivation"


def _first_exact_draw(question, catalog, seed):
    """The seed's first draw the exact solve accepts, found without the float trial make_variant runs first."""
    rng = np.random.default_rng(seed)
    for _ in range(engine.MAX_REDRAWS):
        raw = draw_values(question, rng)
        try:
            solve_values(question, raw, catalog)
        except Reject:
            continue
        return raw
    raise AssertionError("no draw")


@pytest.mark.parametrize("qid", IDS)
def test_the_float_trial_of_a_draw_passes_over_only_draws_the_exact_solve_refuses(bank, catalog, qid):
    """make_variant tries each draw on floats before solving it exactly: the variant a seed names must be
    the one exact solves alone would name, or every code drawn before the trial would open another variant."""
    question = bank.get(qid)
    for seed in range(SEEDS):
        drawn = {p.name: p.raw for p in make_variant(bank, catalog, VariantCode(qid, seed)).params}
        assert drawn == _first_exact_draw(question, catalog, seed), f"{qid}@{seed}"


def test_a_float_fault_in_the_trial_leaves_the_draw_to_the_exact_solve(bank, catalog, monkeypatch):
    """Float arithmetic can fault where sympy's cannot (a division by an exact zero): not a refusal."""
    exact_solve = engine.solve_values

    def faulting(question, raw, catalog, **kwargs):
        if kwargs.get("quick"):
            raise ZeroDivisionError("float division by zero")
        return exact_solve(question, raw, catalog, **kwargs)

    expected = make_variant(bank, catalog, VariantCode("kv-bytes-per-token", 3))
    monkeypatch.setattr(engine, "solve_values", faulting)
    assert make_variant(bank, catalog, VariantCode("kv-bytes-per-token", 3)).params == expected.params


@pytest.mark.parametrize("x, floor, ceil", [
    (3.0, 3, 3), (3.5, 3, 4), (-3.5, -4, -3),
    (511.99999999999994, 512, 512),  # 512 computed in floats: the whole number it stands for
    (512.0000000001, 512, 512), (512.001, 512, 513), (0.1 + 0.2, 0, 1)])
def test_a_quick_solve_floors_floats_snapping_their_noise_only(x, floor, ceil):
    with QuickSheet().solving():
        assert (floor_of(x), ceil_of(x)) == (floor, ceil)


@pytest.mark.parametrize("x", [sympy.Rational(1023, 2), sympy.Rational(-7, 3), sympy.Integer(5), 511.99999999999994,
                               sympy.Float("2.99999999999999999", 20)])
def test_an_exact_solve_floors_as_sympy_does(x):
    assert (floor_of(x), ceil_of(x)) == (sympy.floor(x), sympy.ceiling(x))


@pytest.mark.parametrize("expr", [math.inf, math.nan, sympy.zoo, sympy.Symbol("free")])
def test_a_quick_step_rejects_what_an_exact_step_rejects(expr):
    for sheet in (Sheet(), QuickSheet()):
        with pytest.raises(Reject):
            sheet.step("x", "not a finite number", "x", expr)


def test_a_quick_solve_reads_a_symbol_the_solver_names_again():
    """Solvers may name an earlier step's symbol again (sympy.Symbol('H_gpu')) rather than carry it."""
    for sheet in (Sheet(), QuickSheet()):
        sheet.step("heads", "KV heads per GPU", "H_gpu", sheet.given("H", 8) / sheet.given("n", 2))
        blocks = sheet.step("blocks", "Blocks", "n_blk", 3 * sympy.Symbol("H_gpu"))
        assert sheet.value(blocks) == 12 and sheet.compare(sympy.Symbol("H_gpu"), 4) == 0
        assert sheet.value(sheet.step("twice", "Twice", "t", 2 * sheet.symbol("H_gpu"))) == 8
        with pytest.raises(KeyError):
            sheet.symbol("nowhere")
    with pytest.raises(Reject):
        QuickSheet().step("x", "a symbol never declared", "x", 2 * sympy.Symbol("nowhere"))


def test_a_float_division_by_zero_in_a_quick_solve_is_a_reject_as_sympy_s_zoo_is():
    sheet = QuickSheet()
    with pytest.raises(Reject), sheet.solving():
        sheet.step("x", "a rate over no time", "x", sheet.given("a", 1.0) / sheet.given("t", 0.0))
    with pytest.raises(ZeroDivisionError), Sheet().solving():
        raise ZeroDivisionError("on a Sheet a Python division by zero is a solver bug and stays one")


def test_a_value_shows_in_the_unit_it_was_declared_in_and_a_scan_prints_nothing():
    sheet = Sheet()
    t = sheet.step("t", "Step time", "t", sheet.given("W", 140e9, "GB") / sheet.given("BW", 4.8e12, "TB/s"), "ms")
    share = sheet.given("u", 0.9, "%")
    assert (sheet.text(t), sheet.text(t, 3), sheet.text(share)) == ("29.17 ms", "29.2 ms", "90%")
    assert sheet.text(sheet.given("n", 1, "tokens")) == "1 token"
    quick = QuickSheet()
    assert quick.text(quick.step("t", "Step time", "t", quick.given("W", 140e9, "GB") / 4.8e12, "ms")) == ""
