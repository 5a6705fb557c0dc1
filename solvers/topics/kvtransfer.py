"""KV transfer questions: fetching a cached prefix against recomputing it, and the link a
disaggregated prefill pool needs to ship its KV to decode.

Both turn on one figure of the model, the FLOPs it spends per byte of KV it produces: 2N/KV.
Recomputing a token costs 2N FLOPs at the group's achievable rate; moving it costs KV bytes over
a link. Per GPU under tensor parallelism both shrink by TP (each GPU computes 1/TP and holds
and moves its own KV heads), so TP cancels. The achievable compute is the step-time model's
(steptime.StepConstants, the conventions card's step-compute) unless the question draws a matmul
efficiency.
"""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, floor_of
from solvers.topics.collective import all_reduce_terms, tp_all_reduce
from solvers.topics.common import dtype_bytes, peak_flops
from solvers.topics.kvcache import kv_bytes_per_token_given, kv_bytes_per_token_per_gpu_given
from solvers.topics.steptime import DEFAULT_CONSTANTS
from solvers.units import format_number, format_quantity


def _active_params(s: Sheet, model) -> sympy.Symbol:
    """Parameters a token's forward pass multiplies by: all of them, or an MoE's active share."""
    active = model.get("active_params_b")
    if active is None:
        return s.given("N", model.params_b * 1e9, "", f"{model.name} parameters")
    return s.given("N", active * 1e9, "", f"{model.name} active parameters per token (MoE)")


def _attention_pair_flops(s: Sheet, model) -> sympy.Symbol:
    """The attention-flops card: 4·d_h FLOPs per query head per layer for each query-key pair."""
    L = s.given("L", model.layers, "", "layers")
    H = s.given("H_q", model.heads, "", "query heads")
    d_h = s.given("d_h", model.head_dim, "", "head dim")
    return s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 4 * L * H * d_h, "FLOP",
                  "QKᵀ and PV, a multiply-add per head dimension each, for every query head in every layer")


# --- recompute-vs-fetch ------------------------------------------------------------------------


