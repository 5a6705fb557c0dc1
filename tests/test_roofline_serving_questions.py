"""Checks for weight-read-intensity, datasheet-speedup-regimes and continuous-batching-padding."""
from __future__ import annotations

import heapq
import math

import pytest

from solvers.data import Record
from solvers.engine import VariantError
from solvers.formulas.common import GPU_MEMORY_UTILIZATION
from solvers.interview import stage_run


def test_weight_read_a_modest_upgrade_is_eaten_by_the_all_reduces(variant):
    """A GPU 30% faster in HBM and peak shortens only the 85% of the default's step that is not
    all-reduce: 1.245x, within 1% of the 25% line, so it is judged too close to call and not listed (review 2:
    it sat on the line and read "1.25x ✗"); its reason prints 1.245x. At TP 1 there is nothing it does not
    speed up, and it gains 1.3x (pinned in the question file)."""
    all_reduce = 2 * 80 * (10e-6 + 1.5 * 32 * 8192 * 2 / 450e9)
    reads = (141.1e9 + 32 * 512 * 327680) / (4 * 3.35e12)
    assert (reads + all_reduce) / (reads / 1.3 + all_reduce) == pytest.approx(1.245, abs=1e-3)
    upgrade = "a GPU {upgrade} faster in both HBM bandwidth and tensor peak (same NVLink)"
    default = variant("weight-read-intensity@default")
    assert "1.245x the tokens/s" in default.sheet.reasons["levers"][upgrade]
    assert default.sheet.results["levers"][upgrade] is None and upgrade not in default.shown["levers"]
    assert default.question.answer("levers").text(upgrade) == \
        "a GPU 30% faster in both HBM bandwidth and tensor peak (same NVLink)"
    alone = variant("weight-read-intensity@default+model=llama-3-8b+tp=1").sheet
    assert "1.3x the tokens/s" in alone.reasons["levers"][upgrade]


def test_weight_read_a_doubled_batch_that_barely_fits_or_not_is_not_asked(variant):
    """r3: at @9622 (Qwen2.5-72B fp8 on one H200, 100 × 980 tokens) the doubled batch needs 136.94 GB against
    135.68 GB usable, 0.9% over: an fp8 checkpoint's bf16 tensors or a slip in the bytes flips it, so within 3% of
    usable HBM whether it fits is not asked and the option is not listed. The default fits by a wide margin."""
    twice = "twice the batch (its doubled KV cache must fit in usable HBM)"
    near = variant("weight-read-intensity@9622")
    assert near.sheet.results["levers"][twice] is None and twice not in near.shown["levers"]
    assert "too close to call whether it fits" in near.sheet.reasons["levers"][twice]
    assert variant("weight-read-intensity@default").sheet.results["levers"][twice] is True


def test_weight_read_decode_counts_kv_reads(variant):
    """The old key read the weights alone: at 4K tokens of context 100 sequences read as much KV as weights,
    and no batch makes decode compute-bound (intensity tends to 2N/(T·KV) = 105 FLOP/B)."""
    summary = variant("weight-read-intensity@default+prompt=4096+batch=100").sheet.regime.summary
    assert "no batch gets there" in summary and "105 FLOP/B" in summary


def test_weight_read_pushes_cross_from_either_side(variant, catalog):
    """The memory-bound side's push is a short, wide batch: 1,024 prompts of 128 tokens run at 785 FLOP/B
    against the 295 ridge, each user at 21.25 tokens/s; the compute-bound side's push is the engine's
    crossing search (seed 0: the batch cut from 830 to 100), and neither side is asked the other's."""
    default = variant("weight-read-intensity@default")
    run = stage_run(default, catalog, 3)
    assert str(run.solution.code) == "weight-read-intensity@default+prompt=128+batch=1024"
    assert run.ask == ("regime", "per_user") and stage_run(default, catalog, 4) is None
    pushed = run.solution.sheet.results
    assert pushed["regime"] == "compute-bound"
    assert pushed["per_user"] == pytest.approx(1 / (2 * 70.55e9 * 1024 / (4 * 989.4e12)
                                                    + 2 * 80 * (10e-6 + 1.5 * 1024 * 8192 * 2 / 450e9)))
    wide = variant("weight-read-intensity@0")
    assert wide.regime_name == "compute-bound" and stage_run(wide, catalog, 3) is None
    assert stage_run(wide, catalog, 4).regime == "memory-bound"


