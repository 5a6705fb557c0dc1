"""Prefill-to-decode KV transfer - the bandwidth a disaggregated pool needs."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, tp_all_reduce
from solvers.formulas.common import (
    dtype_bytes,
    given_config,
    given_hbm_bandwidth,
    given_matmul_peaks,
    given_model_params,
    given_weight_bytes,
)
from solvers.formulas.kvcache import kv_bytes_per_token_given, kv_bytes_per_token_per_gpu_given
from solvers.formulas.kvtransfer import active_params, attention_pair_flops
from solvers.formulas.steptime import given_step_bandwidth
from solvers.sheetmath import max_of
from solvers.units import format_number, format_quantity

TOO_CLOSE = 0.10  # a flow within 10% of the link: too close to call (one NIC runs at 87-100% of line rate, REALITY #11)

BREAKERS = (
    "an MHA model of the same size (as many KV heads as query heads)",
    "prefill GPUs with four times the FLOP/s and twice the NVLink bandwidth",
    "four times as many prefill GPUs feeding each decode GPU",
    "prompts four times as long",
    "an fp8 KV cache (half the bytes per token, attention at the fp8 peak)",
    "half this link bandwidth (a NIC shared with other traffic)",
    "twice this link bandwidth",
)


def _link_breakers(s: Sheet, p, *, need, link, N, A, T, TP, mfu, read) -> None:
    """Which single change flips whether the decode GPU's link holds: each the sheet's prefill rate on changed
    inputs, decided against the link on the sheet."""
    model = p.model
    groups = given_config(s, model, "heads") / given_config(s, model, "kv_heads")

    def verdict(factor: sympy.Expr, nic: sympy.Expr = link) -> tuple[bool | None, str]:
        # None: the changed flow lands within TOO_CLOSE of the link, a verdict the NIC's efficiency would decide.
        after = need * factor
        numbers = (f"{format_quantity(s.evaluate(after), 'GB/s')} against "
                   f"{format_quantity(s.evaluate(nic), 'GB/s')} of link")
        if abs(s.evaluate(after / nic) - 1) < TOO_CLOSE:
            return None, numbers
        return s.compare(after, nic) > 0, numbers

    ar = all_reduce_terms(s, model, p.gpu, p.tp)  # the givens tp_all_reduce stated: no new ones on the sheet
    peaks = {p.kv_dtype: given_matmul_peaks(s, p.gpu, p.weight_dtype, p.kv_dtype)}
    if p.kv_dtype == "bf16":  # the fp8 cache's attention peak, for that what-if
        peaks["fp8"] = given_matmul_peaks(s, p.gpu, p.weight_dtype, "fp8", attention_symbol="P_att8")

    def math(prompt: sympy.Expr, speed: int = 1, kv_dtype: str = p.kv_dtype) -> sympy.Expr:
        # Seconds of the prompt's math, `speed` times faster; attention at the peak of the cache's dtype.
        P, P_att = peaks[kv_dtype]
        return prompt * (2 * N / P + A * prompt / 2 / P_att) / (TP * mfu * speed)

    def rate(prompt: sympy.Expr, speed: int = 1, nvlink: int = 1, kv_dtype: str = p.kv_dtype) -> sympy.Expr:
        # Tokens per second of prefill: the pass no faster than one read of the weights (HBM as it is), the
        # all-reduces' bytes over `nvlink` times the bandwidth, their latency unchanged.
        return prompt / (max_of(read, math(prompt, speed, kv_dtype)) + ar.fixed + ar.per_token * prompt / nvlink)

    def x(ratio: sympy.Expr) -> str:
        return format_number(s.evaluate(ratio), 3)

    longer = rate(4 * T) / rate(T)
    blackwell = rate(T, 4, 2) / rate(T)
    fp8_cache = rate(T, kv_dtype="fp8") / (2 * rate(T)) if p.kv_dtype == "bf16" else sympy.Integer(1)
    heads = (f"{x(groups)}x the KV bytes per token for the same FLOPs" if model.heads > model.kv_heads else
             "already MHA: the KV per token stays")
    speed = (f"{x(blackwell)}x the tokens per second, each with the same KV: the compute "
             "shrinks fourfold, the all-reduces' bytes only twofold and their latency not at all"
             if p.tp > 1 else f"{x(blackwell)}x the tokens per second, each with the same KV")
    if s.compare(read, math(T, 4)) > 0:
        speed += ", and the pass then waits on its weight read (HBM as it is)"
    mha, faster, fan, long_prompts, fp8_kv, nic, wider = BREAKERS
    cases = [
        (mha, verdict(groups), heads),
        (faster, verdict(blackwell), speed),
        (fan, verdict(4), "four times the senders into the same link"),
        (nic, verdict(1, link / 2), "half the link for the same flow"),
        (wider, verdict(1, 2 * link), "twice the link for the same flow")]
    fits_longer = 4 * p.prompt <= model.max_context  # a prompt the model cannot take is no change to weigh
    if fits_longer:
        cases.append((long_prompts, verdict(longer),
                      "more attention FLOPs per token: the KV comes out slower" if s.compare(longer, 1) < 0 else
                      "the all-reduces' fixed latency spread over more tokens outweighs the extra attention: the KV "
                      "comes out faster"))
    if p.kv_dtype == "bf16":  # an fp8 cache is no change where the cache is fp8 already: not listed there
        cases.append((fp8_kv, verdict(fp8_cache),
                      f"half the bytes per token, and attention at the fp8 peak: {x(fp8_cache)}x the KV rate"))
    short = s.compare(need, link) > 0
    for option, (breaks, numbers), why in cases:
        if breaks is None:  # not listed: too close to call either way
            s.judge("breakers", option, None, f"{why}: {numbers}: within {TOO_CLOSE:.0%} of the link, too close "
                    "to call")
    flips = [(option, breaks != short, numbers, why) for option, (breaks, numbers), why in cases
             if breaks is not None]
    if len({flipped for _, flipped, _, _ in flips}) == 1:
        raise Reject("every change leaves the link on the same side, or every change moves it: nothing to tell apart")
    for option, flipped, numbers, why in flips:
        now = ("the link comes up short" if not short else "the flow fits") if flipped else \
            ("it stays short" if short else "it still fits")
        s.judge("breakers", option, flipped, f"{why}: {numbers}: {now}")
    if p.kv_dtype != "bf16":
        s.judge("breakers", fp8_kv, None, "the cache is fp8 already: nothing to change")
    if not fits_longer:
        s.judge("breakers", long_prompts, None,
                f"{model.name} serves at most {model.max_context:,} tokens: four times this prompt is past it")


def _link_regime(s: Sheet, need, link, bound, k, request) -> None:
    got, nic = s.text(need), s.text(link)
    size = s.text(request)
    per_gpu = s.text(bound)
    fan = format_number(s.value(k))
    s.regime_by(need, link, tie="below", above=Side(
        "link-breaks",
        f"Each decode GPU must take {got} from its {fan} prefill GPU(s), past its {nic} link: prefill makes KV "
        f"faster than the link moves it (up to {per_gpu} per prefill GPU, whatever the prompt length), so decode "
        "waits on transfers or prefill stalls: the queue on the link grows without bound.",
        "With more compute per KV byte (GQA with few KV heads, bigger models, MLA), fewer prefill GPUs per "
        "decode GPU, an fp8 KV cache or a faster link the flow fits, and prompt length never enters."),
        below=Side(
        "link-suffices",
        f"Each decode GPU takes {got} from its {fan} prefill GPU(s), within its {nic} link: a request's KV is "
        f"{size}, but it trickles out over the prefill time, at most {per_gpu} per prefill GPU whatever the "
        "prompt length.",
        "Models that spend little compute per KV byte (MHA, small models), faster GPUs (Blackwell, fp8 compute) "
        "and a large fan-in of prefill GPUs per decode GPU raise the flow past the link."))


def solve(p, s: Sheet) -> None:
    model, gpu = p.model, p.gpu
    N = active_params(s, model)
    TP = s.param("TP", "tp")
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    KV = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype, TP)
    P, P_att = given_matmul_peaks(s, gpu, p.weight_dtype, p.kv_dtype)
    mfu = s.param("η", "mfu")
    T = s.param("T", "prompt")
    k = s.param("k", "fan_in")
    link = s.step("", "The decode GPU's link in bytes", "BW_D", s.param("BW_b", "link"), "GB/s",
                  "8 bits a byte: the unit the KV comes in")
    A = attention_pair_flops(s, model)

    request = s.step("kv_per_request", "KV one prompt produces", "M_req", T * kv_tok, "GB",
           "every prompt token leaves its keys and values in every layer: the scary number")
    flops = s.step("flops_per_token", "Prefill FLOPs per prompt token, on average", "F_tok", 2 * N + A * T / 2,
                   "GFLOP", "2N through the weights, plus T/2 query-key pairs per token under the causal mask")
    t_ar = tp_all_reduce(s, model, gpu, p.tp, T, tag="pre", label="prefill")
    math = (T * flops / (TP * mfu * P) if P_att is P  # one peak: the FLOPs over one rate
            else T * (2 * N / P + A * T / 2 / P_att) / (TP * mfu))  # the weights' peak, and the cache's for attention
    # The step model's read side: the prompt's pass reads each GPU's share of every weight once.
    N_all = N if model.get("active_params_b") is None else given_model_params(s, model, "N_tot")
    b_w = given_weight_bytes(s, p.weight_dtype)
    BW = given_hbm_bandwidth(s, gpu)
    eta_bw = given_step_bandwidth(s)
    read = s.step("weight_read", "One read of a prefill GPU's weights", "t_W", N_all * b_w / (TP * eta_bw * BW), "ms",
                  "its 1/TP share of " + ("every weight" if N_all is N else "every expert's weights") + ", once a pass")
    t_math = s.step("prefill_math", "Math time of the prompt", "t_F", math, "s",
                    "the prompt's FLOPs over the group's FLOP/s at this matmul efficiency"
                    + ("" if P_att is P else ", attention at its cache's peak (matmul-precision)"))
    t_pre = s.step("prefill_time", "Prefill time of the prompt", "t_pre", max_of(read, t_math) + t_ar, "s",
                   "the slower of its weight read and its math"
                   + ("" if p.tp == 1 else ", then the TP all-reduces, not overlapped"))
    b = s.step("per_gpu", "KV each prefill GPU sends per second", "b", T * KV / t_pre, "GB/s",
               "its share of the prompt's KV over the time the prefill takes to make it")
    if s.compare(KV * TP, kv_tok) > 0:
        raise Reject("TP past the KV heads replicates them: each GPU sends more than its share")
    bound = s.step("per_gpu_bound", "The same with neither attention nor all-reduces: prompt length gone", "b_max",
                   mfu * P / (2 * N / kv_tok), "GB/s", "η·peak/(2N/KV): compute per GPU over the FLOPs per KV byte; "
                   "attention, the weight read and the all-reduces only add time, so no prompt length needs more")
    need = s.step("decode_need", "KV a decode GPU's link carries per second", "b_D", k * b, "GB/s",
                  "each decode GPU takes the KV of the prefill GPUs that feed it")
    share = s.step("link_share", "Share of the decode GPU's link", "u", need / link, "%",
                   "what the KV transfers take of that link")
    if abs(s.evaluate(share) - 1) < TOO_CLOSE:
        raise Reject("the flow is within 10% of the link: whether it holds would turn on the NIC's efficiency and the "
                     "model's constants")
    # This request's own KV into one decode GPU: k of its TP shares where the decode group is TP/k wide, the
    # whole prompt's where one decode GPU takes whole requests (fan-in past TP). Priced alone on the link: in
    # the link-breaks regime a steady queue has no finite TTFT, so the key is the transfer itself.
    L = given_config(s, model, "layers")
    shares = k if p.fan_in <= p.tp else TP
    own = s.step("own_kv", "This request's KV into one decode GPU", "M_own", shares * T * KV, "GB",
                 (f"the {p.fan_in} share(s) its decode GPU holds of the prompt's {p.tp}" if p.fan_in <= p.tp else
                  "a decode GPU takes whole requests: the prompt's KV, all TP shares"))
    t_x = s.step("transfer_time", "Transfer of this request's KV, sent after its prefill", "t_x", own / link,
                 "ms", "its KV into the decode GPU over that GPU's link, with the link to itself")
    streamed = s.step("streamed_time", "What the transfer adds to TTFT, streamed layer by layer", "t_s",
           max_of(t_x / L, t_x - t_pre + t_pre / L), "ms",
           "a pipeline of L layers: each layer's KV leaves as the next layer computes, so only the last layer's "
           "transfer shows, unless the link is the slower stage and the backlog shows too")
    _link_breakers(s, p, need=need, link=link, N=N, A=A, T=T, TP=TP, mfu=mfu, read=read)

    s.assume("Prefill runs back to back on every prefill GPU, one prompt a pass, its matmuls at the given efficiency "
             "(a share of peak for the FLOPs alone: the all-reduces come on top, so end-to-end MFU is lower), no "
             "faster than one read of the GPU's share of the weights at the step bandwidth share (the KV it "
             "writes is left out), and its KV "
             "leaves as it is made (layer by layer, as NIXL/Mooncake transfers do), so the link sees the average "
             "rate, not a burst.")
    s.assume("Each GPU of the prefill group sends its own KV heads; a decode GPU receives the KV of the prefill "
             "GPUs that feed it (the fan-in): at fan-in k ≤ TP the decode group is TP/k GPUs, each holding k prefill "
             "GPUs' KV heads; past TP, a decode GPU takes whole requests from k/TP prefill groups. The transfer "
             "times price this request's KV with the link to itself: on a link busy a share u of the time, a "
             "transfer also waits behind others' (an M/D/1 queue adds u/(2(1 − u)) transfers on average: 2x at "
             "u = 0.8), so near the boundary the streamed figure is no longer about t_x/L.")
    s.assume("FLOPs: 2 per active parameter per token plus attention's causal query-key pairs, the weights' "
             "at the weight dtype's peak and attention's at the KV dtype's (matmul-precision); the prefill "
             "group's all-reduces run over the scale-up fabric, not overlapped with compute: they slow the "
             "prefill a little and the KV rate with it.")
    s.slip("Gb/s and GB/s mixed up", on="link_share", factor=8.0)
    s.slip("the whole token's KV per GPU (TP forgotten)", on="per_gpu", factor=p.tp)
    s.slip("the fan-in forgotten", on="link_share", factor=1 / p.fan_in)
    if p.fan_in < p.tp:
        s.slip("the whole request's KV over one decode GPU's link", on="transfer_time",
               factor=s.evaluate(kv_tok / (k * KV)))
    if p.fan_in > p.tp:
        s.slip("the fan-in's KV all at once (other requests' transfers too)", on="transfer_time",
               factor=s.evaluate(k / TP))
    if p.tp > 1:
        s.slip("the all-reduces left out", on="prefill_time", factor=s.evaluate(max_of(read, t_math) / t_pre))
    s.slip("the whole transfer, as if nothing overlapped the prefill", on="streamed_time",
           factor=s.evaluate(t_x / streamed))
    _link_regime(s, need, link, bound, k, request)