def recompute_vs_fetch(p, s: Sheet) -> None:
    model, gpu = p.model, p.gpu
    N = _active_params(s, model)
    TP = s.param("TP", "tp")
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes("bf16"), "bf16")
    KV = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes("bf16"), "bf16", TP)
    P = s.given("P", peak_flops(gpu, "bf16"), "TFLOP/s", f"{gpu.name} dense bf16 peak")
    eta = s.given("η_c", DEFAULT_CONSTANTS.compute, "%", "achievable fraction of peak compute (step-compute card)")
    BW = s.param("BW", "bandwidth")
    t0 = s.param("t_0", "overhead")
    T = s.param("T", "hit")
    A = _attention_pair_flops(s, model)

    F = s.step("group_flops", "Achievable FLOP/s of the TP group", "F_eff", TP * eta * P, "TFLOP/s",
               "every GPU of the group computes its 1/TP of each token")
    r = s.step("recompute_per_token", "Recompute time per token", "t_r", 2 * N / F, "us",
               "2N FLOPs per token through the weights, at the group's achievable rate")
    f = s.step("fetch_per_token", "Fetch time per token", "t_f", KV / BW, "us",
               "each GPU pulls its own KV heads of the token over its own link, in parallel with the others")
    adv = s.step("advantage", "How many times faster fetching a token is", "R", r / f, "x",
                 "(2N/KV)/(F_eff/BW): TP divides both sides and cancels")
    intensity = s.step("flops_per_kv_byte", "FLOPs the model spends per byte of KV it makes", "I_kv", 2 * N / kv_tok,
                       "FLOP/B", "the model's side of the ratio: compute per byte a recompute would save moving")
    s.step("advantage_peak", "The same at peak compute", "R_peak", intensity / (P / BW), "x",
           "(2N/KV)/(P/BW), per GPU: the floor of fetching's lead, since real prefill runs below peak")
    if s.compare(r, f) <= 0:
        raise Reject("fetching loses per token: no hit is long enough to pay back the overhead")

    T_r = s.step("recompute_time", "Recomputing the hit", "T_r", T * r + A * T**2 / 2 / F, "ms",
                 "2N per token plus attention over the prefix, T²/2 query-key pairs under the causal mask")
    T_f = s.step("fetch_time", "Fetching the hit", "T_f", t0 + T * f, "ms",
                 "the fixed cost of one fetch (lookup, connection, first byte), then the bytes")
    speedup = s.step("speedup", "Fetching's speedup on this hit", "G", T_r / T_f, "x",
                     "above 1 the fetch pays; below it recomputing is faster")
    # t_0 + T·t_f = T·t_r + a·T²/2, a = A/F_eff: the positive root, written without the cancellation.
    star = s.step("crossing", "Hit length where fetching and recomputing take as long", "T_x",
                  2 * t0 / ((r - f) + sympy.sqrt((r - f) ** 2 + 2 * (A / F) * t0)), "tokens",
                  "solve t_0 + T·t_f = T·t_r + (A/F_eff)·T²/2 for T: the positive root of the quadratic")
    s.step("break_even", "Shortest hit worth fetching", "T_star", floor_of(star) + 1, "tokens",
           "the first whole number of tokens past the crossing")
    _situations(s, p, r=s.value(r), f=s.value(f), t0=s.value(t0), hit=s.value(T), a=s.value(A) / s.value(F))

    s.assume("Recomputing rides in the request's own prefill pass at the step-time model's achievable compute "
             "(step-compute card): the pass's step overhead and all-reduce latencies are paid either way, and the "
             "all-reduce bytes of the extra tokens are left out, which flatters recomputing a little.")
    s.assume("That pass is compute-bound (hundreds of tokens or more in it): the hit's tokens cost their FLOPs. "
             "A few tokens alone would be weight-read bound, and recomputing them nearly free.")
    s.assume("Every GPU of the TP group fetches its own share of the KV over a link of the bandwidth given, all in "
             "parallel; the fixed overhead is paid once per hit, and the fetched KV is in the serving dtype (bf16).")
    s.assume("FLOPs: 2 per active parameter per token, plus the attention-flops card's 4·d_h per query head per "
             "layer for each query-key pair of the prefix.")
    s.slip("every GPU fetching the whole token's KV (TP not cancelled)", on="advantage", factor=1 / p.tp)
    s.slip("recompute at peak instead of achievable compute", on="advantage", factor=DEFAULT_CONSTANTS.compute)
    if model.get("active_params_b") is not None:
        s.slip("2N from all the experts' parameters", on="advantage", factor=model.params_b / model.active_params_b)
    s.slip("the fixed overhead forgotten", on="speedup", factor=s.evaluate((t0 + T * f) / (T * f)))
    _fetch_regime(s, speedup, star, adv, T)


SITUATIONS = (
    "the KV coming from a tier with a hundredth of this bandwidth",
    "an MHA model of the same size (as many KV heads as query heads)",
    "a hit of a single 16-token block",
    "a hit a hundred times this long",
    "a GPU with four times the tensor peak at the same efficiency",
    "an fp8 KV cache (half the bytes to fetch)",
    "tensor parallelism twice as wide (all-reduces aside), each GPU fetching its share over its own link",
)


