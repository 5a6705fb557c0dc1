"""roofline-model-breaks: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError
from solvers.interview import stage_run
from tests.by_hand import by_hand_test, value_of
from tests.topics.serving.group_by_hand import draws_of, group_of

BREAKS = {"bandwidth": "kernels reaching only part of the datasheet bandwidth and peak",
          "latency": "the all-reduces' fixed latency, two calls per layer",
          "bytes": "the all-reduces' bytes over the link",
          "overhead": "the per-step overhead (scheduling, sampling, launch gaps)"}


def roofline_by_hand(solution):
    eta_bw = value_of(solution, "bandwidth_eff")
    g = group_of(solution, eta_bw)
    B, S = value_of(solution, "batch"), value_of(solution, "context")
    model, gpu, tp = g.model, g.gpu, g.tp
    moved, flops = g.weights + g.kv * B * S, g.flops(B, B * S)
    bare = max(moved / (gpu.hbm_tb_s * 1e12), flops / (tp * gpu.bf16_dense_tflops * 1e12))
    efficient = g.time(B, B * S, B * S, overhead=0)
    link = gpu.nvlink_gb_s * 1e9 / 2
    message = B * model.hidden * 2  # the batch's bf16 activations
    latencies = 2 * model.layers * value_of(solution, "allreduce_latency")
    ring_bytes = 2 * model.layers * 2 * (tp - 1) / tp * message / link
    overhead = value_of(solution, "overhead")
    corrected = efficient + latencies + ring_bytes + overhead
    costs = {"bandwidth": efficient - bare, "all-reduce": latencies + ring_bytes, "overhead": overhead}
    parts = {"bandwidth": efficient - bare, "latency": latencies, "bytes": ring_bytes, "overhead": overhead}
    listed = {name: cost for name, cost in parts.items() if abs(cost / corrected / 0.1 - 1) >= 0.03}
    if parts["bytes"] > 0.1 * corrected:  # the select's declared fact: not listed where a large batch breaks it
        listed.pop("bytes", None)
    return {
        "bare_throughput": B / bare,
        "allreduce_time": latencies + ring_bytes,
        "corrected_throughput": B / corrected,
        "dominant": max(costs, key=costs.get),
        # a select's judgements: a part within 3% of the 10% line is too close to call (None), never listed
        "breaks": {BREAKS[name]: cost > 0.1 * corrected if name in listed else None for name, cost in parts.items()},
        "regime": "within-reach" if corrected / bare <= 2 else "off-by-a-factor",
    }


def test_roofline_default(variant):
    """70B on 8 x H100 at batch 32, 2K context: 9.99 ms in all, 1.65x the bare step (the keys are pinned in the
    question file). The default overhead was 1 ms, 9.5% of the step: on the 10% line the breaks select now
    grades, so it moved to 0.5 ms."""
    assert variant("roofline-model-breaks@default").sheet.results["ratio"] == pytest.approx(1.651, rel=1e-3)


def test_roofline_candidate_recalls_the_breaks_before_the_select(variant):
    """The review: the list of breaks the teaser scores was handed over as options, and 'catch' mirrored
    'breaks' one to one. The candidate now lists the breaks and how to catch each (a recall stage) before any
    list is shown; the select that follows grades which matter here, its right set moving with the variant,
    and no option is the same in every draw."""
    solution = variant("roofline-model-breaks@default")
    kinds = [stage.kind for stage in solution.question.stages]
    assert kinds.index("recall") < next(i for i, stage in enumerate(solution.question.stages) if "breaks" in stage.ask)
    assert "catch" not in {spec.key for spec in solution.question.answers}
    assert "all-reduce" not in solution.prompt and "overhead" not in solution.prompt
    right_sets, truths = set(), {}
    for draw in draws_of(variant, "roofline-model-breaks"):
        judged = draw.sheet.results["breaks"]
        right_sets.add(frozenset(o for o, holds in judged.items() if holds))
        for option, holds in judged.items():
            truths.setdefault(option, set()).add(holds)
    assert len(right_sets) >= 5
    fact = BREAKS["bytes"]  # read7: false in nearly every draw; now the select's one declared fact
    assert all({True, False} <= seen for option, seen in truths.items() if option != fact)
    assert True not in truths[fact] and False in truths[fact]


def test_roofline_bytes_option_is_the_declared_fact(variant):
    """read7: "the all-reduces' bytes over the link" was false in 191 of 200 draws, true in 7 (batches in the
    hundreds): a memorised rule, not a judgement. It stays, as the select's one declared fact (decode all-reduces
    are latency-bound, the point of the option), with the rule in its key; where a large batch breaks it, it is
    not listed."""
    listed = 0
    for draw in draws_of(variant, "roofline-model-breaks"):
        assert BREAKS["bytes"] in draw.sheet.facts.get("breaks", set())
        holds = draw.sheet.results["breaks"].get(BREAKS["bytes"])
        assert holds is not True
        listed += holds is False
    assert listed > 0


def test_roofline_push_moves_two_parameters_per_side_and_crosses(variant, catalog):
    """The key check: one fixed three-parameter push for every variant, at 9303 announcing 'retuned kernels: 85%'
    where it already was 85%. Each side's push now moves what an interviewer would (the latency tier: one request
    on eight B200s; the overhead and the all-reduce kernel) and crosses in nine draws in ten."""
    crossed = pushed = declared = 0
    for seed in range(60):
        solution = variant(f"roofline-model-breaks@{seed}")
        run = stage_run(solution, catalog, len(solution.question.stages) - 2 +
                        (solution.expected["regime"] == "off-by-a-factor"))
        names = {name for name, _ in run.stage.set}
        assert names in ({"gpu", "tp", "batch"}, {"overhead", "allreduce_latency"})
        declared += set(run.moved) <= names  # else the engine's own push stood in for a declared one that failed
        pushed += 1
        crossed += run.regime != solution.expected["regime"]
    assert crossed >= 0.9 * pushed and declared >= 0.8 * pushed > 0


def test_roofline_calls_are_never_on_a_knife_edge(variant):
    """The choices have no tolerance: no draw within the numbers' 3% of the 2x line, and the largest correction
    leads the next by at least 3% (the first default sat 5% from 2x, its top two corrections 3.8% apart); a
    correction within 3% of the 10% line is not listed in the breaks select (test_roofline_matches_plain_arithmetic)."""
    for solution in draws_of(variant, "roofline-model-breaks"):
        results = solution.sheet.results
        assert abs(results["ratio"] / 2 - 1) >= 0.03
        costs = sorted([results["bandwidth_cost"], results["allreduce_time"], value_of(solution, "overhead")])
        assert costs[1] <= costs[2] * 0.97
        if value_of(solution, "gpu").vendor == "AMD":
            assert value_of(solution, "tp") == 8
    with pytest.raises(VariantError, match="xGMI"):
        variant("roofline-model-breaks@default+gpu=mi300x+tp=2")


def test_roofline_wording(variant):
    """The question that adds TP communication must not say it is left out; a batch of one reads well."""
    solution = variant("roofline-model-breaks@default+batch=1")
    assert not any("communication is left out" in text for text in solution.sheet.assumptions)
    assert "decodes a batch of 1 at about" in solution.prompt
    assert "of context each" not in solution.prompt  # read7 @12012: "each" with a batch of one
    assert "small batch" not in variant("roofline-model-breaks@default").sheet.regime.other_side


def test_roofline_bare_step_is_the_weight_read_at_batch_one(variant):
    """Batch 1, short context: the bare step is the weights over TP × bandwidth (weight-read-intensity's
    42.1 ms for 70B on one H100, spread over 8 GPUs)."""
    solution = variant("roofline-model-breaks@default+batch=1+context=500")
    # 500 tokens of KV add 0.1% to the 17.6 GB of weights each GPU reads.
    assert solution.sheet.results["bare_time"] == pytest.approx(141.1e9 / 8 / 3.35e12, rel=2e-3)


def test_roofline_fixed_costs_swamp_a_short_step(variant):
    """Llama-3-8B over 2 x H100 at batch 1: a 2.4 ms roofline step against 64 all-reduce latencies
    and 2 ms of overhead, past twice the bare estimate (pinned in the question file). (Over 8 GPUs, as this test
    first had it, the model is not served: the realism rule refuses it.)"""
    solution = variant("roofline-model-breaks@default+model=llama-3-8b+tp=2+batch=1+context=500+overhead=2")
    assert solution.sheet.results["ratio"] > 2.2


test_roofline_matches_plain_arithmetic = by_hand_test("roofline-model-breaks", range(15), roofline_by_hand)


def test_roofline_latency_push_leaves_the_dominant_correction_to_find(variant, catalog):
    """read7 @default/@12011: the latency-tier push said "launches and the Python loop cost 8 ms a step" and asked
    what dominates, against corrections of 1.3-1.6 ms: the words gave the answer (overhead in 83 of 100 pushed
    draws). It now moves the tier onto eight B200s at batch one, the engine unchanged: the faster HBM shrinks the
    roofline step under the same fixed costs, and which of them dominates is the candidate's to find."""
    dominant = set()
    for seed in range(40):
        solution = variant(f"roofline-model-breaks@{seed}")
        if solution.expected["regime"] != "within-reach":
            continue
        run = stage_run(solution, catalog, len(solution.question.stages) - 2)
        assert "overhead" not in {name for name, _ in run.stage.set}
        assert "ms a step" not in run.stage.say
        dominant.add(run.solution.expected["dominant"])
    assert {"all-reduce", "overhead"} <= dominant


