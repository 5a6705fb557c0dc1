"""Golden checks for the KV transfer questions: recompute-vs-fetch."""
from __future__ import annotations

import pytest

KIB = 1024


def _params(solution) -> dict:
    return {param.name: param.value for param in solution.params}


def _kv_per_token(model) -> int:
    return 2 * model.layers * model.kv_heads * model.head_dim * 2  # bf16


# --- recompute-vs-fetch ------------------------------------------------------------------------


def test_recompute_vs_fetch_default(variant):
    """Llama-3-70B on H100 over 50 GB/s: fetching wins ~22x at peak compute (the catalogue's figure)."""
    results = variant("recompute-vs-fetch@default").sheet.results
    flops_per_byte = 2 * 70.55e9 / (320 * KIB)
    assert results["flops_per_kv_byte"] == pytest.approx(flops_per_byte)  # 430,603 FLOP/B
    assert results["advantage_peak"] == pytest.approx(flops_per_byte / (989.4e12 / 50e9))
    assert round(results["advantage_peak"]) == 22
    assert results["advantage"] == pytest.approx(results["advantage_peak"] / 0.6)  # 36x at the step model's 60%
    assert results["recompute_per_token"] == pytest.approx(2 * 70.55e9 / (4 * 0.6 * 989.4e12))  # 59.4 us
    assert results["fetch_per_token"] == pytest.approx(80 * KIB / 50e9)  # each of 4 GPUs its 2 KV heads
    attention = 4 * 80 * 64 * 128 * 2048**2 / 2 / (4 * 0.6 * 989.4e12)
    assert results["recompute_time"] == pytest.approx(2048 * results["recompute_per_token"] + attention)
    assert results["fetch_time"] == pytest.approx(0.5e-3 + 2048 * 80 * KIB / 50e9)
    # 0.5 ms = T·(t_r − t_f) + attention: 8.65 tokens, so a 9-token hit is the shortest worth fetching.
    assert results["crossing"] == pytest.approx(_crossing(results, 0.5e-3, 4 * 80 * 64 * 128 / (4 * 0.6 * 989.4e12)))
    assert results["break_even"] == 9
    assert results["regime"] == "fetch-wins"


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
    """Llama-2-7B at TP 1, a 22-token hit: recomputing wins, and only a hundredfold hit flips it; a no-op such as
    'an MHA model' (it is MHA already) never counts."""
    solution = variant("recompute-vs-fetch@100")
    p = _params(solution)
    assert (p["model"].id, p["hit"], solution.sheet.regime.name) == ("llama-2-7b", 22, "recompute-wins")
    assert set(solution.expected["situations"]) == {"a hit a hundred times this long"}


# --- pd-transfer-bandwidth ---------------------------------------------------------------------


def _all_reduces(layers: int, hidden: int, tp: int, nvlink: float, tokens: float) -> float:
    """The tp-all-reduce card: two per layer, 10 us each plus 2(n−1)/n of tokens × hidden × 2 B at half NVLink."""
    if tp == 1:
        return 0.0
    return 2 * layers * (10e-6 + 2 * (tp - 1) / tp * tokens * hidden * 2 / (nvlink / 2))


def test_pd_transfer_bandwidth_default(variant):
    """Llama-3-70B on H100 at 50% MFU: ~1.15 GB/s per prefill GPU whatever the prompt (the catalogue's figure)."""
    results = variant("pd-transfer-bandwidth@default").sheet.results
    assert results["per_gpu_bound"] == pytest.approx(0.5 * 989.4e12 * 320 * KIB / (2 * 70.55e9))
    assert round(results["per_gpu_bound"] / 1e9, 2) == 1.15
    assert results["kv_per_request"] == pytest.approx(8192 * 320 * KIB)  # 2.7 GB: the scary number
    per_token = 2 * 70.55e9 + 4 * 80 * 64 * 128 * 8192 / 2
    compute = 8192 * per_token / (4 * 0.5 * 989.4e12)  # 0.63 s
    assert results["prefill_time"] == pytest.approx(compute + _all_reduces(80, 8192, 4, 900e9, 8192))
    assert results["per_gpu"] == pytest.approx(8192 * 80 * KIB / results["prefill_time"])  # 1.0 GB/s
    assert results["decode_need"] == pytest.approx(2 * results["per_gpu"])
    assert results["link_share"] == pytest.approx(results["decode_need"] / 50e9)  # 4.3% of 400 Gb/s
    assert results["regime"] == "link-suffices"