def _situations(s: Sheet, p, *, r: float, f: float, t0: float, hit: float, a: float) -> None:
    """Which single change flips which is faster for this hit: each one redone on the variant's numbers
    (r, f per token; a = attention FLOPs per pair over the group's FLOP/s)."""
    groups = p.model.heads / p.model.kv_heads

    def recompute_wins(r=r, f=f, hit=hit, a=a) -> tuple[bool, str]:
        rec, fet = hit * r + a * hit**2 / 2, t0 + hit * f
        return rec <= fet, f"recompute {format_quantity(rec, 'ms')} against fetch {format_quantity(fet, 'ms')}"

    tier, mha, block, longer, fast, fp8, wide = SITUATIONS
    cases = (
        (tier, recompute_wins(f=100 * f), "a hundredth of the bandwidth: a hundred times the fetch per token"),
        (mha, recompute_wins(f=groups * f),
         f"{format_number(groups)}x the KV heads: {format_number(groups)}x the bytes per token, the same FLOPs"
         if groups > 1 else "already MHA: nothing changes"),
        (block, recompute_wins(hit=16), "16 tokens carry the whole fixed cost of a fetch"),
        (longer, recompute_wins(hit=100 * hit), "the fixed cost is spread over a hundred times the tokens"),
        (fast, recompute_wins(r=r / 4, a=a / 4), "recomputing runs four times faster; the link does not"),
        (fp8, recompute_wins(f=f / 2), "half the bytes: fetching only gets faster"),
        (wide, recompute_wins(r=r / 2, f=f / 2, a=a / 2),
         "both per-token costs halve and the fixed cost stays, so only short hits move"))
    now, _ = recompute_wins()
    flips = [(option, wins != now, times, why) for option, (wins, times), why in cases]
    if len({flipped for _, flipped, _, _ in flips}) == 1:
        raise Reject("every change leaves the winner as it is, or every change flips it: nothing to tell apart")
    for option, flipped, times, why in flips:
        s.judge("situations", option, flipped, f"{why}; {times}: " + (
            ("recomputing" if not now else "fetching") + " becomes the faster" if flipped else
            ("recomputing" if now else "fetching") + " stays the faster"))


def _fetch_regime(s: Sheet, speedup, star, adv, T) -> None:
    gain, per_token = format_number(s.value(speedup), 3), format_number(s.value(adv), 3)
    hit = format_number(s.value(T))
    # Recompute minus fetch grows with T past the root, so the hit's side of T_x is the winner.
    s.regime_by(T, star, tie="below", above=Side(
        "fetch-wins",
        f"Fetching the {hit}-token hit is {gain}x faster than recomputing it: per token the link beats the GPU "
        f"{per_token}x, and the hit is long enough to bury the fixed overhead.",
        "Below break-even (short hits, a slow tier, or little compute per KV byte: MHA, small models on fast "
        "GPUs) recomputing wins, and a cache tier that serves such hits costs more than it saves."),
        below=Side(
        "recompute-wins",
        f"Recomputing the {hit}-token hit is faster ({gain}x is fetching's 'speedup'): though per token the link "
        f"beats the GPU {per_token}x, the fixed cost of one fetch is more than the whole recompute.",
        "Past the break-even length the per-token lead takes over and every longer hit is worth fetching."))


# --- pd-transfer-bandwidth ---------------------------------------------------------------------


