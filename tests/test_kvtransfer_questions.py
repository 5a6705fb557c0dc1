"""Checks for the KV transfer questions: recompute-vs-fetch and pd-transfer-bandwidth."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from tests.oracles import link_each_way

KIB = 1024


def _params(solution) -> dict:
    return {param.name: param.value for param in solution.params}


def _kv_per_token(model) -> int:
    return 2 * model.layers * model.kv_heads * model.head_dim * 2  # bf16


# --- recompute-vs-fetch ------------------------------------------------------------------------


def test_recompute_vs_fetch_default(variant):
    """Llama-3-70B on TP 4 H100 over 50 GB/s (the keys are pinned in the question file): the FLOPs a KV byte carries,
    the catalogue's 21.8x at peak, and the crossing the break-even rounds up, found by bisection."""
    results = variant("recompute-vs-fetch@default").sheet.results
    assert results["flops_per_kv_byte"] == pytest.approx(2 * 70.55e9 / (320 * KIB))  # 430,603 FLOP/B
    assert results["advantage_peak"] == pytest.approx(2 * 70.55e9 / 989.4e12 / (320 * KIB / 50e9))
    assert results["advantage_peak"] == pytest.approx(21.8, abs=0.05)
    # 0.5 ms = T·(t_r − t_f) + attention: 7.52 tokens, so an 8-token hit is the shortest worth fetching.
    crossing = _crossing(results, 0.5e-3, 4 * 80 * 64 * 128 / (4 * 0.6 * 989.4e12))
    assert results["crossing"] == pytest.approx(crossing)
    assert results["break_even"] == 8


def _crossing(results, t0: float, a: float) -> float:
    """The positive root of a/2·T² + (t_r − t_f)·T − t_0 = 0, by bisection (not the closed form the solver uses);
    it lies below 2·t_0/(t_r − t_f + √(2·a·t_0)), which bounds it whatever the sign of t_r − t_f."""
    gain = results["recompute_per_token"] - results["fetch_per_token"]
    low, high = 0.0, 2 * t0 / (gain + (2 * a * t0) ** 0.5) if gain > 0 else (2 * t0 / a) ** 0.5 - 2 * gain / a
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if a * mid**2 / 2 + gain * mid < t0 else (low, mid)
    return low


def _all_reduce_bytes(model, gpu, tp: int) -> float:
    """Seconds a token's activations add to a pass's all-reduces (the tp-all-reduce card, latency aside: the
    pass pays it either way): two a layer, 2(n−1)/n of hidden × 2 B over half the datasheet's NVLink; on a
    mesh (MI300X) over the n − 1 of its links among the group's GPUs."""
    return 0.0 if tp == 1 else 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / float(link_each_way(gpu, tp))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallelism_cancels_from_the_math_only(variant, tp):
    """Per token the math's lead is (2N/KV)/(F_eff/BW) whatever the TP degree, while the group keeps whole KV
    heads; the all-reduce bytes a token adds do not shrink with TP, so the whole lead grows with it."""
    results = variant(f"recompute-vs-fetch@default+gpu=h200-sxm+tp={tp}").sheet.results
    math_lead = 2 * 70.55e9 / (320 * KIB) / (0.6 * 989.4e12 / 50e9)
    fetch = 320 * KIB / tp / 50e9
    assert results["recompute_math"] / fetch == pytest.approx(math_lead)
    assert results["advantage"] == pytest.approx(math_lead + 2 * 80 * 2 * (tp - 1) / tp * 8192 * 2 / 450e9 / fetch)
    if tp < 8:
        wider = variant(f"recompute-vs-fetch@default+gpu=h200-sxm+tp={2 * tp}").sheet.results
        assert wider["advantage"] > results["advantage"]