def test_roofline_all_reduce_latency_is_an_engines(variant):
    """read7 @12012: 5 us an all-reduce is below what engines reach (REALITY.md: a custom one-shot all-reduce about
    10 us at TP 4, NCCL about 20): drawn from 8 to 25 us, and the fast-kernel push sets 8."""
    latencies = [value_of(draw, "allreduce_latency") for draw in draws_of(variant, "roofline-model-breaks")]
    assert min(latencies) >= 8e-6 and max(latencies) <= 25e-6


def test_roofline_corrections_stage_says_the_figures_it_corrects_with(variant, catalog):
    """rf-s2 @11: the corrections stage read as a worksheet ("Take the efficiencies ... in the table"); the
    interviewer now says the measured bandwidth share, all-reduce latency and host overhead in words."""
    solution = variant("roofline-model-breaks@7")
    run = stage_run(solution, catalog, 2)
    assert run is not None and "breaks" in run.ask
    assert "in the table" not in run.say
    assert "85% of HBM bandwidth" in run.say and "8 us" in run.say and "3.3 ms a step" in run.say


def test_roofline_latency_tier_claims_no_faster_hbm_on_the_same_gpu(variant, catalog):
    """rf-s2 @138: a within-reach draw already on B200 was pushed to batch 1 on the same B200s, and the push said
    "faster HBM". The latency tier's words no longer claim a GPU change the push may not make."""
    solution = variant("roofline-model-breaks@default+gpu=b200+batch=180+context=4000")
    assert solution.regime_name == "within-reach"
    run = stage_run(solution, catalog, 3)
    assert run is not None and run.declared and "gpu" not in run.moved and "faster HBM" not in run.say
