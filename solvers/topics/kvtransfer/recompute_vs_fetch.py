"""Recompute a cached prefix or fetch its KV - one ratio, and where it flips."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms
from solvers.formulas.common import (
    attention_dtype,
    compute_efficiency,
    dtype_bytes,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_matmul_peaks,
    given_peak_flops,
)
from solvers.formulas.kvcache import kv_bytes_per_token_given, kv_bytes_per_token_per_gpu_given
from solvers.formulas.kvtransfer import active_params, attention_pair_flops
from solvers.formulas.steptime import given_step_bandwidth
from solvers.sheetmath import floor_of, max_of
from solvers.units import format_number, format_quantity

TOO_CLOSE = 0.03  # a hit within 3% of break-even: which side wins would turn on the step model's constants

# r7: "a hundredth of this bandwidth" mirrored the regime (true in every fetch-wins draw, false in every other) and
# pre-answered the push that moves the bandwidth; "a single 16-token block" restated the break-even asked beside
# it; "four times the tensor peak" is no real part. A remote store's fixed cost and fp8 matmuls replace them.
SITUATIONS = (
    "the KV coming from a remote store that costs {remote_fixed} before a fetch's first byte",
    "an MHA model of the same size (as many KV heads as query heads)",
    "a hit ten times this long",
    "the recompute run with fp8 matmuls (twice the tensor peak, the same efficiency)",
    "an fp8 KV cache (half the bytes to fetch, attention at the fp8 peak)",
)


@dataclass(frozen=True)
class Costs:
    """The two sides of one hit: recompute per token (the slower of m, the weights' math, and w, the KV it writes;
    then c, its all-reduce bytes), attention per query-key pair (a, at the cache's rate), fetch per token (f) and
    per fetch (t0)."""

    m: sympy.Expr
    w: sympy.Expr
    c: sympy.Expr
    a: sympy.Expr
    f: sympy.Expr
    t0: sympy.Expr

    def recompute(self, hit: sympy.Expr) -> sympy.Expr:
        return hit * (max_of(self.m, self.w) + self.c) + self.a * hit**2 / 2

    def fetch(self, hit: sympy.Expr) -> sympy.Expr:
        return self.t0 + hit * self.f


def _situations(s: Sheet, p, costs: Costs, hit, fp8_attention) -> None:
    """Which single change flips which is faster for this hit: the same two times on changed inputs,
    decided on the sheet."""
    groups = given_config(s, p.model, "heads") / given_config(s, p.model, "kv_heads")
    c = costs

    def recompute_wins(k: Costs, T=hit) -> tuple[bool, str]:
        rec, fet = k.recompute(T), k.fetch(T)
        return s.compare(rec, fet) <= 0, (f"recompute {format_quantity(s.evaluate(rec), 'ms')} against fetch "
                                          f"{format_quantity(s.evaluate(fet), 'ms')}")

    remote, mha, longer, fast, fp8 = SITUATIONS
    t_remote = s.param("t_remote", "remote_fixed")
    mha_why = (f"{format_number(s.evaluate(groups))}x the KV heads: {format_number(s.evaluate(groups))}x the bytes "
               "per token, the same FLOPs" if p.model.heads > p.model.kv_heads else "already MHA: nothing changes")
    fp8_why = ("half the bytes, and attention at the fp8 peak: fetching gets faster, and so does recomputing's "
               "attention" if fp8_attention is not None else
               f"half the bytes; the {p.gpu.name} has no fp8 tensor cores, so attention stays at bf16")
    cases = [
        (mha, recompute_wins(Costs(c.m, groups * c.w, c.c, c.a, groups * c.f, c.t0)), mha_why),
        (fast, recompute_wins(Costs(c.m / 2, c.w, c.c, c.a / 2, c.f, c.t0)),
         "the math runs twice as fast; the all-reduces and the link do not"),
        (fp8, recompute_wins(Costs(c.m, c.w / 2, c.c, c.a if fp8_attention is None else fp8_attention, c.f / 2, c.t0)),
         fp8_why),
    ]
    slower_store = s.compare(t_remote, c.t0) > 0  # a store that answers faster than this tier is no remote one
    if slower_store:
        cases.append((remote, recompute_wins(Costs(c.m, c.w, c.c, c.a, c.f, t_remote)),
                      "only the fixed cost of the fetch moves"))
    if 10 * p.hit <= p.model.max_context:  # a longer hit than the model's context is no situation
        cases.append((longer, recompute_wins(c, 10 * hit), "the fixed cost is spread over ten times the tokens"))
    now, _ = recompute_wins(c)
    flips = [(option, wins != now, times, why) for option, (wins, times), why in cases]
    if len({flipped for _, flipped, _, _ in flips}) == 1:
        raise Reject("every change leaves the winner as it is, or every change flips it: nothing to tell apart")
    for option, flipped, times, why in flips:
        s.judge("situations", option, flipped, f"{why}; {times}: " + (
            ("recomputing" if not now else "fetching") + " becomes the faster" if flipped else
            ("recomputing" if now else "fetching") + " stays the faster"))
    if not slower_store:
        s.judge("situations", remote, None, f"this tier already takes {s.text(c.t0)} before its first byte")
    if 10 * p.hit > p.model.max_context:
        s.judge("situations", longer, None, f"ten times the hit is past {p.model.name}'s context")


def _fetch_regime(s: Sheet, speedup, star, adv, T) -> None:
    gain, per_token = format_number(s.value(speedup), 3), format_number(s.value(adv), 3)
    slower = format_number(1 / s.value(speedup), 3)
    hit, cross = format_number(s.value(T)), format_number(s.value(star), 3)
    ahead = s.compare(adv, 1) > 0
    lead = (f"per token the link beats the GPU {per_token}x" if ahead else
            f"per token the link is the slower ({per_token}x), and only attention's T² makes a longer hit pay")
    # Recompute minus fetch grows with T past the root, so the hit's side of T_x is the winner.
    s.regime_by(T, star, tie="below", above=Side(
        "fetch-wins",
        f"Fetching the {hit}-token hit is {gain}x faster than recomputing it: {lead}, and the hit is past the "
        f"{cross}-token crossing, long enough to bury the fixed cost of a fetch.",
        "Below break-even (short hits, a slow tier, or little compute per KV byte: MHA, small or MoE models on "
        "fast GPUs) recomputing wins, and a cache tier that serves such hits costs more than it saves."),
        below=Side(
        "recompute-wins",
        f"Recomputing the {hit}-token hit is faster (fetching takes {slower}x as long): {lead}, but the hit is "
        f"short of the {cross}-token crossing, so the fetch's fixed cost and bytes outweigh the whole recompute.",
        "Past the break-even length fetching wins, and every longer hit is worth fetching."))


def solve(p, s: Sheet) -> None:
    model, gpu = p.model, p.gpu
    N = active_params(s, model)
    TP = s.param("TP", "tp")
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes("bf16"), "bf16")
    KV = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes("bf16"), "bf16", TP)
    P, _ = given_matmul_peaks(s, gpu, "bf16", "bf16")
    eta, _ = given_compute_efficiencies(s, gpu, "bf16", "bf16")
    BW = s.param("BW", "bandwidth")
    t0 = s.param("t_0", "overhead")
    T = s.param("T", "hit")
    A = attention_pair_flops(s, model)

    F = s.step("group_flops", "Achievable FLOP/s of the TP group", "F_eff", TP * eta * P, "TFLOP/s",
               "every GPU of the group computes its 1/TP of each token")
    r_math = s.step("recompute_math", "Recompute math per token", "t_rF", 2 * N / F, "us",
                    "2N FLOPs per token through the weights, at the group's achievable rate")
    BW_hbm = given_hbm_bandwidth(s, gpu, "BW_HBM")
    r_write = s.step("recompute_write", "Recomputed KV written per token", "t_rM",
                     KV / (given_step_bandwidth(s) * BW_hbm), "us",
                     "the bytes recomputing adds to the pass: each GPU writes its share of the token's KV to HBM")
    ar = all_reduce_terms(s, model, gpu, p.tp)
    r_comm = ar.per_token if p.tp == 1 else s.step(  # one GPU: no all-reduces
        "recompute_allreduce", "All-reduce bytes per recomputed token", "t_rC", ar.per_token, "us",
        "two all-reduces a layer carry each token's activations, 2(TP−1)/TP of them over each GPU's link; their "
        "latency is the request's own pass's, paid either way")
    r = s.step("recompute_per_token", "Recompute time per token", "t_r", max_of(r_math, r_write) + r_comm,
               "us", "the slower of its math and its bytes (the math, by some 2N/KV FLOPs per KV byte), then the "
               "all-reduce bytes the token adds to the pass")
    f = s.step("fetch_per_token", "Fetch time per token", "t_f", KV / BW, "us",
               "each GPU pulls its own KV heads of the token over its own link, in parallel with the others")
    adv = s.step("advantage", "How many times faster fetching a token is", "R", r / f, "x",
                 "(2N/KV)/(F_eff/BW) with the all-reduce bytes on top: TP cancels from the math, not from them")
    intensity = s.step("flops_per_kv_byte", "FLOPs the model spends per byte of KV it makes", "I_kv", 2 * N / kv_tok,
                       "FLOP/B", "the model's side of the ratio: compute per byte a recompute would save moving")
    s.step("advantage_peak", "The weights' math alone at peak compute", "R_peak", intensity / (P / BW), "x",
           "(2N/KV)/(P/BW), per GPU: the lead before efficiency and all-reduces, the catalogue's figure")
    a = s.step("attention_per_pair", "Recompute attention per query-key pair", "t_a", A / F, "ns",
               "the attention FLOPs of one pair at the group's achievable rate")
    costs = Costs(r_math, r_write, r_comm, a, f, t0)
    T_r = s.step("recompute_time", "Recomputing the hit", "T_r", costs.recompute(T), "ms",
                 "t_r per token plus attention over the prefix, T²/2 query-key pairs under the causal mask")
    T_f = s.step("fetch_time", "Fetching the hit", "T_f", costs.fetch(T), "ms",
                 "the fixed cost of one fetch (lookup, connection, first byte), then the bytes")
    speedup = s.step("speedup", "Fetching's speedup on this hit", "G", T_r / T_f, "x",
                     "above 1 the fetch pays; below it recomputing is faster")
    if abs(s.evaluate(speedup) - 1) < TOO_CLOSE:
        raise Reject("the hit is within 3% of break-even: too close to call")
    # t_0 + T·t_f = T·t_r + t_a·T²/2: the positive root, written without the cancellation.
    star = s.step("crossing", "Hit length where fetching and recomputing take as long", "T_x",
                  2 * t0 / ((r - f) + sympy.sqrt((r - f) ** 2 + 2 * a * t0)), "tokens",
                  "solve t_0 + T·t_f = T·t_r + t_a·T²/2 for T: the positive root of the quadratic")
    s.step("break_even", "Shortest hit worth fetching", "T_star", floor_of(star) + 1, "tokens",
           "the first whole number of tokens past the crossing")
    if s.value(star) >= p.model.max_context:
        raise Reject("fetching pays only past the model's context: no hit it can hold is worth fetching")
    fp8_attention = None
    if attention_dtype(gpu, "fp8") == "fp8":
        P8 = given_peak_flops(s, gpu, "fp8", "P_fp8")
        eta8 = s.given("η_fp8", compute_efficiency("fp8"), "%",
                       "achievable fraction of the fp8 dense peak in attention (step-compute-fp8)")
        fp8_attention = A / (TP * eta8 * P8)
    _situations(s, p, costs, T, fp8_attention)

    s.assume("Recomputing rides in the request's own prefill pass (its new tokens need one anyway), priced by "
             "the step-time model kv-cache-tiers prices a whole prefill by: that pass reads the weights and pays "
             "its step overhead and its all-reduces' per-call latency either way, so the hit adds its FLOPs and "
             "the all-reduce bytes of its tokens, no more.")
    s.assume("That pass is compute-bound (hundreds of tokens or more in it): 2N/KV FLOPs per KV byte, tens of "
             "thousands, dwarf any GPU's ridge, so the KV the recompute writes (in the max) is never what it waits "
             "on. A pass of a few tokens alone would wait on the weight read, and recomputing them be nearly free.")
    s.assume("Every GPU of the TP group fetches its own share of the KV over a link of the bandwidth given, all in "
             "parallel, and the fetched KV is in the serving dtype (bf16). The fixed cost is paid once per hit, "
             "before the first byte (the stage says one fetch per hit): real stores (LMCache's chunks, Mooncake's "
             "and NIXL's per-layer or per-chunk transfers) issue many requests, and only where they are pipelined "
             "does the latency stay one; a store that waits on each in turn pays it once a chunk, which lengthens "
             "a long hit's fetch and moves the break-even out.")
    s.assume("FLOPs: 2 per active parameter per token, plus the attention-flops card's 4·d_h per query head per "
             "layer for each query-key pair of the prefix.")
    if p.tp > 1:
        s.slip("the all-reduces forgotten", on="recompute_per_token", factor=s.evaluate(r_math / r))
        s.slip("every GPU fetching the whole token's KV (the TP split forgotten)", on="fetch_per_token",
               factor=s.evaluate(kv_tok / KV))
    s.slip("recompute at peak instead of achievable compute", on="recompute_per_token",
           factor=s.evaluate((r_math * eta + r_comm) / r))
    if model.get("active_params_b") is not None:
        s.slip("2N from all the experts' parameters", on="recompute_per_token",
               factor=s.evaluate((r_math * model.params_b / model.active_params_b + r_comm) / r))
    s.slip("the fixed cost of a fetch forgotten", on="speedup", factor=s.evaluate(T_f / (T * f)))
    s.slip("attention over the prefix forgotten", on="recompute_time", factor=s.evaluate(T * r / T_r))
    _fetch_regime(s, speedup, star, adv, T)