@pytest.mark.parametrize("seed", range(20))
def test_weight_read_matches_plain_arithmetic(variant, seed):
    solution = variant(f"weight-read-intensity@{seed}")
    p = {param.name: param.value for param in solution.params}
    m, gpu, tp, T, B = p["model"], p["gpu"], p["tp"], p["prompt"], p["batch"]
    b = {"bf16": 2, "fp8": 1}[p["dtype"]]
    peak = gpu[f"{p['dtype']}_dense_tflops"] * 1e12
    weights, kv = m.params_b * 1e9 * b, B * T * 4 * m.layers * m.kv_heads * m.head_dim
    assert weights + kv <= 0.9 * tp * gpu.hbm_mib * 2**20  # the batch's KV fits beside the weights

    def all_reduce(tokens):
        return 0 if tp == 1 else 2 * m.layers * (10e-6 + 2 * (tp - 1) / tp * tokens * m.hidden * 2
                                                 / (gpu.nvlink_gb_s * 1e9 / 2))

    step = max((weights + kv) / (tp * gpu.hbm_tb_s * 1e12), 2 * m.params_b * 1e9 * B / (tp * peak)) + all_reduce(B)
    results = solution.sheet.results
    assert results["step_time"] == pytest.approx(step, rel=1e-9)
    assert results["prefill_time"] == pytest.approx(
        max(weights / (tp * gpu.hbm_tb_s * 1e12), 2 * m.params_b * 1e9 * T / (tp * peak)) + all_reduce(T), rel=1e-9)
    intensity = 2 * m.params_b * 1e9 * B / (weights + kv)
    assert results["regime"] == ("compute-bound" if intensity > peak / (gpu.hbm_tb_s * 1e12) else "memory-bound")


@pytest.mark.parametrize("code", ["weight-read-intensity@default+gpu=mi300x+tp=4",
                                  "datasheet-speedup-regimes@default+new_gpu=mi300x+gpus=4"])
def test_an_xgmi_ring_spans_all_eight_gpus(variant, code):
    """The all-reduces take half the xGMI aggregate as the link, which only a ring over all eight MI300X
    reaches: TP 2 and 4 on MI300X are refused, TP 8 is served."""
    with pytest.raises(VariantError, match="xGMI"):
        variant(code)
    assert variant(code.replace("tp=4", "tp=8").replace("gpus=4", "gpus=8")).expected["regime"]


# --- datasheet-speedup-regimes -------------------------------------------------------------


def test_speedup_against_nvidia_h200_figures(variant):
    """NVIDIA's H200 page: 1.4X the H100's memory bandwidth, and up to 1.9X its Llama 2 70B
    inference throughput (TensorRT-LLM, tuned batches). The read-bound part of the small-batch step
    speeds up by exactly the first figure (the all-reduces, on the same NVLink, do not); the
    capacity-bound speedup falls between the two."""
    solution = variant("datasheet-speedup-regimes@default")
    expected = solution.expected
    assert 4.8 / 3.35 == pytest.approx(1.4, abs=0.05)
    assert 1.2 < expected["speedup_bandwidth"] < 4.8 / 3.35
    assert expected["speedup_bandwidth"] < expected["speedup_capacity"] < 1.9


def _roofline_by_hand(old: Record, new: Record, model: Record, gpus: int, context: int, small: int,
                      max_num_seqs: int) -> dict:
    """The speedups recomputed in plain Python from the catalogue records."""
    weights = model.params_b * 1e9 * 2
    kv_request = 2 * model.layers * model.kv_heads * model.head_dim * 2 * context

    def step(gpu: Record, moved: float, tokens: float) -> float:
        all_reduce = 2 * model.layers * (10e-6 + 2 * (gpus - 1) / gpus * tokens * model.hidden * 2
                                         / (gpu.nvlink_gb_s * 1e9 / 2))
        return max(moved / (gpus * gpu.hbm_tb_s * 1e12),
                   2 * model.params_b * 1e9 * tokens / (gpus * gpu.bf16_dense_tflops * 1e12)) + all_reduce

    def batch(gpu: Record) -> int:
        return min(int(max_num_seqs), math.floor((gpus * gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION - weights)
                                            / kv_request))

    def throughput(gpu: Record, size: int) -> float:
        return size / step(gpu, weights + size * kv_request, size)

    tpot = step(old, weights + batch(old) * kv_request, batch(old))
    small_bytes = weights + small * kv_request
    return {
        "speedup_compute": step(old, weights, context) / step(new, weights, context),
        "speedup_bandwidth": step(old, small_bytes, small) / step(new, small_bytes, small),
        "batch_old": batch(old),
        "capacity_decode_old": tpot,
        "speedup_capacity": throughput(new, batch(new)) / throughput(old, batch(old)),
    }


