"""The regime chart's sweep, and the memo the what-if screen keeps between its steps."""
from __future__ import annotations

import pytest

import solvers.engine as engine
from solvers.engine import VariantCode, make_variant, revise, sweep

QUESTION = "ep-load-skew"  # a seeded simulation per point: the sweep the memo saves most on


@pytest.fixture
def solves(monkeypatch):
    counted = {"quick": 0}
    solve_values = engine.solve_values

    def counting(question, raw, catalog, **options):
        counted["quick"] += options.get("quick", False)
        return solve_values(question, raw, catalog, **options)

    monkeypatch.setattr(engine, "solve_values", counting)
    return counted


def test_a_step_along_the_chart_re_solves_no_point_it_has_seen(bank, catalog, solves):
    first = make_variant(bank, catalog, VariantCode(QUESTION, 3))
    x, y = first.question.chart
    memo: dict = {}
    solves["quick"] = 0  # making the variant tried its draw on floats: count the sweep's own solves
    opening = sweep(first, catalog, x, y, points=32, solved=memo)
    spec = first.question.parameter(x)
    assert solves["quick"] == len(spec.grid(32) - {first.param(x).raw})
    moved = revise(first, catalog, {x: sorted(spec.grid(8))[3]})
    solves["quick"] = 0
    stepped = sweep(moved, catalog, x, y, points=32, solved=memo)
    assert solves["quick"] == 0  # the grid from the memo, the moved variant's own point from its exact sheet
    fresh = sweep(moved, catalog, x, y, points=32)
    assert [(p.x, p.regime) for p in stepped] == [(p.x, p.regime) for p in fresh]
    assert [p.y for p in stepped] == pytest.approx([p.y for p in fresh], rel=1e-12)
    on_grid = {float(v) for v in spec.grid(32)}
    assert {p.x for p in opening} - {p.x for p in stepped} == {float(first.param(x).raw)} - on_grid


def test_the_memo_keeps_answers_and_parameter_values_apart(bank, catalog, solves):
    first = make_variant(bank, catalog, VariantCode(QUESTION, 3))
    x, y = first.question.chart
    memo: dict = {}
    sweep(first, catalog, x, y, points=8, solved=memo)
    solves["quick"] = 0
    other_answer = next(a.key for a in first.question.answers if a.numeric and a.key != y)
    sweep(first, catalog, x, other_answer, points=8, solved=memo)
    assert solves["quick"] > 0
    solves["quick"] = 0
    other_hot = revise(first, catalog, {"hot": first.param("hot").raw * 1.5})
    points = sweep(other_hot, catalog, x, y, points=8, solved=memo)
    assert solves["quick"] > 0
    assert points == sweep(other_hot, catalog, x, y, points=8)
