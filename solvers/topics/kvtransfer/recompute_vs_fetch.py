"""Recompute a cached prefix or fetch its KV - one ratio, and where it flips."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.models.common import (
    compute_efficiency,
    dtype_bytes,
    given_config,
    given_hbm_bandwidth,
    given_peak_flops,
)
from solvers.models.kvcache import kv_bytes_per_token_given, kv_bytes_per_token_per_gpu_given
from solvers.models.kvtransfer import active_params, attention_pair_flops
from solvers.models.steptime import given_step_bandwidth
from solvers.sheetmath import floor_of, max_of
from solvers.units import format_number, format_quantity

SITUATIONS = (
    "the KV coming from a tier with a hundredth of this bandwidth",
    "an MHA model of the same size (as many KV heads as query heads)",
    "a hit of a single 16-token block",
    "a hit a hundred times this long",
    "a GPU with four times the tensor peak at the same efficiency",
    "an fp8 KV cache (half the bytes to fetch)",
    "tensor parallelism twice as wide (all-reduces aside), each GPU fetching its share over its own link",
)


def _situations(s: Sheet, p, *, m, w, f, t0, hit, a) -> None:
    """Which single change flips which is faster for this hit: each the sheet's two times on changed inputs
    (m, w: recompute's math and KV write per token; f: fetch per token; a = attention FLOPs per pair over the
    group's FLOP/s), decided on the sheet."""
    groups = given_config(s, p.model, "heads") / given_config(s, p.model, "kv_heads")

    def recompute_wins(m=m, w=w, f=f, hit=hit, a=a) -> tuple[bool, str]:
        rec, fet = hit * max_of(m, w) + a * hit**2 / 2, t0 + hit * f
        return s.compare(rec, fet) <= 0, (f"recompute {format_quantity(s.evaluate(rec), 'ms')} against fetch "
                                          f"{format_quantity(s.evaluate(fet), 'ms')}")

    tier, mha, block, longer, fast, fp8, wide = SITUATIONS
    cases = (
        (tier, recompute_wins(f=100 * f), "a hundredth of the bandwidth: a hundred times the fetch per token"),
        (mha, recompute_wins(f=groups * f, w=groups * w),
         f"{format_number(s.evaluate(groups))}x the KV heads: {format_number(s.evaluate(groups))}x the bytes per "
         "token, the same FLOPs" if p.model.heads > p.model.kv_heads else "already MHA: nothing changes"),
        (block, recompute_wins(hit=16), "16 tokens carry the whole fixed cost of a fetch"),
        (longer, recompute_wins(hit=100 * hit), "the fixed cost is spread over a hundred times the tokens"),
        (fast, recompute_wins(m=m / 4, a=a / 4), "recomputing runs four times faster; the link does not"),
        (fp8, recompute_wins(f=f / 2, w=w / 2), "half the bytes: fetching only gets faster"),
        (wide, recompute_wins(m=m / 2, w=w / 2, f=f / 2, a=a / 2),
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


def solve(p, s: Sheet) -> None:
    model, gpu = p.model, p.gpu
    N = active_params(s, model)
    TP = s.param("TP", "tp")
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes("bf16"), "bf16")
    KV = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes("bf16"), "bf16", TP)
    P = given_peak_flops(s, gpu, "bf16")
    eta = s.given("η_c", compute_efficiency("bf16"), "%", "achievable fraction of peak compute (step-compute card)")
    BW = s.param("BW", "bandwidth")
    t0 = s.param("t_0", "overhead")
    T = s.param("T", "hit")
    A = attention_pair_flops(s, model)

    F = s.step("group_flops", "Achievable FLOP/s of the TP group", "F_eff", TP * eta * P, "TFLOP/s",
               "every GPU of the group computes its 1/TP of each token")
    BW_hbm = given_hbm_bandwidth(s, gpu, "BW_HBM")
    eta_bw = given_step_bandwidth(s)
    r_math = s.step("", "Recompute math per token", "t_rF", 2 * N / F, "us",
                    "2N FLOPs per token through the weights, at the group's achievable rate")
    r_write = s.step("", "Recomputed KV written per token", "t_rM", KV / (eta_bw * BW_hbm), "us",
                     "the bytes recomputing adds to the pass: each GPU writes its share of the token's KV to HBM")
    r = s.step("recompute_per_token", "Recompute time per token", "t_r", max_of(r_math, r_write), "us",
               "the slower of its math and its bytes (the step model): the math, by some 2N/KV FLOPs per KV byte")
    f = s.step("fetch_per_token", "Fetch time per token", "t_f", KV / BW, "us",
               "each GPU pulls its own KV heads of the token over its own link, in parallel with the others")
    adv = s.step("advantage", "How many times faster fetching a token is", "R", r / f, "x",
                 "(2N/KV)/(F_eff/BW): TP divides both sides and cancels")
    intensity = s.step("flops_per_kv_byte", "FLOPs the model spends per byte of KV it makes", "I_kv", 2 * N / kv_tok,
                       "FLOP/B", "the model's side of the ratio: compute per byte a recompute would save moving")
    s.step("advantage_peak", "The same at peak compute", "R_peak", max_of(intensity / (P / BW), BW / BW_hbm), "x",
           "(2N/KV)/(P/BW), per GPU: the floor of fetching's lead, since real prefill runs below peak (its KV "
           "written at the full HBM bandwidth, BW/BW_HBM, is far less)")
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
    _situations(s, p, m=r_math, w=r_write, f=f, t0=t0, hit=T, a=A / F)

    s.assume("Recomputing rides in the request's own prefill pass at the step-time model's achievable compute "
             "(step-compute card): the pass's step overhead and all-reduce latencies are paid either way, and the "
             "all-reduce bytes of the extra tokens are left out, which flatters recomputing a little.")
    s.assume("That pass is compute-bound (hundreds of tokens or more in it): the hit's tokens cost their FLOPs. "
             "The pass reads the weights whichever way the prefix arrives, so the bytes recomputing adds are the KV "
             "it writes, shown in the max though 2N/KV FLOPs per KV byte (tens of thousands at least) dwarf any "
             "GPU's ridge (hundreds); a pass of a few tokens alone would wait on the weight read, and recomputing "
             "them be nearly free.")
    s.assume("Every GPU of the TP group fetches its own share of the KV over a link of the bandwidth given, all in "
             "parallel; the fixed overhead is paid once per hit, and the fetched KV is in the serving dtype (bf16).")
    s.assume("FLOPs: 2 per active parameter per token, plus the attention-flops card's 4·d_h per query head per "
             "layer for each query-key pair of the prefix.")
    s.slip("every GPU fetching the whole token's KV (TP not cancelled)", on="advantage", factor=1 / p.tp)
    s.slip("recompute at peak instead of achievable compute", on="advantage", factor=compute_efficiency("bf16"))
    if model.get("active_params_b") is not None:
        s.slip("2N from all the experts' parameters", on="advantage", factor=model.params_b / model.active_params_b)
    s.slip("the fixed overhead forgotten", on="speedup", factor=s.evaluate((t0 + T * f) / (T * f)))
    _fetch_regime(s, speedup, star, adv, T)

