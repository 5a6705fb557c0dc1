"""The card's matmul-precision: weight GEMMs at the weights' dense peak, attention (QKᵀ and PV) at the KV
cache's. One helper gives the two peaks; the step-time model and every solver that mixes dtypes use it.
The expected figures here come from the datasheet fields, not from the helper."""
from __future__ import annotations

import math

import pytest
import sympy

from solvers.conventions import convention
from solvers.derivation import Sheet
from solvers.formulas.common import given_matmul_peaks, matmul_peaks
from solvers.formulas.steptime import StepConstants, engine, step_time, step_work
from tests.by_hand import DTYPE_BYTES, param_values

FIELD = {"bf16": "bf16_dense_tflops", "fp8": "fp8_dense_tflops"}


def datasheet_peaks(gpu, weight_dtype: str, kv_dtype: str) -> tuple[float, float]:
    """(weights' peak, attention's peak) in FLOP/s: the cache's dtype, bf16 where the GPU has no tensor cores
    for it (an fp8 cache on an A100 is dequantised)."""
    attention = gpu.get(FIELD[kv_dtype]) or gpu.get(FIELD["bf16"])
    return gpu.get(FIELD[weight_dtype]) * 1e12, attention * 1e12


ETA = {"bf16": 0.6, "fp8": 0.5}  # step-compute and step-compute-fp8: each matmul at its own precision's share


def achievable_peaks(gpu, weight_dtype: str, kv_dtype: str) -> tuple[float, float]:
    """datasheet_peaks at the share of each a step reaches (the precision attention runs at: the cache's,
    bf16 where the GPU has no tensor cores for it)."""
    P, P_att = datasheet_peaks(gpu, weight_dtype, kv_dtype)
    attention = kv_dtype if gpu.get(FIELD[kv_dtype]) else "bf16"
    return ETA[weight_dtype] * P, ETA[attention] * P_att


def test_the_card_states_the_rule():
    text = convention("matmul-precision").text
    assert "weights' dtype" in text and "cache's dtype" in text and "bf16" in text


@pytest.mark.parametrize("gpu_id", ["h100-sxm", "h200-sxm", "b200", "mi300x", "a100-sxm-80gb"])
@pytest.mark.parametrize("weights", ["bf16", "fp8"])
@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_helper_gives_the_weights_peak_and_the_caches(catalog, gpu_id, weights, cache):
    gpu = catalog.get("gpus", gpu_id)
    if gpu.get(FIELD[weights]) is None:
        return  # no fp8 GEMMs on this GPU: the solvers refuse such a draw
    expected = datasheet_peaks(gpu, weights, cache)
    assert matmul_peaks(gpu, weights, cache) == pytest.approx(expected)
    s = Sheet()
    P, P_att = given_matmul_peaks(s, gpu, weights, cache)
    assert (s.value(P), s.value(P_att)) == pytest.approx(expected)
    assert (P is P_att) == (expected[0] == expected[1])  # one given where the figures agree


def _prefill(catalog, weights: str, cache: str, tokens: int = 16384, gpu_id: str = "h100-sxm", tp: int = 4):
    s = Sheet()
    model, gpu = catalog.get("models", "llama-3-70b"), catalog.get("gpus", gpu_id)
    e = engine(s, model, gpu, tp, StepConstants(overhead=None), dtype=weights, kv_dtype=cache)
    T = sympy.Integer(tokens)
    work = step_work(s, e, "x", "prefill", T, T**2 / 2, 0)
    return s.value(step_time(s, e, "x", "prefill", work)), model, gpu


@pytest.mark.parametrize("weights, cache", [("bf16", "bf16"), ("fp8", "bf16"), ("bf16", "fp8"), ("fp8", "fp8")])
def test_step_time_prices_each_matmul_at_its_peak(catalog, weights, cache):
    """A 16K-token prefill of Llama-3-70B on TP 4 H100 is compute-bound: 2N per token at the weights' peak,
    A·T²/2 at the cache's, each at its precision's share (bf16 60%, fp8 50%)."""
    t, model, gpu = _prefill(catalog, weights, cache)
    P, P_att = achievable_peaks(gpu, weights, cache)
    T = 16384
    attention = 4 * model.layers * model.heads * model.head_dim * T**2 / 2
    assert t == pytest.approx(2 * model.params_b * 1e9 * T / (4 * P) + attention / (4 * P_att), rel=1e-12)