@pytest.mark.parametrize("seed", range(20))
def test_speedup_matches_plain_arithmetic(variant, seed):
    solution = variant(f"datasheet-speedup-regimes@{seed}")
    p = {param.name: param.value for param in solution.params}
    by_hand = _roofline_by_hand(p["old_gpu"], p["new_gpu"], p["model"], p["gpus"], p["context"], p["small_batch"],
                                p["max_num_seqs"])
    for key, value in by_hand.items():
        assert solution.expected[key] == pytest.approx(value, rel=1e-9), key
    names = ("compute", "bandwidth", "capacity")
    best = max(by_hand[f"speedup_{name}"] for name in names)
    assert by_hand[f"speedup_{solution.expected['regime']}"] == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(0, 400, 2))
def test_speedup_none_of_them_follows_every_workloads_figure(variant, seed):
    """Key check 9403: decode at the largest batch gained 2.448x over a 2.388x bandwidth ratio, sat unlisted within
    3% of the line, and "none of them" was keyed true. "None" must hold exactly when no workload, listed or not,
    beats the ratio; each listed option must follow its own figure."""
    solution = variant(f"datasheet-speedup-regimes@{seed}")
    p = {param.name: param.value for param in solution.params}
    ratio = p["new_gpu"].hbm_tb_s / p["old_gpu"].hbm_tb_s
    gains = {option: solution.expected[f"speedup_{name}"] for name, option in
             (("compute", "a long prompt's prefill"), ("bandwidth", "decode at the small batch"),
              ("capacity", "decode at the largest batch"))}
    keyed = set(solution.expected["over_bandwidth"])
    none = "none of them: every workload gains less"
    assert (none in keyed) == all(gain < ratio for gain in gains.values())
    for option, gain in gains.items():
        if option in solution.shown["over_bandwidth"]:
            assert (option in keyed) == (gain > ratio), option


@pytest.mark.parametrize("seed", range(100))
def test_speedup_draws_pairs_close_on_the_datasheet(variant, seed):
    """The teaser's premise: compute and bandwidth ratios within 1.5x of each other. The old draws had
    A100 to B200 (7.2x vs 3.9x) and 70B on two H100s with 2 requests fitting (a 66x 'capacity speedup')."""
    p = {param.name: param.value for param in variant(f"datasheet-speedup-regimes@{seed}").params}
    old, new = p["old_gpu"], p["new_gpu"]
    peak, bandwidth = new.bf16_dense_tflops / old.bf16_dense_tflops, new.hbm_tb_s / old.hbm_tb_s
    assert 1 / 1.5 <= peak / bandwidth <= 1.5
    assert 2 * p["model"].params_b <= 0.8 * p["gpus"] * old.hbm_mib * 2**20 / 1e9


def test_speedup_degenerate_layouts_are_refused(variant):
    with pytest.raises(VariantError):  # @19 of the review: 141 GB of weights on 2 x 80 GB
        variant("datasheet-speedup-regimes@default+gpus=2")
    with pytest.raises(VariantError):  # A100 to H100: 3.2x the peak, 1.6x the bandwidth, not "close"
        variant("datasheet-speedup-regimes@default+old_gpu=a100-sxm-80gb+new_gpu=h100-sxm")


def test_speedup_push_flips_the_winner(variant, catalog):
    """The capacity side's push is the interviewer's 'and for Blackwell?': H200 to B200 adds 2.3x the peak and
    1.3x the HBM, so prefill wins."""
    run = stage_run(variant("datasheet-speedup-regimes@default"), catalog, 3)
    assert str(run.solution.code).endswith("+old_gpu=h200-sxm+new_gpu=b200")
    assert run.regime == "compute"


def test_speedup_small_batch_winning_is_refused(variant):
    """Small-batch decode wins only where max_num_seqs caps both batches (1,876 requests fit on the H200s at 1,536
    tokens, 1,024 run): too rare (about 4% of draws) to be a choice, so the draw is refused. At 16K-token requests
    the same pair's batches stay under the cap, and capacity wins."""
    base = "datasheet-speedup-regimes@default+small_batch=4+max_num_seqs=1024"
    with pytest.raises(VariantError):
        variant(f"{base}+context=1536")
    uncapped = variant(f"{base}+context=16384")
    assert uncapped.sheet.results["batch_new"] < 1024 and uncapped.expected["regime"] == "capacity"


