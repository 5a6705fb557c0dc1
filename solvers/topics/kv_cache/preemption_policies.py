"""Out of KV blocks - recompute, swap, or wait."""
from __future__ import annotations

from fractions import Fraction

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.steptime import StepConstants, engine, given_step_overhead, step_work, usable_hbm
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number, format_quantity

# A stall that hits more than this share of a stream's decode steps sets its p99 inter-token latency.
P99_SHARE = sympy.Rational(1, 100)
# A break-even below this leaves swap cheaper on every link the question draws (1 GB/s and up) with room to
# spare: the choice is made before it is asked, and no push on the link can cross it clearly.
BREAKEVEN_FLOOR = sympy.Rational(3, 2) * 10**9  # B/s


LONG = "Even the cheaper eviction stalls every running stream for longer than one TPOT at a time"
TAIL = "The stalls land in more than 1 decode step in 100, so they set every stream's p99 inter-token latency"
MEAN = "Spread over the steps one eviction buys, the stalls add over {mean_share} to every stream's mean time per token"
RESERVE = ("Holding back what the batch writes before the nearest completion would take under {reserve_share} of "
           "the pool")
CLEAR = "The costlier way out takes at least twice as long as the cheaper one"


def _near(s: Sheet, ratio: float, line: str, keys: list[str]) -> None:
    """Graded figures within 3% of a judged line can land on either side of it: refused where they are asked."""
    if abs(ratio - 1) <= TOO_CLOSE:
        s.refuse_if_asked(keys, f"{line} is within 3% of its threshold: too close to call")


def _stall_judgements(s: Sheet, p, t_rec, t_swap, T, S, pool, b, R) -> None:
    """What the evictions cost the running streams. A swap is two stalls of half its time (out now, in later), a
    recompute one of its whole time; the mean counts the sum."""
    swap = s.compare(t_swap, t_rec) < 0  # at the tie, recompute (the regime's rule)
    stall = t_swap if swap else t_rec
    event = s.evaluate(stall / 2 if swap else stall)
    events = 2 if swap else 1
    way = "the swap" if swap else "the recompute"
    each = (f"{way}'s copy out and its copy back, {format_quantity(event, 'ms')} each" if swap else
            f"{way}'s {format_quantity(event, 'ms')}, in one step")
    _near(s, event / s.value(T), "the longest stall against one TPOT", ["who_pays", "link_pays"])
    long_stall = s.compare(stall / 2 if swap else stall, T) > 0
    for key in ("who_pays", "link_pays"):
        s.judge(key, LONG, long_stall, f"{each}: {'more' if long_stall else 'less'} than the {s.text(T)} TPOT")
    tail = s.compare(events / S, P99_SHARE) > 0
    s.judge("who_pays", TAIL, tail, f"{events} stall{'s' if events > 1 else ''} every {s.text(S)}: "
            + ("above 1%, inside the p99" if tail else "at most 1%, beyond the p99 (p99.9 and the maximum)"))
    f_mean = s.param("f_mean", "mean_share")
    added = s.evaluate(stall / (S * T))
    _near(s, added / s.value(f_mean), "the stalls' share of the mean", ["who_pays", "link_pays"])
    mean = s.compare(stall / (S * T), f_mean) > 0
    for key in ("who_pays", "link_pays"):
        s.judge(key, MEAN, mean, f"{format_quantity(s.evaluate(stall), 'ms')} every {s.text(S)} of {s.text(T)}: "
                f"{format_quantity(added, '%')} on the mean" + ("" if mean else ", a tail effect more than a mean one"))
    f_res = s.param("f_res", "reserve_share")
    share = s.step("reserve_share_of_pool", "Share of the pool the nearest completion's reserve takes",
                   "r", b * R / pool, "%",
                   "b streams write R tokens each before a stream finishes and frees its blocks")
    _near(s, s.value(share) / s.value(f_res), "the reserve's share of the pool", ["who_pays"])
    small = s.compare(share, f_res) < 0
    s.judge("who_pays", RESERVE, small,
            f"{format_number(p.batch)} streams × {format_number(p.remaining)} tokens is {s.text(share)} of the pool"
            + (": a reserve (or a lower max_num_seqs) that small beats evicting" if small else
               ": a reserve that large idles the memory the batch needs"))
    ratio = s.evaluate(max_of(t_rec, t_swap) / min_of(t_rec, t_swap))
    _near(s, ratio / 2, "the two ways' ratio", ["link_pays"])
    clear = s.compare(max_of(t_rec, t_swap) / min_of(t_rec, t_swap), 2) >= 0
    s.judge("link_pays", CLEAR, clear,
            f"{format_quantity(s.evaluate(t_rec), 'ms')} to recompute against "
            f"{format_quantity(s.evaluate(t_swap), 'ms')} to swap: {format_number(ratio, 3)}x"
            + ("" if clear else ", under twice"))