def test_an_fp8_cache_on_an_a100_runs_bf16_attention(catalog):
    """No fp8 tensor cores: the cache is dequantised, so the step is the bf16 one (the bytes are not read here)."""
    assert _prefill(catalog, "bf16", "fp8", gpu_id="a100-sxm-80gb")[0] == pytest.approx(
        _prefill(catalog, "bf16", "bf16", gpu_id="a100-sxm-80gb")[0], rel=1e-12)


# The bank's questions whose weights and cache can differ: where each reads its two dtypes (a parameter, or
# the dtype its prompt states).
MIXED = {
    "kv-cache-tiers": ("dtype", "bf16"),
    "million-token-context": ("weight_dtype", "kv_dtype"),
    "mla-vs-gqa-under-tp": ("weight_dtype", "kv_dtype"),
    "mla-tp-duplication": ("fp8", "kv_dtype"),
    "pd-transfer-bandwidth": ("weight_dtype", "kv_dtype"),
    "model-runner-v2": ("dtype", "bf16"),
    "split-kv-decode-merge": ("dtype", "bf16"),
    "voice-latency-budget": ("dtype", "bf16"),
}


def _dtype(values: dict, name: str) -> str:
    return values[name] if name in values else name


@pytest.mark.parametrize("qid", sorted(MIXED))
@pytest.mark.parametrize("seed", range(7001, 7021))
def test_every_mixed_precision_solver_states_both_peaks(variant, qid, seed):
    """Each sheet gives the weights' peak and the cache's among its datasheet figures: a solver that prices a
    bf16 cache's attention at the fp8 weights' peak (or an fp8 cache's at bf16) states only one and fails."""
    solution = variant(f"{qid}@{seed}")
    values = param_values(solution)
    weights, cache = (_dtype(values, name) for name in MIXED[qid])
    wanted = datasheet_peaks(values["gpu"], weights, cache)
    stated = {g.value for g in solution.sheet.givens if g.unit == "TFLOP/s" and "dense" in g.label}
    assert all(any(math.isclose(peak, x, rel_tol=1e-12) for x in stated) for peak in wanted), (wanted, stated)


@pytest.mark.parametrize("seed", range(7001, 7041))
def test_kv_cache_tiers_recompute_by_hand(variant, seed):
    """The recompute per token is the prefill by the step model, with its two peaks: the weights' dtype for
    2N per token, the bf16 cache's for attention (the prompt says 'bf16 KV'), over the TP group, each at its
    precision's share."""
    solution = variant(f"kv-cache-tiers@{seed}")
    p, r = {x.name: x.value for x in solution.params}, solution.sheet.results
    model, gpu, tp, D = p["model"], p["gpu"], p["tp"], p["prompt"]
    P, P_att = achievable_peaks(gpu, p["dtype"], "bf16")
    N = model.params_b * 1e9
    math_time = (2 * N * D / P + 4 * model.layers * model.heads * model.head_dim * D**2 / 2 / P_att) / tp
    reads = N * DTYPE_BYTES[p["dtype"]] / tp / (0.8 * gpu.hbm_tb_s * 1e12)
    prefill = max(reads, math_time) + (r["allreduce_pre"] if tp > 1 else 0)
    assert r["recompute"] == pytest.approx(prefill / D, rel=1e-9)


@pytest.mark.parametrize("seed", range(7001, 7031))
def test_million_token_prefill_by_hand(variant, seed):
    """The prefill's math over the nodes: the weights' FLOPs at their peak, causal attention at the cache's."""
    solution = variant(f"million-token-context@{seed}")
    p, r = {x.name: x.value for x in solution.params}, solution.sheet.results
    model, T = p["model"], p["context"]
    P, P_att = achievable_peaks(p["gpu"], p["weight_dtype"], p["kv_dtype"])
    attention = 4 * model.layers * model.heads * model.head_dim * T**2 / 2
    compute = (2 * model.params_b * 1e9 * T / P + attention / P_att) / (8 * r["nodes"])
    expected = max(compute, r["ring_pass"]) + r["allreduce_pre"] + 2e-3
    assert r["prefill_time"] == pytest.approx(expected, rel=1e-9)
