"""Regime text follows the variant: the side follows the exact comparison, the words the margin."""
from __future__ import annotations

import pytest

from solvers.derivation import Sheet, Side

ABOVE = Side("compute-bound", "far above", "below: memory")
BELOW = Side("memory-bound", "far below", "above: compute", near="just below")


def _regime(position: float, boundary: float, tie: str = "above"):
    s = Sheet()
    s.regime_by(s.given("x", position), s.given("b", boundary), above=ABOVE, below=BELOW, tie=tie)
    return s.regime


@pytest.mark.parametrize("position, name, summary", [
    (10, "memory-bound", "far below"), (90, "memory-bound", "just below"),
    (110, "compute-bound", "far above It sits only 1.1× above the boundary: a modest change tips it to memory-bound."),
    (1000, "compute-bound", "far above"),
])
def test_side_and_words_follow_the_variant(position, name, summary):
    regime = _regime(position, 100)
    assert (regime.name, regime.summary) == (name, summary)
    assert regime.near == (summary != "far above" and summary != "far below")


def test_a_tie_goes_where_the_question_says_exactly():
    assert _regime(0.3, 0.1 * 3).name == "compute-bound"  # 0.1 * 3 is not 0.3 in floats; exactly it is
    assert _regime(0.3, 0.1 * 3, tie="below").name == "memory-bound"


def test_the_weight_read_regime_reads_differently_near_the_crossover(variant):
    near = variant("weight-read-intensity@default+batch=260").sheet.regime  # the kernels' ridge: from about 301
    far = variant("weight-read-intensity@default").sheet.regime
    assert near.name == far.name == "memory-bound"
    assert near.near and not far.near and "just below" in near.summary and "just" not in far.summary


@pytest.mark.parametrize("position", [0.5, 1, 1.5])
def test_a_numeric_boundary_decides_as_a_given_one_and_stands_in_no_given_table(position):
    """A break-even of 1× is the model's, not the variant's: it names the boundary and adds no 'S_even = 1×' given."""
    numeric, given = Sheet(), Sheet()
    numeric.regime_by(numeric.given("x", position, "x"), 1, boundary_label="break-even", above=ABOVE, below=BELOW)
    given.regime_by(given.given("x", position, "x"), given.given("b", 1, "x"), above=ABOVE, below=BELOW)
    assert (numeric.regime.name, numeric.regime.margin) == (given.regime.name, given.regime.margin)
    assert [g.symbol for g in numeric.givens] == ["x"]
    assert (numeric.regime.boundary.equation, numeric.regime.boundary.result) == ("break-even", "1×")
    bare = Sheet()
    with pytest.raises(ValueError, match="boundary_label"):
        bare.regime_by(bare.given("x", position), 1, above=ABOVE, below=BELOW)


def test_no_question_shows_a_stand_in_given_of_one(bank, catalog, variant):
    """The four questions that once declared a boundary of 1 as a given (S_even, parity, g_1, k_fit) no longer do."""
    for qid in ("spec-decode-by-load", "kv-quant-keys-vs-values", "cost-audit-rollout", "fp8-scale-formats"):
        sheet = variant(f"{qid}@default").sheet
        assert sheet.regime.boundary.expr is None and sheet.regime.boundary.value == 1
        assert all(g.symbol != sheet.regime.boundary.symbol for g in sheet.givens), qid