def _preemption_regime(s: Sheet, t_rec, t_swap, W_star, W) -> None:
    rec, swap = s.text(t_rec), s.text(t_swap)
    breakeven = s.text(W_star)
    s.regime_by(W, W_star, tie="below", above=Side(
        "swap-cheaper",
        f"Copying the victim's KV out and back takes {swap}, against {rec} to recompute it: swap is "
        f"{format_number(s.value(t_rec) / s.value(t_swap), 3)}x cheaper, the link being faster than the "
        f"{breakeven} at which they tie.",
        f"Below {breakeven} of effective PCIe bandwidth recompute wins, and the break-even rises for a model "
        "that redoes fewer FLOPs per KV byte it would move (a small dense model, bf16 KV) or for faster "
        "compute (fp8, a newer GPU): the victim then redoes its prefill and every running stream waits for "
        "it. Engines that only recompute (vLLM V1) lean on the prefix cache to make part of it free."),
        below=Side(
        "recompute-cheaper",
        f"Re-prefilling the victim takes {rec} of the group's compute, less than the {swap} the PCIe copy "
        f"out and back would take: recompute is {format_number(s.value(t_swap) / s.value(t_rec), 3)}x cheaper, "
        f"the link being no faster than the {breakeven} at which they tie.",
        f"Above {breakeven} of effective PCIe bandwidth swap wins, and the break-even falls for a model "
        "that redoes more FLOPs per KV byte (a larger model, fp8 KV, a longer context) or for slower "
        "compute: nobody then redoes work, and the running streams wait only for the copies."))


# A full pool of streams averaging more than this share of the model's context is no real batch (the review's
# 14 streams at 131K each on 4 x MI300X): refused.
RESIDENT_CAP = Fraction(6, 10)
EXACT_BATCH = 4096  # sympy's exact harmonic(n): 0.1 s at 4,096, 0.7 s at 8,192, 14 s at 25,600
TOO_CLOSE = 0.03  # the stall's and the TPOT's tolerance in the question file


def _evictions(s: Sheet, C, b, R, context: int, batch: int, remaining: int):
    """Evict one C-token victim each time the pool runs dry. After the i-th eviction b + 1 − i streams write, so
    the C tokens it frees last C / (b + 1 − i) steps, and after k evictions the pool is dry again at step
    t_k = C·(1/b + 1/(b − 1) + … + 1/(b − k + 1)). The key is the least k with t_k ≥ R, found exactly in
    fractions and shown as the bracket t_(k−1) < R ≤ t_k."""
    if batch > EXACT_BATCH:
        raise Reject(f"{batch:,.0f} streams: the exact harmonic sums take seconds past {EXACT_BATCH:,} (an override, "
                     "never a draw)")
    dry, count = Fraction(0), 0
    while dry < remaining:
        if count >= batch:  # the nearest request itself would be next: never reached within the draws' ranges
            raise Reject("evicting every other stream does not reach the nearest completion")
        dry += Fraction(context) / (Fraction(batch) - count)
        count += 1
    k = s.step("evictions", "Victims of this size evicted before the nearest completion", "k",
               s.integer(count), "",
               "the least k whose freed tokens carry the streams left to the nearest completion: the two steps below")
    t_k = s.step("t_dry", "Step at which the pool runs dry after k evictions", "t_k",
                 C * (sympy.harmonic(b) - sympy.harmonic(b - k)), "steps",
                 "the i-th victim's C tokens feed the b + 1 − i streams still writing; harmonic(n) = 1 + 1/2 + … + 1/n")
    # With one victim there is none fewer: 0 outright, where floats would leave H(b) − H(b) a rounding off zero.
    t_before = s.step("t_dry_before", "Step at which it runs dry after k − 1", "t_k1",
                      C * (sympy.harmonic(b) - sympy.harmonic(b - k + 1)) if count > 1 else sympy.Integer(0), "steps",
                      "one victim fewer: the pool runs dry before the nearest request has written its R tokens")
    return k, t_k, t_before