# --- continuous-batching-padding -----------------------------------------------------------


def test_padding_default_matches_catalogue(variant):
    """A batch of eight finishes with its 800-token request: seven slots pad until then (the keys are pinned in
    the question file)."""
    solution = variant("continuous-batching-padding@default")
    assert solution.param("lengths").value == [120, 95, 140, 110, 800, 130, 105, 90]


def test_padding_answers_depend_on_the_lengths_not_only_the_batch(variant, bank):
    """The review's bug: "slots on padding in the final step" was B - 1 in every draw. Among draws of
    one batch size, every graded number now takes more than one value."""
    assert "padding_slots" not in {a.key for a in bank.get("continuous-batching-padding").answers}
    by_batch: dict[int, list[dict]] = {}
    for seed in range(40):
        solution = variant(f"continuous-batching-padding@{seed}")
        by_batch.setdefault(solution.param("batch").value, []).append(solution.expected)
    for draws in by_batch.values():
        if len(draws) < 3:
            continue
        for key, value in draws[0].items():
            if isinstance(value, float):
                assert len({d[key] for d in draws}) > 1, key


def _steps_with_refill(lengths: list[int], slots: int) -> int:
    """Steps to finish `lengths` (in queue order) when a freed slot takes the next request at once."""
    finish = [0] * slots
    for length in lengths:
        heapq.heappush(finish, heapq.heappop(finish) + length)
    return max(finish)


@pytest.mark.parametrize("code", ["continuous-batching-padding@default", "continuous-batching-padding@2",
                                  "continuous-batching-padding@5"])
def test_gain_matches_a_scheduling_simulation(variant, code):
    """Serve the batch's requests over and over from a queue that never empties: static batches
    take max(L) steps each, refilled slots finish the same work in about sum(L)/B steps."""
    solution = variant(code)
    lengths = solution.param("lengths").value
    repeats = 2000
    static_steps = repeats * max(lengths)
    refill_steps = _steps_with_refill(lengths * repeats, len(lengths))
    assert static_steps / refill_steps == pytest.approx(solution.expected["gain"], rel=0.01)


def test_padding_push_changes_the_traffic_and_crosses(variant, catalog):
    """The push changes the traffic, as an interviewer would: chat replies with a long tail where switching did
    not pay; where it paid, a small model (15 ms steps) with same-length replies. The refilling cost never
    moves, the lengths always do, and the pushes cross in nine draws in ten."""
    crossed = declared = 0
    for seed in range(40):
        first = variant(f"continuous-batching-padding@{seed}")
        side = first.expected["regime"]
        push = next(i for i, stage in enumerate(first.question.stages) if stage.when == side)
        run = stage_run(first, catalog, push)
        crossed += run.regime != side
        assert run.solution.param("refill_cost").raw == first.param("refill_cost").raw
        if "spread" in run.moved:  # the declared push (else the engine's own stood in for it)
            declared += 1
            assert run.solution.param("lengths").raw != first.param("lengths").raw
    assert crossed >= 36 and declared >= 34


@pytest.mark.parametrize("seed", range(40))
def test_padding_switch_pays_exactly_when_refilled_throughput_beats_static(variant, seed):
    """The decision turns on a second quantity: refilling pays when B / (step + cost) beats the static batch's
    sum(L) / (max(L) · step), not on the gain alone (the old 'gain >= 2' restated a graded number)."""
    solution = variant(f"continuous-batching-padding@{seed}")
    lengths = solution.param("lengths").value
    step, cost = solution.param("step").value, solution.param("refill_cost").value
    static = sum(lengths) / (max(lengths) * step)
    refilled = len(lengths) / (step + cost)
    assert solution.expected["regime"] == ("pays" if refilled > static else "does-not-pay")
    assert abs(refilled / static - 1) >= 0.03  # never a call on the answers' rounding


def test_padding_pinned_seed(variant):
    """Seed 0 draws these parameters (its keys are pinned in the question file)."""
    solution = variant("continuous-batching-padding@0")
    assert [p.raw for p in solution.params] == [8, 110, 0.1, [111, 104, 114, 125, 121, 103, 97, 103], 15, 20]
