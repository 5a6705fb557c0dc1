"""What every question on the step-time model shares: small models stay on few GPUs, xGMI rings span
the eight MI300X, the default chart crosses its boundary."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError, sweep
from tests.by_hand import value_of
from tests.topics.serving.group_by_hand import draws_of


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_small_models_are_not_split_many_ways(variant, qid):
    """An 8B model on TP 4 or 8 gave 0.3 ms steps (decode-loop-overlap) and 90K-token chunks."""
    for solution in draws_of(variant, qid):
        if value_of(solution, "model").params_b < 20:
            assert value_of(solution, "tp") <= 2
    with pytest.raises(VariantError, match="not served over 8 GPUs"):
        variant(f"{qid}@default+model=llama-3-8b+tp=8")


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_an_xgmi_ring_spans_all_eight_gpus(variant, qid):
    """The all-reduce model takes half the xGMI aggregate as the link, which only a ring over all eight
    MI300X reaches (each GPU has one link to each peer): TP 2 and 4 on MI300X are not drawn."""
    for solution in draws_of(variant, qid)[:60]:
        if value_of(solution, "gpu").vendor == "AMD":
            assert value_of(solution, "tp") in (1, 8)
    with pytest.raises(VariantError, match="xGMI"):
        variant(f"{qid}@default+gpu=mi300x+tp=2")


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_default_chart_crosses_the_regime_boundary(variant, catalog, qid):
    """A chart that stays on one side, or plots a flat line, teaches nothing (long-reply-batching's first
    chart, per-user speed against reply length, was flat at ~35 tokens/s)."""
    solution = variant(f"{qid}@default")
    curve = sweep(solution, catalog, *solution.question.chart)
    assert len({point.regime for point in curve}) >= 2
    assert len({round(point.y, 9) for point in curve}) >= 3