def test_mha_and_moe_spend_little_compute_per_kv_byte(variant):
    """Llama-2-7B (MHA, 512 KiB/token) and Mixtral (2N from its 12.9B active parameters) sit far below 70B GQA."""
    mha = variant("recompute-vs-fetch@default+model=llama-2-7b+tp=1+hit=2000").sheet.results
    assert mha["flops_per_kv_byte"] == pytest.approx(2 * 6.74e9 / (512 * KIB))  # 25,712 FLOP/B
    moe = variant("recompute-vs-fetch@default+model=mixtral-8x7b+tp=2").sheet.results
    assert moe["flops_per_kv_byte"] == pytest.approx(2 * 12.88e9 / (128 * KIB))
    assert mha["advantage_peak"] < 2  # over 50 GB/s an H100 recomputes an MHA 7B nearly as fast as it fetches


def _recompute_by_hand(p, hit: float, *, peak: float = 1.0, fetch_scale: float = 1.0,
                       attention_rate: float | None = None) -> tuple[float, float]:
    """(recompute, fetch) of a hit in plain floats: 2N a token at 60% of the bf16 peak (times `peak`), the
    all-reduce bytes, attention's T²/2 pairs (at `attention_rate`, else the weights' rate); the fixed cost and
    each GPU's KV heads over the link (times `fetch_scale`)."""
    model, gpu, tp = p["model"], p["gpu"], int(p["tp"])
    n = model.get("active_params_b", model.params_b) * 1e9
    rate = tp * 0.6 * gpu.bf16_dense_tflops * 1e12 * peak
    kv_heads = max(1, model.kv_heads // tp)
    f = 2 * model.layers * kv_heads * model.head_dim * 2 / p["bandwidth"] * fetch_scale
    att = 4 * model.layers * model.heads * model.head_dim / (attention_rate or rate)
    recompute = hit * (2 * n / rate + _all_reduce_bytes(model, gpu, tp)) + att * hit**2 / 2
    return recompute, p["overhead"] + hit * f


@pytest.mark.parametrize("seed", range(30))
def test_recompute_vs_fetch_matches_plain_arithmetic(variant, seed):
    solution = variant(f"recompute-vs-fetch@{seed}")
    p, expected = _params(solution), solution.expected
    model, gpu, tp, hit = p["model"], p["gpu"], int(p["tp"]), p["hit"]
    rate = tp * 0.6 * gpu.bf16_dense_tflops * 1e12
    recompute, fetch = _recompute_by_hand(p, hit)
    per_token, _ = _recompute_by_hand(p, 1)
    assert expected["recompute_per_token"] == pytest.approx(per_token - 4 * model.layers * model.heads
                                                            * model.head_dim / rate / 2)
    assert expected["recompute_time"] == pytest.approx(recompute)
    assert expected["speedup"] == pytest.approx(recompute / fetch)
    crossing = _crossing(solution.sheet.results, p["overhead"], 4 * model.layers * model.heads * model.head_dim / rate)
    assert solution.sheet.results["crossing"] == pytest.approx(crossing)
    assert expected["break_even"] == int(crossing) + 1 and crossing < model.max_context
    assert expected["regime"] == ("fetch-wins" if recompute > fetch else "recompute-wins")


@pytest.mark.parametrize("seed", range(30))
def test_situations_judged_as_solving_them(variant, seed):
    """Each change re-solved in plain floats: the option holds where the winner for this hit flips."""
    solution = variant(f"recompute-vs-fetch@{seed}")
    p = _params(solution)
    model, gpu, hit = p["model"], p["gpu"], p["hit"]
    fp8 = gpu.get("fp8_dense_tflops")
    fp8_rate = None if fp8 is None else int(p["tp"]) * 0.5 * fp8 * 1e12
    cases = {
        "the KV coming from a tier with a hundredth of this bandwidth": _recompute_by_hand(p, hit, fetch_scale=100),
        "an MHA model of the same size (as many KV heads as query heads)":
            _recompute_by_hand(p, hit, fetch_scale=model.heads / model.kv_heads),
        "a hit of a single 16-token block": _recompute_by_hand(p, 16),
        "a GPU with four times the tensor peak at the same efficiency": _recompute_by_hand(p, hit, peak=4),
        "an fp8 KV cache (half the bytes to fetch, attention at the fp8 peak)":
            _recompute_by_hand(p, hit, fetch_scale=0.5, attention_rate=fp8_rate),
        "a hit ten times this long": _recompute_by_hand(p, 10 * hit),
    }
    now = solution.expected["regime"] == "fetch-wins"
    judged = solution.sheet.judged("situations")
    for option, (recompute, fetch) in cases.items():
        if option == "a hit ten times this long" and 10 * hit > model.max_context:
            assert judged[option] is None
            continue
        assert judged[option] == ((recompute > fetch) != now), option


def test_break_even_is_exact_either_side(variant):
    """Attention pulls the crossing under t_0/(t_r − t_f) (at a 20 ms fixed cost, on a tier slow enough to have
    one): a hit a little past it fetches, a little short of it recomputes, and the crossing itself is refused."""
    base = variant("recompute-vs-fetch@default+bandwidth=8+overhead=20").sheet.results
    star = base["break_even"]
    assert star < 20e-3 / (base["recompute_per_token"] - base["fetch_per_token"])
    # Whole 16-token blocks past the 3% band each side of the crossing (draws inside it are refused).
    above, below = 16 * math.ceil(star * 1.04 / 16), 16 * math.floor(star * 0.96 / 16)
    for hit, side in ((above, "fetch-wins"), (below, "recompute-wins")):
        assert variant(f"recompute-vs-fetch@default+bandwidth=8+overhead=20+hit={hit}").sheet.regime.name == side
    with pytest.raises(VariantError):
        variant(f"recompute-vs-fetch@default+bandwidth=8+overhead=20+hit={star}")


def test_fetching_past_the_context_is_refused(variant):
    """A slow tier for a small MHA model: per token the link is slower than the GPU, and only attention's T² would
    make a hit pay, past Llama-2-7B's 4,096 tokens: no such variant."""
    with pytest.raises(VariantError):
        variant("recompute-vs-fetch@default+model=llama-2-7b+tp=1+bandwidth=0.5+hit=1000")


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


def _prefill_by_hand(p, *, speed: float = 1, nvlink: float = 1) -> float:
    """A prompt's prefill from the datasheet and the config: the slower of one read of a GPU's weights (every
    expert's) at 80% of HBM and the math (`speed` times the peaks), then the all-reduces (`nvlink` times the link)."""
    model, gpu, tp = p["model"], p["gpu"], int(p["tp"])
    n = model.get("active_params_b", model.params_b) * 1e9
    peak, att_peak = _peaks(gpu, p["weight_dtype"], p["kv_dtype"])
    attention = 4 * model.layers * model.heads * model.head_dim * p["prompt"] / 2
    math = p["prompt"] * (2 * n / peak + attention / att_peak) / (tp * p["mfu"] * speed)
    read = model.params_b * 1e9 * (1 if p["weight_dtype"] == "fp8" else 2) / (tp * 0.8 * gpu.hbm_tb_s * 1e12)
    return max(read, math) + _all_reduces(model.layers, model.hidden, tp, nvlink * gpu.nvlink_gb_s * 1e9, p["prompt"])


@pytest.mark.parametrize("seed", range(30))
def test_pd_transfer_matches_plain_arithmetic(variant, seed):
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p, expected = _params(solution), solution.expected
    model = p["model"]
    n = model.get("active_params_b", model.params_b) * 1e9
    kv = _kv_per_token(model) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    peak, _ = _peaks(p["gpu"], p["weight_dtype"], p["kv_dtype"])
    tp = int(p["tp"])
    prefill = _prefill_by_hand(p)
    rate = p["prompt"] * kv / tp / prefill
    assert expected["prefill_time"] == pytest.approx(prefill)
    assert expected["per_gpu"] == pytest.approx(rate)
    assert expected["per_gpu_bound"] == pytest.approx(p["mfu"] * peak * kv / (2 * n))
    need = p["fan_in"] * rate
    assert expected["link_share"] == pytest.approx(need / p["link"])
    assert expected["regime"] == ("link-breaks" if need > p["link"] else "link-suffices")
    # This request alone on the link: the shares its decode GPU holds (the fan-in's, at most all TP of them);
    # streamed, a two-stage pipeline over the layers.
    sent = min(p["fan_in"], tp) * p["prompt"] * kv / tp / p["link"]
    assert expected["transfer_time"] == pytest.approx(sent)
    layer, link_layer = prefill / model.layers, sent / model.layers
    finish = (layer + model.layers * link_layer if link_layer >= layer else model.layers * layer + link_layer)
    assert expected["streamed_time"] == pytest.approx(finish - prefill)


def test_streaming_hides_the_transfer_only_while_the_link_keeps_up(variant):
    """Streamed, a link that keeps up shows only the last layer's share; one that breaks shows its whole backlog
    (the transfer less the prefill it overlapped): TTFT grows with the shortfall."""
    fits = variant("pd-transfer-bandwidth@default").expected
    assert fits["streamed_time"] == pytest.approx(fits["transfer_time"] / 80)
    short = variant(
        "pd-transfer-bandwidth@default+model=llama-2-7b+gpu=b200+weight_dtype=fp8+tp=1+prompt=4000+fan_in=1+link=400").expected
    backlog = short["transfer_time"] - short["prefill_time"] * 31 / 32  # Llama-2-7B's 32 layers
    assert short["streamed_time"] == pytest.approx(backlog) and backlog > short["transfer_time"] / 32


@pytest.mark.parametrize("seed", range(12))
def test_longer_prompts_judged_as_solving_them(variant, seed):
    """The 'prompts four times as long' judgement is the verdict of the variant with that prompt, all-reduces in."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p = _params(solution)
    if 4 * p["prompt"] > p["model"].max_context:
        return
    longer = variant(f"pd-transfer-bandwidth@{seed}+prompt={int(4 * p['prompt'])}").sheet
    holds = solution.sheet.judged("breakers")["prompts four times as long"]
    assert holds == (longer.regime.name != solution.sheet.regime.name)


@pytest.mark.parametrize("seed", range(7001, 7041))
def test_fp8_cache_judged_as_solving_it(variant, seed):
    """'an fp8 KV cache' is the verdict of the variant with one: half the bytes, and attention at the fp8 peak
    (matmul-precision), so the prefill that makes the KV is faster too; already fp8, it is not listed."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    option = "an fp8 KV cache (half the bytes per token, attention at the fp8 peak)"
    judged = solution.sheet.judged("breakers")[option]
    if _params(solution)["kv_dtype"] == "fp8":
        assert judged is None and option not in solution.shown["breakers"]
        return
    try:
        fp8 = variant(f"pd-transfer-bandwidth@{seed}+kv_dtype=fp8").sheet
    except VariantError:  # the fp8 variant is refused (every breaker on one side): nothing to compare
        return
    assert judged == (fp8.regime.name != solution.sheet.regime.name)


@pytest.mark.parametrize("seed", range(30))
def test_link_options_judged_against_the_flow(variant, seed):
    """Half or twice the link: the same flow against the new link."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    share, judged = solution.expected["link_share"], solution.sheet.judged("breakers")
    assert judged["half this link bandwidth (a NIC shared with other traffic)"] == (share <= 1 < 2 * share)
    assert judged["twice this link bandwidth"] == (share / 2 <= 1 < share)


FASTER = "prefill GPUs with four times the FLOP/s and twice the NVLink bandwidth"


@pytest.mark.parametrize("seed", range(30))
def test_faster_gpus_judged_by_plain_arithmetic(variant, seed):
    """4x the peak, 2x the NVLink, the same 10 us per all-reduce and the same HBM: the prefill redone from scratch."""
    solution = variant(f"pd-transfer-bandwidth@{seed}")
    p = _params(solution)
    kv = _kv_per_token(p["model"]) * (0.5 if p["kv_dtype"] == "fp8" else 1)
    need = p["fan_in"] * p["prompt"] * kv / int(p["tp"]) / _prefill_by_hand(p, speed=4, nvlink=2)
    short = solution.expected["link_share"] > 1
    assert solution.sheet.judged("breakers")[FASTER] == ((need > p["link"]) != short)