@pytest.mark.parametrize("prompt", [4000, 12000, 20000])
def test_prompt_length_cancels_but_for_attention(variant, prompt):
    """The bound is the same for every prompt; attention lowers the rate, the more the longer the prompt (past
    the few thousand tokens where the all-reduces' fixed latency still shows)."""
    results = variant(f"pd-transfer-bandwidth@default+prompt={prompt}").sheet.results
    shorter = variant(f"pd-transfer-bandwidth@default+prompt={prompt // 2}").sheet.results
    assert results["per_gpu_bound"] == pytest.approx(0.5 * 989.4e12 * 320 * KIB / (2 * 70.55e9))
    assert shorter["per_gpu"] > results["per_gpu"]
    assert results["per_gpu"] < results["per_gpu_bound"]


def test_mha_on_blackwell_breaks_a_400g_link(variant):
    """Llama-2-7B (MHA, 512 KiB/token) on GB200 at fp8: about 97 GB/s per prefill GPU at 50% MFU, past 50 GB/s."""
    sheet = variant("pd-transfer-bandwidth@default+model=llama-2-7b+gpu=gb200+weight_dtype=fp8+tp=1"
                    "+prompt=4000+fan_in=1").sheet
    assert sheet.results["per_gpu_bound"] == pytest.approx(0.5 * 5000e12 * 512 * KIB / (2 * 6.74e9))
    assert sheet.regime.name == "link-breaks"
    # On a short link the question is what relieves it: halving the bytes or doubling the link (90 GB/s).
    expected = variant("pd-transfer-bandwidth@default+model=llama-2-7b+gpu=gb200+weight_dtype=fp8+tp=1"
                       "+prompt=4000+fan_in=1").expected
    assert set(expected["breakers"]) == {"an fp8 KV cache (half the bytes per token)", "twice the link bandwidth"}


@pytest.mark.parametrize("seed", range(30))
def test_pd_transfer_matches_plain_arithmetic(variant, seed):
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p, expected = _params(solution), solution.expected
    model, gpu = p["model"], p["gpu"]
    n = model.get("active_params_b", model.params_b) * 1e9
    kv = _kv_per_token(model) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    peak = (gpu.fp8_dense_tflops if p["weight_dtype"] == "fp8" else gpu.bf16_dense_tflops) * 1e12
    per_token = 2 * n + 4 * model.layers * model.heads * model.head_dim * p["prompt"] / 2
    tp = int(p["tp"])
    prefill = (p["prompt"] * per_token / (tp * p["mfu"] * peak)
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


FASTER = "GPUs with four times the FLOP/s and twice the NVLink bandwidth (Blackwell at fp8 against Hopper at bf16)"


def test_four_times_the_flops_leaves_the_all_reduce_latency(variant):
    """Llama-3.1-70B at TP 8 on H100, 1,100-token prompts, a 25 Gb/s link: 4x the FLOP/s alone would send
    3.44 GB/s, past 3.125, but the all-reduces shrink only by the doubled NVLink: 2.63 GB/s, the link holds."""
    solution = variant("pd-transfer-bandwidth@2")
    p = _params(solution)
    assert (p["tp"], p["prompt"], p["link"], p["fan_in"]) == (8, 1100, 25e9 / 8, 1)
    assert set(solution.expected["breakers"]) == {
        "an MHA model of the same size (as many KV heads as query heads)",
        "an MHA model of the same size, and GPUs with four times the FLOP/s and twice the NVLink bandwidth",
        "four times as many prefill GPUs feeding each decode GPU"}


@pytest.mark.parametrize("seed", range(30))
def test_faster_gpus_judged_by_plain_arithmetic(variant, seed):
    """4x the peak, 2x the NVLink, the same 10 us per all-reduce: the prefill time redone from scratch."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p = _params(solution)
    model, gpu, tp = p["model"], p["gpu"], int(p["tp"])
    n = model.get("active_params_b", model.params_b) * 1e9
    kv = _kv_per_token(model) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    peak = 4 * (gpu.fp8_dense_tflops if p["weight_dtype"] == "fp8" else gpu.bf16_dense_tflops) * 1e12
    per_token = 2 * n + 4 * model.layers * model.heads * model.head_dim * p["prompt"] / 2
    prefill = (p["prompt"] * per_token / (tp * p["mfu"] * peak)
               + _all_reduces(model.layers, model.hidden, tp, 2 * gpu.nvlink_gb_s * 1e9, p["prompt"]))
    need = p["fan_in"] * p["prompt"] * kv / tp / prefill
    short = solution.expected["decode_need"] > p["link"]
    assert (FASTER in solution.expected["breakers"]) == ((need > p["link"]) != short)