def pd_transfer_bandwidth(p, s: Sheet) -> None:
    model, gpu = p.model, p.gpu
    N = _active_params(s, model)
    TP = s.param("TP", "tp")
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    KV = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype, TP)
    P = s.given("P", peak_flops(gpu, p.weight_dtype), "TFLOP/s", f"{gpu.name} dense {p.weight_dtype} peak")
    mfu = s.param("η", "mfu")
    T = s.param("T", "prompt")
    k = s.param("k", "fan_in")
    link = s.step("", "The decode GPU's link in bytes", "BW_D", s.param("BW_b", "link"), "GB/s",
                  "8 bits a byte: the unit the KV comes in")
    A = _attention_pair_flops(s, model)

    request = s.step("kv_per_request", "KV one prompt produces", "M_req", T * kv_tok, "GB",
           "every prompt token leaves its keys and values in every layer: the scary number")
    flops = s.step("flops_per_token", "Prefill FLOPs per prompt token, on average", "F_tok", 2 * N + A * T / 2,
                   "GFLOP", "2N through the weights, plus T/2 query-key pairs per token under the causal mask")
    t_ar = tp_all_reduce(s, model, gpu, p.tp, T, tag="pre", label="prefill")
    t_pre = s.step("prefill_time", "Prefill time of the prompt", "t_pre", T * flops / (TP * mfu * P) + t_ar, "s",
                   "the prompt's FLOPs over the group's FLOP/s at this matmul efficiency"
                   + ("" if p.tp == 1 else ", then the TP all-reduces (tp-all-reduce card)"))
    b = s.step("per_gpu", "KV each prefill GPU sends per second", "b", T * KV / t_pre, "GB/s",
               "its share of the prompt's KV over the prefill time: the prompt length cancels but for attention"
               + ("" if p.tp == 1 else " and the all-reduces' latency"))
    if s.compare(KV * TP, kv_tok) > 0:
        raise Reject("TP past the KV heads replicates them: each GPU sends more than its share")
    bound = s.step("per_gpu_bound", "The same with neither attention nor all-reduces: prompt length gone", "b_max",
                   mfu * P / (2 * N / kv_tok), "GB/s", "η·peak/(2N/KV): compute per GPU over the FLOPs per KV byte; "
                   "attention and the all-reduces only add time, so no prompt length needs more")
    need = s.step("decode_need", "KV a decode GPU's link carries per second", "b_D", k * b, "GB/s",
                  "each decode GPU takes the KV of the prefill GPUs that feed it")
    s.step("link_share", "Share of the decode GPU's link", "u", need / link, "%",
           "what the transfer leaves for everything else on that link")
    _link_breakers(s, p, need=s.value(need), link=s.value(link))

    s.assume("Prefill runs back to back on every prefill GPU, its matmuls at the given efficiency (a share of "
             "peak for the FLOPs alone: the all-reduces come on top, so end-to-end MFU is lower), and its KV "
             "leaves as it is made (layer by layer, as NIXL/Mooncake transfers do), so the link sees the average "
             "rate, not a burst.")
    s.assume("Each GPU of the prefill group sends its own KV heads; a decode GPU receives the KV of the prefill "
             "GPUs that feed it (the fan-in) over its link, with no other traffic on it.")
    s.assume("FLOPs: 2 per active parameter per token plus the attention-flops card's causal pairs; the prefill "
             "group's all-reduces follow the tp-all-reduce card over NVLink, not overlapped with compute: they "
             "slow the prefill a little and the KV rate with it.")
    s.slip("Gb/s and GB/s mixed up", on="link_share", factor=8.0)
    s.slip("the whole token's KV per GPU (TP forgotten)", on="per_gpu", factor=p.tp)
    s.slip("the fan-in forgotten", on="decode_need", factor=1 / p.fan_in)
    _link_regime(s, need, link, bound, k, request)


BREAKERS = (
    "an MHA model of the same size (as many KV heads as query heads)",
    "GPUs with four times the FLOP/s and twice the NVLink bandwidth (Blackwell at fp8 against Hopper at bf16)",
    "an MHA model of the same size, and GPUs with four times the FLOP/s and twice the NVLink bandwidth",
    "four times as many prefill GPUs feeding each decode GPU",
    "prompts four times as long",
    "an fp8 KV cache (half the bytes per token)",
    "twice the link bandwidth",
)


