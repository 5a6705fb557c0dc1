"""The shared step-time model against plain arithmetic and against its two limits."""
from __future__ import annotations

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.derivation import Reject, Sheet
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    StepConstants,
    all_reduce_steps,
    engine,
    require_fit,
    step_time,
    step_work,
)


def memory_bound(s, e, work) -> bool:
    return s.evaluate(work.bytes / e.byte_rate) >= s.evaluate(work.flops / e.flop_rate)


def _time(catalog, model_id="llama-3-70b", gpu_id="h100-sxm", tp=8, tokens=32, attended=0, cached=0,
          constants=DEFAULT_CONSTANTS):
    s = Sheet()
    e = engine(s, catalog.get("models", model_id), catalog.get("gpus", gpu_id), tp, constants)
    work = step_work(s, e, "x", "step", sympy.Integer(tokens), sympy.Integer(attended), sympy.Integer(cached))
    return s, e, work, s.value(step_time(s, e, "x", "step", work))


def by_hand(model, gpu, tp, tokens, attended, cached, compute=0.6, bandwidth=0.8, overhead=2e-3):
    """The model in plain Python from the catalogue records (tp ≤ KV heads)."""
    params = model.params_b * 1e9
    kv_per_gpu = 2 * model.layers * (model.kv_heads // tp) * model.head_dim * 2
    flops = 2 * params * tokens + 4 * model.layers * model.heads * model.head_dim * attended
    moved = params * 2 / tp + kv_per_gpu * cached
    rate = tp * compute * gpu.bf16_dense_tflops * 1e12
    return max(moved / (bandwidth * gpu.hbm_tb_s * 1e12), flops / rate) + overhead


@pytest.mark.parametrize("model_id, gpu_id, tp, tokens, attended, cached", [
    ("llama-3-70b", "h100-sxm", 8, 32, 32 * 2000, 32 * 2000),  # decode batch
    ("llama-3-70b", "h100-sxm", 8, 20032, 32 * 2000 + 20000**2 // 2, 32 * 2000),  # decode + whole prompt
    ("llama-3-8b", "a100-sxm-80gb", 1, 512, 512 * 1024, 0),  # a prefill chunk
    ("qwen2.5-72b", "h200-sxm", 4, 128, 128 * 8000, 128 * 8000),  # long-context decode
    ("llama-3-8b", "mi300x", 2, 2048, 2048**2 // 2, 0),
])
def test_matches_plain_arithmetic(catalog, model_id, gpu_id, tp, tokens, attended, cached):
    _, _, _, t = _time(catalog, model_id, gpu_id, tp, tokens, attended, cached)
    expected = by_hand(catalog.get("models", model_id), catalog.get("gpus", gpu_id), tp, tokens, attended, cached)
    assert t == pytest.approx(expected, rel=1e-12)


def test_small_batch_decode_is_the_weight_read_plus_overhead(catalog):
    """Batch 1 at a short context: 141.1 GB / 8 GPUs at 80% of 3.35 TB/s = 6.58 ms, plus 2 ms."""
    s, e, work, t = _time(catalog, tokens=1, attended=100, cached=100)
    assert memory_bound(s, e, work)
    weight_read = 70.55e9 * 2 / 8 / (0.8 * 3.35e12)
    assert t == pytest.approx(weight_read + 2e-3, rel=1e-3)  # 100 tokens of KV add 0.06%


def test_large_prefill_chunk_is_the_math_plus_overhead(catalog):
    """An 8K-token prefill: compute-bound, FLOPs / (TP × 60% × 989.4 TFLOP/s) + 2 ms."""
    tokens = 8192
    s, e, work, t = _time(catalog, tokens=tokens, attended=tokens**2 // 2)
    assert not memory_bound(s, e, work)
    flops = 2 * 70.55e9 * tokens + 4 * 80 * 64 * 128 * tokens**2 / 2
    assert t == pytest.approx(flops / (8 * 0.6 * 989.4e12) + 2e-3, rel=1e-12)


def test_tensor_parallelism_divides_bytes_and_flops(catalog):
    """Doubling TP halves the kernel time on both sides of the roofline (KV heads still split)."""
    for tokens, attended, cached in ((16, 16 * 4000, 16 * 4000), (4096, 4096**2 // 2, 0)):
        *_, t2 = _time(catalog, "llama-3-8b", tp=2, tokens=tokens, attended=attended, cached=cached)
        *_, t4 = _time(catalog, "llama-3-8b", tp=4, tokens=tokens, attended=attended, cached=cached)
        assert t4 - 2e-3 == pytest.approx((t2 - 2e-3) / 2, rel=1e-12)


def test_crossover_sits_at_the_ridge_over_the_efficiencies(catalog):
    """Weights only: memory and math tie at 2N·T/(η_c·P) = N·b/(η_bw·BW), T = b·η_c·P / (2·η_bw·BW)."""
    ridge_tokens = 2 * 0.6 * 989.4e12 / (2 * 0.8 * 3.35e12)  # ≈ 221 tokens on H100 in bf16
    below, above = int(ridge_tokens) - 1, int(ridge_tokens) + 2
    s, e, work, _ = _time(catalog, tokens=below)
    assert memory_bound(s, e, work)
    s, e, work, _ = _time(catalog, tokens=above)
    assert not memory_bound(s, e, work)


def test_constants_are_named_and_passed_in(catalog):
    constants = StepConstants(compute=0.5, bandwidth=0.9, overhead=5e-3)
    s, _, _, t = _time(catalog, tokens=1, constants=constants)
    shown = {g.symbol: g.value for g in s.givens}
    assert (shown["η_c"], shown["η_bw"], shown["t_oh"]) == (0.5, 0.9, 5e-3)
    assert t == pytest.approx(70.55e9 * 2 / 8 / (0.9 * 3.35e12) + 5e-3, rel=1e-12)
    assert any("η_c = 50%" in text and "t_oh = 5 ms" in text for text in s.assumptions)


def test_overhead_may_be_left_to_the_question(catalog):
    s, e, _, t = _time(catalog, tokens=1, constants=StepConstants(overhead=None))
    assert e.t_oh is None and "t_oh" not in {g.symbol for g in s.givens}
    assert t == pytest.approx(70.55e9 * 2 / 8 / (0.8 * 3.35e12), rel=1e-12)
    assert s.evaluate(e.bytes_within(sympy.Float(0.01))) == pytest.approx(0.01 * 0.8 * 3.35e12)


def test_budget_helpers_subtract_the_overhead(catalog):
    s, e, *_ = _time(catalog)
    assert s.evaluate(e.bytes_within(sympy.Float(0.05))) == pytest.approx(0.048 * 0.8 * 3.35e12)


def test_kv_replicated_past_the_kv_heads(catalog):
    """TP 16 on an 8-KV-head model: each GPU still holds one head, so KV bytes per GPU stop falling."""
    s8, e8, *_ = _time(catalog, tp=8)
    s16, e16, *_ = _time(catalog, tp=16)
    assert s8.value(e8.KV) == s16.value(e16.KV) == 327_680 / 8


def test_require_fit_rejects_what_does_not_fit(catalog):
    s, e, *_ = _time(catalog, tp=1)
    with pytest.raises(Reject):
        require_fit(s, e, catalog.get("gpus", "h100-sxm"), sympy.Integer(0))  # 141 GB on one 80 GB GPU
    s, e, *_ = _time(catalog, tp=8)
    require_fit(s, e, catalog.get("gpus", "h100-sxm"), sympy.Integer(100_000))  # 17.6 GB + 4.1 GB


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(0, 10**7), st.integers(0, 10**6))
def test_step_time_is_the_larger_bound_plus_overhead(catalog, tokens, attended, cached):
    s, e, work, t = _time(catalog, tokens=tokens, attended=attended, cached=cached)
    memory = s.evaluate(work.bytes / e.byte_rate)
    compute = s.evaluate(work.flops / e.flop_rate)
    assert t == pytest.approx(max(memory, compute) + 2e-3, rel=1e-12)


def test_communication_clause_follows_the_question(catalog):
    """The stated model leaves TP communication out unless the question adds it (roofline-model-breaks)."""
    model, gpu = catalog.get("models", "llama-3-70b"), catalog.get("gpus", "h100-sxm")
    for communication, clause in ((False, "TP communication is left out."), (True, "TP communication comes on top")):
        s = Sheet()
        engine(s, model, gpu, 8, communication=communication)
        assert any(clause in text for text in s.assumptions)


@pytest.mark.parametrize("model_id, tp, tokens", [("llama-3-70b", 8, 20_032), ("llama-3-70b", 4, 99),
                                                  ("qwen2.5-72b", 2, 1), ("llama-3-8b", 2, 4096)])
def test_all_reduce_steps_split_the_collective_exactly(catalog, model_id, tp, tokens):
    """fixed + per_token × tokens is collective.tp_all_reduce, on the same givens: what the chunk and batch
    questions solve with must be what they show. 70B at TP 8, 20,032 tokens: the issue's +0.206 s."""
    model, gpu = catalog.get("models", model_id), catalog.get("gpus", "h100-sxm")
    s = Sheet()
    engine(s, model, gpu, tp, communication=True)
    terms = all_reduce_steps(s, model, gpu, tp)
    shown = tp_all_reduce(s, model, gpu, tp, sympy.Integer(tokens), tag="x", label="step")
    assert s.compare(terms.fixed + terms.per_token * tokens, shown) == 0
    assert s.value(terms.fixed) == pytest.approx(2 * model.layers * 10e-6)
    if (model_id, tp, tokens) == ("llama-3-70b", 8, 20_032):
        assert s.value(shown) == pytest.approx(0.2058, rel=1e-3)


def test_all_reduce_steps_vanish_at_tp_one(catalog):
    s = Sheet()
    terms = all_reduce_steps(s, catalog.get("models", "llama-3-8b"), catalog.get("gpus", "h100-sxm"), 1)
    assert terms.fixed == 0 and terms.per_token == 0 and not s.steps


@pytest.mark.parametrize("model_id, tp", [("llama-3-70b", 8), ("llama-3-70b", 16), ("qwen2.5-72b", 4),
                                          ("llama-3-8b", 1)])
def test_kv_prerequisite_gives_the_same_share_per_gpu(catalog, model_id, tp):
    """KV bytes per token taken from kv-bytes-per-token, then split over the KV heads each GPU holds, equal
    the derived per-GPU figure (replication past the KV heads included), and the sheet names the source."""
    model, gpu = catalog.get("models", model_id), catalog.get("gpus", "h100-sxm")
    derived, given = Sheet(), Sheet()
    e1 = engine(derived, model, gpu, tp)
    e2 = engine(given, model, gpu, tp, kv_prerequisite=True)
    assert given.value(e2.KV) == derived.value(e1.KV)
    assert given.prerequisites == {"kv-bytes-per-token"} and not derived.prerequisites


@pytest.mark.parametrize("code, listed, unlisted", [
    # bf16 weights, the engine's defaults: each constant's card is on the screen
    ("multi-model-fleet-tiering@default", {"step-compute", "step-bandwidth", "step-overhead"}, {"step-compute-fp8"}),
    # fp8 weights and cache: the FP8 card, and bf16's not
    ("million-token-context@default+weight_dtype=fp8+kv_dtype=fp8",
     {"step-compute-fp8", "step-bandwidth", "step-overhead"}, {"step-compute"}),
    # its own MFU: the bandwidth and the decode step's overhead (its TPOT) are the cards'
    ("preemption-policies@default", {"step-bandwidth", "step-overhead"}, {"step-compute", "step-compute-fp8"}),
])
def test_the_cards_in_play_are_the_constants_used(variant, code, listed, unlisted):
    """A constant taken from a card puts that card on the screen, whatever the question's words name: a
    staged file names no card, and a re-deriver reading million-token-context saw no bandwidth figure."""
    cards = set(variant(code).cards())
    assert listed <= cards and not unlisted & cards