def solve(p, s: Sheet) -> None:
    model, n_gpus = p.model, p.tp

    # The step-time model at the drawn MFU: the re-prefill reads the weights once and does its math, each matmul
    # at its own peak (matmul-precision); the all-reduces come on top.
    e = engine(s, model, p.gpu, n_gpus, StepConstants(compute=p.mfu, overhead=None), dtype=p.weight_dtype,
               kv_dtype=p.kv_dtype, communication=n_gpus > 1, kv_prerequisite=True)
    C = s.param("C", "context")
    F_w = s.step("flops_weights", "Weight FLOPs of the re-prefill", "F_w", 2 * e.N * C, "TFLOP",
                 "a multiply-add (2 FLOPs) per parameter per token, embeddings included")
    F_a = s.step("flops_attention", "Attention FLOPs of the re-prefill", "F_a", e.A * C**2 / 2, "TFLOP",
                 "A per query-key pair, C²/2 pairs under the causal mask")
    F = s.step("flops", "FLOPs recompute redoes", "F", F_w + F_a, "TFLOP",
               "the victim's whole prefill, done again")
    t_math = s.step("t_recompute_math", "Recompute math", "t_math", e.math_time(F_w, F_a), "ms",
                    "the TP group shares the prefill at its achievable compute" + (
                        "" if e.P_att is e.P else ", the weight GEMMs at P and attention at P_att"))
    t_read = s.step("t_recompute_read", "Recompute weight read", "t_read", e.W / e.TP / e.byte_rate, "ms",
                    "each GPU reads its share of the weights once for the whole prefill")
    t_ar = tp_all_reduce(s, model, p.gpu, n_gpus, C, tag="rec", label="re-prefill")
    t_rec = s.step("t_recompute", "Recompute time", "t_rec", max_of(t_read, t_math) + t_ar, "ms",
                   "the slower of the weight read and the math, then the TP all-reduces it cannot overlap"
                   if n_gpus > 1 else "the slower of the weight read and the math; one GPU: no all-reduces")

    kv_gpu = e.KV
    V = s.step("swap_bytes", "Victim's KV on each GPU", "V", kv_gpu * C, "GB",
               "each GPU holds its KV heads' share of the victim's context")
    W = s.param("W_PCIe", "pcie")
    t_swap = s.step("t_swap", "Swap time (out and back in)", "t_swap", 2 * V / W, "ms",
                    "each GPU copies its share to host memory and later back, over its own link")
    W_star = s.step("breakeven_bw", "PCIe bandwidth at which swap and recompute cost the same", "W_star",
                    2 * V / t_rec, "GB/s", "set 2V/W equal to the recompute time and solve for W")
    if s.compare(W_star, BREAKEVEN_FLOOR) < 0:
        raise Reject(f"swap and recompute tie at {s.text(W_star)} of PCIe, under "
                     f"{format_quantity(float(BREAKEVEN_FLOOR), 'GB/s')}: no swap path is that slow, so swap wins on "
                     "any link and there is no choice to make (a large model on a wide TP group)")

    b = s.param("b", "batch")
    R = s.param("R", "remaining")
    # The pool is full: the b streams and the victim hold every token it has room for. Its size sets how long the
    # streams are (a pool no real batch could fill is refused) and what each decode step reads.
    pool = s.step("pool_tokens", "Tokens the full KV pool holds", "P_kv", (usable_hbm(s, p.gpu) - e.W / e.TP) / e.KV,
                  "tokens", "each GPU's usable HBM less its share of the weights, over its KV bytes per token")
    held = s.step("batch_tokens", "Tokens the running streams hold", "P_b", pool - C, "tokens",
                  "the full pool less the victim's C")
    mean = s.evaluate(held / b)
    if mean <= 0 or mean > RESIDENT_CAP * model.max_context:
        raise Reject(f"{format_number(p.batch)} streams filling the pool beside the victim would each hold "
                     f"{format_number(mean)} tokens, past {format_number(float(RESIDENT_CAP) * 100)}% of the model's "
                     "context: no real batch sits that long")
    s.step("resident_context", "Mean context each running stream holds", "C_b", held / b, "tokens",
           "the streams' share of the full pool: what fills it")
    work = step_work(s, e, "dec", "decode step", b, held, held)
    t_ar_dec = tp_all_reduce(s, model, p.gpu, n_gpus, b, tag="dec", label="decode step")
    t_oh = given_step_overhead(s)
    T = s.step("tpot", "Time per output token of the running batch", "T",
               max_of(work.bytes / e.byte_rate, work.math) + t_ar_dec + t_oh, "ms",
               "each GPU reads its weights and all the KV the streams hold, or does its math, whichever is longer; "
               "then the all-reduces and the overhead")
    s.step("t_free", "Time until the nearest request finishes", "t_free", R * T, "s",
           "the first blocks to come free, with evictions keeping the batch decoding")
    S = s.step("steps_bought", "Decode steps one eviction buys", "S", floor_of(C / b), "steps",
               "the victim frees C tokens of KV; the running streams write b tokens of it per step")
    s.step("reserve", "KV the batch writes before that completion (each GPU)", "V_res", b * R * kv_gpu, "GB",
           "what a scheduler must hold back for waiting to be safe: b streams, R tokens each")
    k, t_k, t_before = _evictions(s, C, b, R, p.context, p.batch, p.remaining)
    s.assume(f"Recompute by the step-time model at {format_number(p.mfu * 100)}% of the dense peaks across the TP "
             "group (the drawn prefill MFU as η_c), plus the TP all-reduces by the card's tp-all-reduce model; all "
             "weights and the causal attention over the context counted, nothing of the victim left in a prefix "
             "cache. No per-step overhead: the re-prefill rides in a step the batch takes anyway.")
    s.assume(f"Swap at an effective {format_quantity(p.pcie, 'GB/s')} per GPU, each GPU over its own PCIe link: "
             "PCIe Gen5 x16 carries about 64 GB/s each way and pinned bulk copies reach most of it; copies of one "
             "small page per layer per call (vLLM V0's swap_blocks) and links shared behind a PCIe switch deliver a "
             "fraction of it, down to a few GB/s (an assumption; measure it). Where the link is fast, the swap wins "
             "by far: that is why CPU offloading (LMCache, vLLM's offload connectors) moves whole layers in "
             "large copies.")
    s.assume("Either eviction stalls the engine step it runs in: the re-prefill shares the step with the decode "
             "streams, and vLLM V0 ran its swaps in the worker before the forward pass. So every running stream "
             "waits out the eviction's time once.")
    s.assume("The re-prefill is priced as one stall, now: none of the victim's blocks survive in the prefix cache "
             "and it comes back in one chunk. vLLM V1 re-prefills when it re-admits the victim (often after others "
             "finish), in chunks of its token budget (the same work over several steps, each stalled less), and "
             "prefix-cache hits on blocks not yet reused can make part of it free.")
    s.assume("The swap's copy out and copy back are two stalls of half the time each, the second when the victim "
             "returns: no stream waits longer than one of them at a time, and two land in every S steps. The mean "
             "counts their sum. The victim itself (vLLM picks the latest arrival, the lowest priority) waits its "
             "whole time out of the pool as one inter-token gap.")
    s.assume("The pool is full and nothing is reserved: each running stream needs a new block within one block's "
             "worth of tokens, so evicting no one stalls them all, the nearest-to-done request included (it "
             "is R tokens from done). Engines avoid this by stopping admissions early (a watermark or a "
             "reserve of blocks) and by preempting, never by waiting.")
    s.assume("The time per output token is the step-time model's decode step of the running streams over the full "
             "pool (less the victim), with the drawn MFU for its (small) math and the step overhead; it is taken as "
             "fixed while the streams grow, since the pool stays full.")
    s.assume("Each later victim holds the same C tokens when it is evicted, and an evicted stream stops writing; "
             f"the {format_number(p.batch)} other streams write one token per step each and none finishes before "
             "the nearest one. Tokens are counted as they flow (the pool runs dry part-way through a step) and "
             "block granularity is ignored.")
    one_gpu = f"x{n_gpus}: one GPU doing the whole recompute or copy, not its 1/{n_gpus} share"
    s.slip(one_gpu, n_gpus, on="t_swap")
    s.slip(one_gpu, on="t_recompute", factor=s.evaluate(max_of(e.TP * t_read, e.TP * t_math) + t_ar) / s.value(t_rec))
    s.slip("x2: the copy counted one way only", 0.5, on=("t_swap", "breakeven_bw"))
    s.slip("attention FLOPs left out", on="t_recompute",
           factor=s.evaluate(max_of(t_read, e.math_time(F_w, 0)) + t_ar) / s.value(t_rec))
    if e.P_att is not e.P:
        s.slip("attention at the weights' peak", on="t_recompute",
               factor=s.evaluate(max_of(t_read, F / e.flop_rate) + t_ar) / s.value(t_rec))
    if n_gpus > 1:
        s.slip("TP all-reduces left out", s.evaluate(t_rec - t_ar) / s.value(t_rec), on="t_recompute")
        s.slip("TP all-reduces left out", s.value(t_rec) / s.evaluate(t_rec - t_ar), on="breakeven_bw")

    _stall_judgements(s, p, t_rec, t_swap, T, S, pool, b, R)
    _preemption_regime(s, t_rec, t_swap, W_star, W)