def _link_breakers(s: Sheet, p, *, need: float, link: float) -> None:
    """Which single change flips whether the decode GPU's link holds: each redone on the variant's numbers."""
    model = p.model
    groups = model.heads / model.kv_heads
    n = model.get("active_params_b", model.params_b) * 1e9
    pair = 4 * model.layers * model.heads * model.head_dim

    def verdict(factor: float, nic: float = link) -> tuple[bool, str]:
        after = need * factor
        return after > nic, f"{format_quantity(after, 'GB/s')} against {format_quantity(nic, 'GB/s')} of link"

    ar = all_reduce_terms(s, model, p.gpu, p.tp)  # the givens tp_all_reduce stated: no new ones on the sheet
    fixed, per_token = s.evaluate(ar.fixed), s.evaluate(ar.per_token)
    compute = p.tp * p.mfu * peak_flops(p.gpu, p.weight_dtype)

    def rate(prompt: float, speed: float = 1.0, nvlink: float = 1.0) -> float:
        # Tokens per second of prefill: compute `speed` times faster, the all-reduces' bytes over `nvlink`
        # times the bandwidth, their latency unchanged.
        return prompt / (prompt * (2 * n + pair * prompt / 2) / (speed * compute) + fixed
                         + per_token * prompt / nvlink)

    longer = rate(4 * p.prompt) / rate(p.prompt)
    blackwell = rate(p.prompt, 4, 2) / rate(p.prompt)
    heads = f"{format_number(groups)}x the KV bytes per token for the same FLOPs" if groups > 1 else \
        "already MHA: the KV per token stays"
    speed = (f"{format_number(blackwell, 3)}x the tokens per second, each with the same KV: the compute "
             "shrinks fourfold, the all-reduces' bytes only twofold and their latency not at all"
             if p.tp > 1 else "four times the tokens per second, each with the same KV")
    mha, faster, both, fan, long_prompts, fp8_kv, nic = BREAKERS
    cases = (
        (mha, verdict(groups), heads),
        (faster, verdict(blackwell), speed),
        (both, verdict(groups * blackwell), f"{heads}, and {format_number(blackwell, 3)}x the tokens per second"),
        (fan, verdict(4), "four times the senders into the same link"),
        (long_prompts, verdict(longer),
         "more attention FLOPs per token: the KV comes out slower" if longer < 1 else
         "the all-reduces' fixed latency spread over more tokens outweighs the extra attention: the KV comes "
         "out faster"),
        (fp8_kv, verdict(0.5 if p.kv_dtype == "bf16" else 1.0),
         "half the bytes per token" if p.kv_dtype == "bf16" else "already fp8: nothing changes"),
        (nic, verdict(1, 2 * link), "twice the link for the same flow"))
    short = need > link
    flips = [(option, breaks != short, numbers, why) for option, (breaks, numbers), why in cases]
    if len({flipped for _, flipped, _, _ in flips}) == 1:
        raise Reject("every change leaves the link on the same side, or every change moves it: nothing to tell apart")
    for option, flipped, numbers, why in flips:
        now = ("the link comes up short" if not short else "the flow fits") if flipped else \
            ("it stays short" if short else "it still fits")
        s.judge("breakers", option, flipped, f"{why}: {numbers}: {now}")


def _link_regime(s: Sheet, need, link, bound, k, request) -> None:
    got, nic = format_quantity(s.value(need), "GB/s"), format_quantity(s.value(link), "GB/s")
    size = format_quantity(s.value(request), "GB")
    per_gpu = format_quantity(s.value(bound), "GB/s")
    fan = format_number(s.value(k))
    s.regime_by(need, link, tie="below", above=Side(
        "link-breaks",
        f"Each decode GPU must take {got} from its {fan} prefill GPU(s), past its {nic} link: prefill makes KV "
        f"faster than the link moves it (up to {per_gpu} per prefill GPU, whatever the prompt length), so decode "
        "waits on transfers or prefill stalls.",
        "With more compute per KV byte (GQA with few KV heads, bigger models, MLA), fewer prefill GPUs per "
        "decode GPU, an fp8 KV cache or a faster link the flow fits, and prompt length never enters."),
        below=Side(
        "link-suffices",
        f"Each decode GPU takes {got} from its {fan} prefill GPU(s), within its {nic} link: a request's KV is "
        f"{size}, but it trickles out over the prefill time, at most {per_gpu} per prefill GPU whatever the "
        "prompt length.",
        "Models that spend little compute per KV byte (MHA, small models), faster GPUs (Blackwell, fp8 compute) "
        "and a large fan-in of prefill GPUs per decode GPU raise the flow past the link."))
