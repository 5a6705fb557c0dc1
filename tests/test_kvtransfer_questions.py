"""Checks for the KV transfer questions: recompute-vs-fetch."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError

KIB = 1024


def _params(solution) -> dict:
    return {param.name: param.value for param in solution.params}


def _kv_per_token(model) -> int:
    return 2 * model.layers * model.kv_heads * model.head_dim * 2  # bf16


# --- recompute-vs-fetch ------------------------------------------------------------------------


def test_recompute_vs_fetch_default(variant):
    """Llama-3-70B on H100 over 50 GB/s (the keys are pinned in the question file): the FLOPs a KV byte carries,
    and the crossing the break-even rounds up, found by bisection."""
    results = variant("recompute-vs-fetch@default").sheet.results
    assert results["flops_per_kv_byte"] == pytest.approx(2 * 70.55e9 / (320 * KIB))  # 430,603 FLOP/B
    # 0.5 ms = T·(t_r − t_f) + attention: 8.65 tokens, so a 9-token hit is the shortest worth fetching.
    assert results["crossing"] == pytest.approx(_crossing(results, 0.5e-3, 4 * 80 * 64 * 128 / (4 * 0.6 * 989.4e12)))


def _crossing(results, t0: float, a: float) -> float:
    """The positive root of a/2·T² + (t_r − t_f)·T − t_0 = 0, by bisection (not the closed form the solver uses)."""
    gain = results["recompute_per_token"] - results["fetch_per_token"]
    low, high = 0.0, t0 / gain
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if a * mid**2 / 2 + gain * mid < t0 else (low, mid)
    return low


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallelism_cancels(variant, tp):
    """The lead per token is (2N/KV)/(F_eff/BW) whatever the TP degree, while the group keeps whole KV heads."""
    results = variant(f"recompute-vs-fetch@default+gpu=h200-sxm+tp={tp}").sheet.results
    assert results["advantage"] == pytest.approx(2 * 70.55e9 / (320 * KIB) / (0.6 * 989.4e12 / 50e9))


def test_mha_and_moe_spend_little_compute_per_kv_byte(variant):
    """Llama-2-7B (MHA, 512 KiB/token) and Mixtral (2N from its 12.9B active parameters) sit far below 70B GQA."""
    mha = variant("recompute-vs-fetch@default+model=llama-2-7b+tp=1+hit=2000").sheet.results
    assert mha["flops_per_kv_byte"] == pytest.approx(2 * 6.74e9 / (512 * KIB))  # 25,712 FLOP/B
    moe = variant("recompute-vs-fetch@default+model=mixtral-8x7b+tp=2").sheet.results
    assert moe["flops_per_kv_byte"] == pytest.approx(2 * 12.88e9 / (128 * KIB))
    assert mha["advantage_peak"] < 2  # over 50 GB/s an H100 recomputes an MHA 7B nearly as fast as it fetches


@pytest.mark.parametrize("seed", range(30))
def test_recompute_vs_fetch_matches_plain_arithmetic(variant, seed):
    solution = variant(f"recompute-vs-fetch@{seed}")
    p, expected = _params(solution), solution.expected
    model, gpu, tp = p["model"], p["gpu"], int(p["tp"])
    n = model.get("active_params_b", model.params_b) * 1e9
    rate = tp * 0.6 * gpu.bf16_dense_tflops * 1e12
    r = 2 * n / rate
    f = _kv_per_token(model) / tp / p["bandwidth"]
    hit = p["hit"]
    recompute = hit * r + 4 * model.layers * model.heads * model.head_dim * hit**2 / 2 / rate
    fetch = p["overhead"] + hit * f
    assert expected["advantage"] == pytest.approx(r / f)
    assert expected["recompute_time"] == pytest.approx(recompute)
    assert expected["fetch_time"] == pytest.approx(fetch)
    crossing = _crossing(solution.sheet.results, p["overhead"], 4 * model.layers * model.heads * model.head_dim / rate)
    assert solution.sheet.results["crossing"] == pytest.approx(crossing)
    assert expected["break_even"] == int(crossing) + 1
    assert expected["regime"] == ("fetch-wins" if recompute > fetch else "recompute-wins")


def test_break_even_is_exact_either_side(variant):
    """Attention pulls the crossing under t_0/(t_r − t_f) (346 tokens at a 20 ms fixed cost): the shortest hit
    worth fetching wins by a hair, one token fewer loses."""
    base = variant("recompute-vs-fetch@default+overhead=20").sheet.results
    star = base["break_even"]
    assert star < 20e-3 / (base["recompute_per_token"] - base["fetch_per_token"])
    longer = variant(f"recompute-vs-fetch@default+overhead=20+hit={star}").sheet
    shorter = variant(f"recompute-vs-fetch@default+overhead=20+hit={star - 1}").sheet
    assert longer.regime.name == "fetch-wins" and longer.results["speedup"] > 1
    assert shorter.regime.name == "recompute-wins" and shorter.results["speedup"] <= 1


def test_situations_ask_what_flips_the_winner(variant):
    """Seed 100 draws Llama-2-7B at TP 1 and a 22-token hit (recomputing wins, and only a hundredfold hit flips
    it: pinned in the question file)."""
    p = _params(variant("recompute-vs-fetch@100"))
    assert (p["model"].id, p["hit"]) == ("llama-2-7b", 22)


# --- pd-transfer-bandwidth ---------------------------------------------------------------------


def _all_reduces(layers: int, hidden: int, tp: int, nvlink: float, tokens: float) -> float:
    """The tp-all-reduce card: two per layer, 10 us each plus 2(n−1)/n of tokens × hidden × 2 B at half NVLink."""
    if tp == 1:
        return 0.0
    return 2 * layers * (10e-6 + 2 * (tp - 1) / tp * tokens * hidden * 2 / (nvlink / 2))


@pytest.mark.parametrize("prompt", [4000, 12000, 20000])
def test_prompt_length_cancels_but_for_attention(variant, prompt):
    """The bound is the same for every prompt; attention lowers the rate, the more the longer the prompt (past
    the few thousand tokens where the all-reduces' fixed latency still shows)."""
    results = variant(f"pd-transfer-bandwidth@default+prompt={prompt}").sheet.results
    shorter = variant(f"pd-transfer-bandwidth@default+prompt={prompt // 2}").sheet.results
    assert results["per_gpu_bound"] == pytest.approx(0.5 * 989.4e12 * 320 * KIB / (2 * 70.55e9))
    assert shorter["per_gpu"] > results["per_gpu"]
    assert results["per_gpu"] < results["per_gpu_bound"]


def _peaks(gpu, weight_dtype: str, kv_dtype: str) -> tuple[float, float]:
    """The card's matmul-precision from the datasheet: the weights' dense peak, and the cache's for attention
    (bf16 where the GPU has no tensor cores for it)."""
    def peak(dtype: str) -> float | None:
        figure = gpu.get({"bf16": "bf16_dense_tflops", "fp8": "fp8_dense_tflops"}[dtype])
        return None if figure is None else figure * 1e12
    return peak(weight_dtype), peak(kv_dtype) or peak("bf16")


@pytest.mark.parametrize("seed", range(30))
def test_pd_transfer_matches_plain_arithmetic(variant, seed):
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p, expected = _params(solution), solution.expected
    model, gpu = p["model"], p["gpu"]
    n = model.get("active_params_b", model.params_b) * 1e9
    kv = _kv_per_token(model) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    peak, att_peak = _peaks(gpu, p["weight_dtype"], p["kv_dtype"])
    attention = 4 * model.layers * model.heads * model.head_dim * p["prompt"] / 2
    tp = int(p["tp"])
    prefill = (p["prompt"] * (2 * n / peak + attention / att_peak) / (tp * p["mfu"])
               + _all_reduces(model.layers, model.hidden, tp, gpu.nvlink_gb_s * 1e9, p["prompt"]))
    rate = p["prompt"] * kv / tp / prefill
    assert expected["per_gpu"] == pytest.approx(rate)
    assert expected["per_gpu_bound"] == pytest.approx(p["mfu"] * peak * kv / (2 * n))
    need = p["fan_in"] * rate
    assert expected["decode_need"] == pytest.approx(need)
    assert expected["regime"] == ("link-breaks" if need > p["link"] else "link-suffices")


@pytest.mark.parametrize("seed", range(12))
def test_longer_prompts_judged_as_solving_them(variant, seed):
    """The 'prompts four times as long' judgement is the verdict of the variant with that prompt, all-reduces in."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p = _params(solution)
    if 4 * p["prompt"] > p["model"].max_context:
        return
    longer = variant(f"pd-transfer-bandwidth@{seed}+prompt={int(4 * p['prompt'])}").sheet
    holds = "prompts four times as long" in solution.expected["breakers"]
    assert holds == (longer.regime.name != solution.sheet.regime.name)


@pytest.mark.parametrize("seed", range(7001, 7041))
def test_fp8_cache_judged_as_solving_it(variant, seed):
    """'an fp8 KV cache' is the verdict of the variant with one: half the bytes, and attention at the fp8 peak
    (matmul-precision), so the prefill that makes the KV is faster too; already fp8, nothing changes."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    option = "an fp8 KV cache (half the bytes per token, if bf16 now)"
    holds = option in solution.expected["breakers"]
    if _params(solution)["kv_dtype"] == "fp8":
        assert not holds
        return
    try:
        fp8 = variant(f"pd-transfer-bandwidth@{seed}+kv_dtype=fp8").sheet
    except VariantError:  # the fp8 variant is refused (every breaker on one side): nothing to compare
        return
    assert holds == (fp8.regime.name != solution.sheet.regime.name)


FASTER = "GPUs with four times the FLOP/s and twice the NVLink bandwidth (Blackwell at fp8 against Hopper at bf16)"


def test_four_times_the_flops_leaves_the_all_reduce_latency(variant):
    """Seed 2 draws Llama-3.1-70B at TP 8 on H100, 1,100-token prompts, a 25 Gb/s link (its breakers, where 4x the
    FLOP/s alone is not one, are pinned in the question file)."""
    p = _params(variant("pd-transfer-bandwidth@2"))
    assert (p["tp"], p["prompt"], p["link"], p["fan_in"]) == (8, 1100, 25e9 / 8, 1)


@pytest.mark.parametrize("seed", range(30))
def test_faster_gpus_judged_by_plain_arithmetic(variant, seed):
    """4x the peak, 2x the NVLink, the same 10 us per all-reduce: the prefill time redone from scratch."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p = _params(solution)
    model, gpu, tp = p["model"], p["gpu"], int(p["tp"])
    n = model.get("active_params_b", model.params_b) * 1e9
    kv = _kv_per_token(model) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    peak, att_peak = _peaks(gpu, p["weight_dtype"], p["kv_dtype"])
    attention = 4 * model.layers * model.heads * model.head_dim * p["prompt"] / 2
    prefill = (p["prompt"] * (2 * n / peak + attention / att_peak) / (4 * tp * p["mfu"])
               + _all_reduces(model.layers, model.hidden, tp, 2 * gpu.nvlink_gb_s * 1e9, p["prompt"]))
    need = p["fan_in"] * p["prompt"] * kv / tp / prefill
    short = solution.expected["decode_need"] > p["link"]
    assert (FASTER in solution.expected["breakers"]) == ((need > p["link"]) != short)
