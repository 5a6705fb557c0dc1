"""tests/topics/roofline/test_weight_read_intensity.py"""
from __future__ import annotations

import pytest

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
