"""One request, two halves - prefill and decode on the roofline."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.collective import AllReduceTerms, all_reduce_terms, tp_all_reduce
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    given_compute_efficiencies,
    given_hbm_bandwidth,
    given_kv_bytes,
    given_model_params,
    given_peak_flops,
    given_weight_bytes,
    hbm_bytes,
)
from solvers.formulas.kvcache import kv_bytes_per_token
from solvers.formulas.roofline import require_full_xgmi_ring
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import max_of
from solvers.units import figures_against, format_number, format_quantity

# The doubled batch is a lever only where its KV cache still fits: the option says so, not just the key.
TWICE_THE_BATCH = "twice the batch (its doubled KV cache must fit in usable HBM)"
# Weight-only quantisation (W4A16, W8A16): fewer bytes to read, the matmuls at the peak they ran at (r7 finding 6).
HALF_WEIGHTS = "weights at half the bytes (weight-only quantisation: the matmuls keep their peak)"
# A lever whose gain lands this close to the line (relative) is not listed: the step time is graded within 3%,
# so a candidate's own step could put it on either side (the 30% upgrade at 1.245x against 1.25x, review 2).
TOO_CLOSE = sympy.Rational(1, 100)
ON_THE_RIDGE = sympy.Rational(2, 100)
# Whether the doubled batch's KV fits is not asked within this share of usable HBM: the bytes are graded within 2%,
# and fp8 checkpoints keep some tensors in bf16 (r3: 136.94 GB needed against 135.68 usable at @9622).
FITS_TOO_CLOSE = sympy.Rational(3, 100)


def _within(s: Sheet, value: sympy.Expr, line: sympy.Expr, share: sympy.Expr) -> bool:
    """value lies strictly within a relative `share` of line, either side (decided exactly)."""
    return s.compare(value, line * (1 - share)) > 0 and s.compare(value, line * (1 + share)) < 0


def _decode_levers(s: Sheet, p, *, weights: sympy.Expr, cache: sympy.Expr, flops: sympy.Expr, comm: AllReduceTerms,
                   throughput: sympy.Expr, n: sympy.Expr, bandwidth: sympy.Expr, peak: sympy.Expr,
                   batch: sympy.Expr, overhead: sympy.Expr) -> None:
    """Which single change lifts this decode step's tokens/s by the parameter `raise_by` or more: the
    answer follows from the KV cache's share of the bytes and from the side of the roofline. The GPU
    `upgrade` faster in both (a modest generation) gains it only while the all-reduces and the step's
    overhead, which no GPU shortens, are a small share. bandwidth and peak are what the kernels reach.
    Each lever's gain is an expression of the sheet's symbols, judged exactly against 1 + raise_by."""
    lever_gain, upgrade, today = 1 + exact(p.raise_by), 1 + exact(p.upgrade), comm.of(batch)

    def gain(w=weights, kv=cache, bw=bandwidth, pk=peak, f=flops, b=batch, ar=today) -> sympy.Expr:
        return b / (max_of((w + kv) / (n * bw), f / (n * pk)) + ar + overhead) / throughput

    t_read, t_math = (weights + cache) / (n * bandwidth), flops / (n * peak)
    reads_bind = s.compare(t_read, t_math) > 0
    ar_ms = s.evaluate(today)
    fixed = today + overhead
    side = (f"{format_quantity(s.evaluate(t_read), 'ms')} of reads vs {format_quantity(s.evaluate(t_math), 'ms')} "
            "of math, plus " + (f"{format_quantity(ar_ms, 'ms')} of all-reduces and " if ar_ms else "")
            + f"{format_quantity(s.evaluate(overhead), 'ms')} of overhead")

    def say(option: str, ratio: sympy.Expr, why: str) -> None:
        shown = s.evaluate(ratio)
        gained = f"{side}; {why}: {format_number(shown, figures_against(shown, 1 + p.raise_by))}x the tokens/s"
        if _within(s, ratio, lever_gain, TOO_CLOSE):
            s.judge("levers", option, None, f"{gained}, too close to the {format_quantity(p.raise_by, '%')} line "
                    "to call: not asked")
            return
        s.judge("levers", option, s.compare(ratio, lever_gain) >= 0, gained)

    kv_share = format_number(100 * s.evaluate(cache / (weights + cache)), 2) + "%"
    if s.compare(gain(bw=2 * bandwidth, pk=2 * peak), lever_gain) < 0:
        raise Reject(f"not even a GPU twice as fast gains {format_quantity(p.raise_by, '%')}: the all-reduces "
                     "and the overhead dominate the step")
    usable = n * exact(hbm_bytes(p.gpu)) * exact(GPU_MEMORY_UTILIZATION)
    if _within(s, weights + 2 * cache, usable, FITS_TOO_CLOSE):
        s.judge("levers", TWICE_THE_BATCH, None,
                f"twice the KV cache needs {format_quantity(s.evaluate(weights + 2 * cache), 'GB')} against "
                f"{format_quantity(s.evaluate(usable), 'GB')} usable: too close to call whether it fits, not asked")
    elif s.compare(weights + 2 * cache, usable) <= 0:
        say(TWICE_THE_BATCH, gain(kv=2 * cache, f=2 * flops, b=2 * batch, ar=comm.of(2 * batch)),
            "one weight read serves twice the tokens while the KV reads and the math double")
    else:
        s.judge("levers", TWICE_THE_BATCH, False,
                f"twice the KV cache does not fit beside the weights on {p.tp} × {p.gpu.name}")
    reads = "the reads halve" if reads_bind else "only the reads, which wait on the math, get shorter"
    say(HALF_WEIGHTS, gain(w=weights / 2),
        f"the weights are {format_number(100 - 100 * s.evaluate(cache / (weights + cache)), 2)}% of the bytes")
    say("an fp8 KV cache", gain(kv=cache / 2), f"the KV cache is {kv_share} of the bytes")
    say("a GPU with twice the HBM bandwidth", gain(bw=2 * bandwidth), reads)
    say("a GPU with twice the tensor peak", gain(pk=2 * peak),
        "the math halves" if s.compare(t_math, t_read) > 0 else "the math already waits on the reads")
    pct = f"{format_number(100 * s.evaluate(fixed / (fixed + max_of(t_read, t_math))), 2)}% of the step"
    share = (f"the all-reduces and the overhead are {pct}" if ar_ms else
             f"the overhead is {pct} (no all-reduces at TP 1)")
    shrink = f"both sides shrink by 1/{format_number(float(upgrade))}"
    say("a GPU {upgrade} faster in both HBM bandwidth and tensor peak (same NVLink)",
        gain(bw=upgrade * bandwidth, pk=upgrade * peak),
        f"{shrink}; " + (f"{share}, and do not" if ar_ms else f"{share}, and does not"))
    fixed_words = "the all-reduces and the overhead" if ar_ms else "the overhead (no all-reduces at TP 1)"
    s.judge("levers", "a GPU with twice the bandwidth and twice the peak", True,
            f"both sides halve whichever binds, but not {fixed_words}, {pct}: "
            f"{format_number(s.evaluate(gain(bw=2 * bandwidth, pk=2 * peak)), 3)}x the tokens/s", fact=True)


def _decode_regime(s: Sheet, p, I_dec, ridge, T, kv_tok, N, BW, P) -> None:
    """Decode's side of the ridge, with KV reads in; the boundary in batch terms exists only while a
    sequence's KV read is shorter than its token's math. BW and P: what the kernels reach."""
    intensity, at_ridge = format_number(s.value(I_dec), 3), format_number(s.value(ridge), 3)
    reachable = s.compare(T * kv_tok / BW, 2 * N / P) < 0
    if reachable:
        B_kv = s.evaluate((N * dtype_bytes(p.dtype) / BW) / (2 * N / P - T * kv_tok / BW))
        boundary = (f"with the KV reads in, decode turns compute-bound from about {format_number(B_kv, 3)} "
                    "sequences, if their KV cache fits")
    else:
        limit = s.evaluate(2 * N / (T * kv_tok))
        boundary = (f"at {format_number(p.prompt)} tokens of context no batch gets there: the step's intensity "
                    f"tends to 2N/(T·KV_tok) = {format_number(limit, 3)} FLOP/B as sequences are added")
    prefill_bound = s.results["prefill_regime"] == "compute-bound"
    beside_memory = ("The prefill of the same request is compute-bound: the two halves sit on opposite sides."
                     if prefill_bound else
                     "Even the prefill is memory-bound: the prompt is shorter than the crossover.")
    # A lone short prompt is memory-bound, but a batch job prefills its prompts together (r7 finding 2).
    beside_compute = ("The prefill is compute-bound too." if prefill_bound else
                      f"One {format_number(p.prompt)}-token prompt alone would be memory-bound (shorter than the "
                      "crossover), but prompts prefilled together share the weight read: batched prefill is "
                      "compute-bound, so both halves now sit on the math side.")
    s.regime_by(I_dec, ridge, tie="above", below=Side(
        "memory-bound",
        f"Decode runs at {intensity} FLOP/B against the kernels' ridge of {at_ridge}: the step waits on HBM; "
        f"{boundary}. " + beside_memory,
        "Above the ridge the tensor cores set the pace: tokens/s stops rising with the batch, and only more "
        "FLOP/s (or fewer FLOPs per token) helps; the per-user speed falls with every sequence added.",
        near=f"Decode runs at {intensity} FLOP/B, just below the kernels' ridge of {at_ridge}: the reads still "
             f"set the pace, but the math takes nearly as long; {boundary}. " + beside_memory),
        above=Side(
        "compute-bound",
        f"Decode runs at {intensity} FLOP/B, past the kernels' ridge of {at_ridge}: short contexts and a wide batch "
        "let the weight read amortise until the math binds; tokens/s has stopped rising with the batch. "
        + beside_compute,
        "Below the ridge the step waits on HBM: a longer context or a smaller batch moves it there, and then "
        "bandwidth, smaller weights or a smaller KV cache raise tokens/s.",
        near=f"Decode runs at {intensity} FLOP/B, just past the kernels' ridge of {at_ridge}: the math now sets "
             "the pace, with the reads nearly as long, so neither side alone buys much. " + beside_compute))


def solve(p, s: Sheet) -> None:
    """One request's two halves on one TP group, timed by the bank's step model: a prefill of T tokens,
    then decode steps of B sequences that each read their own KV cache as well as the shared weights."""
    require_full_xgmi_ring(p.gpu, p.tp)
    N = given_model_params(s, p.model)
    T = s.param("T", "prompt")
    B = s.param("B", "batch")
    n = s.param("TP", "tp")
    b = given_weight_bytes(s, p.dtype)
    b_kv = given_kv_bytes(s, "bf16")
    P = given_peak_flops(s, p.gpu, p.dtype)
    BW = given_hbm_bandwidth(s, p.gpu)
    eta_c, _ = given_compute_efficiencies(s, p.gpu, p.dtype, p.dtype)
    eta_bw = given_step_bandwidth(s)
    t_oh = given_step_overhead(s)
    reach_P, reach_BW = eta_c * P, eta_bw * BW  # what the kernels reach

    W = s.step("weights", "Weight bytes", "W", N * b, "GB", "every weight is read from HBM once per pass")
    s.step("", "Ridge on the datasheet", "I_ds", P / BW, "FLOP/B",
                       "peak FLOP/s over HBM bytes/s: the idealised crossover, which no kernel reaches on either side")
    ridge = s.step("ridge", "Ridge the kernels reach", "I_ridge", reach_P / reach_BW, "FLOP/B",
                   "the achievable FLOP/s over the achievable bytes/s: matmuls reach less of their peak than "
                   "streaming reads do of theirs, so the math binds sooner")
    # Prefill: every prompt token rides on one read of the weights.
    F_pre = s.step("flops", "FLOPs of the prefill", "F_pre", 2 * N * T, "TFLOP",
                   "one multiply-add (2 FLOPs) per weight for each prompt token")
    I_pre = s.step("prefill_intensity", "Arithmetic intensity of the prefill", "I_pre", F_pre / W, "FLOP/B",
                   "2T/b_w: every prompt token shares each weight byte read")
    then = ", then the overhead" if p.tp == 1 else ", then the all-reduces and the overhead"
    ar_pre = tp_all_reduce(s, p.model, p.gpu, p.tp, T, tag="pre", label="prefill")
    t_pre = s.step("prefill_time", "Time of the prefill", "t_pre",
                   max_of(W / (n * reach_BW), F_pre / (n * reach_P)) + ar_pre + t_oh, "ms",
                   "each GPU reads 1/TP of the weights and does 1/TP of the math at what its kernels reach; the "
                   "slower sets the pace" + then)
    # Decode: one token per sequence, and every sequence reads its own KV cache.
    kv_tok = kv_bytes_per_token(s, p.model, b_kv)
    F_dec = s.step("decode_flops", "FLOPs of one decode step", "F_dec", 2 * N * B, "TFLOP",
                   "one token per sequence through every weight")
    M_dec = s.step("bytes", "Bytes read by one decode step", "M_dec", W + B * T * kv_tok, "GB",
                   "the weights once, plus every sequence's own KV cache of T tokens")
    I_dec = s.step("decode_intensity", "Arithmetic intensity of the decode step", "I_dec", F_dec / M_dec, "FLOP/B",
                   "2B/b_w for the weights alone, pulled down by KV reads that no other sequence shares")
    crossover = s.step("crossover", "Tokens one read of the weights must serve before the math binds", "B_star",
                       b * reach_P / (2 * reach_BW), "tokens",
                       "solve 2B/b_w = η_c·P/(η_bw·BW) for B: a prompt's tokens in the prefill, one token per "
                       "sequence in decode (where the KV reads push the real boundary further out)")
    t_mem = s.step("", "Decode step: time to read", "t_M", M_dec / (n * reach_BW), "ms", "HBM's side of the roofline")
    t_math = s.step("", "Decode step: time for the math", "t_F", F_dec / (n * reach_P), "ms", "the tensor cores' side")
    ar_dec = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    t = s.step("step_time", "Time of one decode step", "t_dec", max_of(t_mem, t_math) + ar_dec + t_oh, "ms",
               "the slower of reading and computing" + then)
    X = s.step("throughput", "Decode tokens per second", "X", B / t, "tokens/s", "one token per sequence per step")
    s.step("per_user", "Tokens per second per user", "X_user", 1 / t, "tokens/s", "each sequence gets one token a step")
    # Each side is graded as a choice: a half whose intensity sits this close to the ridge could be called either way.
    if any(_within(s, intensity, ridge, ON_THE_RIDGE) for intensity in (I_pre, I_dec)):
        raise Reject(f"a half within {format_quantity(float(ON_THE_RIDGE), '%')} of the ridge: too close to name "
                     "its side")
    pre_bound = s.compare(I_pre, ridge) > 0
    s.choose("prefill_regime", "compute-bound" if pre_bound else "memory-bound",
             f"{format_number(p.prompt)} tokens share each weight read, "
             + (f"past the crossover of {s.text(crossover)}, so the math is the longer side" if pre_bound else
                f"short of the crossover of {s.text(crossover)}, so the read is the longer side"))
    _decode_levers(s, p, weights=W, cache=B * T * kv_tok, flops=F_dec, comm=all_reduce_terms(s, p.model, p.gpu, p.tp),
                   throughput=X, n=n, bandwidth=reach_BW, peak=reach_P, batch=B, overhead=t_oh)

    s.assume("The bank's step model (step-compute, step-bandwidth, step-overhead): the matmuls reach η_c of the "
             "dense peak of the weights' dtype, the reads 80% of HBM bandwidth, and every pass pays 2 ms outside "
             "its kernels. The datasheet ridge P/BW is the idealised crossover; the step's own is η_c·P/(η_bw·BW).")
    if p.dtype == "fp8":
        s.assume("fp8 weights run W8A8: the matmuls at the fp8 dense peak, at 50% of it (step-compute-fp8). The "
                 "half-byte weights lever is weight-only quantisation (W4A16-style): fewer bytes, the same math.")
    s.assume("FLOPs from the weight matmuls only (flops-per-token): attention's own FLOPs over the context add a "
             "few percent at these lengths and would make the prefill only more compute-bound; leaving them out "
             "keeps the intensity and the ridge an exact test of which side binds.")
    s.assume("The prefill reads the weights once (its KV writes, T·KV_tok, are small beside them); every decode "
             "sequence holds about the prompt's length of context, its KV cache in bf16.")
    s.assume("Under tensor parallelism each GPU reads and computes 1/TP of the pass, so intensity and ridge are "
             "those of one GPU; the all-reduces (tp-all-reduce) come on top, not overlapped.")
    s.slip("datasheet peaks: the kernels' efficiencies left out", s.evaluate(b * P / (2 * BW)) / s.value(crossover),
           on="crossover")
    if p.dtype == "bf16":
        s.slip("x2: FLOPs not doubled", 2.0, on="crossover")
        s.slip("x2: a bf16 weight counted as 1 byte", 0.5, on="crossover")
    else:
        s.slip("the ridge in FLOP/B given for tokens (with 1-byte weights they differ by 2), or FLOPs not doubled",
               2.0, on="crossover")
    s.slip("KV reads left out of the decode step", s.evaluate(W / M_dec), on="bytes")
    s.slip("KV reads left out of the decode step",
           s.evaluate(max_of(W / (n * reach_BW), t_math) + ar_dec + t_oh) / s.value(t), on="step_time")
    s.slip("the step overhead left out", s.evaluate(t - t_oh) / s.value(t), on="step_time")
    s.slip("the step overhead left out", s.evaluate(t_pre - t_oh) / s.value(t_pre), on="prefill_time")
    s.slip("datasheet peaks: the kernels' efficiencies left out",
           s.evaluate(max_of(M_dec / (n * BW), F_dec / (n * P)) + ar_dec + t_oh) / s.value(t), on="step_time")
    s.slip("per-user speed given for the throughput", 1 / s.value(B), on="throughput")
    _decode_regime(s, p, I_dec, ridge, T, kv_tok, N, reach_BW, reach_P)
