"""Roofline questions: arithmetic intensity against the ridge point, what a new GPU speeds up, and
how the ops of one decode step rank as the batch grows."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, floor_of, max_of, min_of
from solvers.topics.collective import all_reduce_terms, link_latency, tp_all_reduce
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    model_params,
    peak_flops,
    require_context,
)
from solvers.topics.kvcache import kv_bytes_per_token
from solvers.units import format_number, format_quantity


def _require_full_xgmi_ring(gpu, tp: int) -> None:
    """The all-reduce model takes half the link aggregate; an xGMI mesh gives each GPU one link per peer,
    so only a ring over all eight MI300X reaches it (as the scheduling questions rule)."""
    if gpu.get("vendor") == "AMD" and 1 < tp < 8:
        raise Reject(f"{gpu.name} reaches half its xGMI aggregate only in a ring over all eight GPUs")


def weight_read_intensity(p, s: Sheet) -> None:
    """One request's two halves on one TP group: a prefill of T tokens, then decode steps of B
    sequences that each read their own KV cache as well as the shared weights."""
    _require_full_xgmi_ring(p.gpu, p.tp)
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    T = s.param("T", "prompt")
    B = s.param("B", "batch")
    n = s.param("TP", "tp")
    b = s.given("b_w", dtype_bytes(p.dtype), "B", f"bytes per weight ({p.dtype})")
    b_kv = s.given("b_kv", dtype_bytes("bf16"), "B", "bytes per KV value (bf16)")
    P = s.given("P", peak_flops(p.gpu, p.dtype), "TFLOP/s", f"{p.gpu.name} dense {p.dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")

    W = s.step("weights", "Weight bytes", "W", N * b, "GB", "every weight is read from HBM once per pass")
    ridge = s.step("ridge", "Ridge point of the GPU", "I_ridge", P / BW, "FLOP/B",
                   "below this intensity HBM cannot feed the tensor cores fast enough")
    # Prefill: every prompt token rides on one read of the weights.
    F_pre = s.step("flops", "FLOPs of the prefill", "F_pre", 2 * N * T, "TFLOP",
                   "one multiply-add (2 FLOPs) per weight for each prompt token")
    I_pre = s.step("prefill_intensity", "Arithmetic intensity of the prefill", "I_pre", F_pre / W, "FLOP/B",
                   "2T/b_w: every prompt token shares each weight byte read")
    then = "" if p.tp == 1 else ", then the all-reduces"
    ar_pre = tp_all_reduce(s, p.model, p.gpu, p.tp, T, tag="pre", label="prefill")
    s.step("prefill_time", "Time of the prefill", "t_pre", max_of(W / (n * BW), F_pre / (n * P)) + ar_pre, "ms",
           "each GPU reads 1/TP of the weights and does 1/TP of the math; the slower sets the pace" + then)
    # Decode: one token per sequence, and every sequence reads its own KV cache.
    kv_tok = kv_bytes_per_token(s, p.model, b_kv)
    F_dec = s.step("decode_flops", "FLOPs of one decode step", "F_dec", 2 * N * B, "TFLOP",
                   "one token per sequence through every weight")
    M_dec = s.step("bytes", "Bytes read by one decode step", "M_dec", W + B * T * kv_tok, "GB",
                   "the weights once, plus every sequence's own KV cache of T tokens")
    I_dec = s.step("decode_intensity", "Arithmetic intensity of the decode step", "I_dec", F_dec / M_dec, "FLOP/B",
                   "2B/b_w for the weights alone, pulled down by KV reads that no other sequence shares")
    s.step("crossover", "Batch where the weight reads alone stop binding", "B_star", b * P / (2 * BW), "sequences",
           "solve 2B/b_w = P/BW for B; the KV reads push the real boundary further out")
    t_mem = s.step("", "Decode step: time to read", "t_M", M_dec / (n * BW), "ms", "HBM's side of the roofline")
    t_math = s.step("", "Decode step: time for the math", "t_F", F_dec / (n * P), "ms", "the tensor cores' side")
    ar_dec = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    t = s.step("step_time", "Time of one decode step", "t_dec", max_of(t_mem, t_math) + ar_dec, "ms",
               "the slower of reading and computing" + then)
    X = s.step("throughput", "Decode tokens per second", "X", B / t, "tokens/s", "one token per sequence per step")
    s.step("per_user", "Tokens per second per user", "X_user", 1 / t, "tokens/s", "each sequence gets one token a step")
    if s.compare(I_dec, ridge) == 0 or s.compare(I_pre, ridge) == 0:
        raise Reject("exactly on the ridge: no side to name")
    s.choose("prefill_regime", "compute-bound" if s.compare(I_pre, ridge) > 0 else "memory-bound")
    _decode_levers(s, p, weights=s.value(W), cache=s.evaluate(B * T * kv_tok), flops=s.value(F_dec),
                   comm=s.evaluate(ar_dec), throughput=s.value(X))

    s.assume("Datasheet dense peaks and HBM bandwidth with no efficiency factor (dense-peaks, roofline-time); "
             "real kernels reach 60-80% of both.")
    s.assume("FLOPs from the weight matmuls only (flops-per-token): attention's own FLOPs over the context add a "
             "few percent at these lengths and would make the prefill only more compute-bound.")
    s.assume("The prefill reads the weights once (its KV writes, T·KV_tok, are small beside them); every decode "
             "sequence holds about the prompt's length of context, its KV cache in bf16.")
    s.assume("Under tensor parallelism each GPU reads and computes 1/TP of the pass, so intensity and ridge are "
             "those of one GPU; the all-reduces (tp-all-reduce) come on top, not overlapped.")
    s.slip("x2: FLOPs not doubled", 0.5, on=("flops", "prefill_intensity", "decode_intensity"))
    s.slip("x2: FLOPs not doubled", 2.0, on="crossover")
    s.slip("KV reads left out of the decode step", s.evaluate(W / M_dec), on="bytes")
    if p.dtype == "bf16":
        s.slip("x2: a bf16 weight counted as 1 byte", 0.5, on="crossover")
        s.slip("x2: a bf16 weight counted as 1 byte", 2.0, on="prefill_intensity")
    _decode_regime(s, p, I_dec, ridge, T, kv_tok, N, BW, P)


LEVER_GAIN = 1.25  # a lever "raises" decode tokens/s when it gains at least this factor
UPGRADE = 1.3  # a modest GPU generation: it gains LEVER_GAIN only while the all-reduces are under 13% of the step


def _decode_levers(s: Sheet, p, *, weights: float, cache: float, flops: float, comm: float,
                   throughput: float) -> None:
    """Which single change lifts this decode step's tokens/s by LEVER_GAIN or more: the answer
    follows from the KV cache's share of the bytes and from the side of the roofline."""
    n, bandwidth, peak = p.tp, hbm_bandwidth(p.gpu), peak_flops(p.gpu, p.dtype)
    batch = p.batch

    def gain(w=weights, kv=cache, bw=bandwidth, pk=peak, f=flops, b=batch, ar=comm) -> float:
        return b / (max((w + kv) / (n * bw), f / (n * pk)) + ar) / throughput

    t_read, t_math = (weights + cache) / (n * bandwidth), flops / (n * peak)
    side = (f"{format_quantity(t_read, 'ms')} of reads vs {format_quantity(t_math, 'ms')} of math"
            + (f", plus {format_quantity(comm, 'ms')} of all-reduces" if comm else ""))

    def say(option: str, ratio: float, why: str) -> None:
        s.judge("levers", option, ratio >= LEVER_GAIN, f"{side}; {why}: {format_number(ratio, 3)}x the tokens/s")

    kv_share = format_number(100 * cache / (weights + cache), 2) + "%"
    if gain(bw=2 * bandwidth, pk=2 * peak) < LEVER_GAIN:
        raise Reject("not even a GPU twice as fast gains 25%: the all-reduces dominate the step")
    if weights + 2 * cache <= n * hbm_bytes(p.gpu) * GPU_MEMORY_UTILIZATION:
        scratch = Sheet()  # the all-reduces of a step twice as wide, off the candidate's sheet
        doubled = scratch.evaluate(tp_all_reduce(scratch, p.model, p.gpu, n, 2 * batch, tag="x", label="x"))
        say("twice the batch", gain(kv=2 * cache, f=2 * flops, b=2 * batch, ar=doubled),
            "one weight read serves twice the tokens while the KV reads and the math double")
    else:
        s.judge("levers", "twice the batch", False,
                f"twice the KV cache does not fit beside the weights on {n} × {p.gpu.name}")
    reads = "the reads halve" if t_read > t_math else "only the reads, which wait on the math, get shorter"
    say("weights at half the bytes (same tensor peak)", gain(w=weights / 2),
        f"the weights are {format_number(100 - 100 * cache / (weights + cache), 2)}% of the bytes")
    say("an fp8 KV cache", gain(kv=cache / 2), f"the KV cache is {kv_share} of the bytes")
    say("a GPU with twice the HBM bandwidth", gain(bw=2 * bandwidth), reads)
    say("a GPU with twice the tensor peak", gain(pk=2 * peak),
        "the math halves" if t_math > t_read else "the math already waits on the reads")
    share = f"the all-reduces are {format_number(100 * comm / (comm + max(t_read, t_math)), 2)}% of the step"
    say("a GPU 30% faster in both HBM bandwidth and tensor peak (same NVLink)",
        gain(bw=UPGRADE * bandwidth, pk=UPGRADE * peak),
        f"both sides shrink by 1/1.3; {share} and do not" if comm
        else "both sides shrink by 1/1.3 and there are no all-reduces at TP 1")
    s.judge("levers", "a GPU with twice the bandwidth and twice the peak", True,
            f"both sides halve whichever binds; {share}, and draws where they pass 60% are refused: "
            f"{format_number(gain(bw=2 * bandwidth, pk=2 * peak), 3)}x the tokens/s" if comm else
            "both sides halve whichever binds and there are no all-reduces: 2x the tokens/s", fact=True)


def _decode_regime(s: Sheet, p, I_dec, ridge, T, kv_tok, N, BW, P) -> None:
    """Decode's side of the ridge, with KV reads in; the boundary in batch terms exists only while a
    sequence's KV read is shorter than its token's math."""
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
    beside_compute = ("The prefill is compute-bound too." if prefill_bound else
                      "The prefill, shorter than the crossover, is memory-bound: the halves have swapped sides.")
    s.regime_by(I_dec, ridge, tie="above", below=Side(
        "memory-bound",
        f"Decode runs at {intensity} FLOP/B against a ridge of {at_ridge}: the step waits on HBM; {boundary}. "
        + beside_memory,
        "Above the ridge the tensor cores set the pace: tokens/s stops rising with the batch, and only more "
        "FLOP/s (or fewer FLOPs per token) helps; the per-user speed falls with every sequence added.",
        near=f"Decode runs at {intensity} FLOP/B, just below the ridge of {at_ridge}: the reads still set the "
             f"pace, but the math takes nearly as long; {boundary}. " + beside_memory),
        above=Side(
        "compute-bound",
        f"Decode runs at {intensity} FLOP/B, past the ridge of {at_ridge}: short contexts and a wide batch "
        "let the weight read amortise until the math binds; tokens/s has stopped rising with the batch. "
        + beside_compute,
        "Below the ridge the step waits on HBM: a longer context or a smaller batch moves it there, and then "
        "bandwidth, smaller weights or a smaller KV cache raise tokens/s.",
        near=f"Decode runs at {intensity} FLOP/B, just past the ridge of {at_ridge}: the math now sets the pace, "
             "with the reads nearly as long, so neither side alone buys much. " + beside_compute))


_REGIMES = ("compute", "bandwidth", "capacity")  # tie order: the simpler explanation first


class _Gpu:
    """One GPU type's datasheet givens on the sheet, tagged so two types can share it."""

    def __init__(self, s: Sheet, gpu, tag: str):
        self.gpu, self.tag = gpu, tag
        self.P = s.given(f"P_{tag}", peak_flops(gpu, "bf16"), "TFLOP/s", f"{gpu.name} dense bf16 peak")
        self.BW = s.given(f"BW_{tag}", hbm_bandwidth(gpu), "TB/s", f"{gpu.name} HBM bandwidth")
        self.M = s.given(f"M_{tag}", hbm_bytes(gpu), "GB", f"{gpu.name} HBM capacity")


def _step(s: Sheet, key: str, title: str, symbol: str, g: _Gpu, n, moved, flops, comm, why: str) -> sympy.Symbol:
    """Roofline time of one pass split over n GPUs, then its all-reduces."""
    return s.step(key, title, symbol, max_of(moved / (n * g.BW), flops / (n * g.P)) + comm, "ms", why)


def datasheet_speedup_regimes(p, s: Sheet) -> None:
    old, new = p.old_gpu, p.new_gpu
    require_context(p.model, p.context)
    for gpu in (old, new):
        _require_full_xgmi_ring(gpu, p.gpus)
    if old.id == new.id:
        raise Reject("same GPU twice")
    if peak_flops(new, "bf16") < peak_flops(old, "bf16") or hbm_bandwidth(new) < hbm_bandwidth(old):
        raise Reject("not an upgrade: the new GPU is slower in peak or bandwidth")

    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per value (bf16 weights and KV cache)")
    n = s.param("n", "gpus")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable fraction of HBM (usable-hbm)")
    C = s.param("C", "context")
    B_s = s.param("B_s", "small_batch")
    o, w = _Gpu(s, old, "old"), _Gpu(s, new, "new")
    alpha = link_latency(s, old, p.gpus)  # the card's latency per call, the same on both
    ar_old = all_reduce_terms(s, p.model, old, p.gpus, group="old", tp_symbol=n, latency=alpha)
    ar_new = all_reduce_terms(s, p.model, new, p.gpus, group="new", tp_symbol=n, latency=alpha)

    W = s.step("weights", "Weight bytes", "W", N * b, "GB", "one copy of the weights, split across the replica's GPUs")
    kv_tok = kv_bytes_per_token(s, p.model, b)
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GB",
                    "every token of the context keeps its keys and values")
    a_o = s.step("", f"All-reduce time per token of a pass on {old.name}", "a_old",
                 ar_old.per_token, "us",
                 "2 per layer, each sending 2(n−1)/n of a token's hidden vector over NVLink (tp-all-reduce)")
    a_n = s.step("", f"All-reduce time per token of a pass on {new.name}", "a_new",
                 ar_new.per_token, "us", "the same message over the new GPU's NVLink")
    fixed = ar_old.fixed

    # Compute-bound workload: a prompt's tokens all share one read of the weights.
    pre_o = _step(s, "prefill_old", f"Prefill time on {old.name}", "t_pre_old", o, n, W, 2 * N * C,
                  fixed + a_o * C, "thousands of tokens per weight read: the math dominates, then the all-reduces")
    pre_n = _step(s, "prefill_new", f"Prefill time on {new.name}", "t_pre_new", w, n, W, 2 * N * C,
                  fixed + a_n * C, "same bytes and FLOPs on the new GPU")
    S_c = s.step("speedup_compute", "Speedup, compute-bound (prefill)", "S_compute", pre_o / pre_n, "x",
                 "the ratio of peak FLOP/s, diluted by the all-reduces where NVLink did not speed up as much")

    # Bandwidth-bound workload: a small batch cannot amortise the weight read.
    small = W + B_s * kv_req
    dec_o = _step(s, "small_decode_old", f"Decode step at the small batch on {old.name}", "t_bw_old", o, n,
                  small, 2 * N * B_s, fixed + a_o * B_s,
                  "weights plus the batch's KV read every step; a few tokens per weight read sit far below the ridge")
    dec_n = _step(s, "small_decode_new", f"Decode step at the small batch on {new.name}", "t_bw_new", w, n,
                  small, 2 * N * B_s, fixed + a_n * B_s, "the same bytes, read faster")
    S_b = s.step("speedup_bandwidth", "Speedup, bandwidth-bound (small-batch decode)", "S_bandwidth",
                 dec_o / dec_n, "x", "both steps read the same bytes: close to the ratio of HBM bandwidths")

    # Capacity-bound workload: the batch is whatever fits next to the weights.
    batch_o = s.step("batch_old", f"Largest batch on {old.name}", "B_old", floor_of((n * o.M * u - W) / kv_req),
                     "requests", "usable HBM of the replica minus the weights, in whole requests' KV caches")
    batch_n = s.step("batch_new", f"Largest batch on {new.name}", "B_new", floor_of((n * w.M * u - W) / kv_req),
                     "requests", "the weights cost the same, so every extra byte of HBM goes to KV cache")
    if s.value(batch_o) < p.small_batch:
        raise Reject("the small batch does not fit on the current GPUs")
    ratio = s.step("batch_ratio", "Batch ratio", "R_B", batch_n / batch_o, "x",
                   "grows faster than the memory ratio, because the weights are a fixed cost")
    cap_o = _step(s, "capacity_decode_old", f"Decode step (TPOT) at the largest batch on {old.name}", "t_cap_old",
                  o, n, W + batch_o * kv_req, 2 * N * batch_o, fixed + a_o * batch_o,
                  "the step reads nearly all of usable HBM: about u·M/BW whatever the model")
    cap_n = _step(s, "capacity_decode_new", f"Decode step (TPOT) at the largest batch on {new.name}", "t_cap_new",
                  w, n, W + batch_n * kv_req, 2 * N * batch_n, fixed + a_n * batch_n,
                  "more bytes per step, read faster: the per-user speed follows HBM capacity over bandwidth")
    X_o = s.step("throughput_old", f"Decode throughput on {old.name}", "X_old", batch_o / cap_o, "tokens/s",
                 "one token per request per step")
    X_n = s.step("throughput_new", f"Decode throughput on {new.name}", "X_new", batch_n / cap_n, "tokens/s",
                 "one token per request per step")
    S_k = s.step("speedup_capacity", "Speedup, capacity-bound (decode at the largest batch)", "S_capacity",
                 X_n / X_o, "x", "batch ratio × bandwidth ratio ÷ ratio of bytes per step, when both read-bound")
    # The same per-user speed: the largest batch whose step on the new GPU is no longer than the old TPOT.
    room_mem = (cap_o - fixed - W / (n * w.BW)) / (kv_req / (n * w.BW) + a_n)
    room_math = (cap_o - fixed) / (2 * N / (n * w.P) + a_n)
    B_iso = s.step("batch_iso", f"Largest batch on {new.name} at the {old.name} TPOT", "B_iso",
                   min_of(batch_n, floor_of(room_mem), floor_of(room_math)), "requests",
                   "solve the new step time = the old TPOT for the batch (reads and math alike), capped by memory")
    t_iso = _step(s, "", f"Decode step at that batch on {new.name}", "t_iso", w, n, W + B_iso * kv_req,
                  2 * N * B_iso, fixed + a_n * B_iso, "no longer than the old TPOT")
    S_iso = s.step("speedup_iso_tpot", "Speedup at the same per-user speed", "S_iso", (B_iso / t_iso) / X_o, "x",
                   "what the upgrade buys without slowing any user down")

    s.assume("Usable HBM (usable-hbm) holds weights plus KV cache; activations and CUDA graphs are ignored.")
    s.assume("Datasheet dense bf16 peaks and HBM bandwidths with no efficiency factor (dense-peaks, roofline-time): "
             "an equal efficiency on both GPUs cancels in the ratios.")
    s.assume("FLOPs from the weight matmuls only (flops-per-token); attention FLOPs over the context would add to "
             "prefill and leave decode just as memory-bound.")
    s.assume("Tensor parallelism splits weights, KV heads and FLOPs evenly; its all-reduces follow the tp-all-reduce "
             "card over each GPU's NVLink, not overlapped. In the capacity case every request holds its full context.")
    s.slip("memory ratio taken as the capacity speedup", on="speedup_capacity",
           factor=(hbm_bytes(new) / hbm_bytes(old)) / s.value(S_k))
    s.slip("batch ratio taken as the capacity speedup (the longer step forgotten)", on="speedup_capacity",
           factor=s.value(ratio) / s.value(S_k))
    s.slip("capacity speedup taken at the same TPOT (the longer step forgotten)", on="speedup_iso_tpot",
           factor=s.value(ratio) / s.value(S_iso))
    _speedup_regime(s, {"compute": S_c, "bandwidth": S_b, "capacity": S_k}, batch_o, batch_n, ratio, cap_o, cap_n)


TIE = 0.02  # speedups closer than this give no clear winner


def _speedup_regime(s: Sheet, speedups: dict[str, sympy.Symbol], batch_o, batch_n, ratio, cap_o, cap_n) -> None:
    value = {name: s.value(sym) for name, sym in speedups.items()}
    best, second = sorted(value.values(), reverse=True)[:2]
    if second >= best * (1 - TIE):
        # Within the answers' tolerance a candidate could not tell which workload wins.
        raise Reject("two workloads gain within 2%: no clear winner")
    if max(value, key=value.__getitem__) == "bandwidth":
        # Only where the new GPU's largest batch turns compute-bound; the drawn pairs never do.
        raise Reject("small-batch decode gains most: a corner the pairs drawn here do not reach")
    shown = {name: format_number(v, 3) for name, v in value.items()}
    fit = f"{format_number(s.value(batch_n))} requests fit instead of {format_number(s.value(batch_o))}"
    tpot = (f"the step at that batch takes {format_quantity(s.value(cap_n), 'ms')} instead of "
            f"{format_quantity(s.value(cap_o), 'ms')}, so each user "
            + ("waits longer per token" if s.compare(cap_n, cap_o) > 0 else "also gets tokens sooner"))
    s.regime_by(speedups["capacity"], speedups["compute"], tie="below", above=Side(
        "capacity",
        f"Decode at the largest batch gains most ({shown['capacity']}x): {fit} ({format_number(s.value(ratio), 3)}x, "
        f"the weights being a fixed cost), and {tpot}. Small-batch decode gains {shown['bandwidth']}x and prefill "
        f"{shown['compute']}x.",
        "Where the new GPU adds FLOP/s faster than memory (H200 to B200: 2.3x the peak, 1.3x the HBM), the larger "
        "batch no longer makes up for it and prefill gains most. One 'x faster' figure for all workloads is wrong "
        "both ways."),
        below=Side(
        "compute",
        f"Prefill gains most ({shown['compute']}x, near the peak ratio): decode gains {shown['bandwidth']}x at a "
        f"small batch and {shown['capacity']}x at the largest batch ({fit}; {tpot}).",
        "Where the new GPU adds memory faster than FLOP/s (H100 to H200: the same die, 76% more HBM), the larger "
        "batch times the faster reads beats the peak ratio, and capacity wins."))


# --- decode-op-ranking ---------------------------------------------------------------------

DECODE_GAIN = 1.2  # a change "raises" the decode step's tokens/s when it gains at least this factor


def _gemm_intensity(s: Sheet, tag: str, name: str, d_in, d_out, B, b_w) -> sympy.Symbol:
    """One weight GEMM of a decode step: its weight bytes, then FLOPs per byte."""
    shape = " × ".join(format_number(s.evaluate(side)) for side in (d_in, d_out))
    W = s.step("", f"{name}: weight bytes per layer", f"W_{tag}", d_in * d_out * b_w, "MB",
               f"{shape} weights, read once per step whatever the batch")
    return s.step(f"{tag}_intensity", f"{name}: arithmetic intensity", f"I_{tag}", 2 * B * d_in * d_out / W,
                  "FLOP/B", "one multiply-add per weight for each of the B tokens, over the weight bytes")


TOO_CLOSE_TO_CALL = 0.05


def decode_op_ranking(p, s: Sheet) -> None:
    model = p.model
    _require_full_xgmi_ring(p.gpu, p.tp)
    B = s.param("B", "batch")
    T = s.param("T", "context")
    n = s.param("TP", "tp")
    d = s.given("d", model.hidden, "", "hidden size")
    H = s.given("H_q", model.heads, "", "query heads")
    H_kv = s.given("H_kv", model.kv_heads, "", "KV heads")
    d_h = s.given("d_h", model.head_dim, "", "head dim")
    f = s.given("d_ff", model.ffn, "", "FFN size")
    L = s.given("L", model.layers, "", "layers")
    N = s.given("N", model_params(model), "", f"{model.name} parameters")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    b_kv = s.given("b_kv", dtype_bytes(p.kv_dtype), "B", f"bytes per KV element ({p.kv_dtype})")

    for tag, name, d_in, d_out in (("qkv", "QKV projection", d, (H + 2 * H_kv) * d_h),
                                   ("out", "Output projection", H * d_h, d),
                                   ("up_gate", "Up and gate projections", d, 2 * f),
                                   ("down", "Down projection", f, d)):
        _gemm_intensity(s, tag, name, d_in, d_out, B, b_w)
    I_gemm = s.step("gemm_intensity", "Every weight GEMM", "I_GEMM", 2 * B / b_w, "FLOP/B",
                    "the matrix shape cancels: all four tie at 2B/b_w, and grow with the batch")
    W_att = s.step("kv_bytes_layer", "Attention: KV bytes read per layer", "W_att", 2 * B * T * H_kv * d_h * b_kv,
                   "MB", "each sequence reads its own keys and values: nothing is shared across the batch")
    F_att = s.step("", "Attention: FLOPs per layer", "F_att", 4 * B * T * H * d_h, "GFLOP",
                   "each query head does a multiply-add per key element (QKᵀ) and per value element (PV)")
    I_att = s.step("attention_intensity", "Attention: arithmetic intensity", "I_att", F_att / W_att, "FLOP/B",
                   "batch and context cancel: 2·(H_q/H_kv)/b_kv, set by the query heads sharing each KV head")
    B_star = s.step("flip_batch", "Batch where the ranking flips", "B_star", H * b_w / (H_kv * b_kv), "sequences",
                    "solve 2B/b_w = 2·(H_q/H_kv)/b_kv for B")
    if s.value(B) == s.value(B_star):
        raise Reject("the batch sits exactly at the flip: attention and the GEMMs tie")
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")
    ridge = s.step("ridge", "Ridge point of the GPU", "I_ridge", P / BW, "FLOP/B",
                   "an op below this intensity waits on HBM")
    s.step("attention_gap", "How far attention sits below the ridge", "R_att", ridge / I_att, "x",
           "no batch size closes this gap: more query heads per KV head, MLA, a narrower KV dtype or more "
           "query tokens per KV read (speculative decoding) do")

    # Intensity ranks the ops; the step's time is set by their bytes.
    W = s.step("weights", "Weight bytes of the step", "W", N * b_w, "GB", "every weight read once per step")
    KV = s.step("kv_bytes", "KV bytes of the step", "M_KV", L * W_att, "GB", "every layer's attention reads")
    share = s.step("attention_share", "Attention's share of the step's reads", "s_att", KV / (W + KV), "%",
                   "the least intense op need not be the biggest: its share of the bytes sets its share of the time")
    F = s.step("", "FLOPs of the step", "F", 2 * N * B + L * F_att, "TFLOP", "the GEMMs' 2·N per token plus attention")
    ar = tp_all_reduce(s, model, p.gpu, p.tp, B, tag="dec", label="decode step")
    t = s.step("step_time", "Time of the decode step", "t", max_of((W + KV) / (n * BW), F / (n * P)) + ar, "ms",
               "each GPU reads 1/TP of the weights and KV heads; the slower of reading and math"
               + ("" if p.tp == 1 else ", then the all-reduces"))
    s.step("per_user", "Tokens per second per user", "X_user", 1 / t, "tokens/s", "one token per sequence per step")
    if abs(s.value(KV) / s.value(W) - 1) < TOO_CLOSE_TO_CALL:
        # Which reads dominate would turn on rounding the parameter count or counting the embeddings.
        raise Reject("the KV and weight reads are within 5% of each other")
    s.choose("dominant", "kv-reads" if s.compare(KV, W) > 0 else "weight-reads")
    _decode_step_levers(s, p, weights=s.value(W), cache=s.value(KV), flops=s.value(F), comm=s.evaluate(ar),
                        step=s.value(t))

    s.assume("Weight bytes only for the GEMMs: the activations they read and write (B·(d_in + d_out) values) "
             "are small next to d_in·d_out weights at decode batch sizes.")
    s.assume("Attention FLOPs count the two matmuls (QKᵀ and PV); softmax, masking and RoPE are left out. "
             "Attention is fused (scores stay on chip), and all math runs in bf16 (fp8 weights and KV are widened on "
             "load, as weight-only kernels do), so the bf16 ridge applies.")
    s.assume("Dense decoder with grouped-query attention; tensor parallelism splits weights, heads and FLOPs "
             "alike, so no intensity changes with it; its all-reduces follow the tp-all-reduce card.")
    s.assume("The step time is a roofline (roofline-time) with no launch gaps or activation traffic: what kernel "
             "fusion and CUDA graphs remove is outside it, which is why fusion cannot move any op's intensity. "
             "Speculative decoding, which raises the GEMMs' and attention's intensity alike, is left out.")
    s.slip("per query head instead of per KV head: the sharing forgotten", on=("attention_intensity", "flip_batch"),
           factor=model.kv_heads / model.heads)
    s.slip("per query head instead of per KV head: the sharing forgotten", on="attention_gap",
           factor=model.heads / model.kv_heads)
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 0.5, on=("attention_intensity", "flip_batch"))
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 2.0, on="attention_gap")
    s.slip("one layer's KV taken for the whole step", on="attention_share",
           factor=s.evaluate(W_att / (W + W_att)) / s.value(share))
    _ranking_regime(s, B, B_star, I_gemm, I_att, share)


def _decode_step_levers(s: Sheet, p, *, weights: float, cache: float, flops: float, comm: float,
                        step: float) -> None:
    """Which single change raises this decode step's tokens/s by DECODE_GAIN: the answer follows from
    the KV cache's share of the bytes, not from the ranking by intensity."""
    n, bandwidth, peak, batch = p.tp, hbm_bandwidth(p.gpu), peak_flops(p.gpu, "bf16"), p.batch
    share = format_number(100 * cache / (weights + cache), 2) + "%"

    def gain(w=weights, kv=cache, f=flops, b=batch, ar=comm, pk=peak) -> float:
        return (b / (max((w + kv) / (n * bandwidth), f / (n * pk)) + ar)) / (batch / step)

    def say(option: str, ratio: float, why: str) -> None:
        s.judge("levers", option, ratio >= DECODE_GAIN, f"{why}: {format_number(ratio, 3)}x the tokens/s")

    if max(gain(kv=cache / 2), gain(w=weights / 2), gain(pk=2 * peak)) < DECODE_GAIN:
        raise Reject("no single change gains 20%: the step sits at the ridge, reads and math alike")

    if weights + 2 * cache <= n * hbm_bytes(p.gpu) * GPU_MEMORY_UTILIZATION:
        scratch = Sheet()  # the all-reduces of a step twice as wide, off the candidate's sheet
        doubled = scratch.evaluate(tp_all_reduce(scratch, p.model, p.gpu, n, 2 * batch, tag="x", label="x"))
        say("twice the batch", gain(kv=2 * cache, f=2 * flops, b=2 * batch, ar=doubled),
            f"the KV reads ({share} of the bytes) double with it; only the weight reads are shared")
    else:
        s.judge("levers", "twice the batch", False,
                f"twice the KV cache does not fit beside the weights on {n} × {p.gpu.name}")
    say("a KV cache at half the bytes (fp8 KV, or half the KV heads)", gain(kv=cache / 2),
        f"the KV cache is {share} of the step's bytes")
    say("weights at half the bytes", gain(w=weights / 2),
        f"the weights are {format_number(100 - 100 * cache / (weights + cache), 2)}% of the step's bytes")
    s.judge("levers", "fusing the norms, RoPE and activations into the GEMMs (CUDA graphs too)", False,
            "fusion removes launch gaps and activation round trips, not one byte of weights or KV: no op's "
            "intensity moves, so a read-bound step stays as long", fact=True)
    say("a GPU with twice the tensor peak", gain(pk=2 * peak),
        "the math sets the pace and halves" if flops / peak > (weights + cache) / bandwidth
        else "the math is not what the step waits on")


def _ranking_regime(s: Sheet, B, B_star, I_gemm, I_att, share) -> None:
    gemm, att = format_number(s.value(I_gemm), 3), format_number(s.value(I_att), 3)
    flip = format_number(s.value(B_star))
    part = format_number(100 * s.value(share), 2) + "%"
    time = (f" By time, though, the KV reads are {part} of the step's bytes: they, not the weights, set its length."
            if s.value(share) > 0.5 else
            f" By time, though, attention's KV reads are only {part} of the step's bytes: the weight reads set its "
            "length.")
    s.regime_by(B, B_star, tie="above", below=Side(
        "attention-above",
        f"Below the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) are the least intense ops: "
        f"attention ({att} FLOP/B) sits above them, and batching more sequences is the lever." + time,
        "Past the flip batch the GEMMs keep climbing with B while attention stays where it is: attention "
        "becomes the least intense op, and only the architecture or the KV dtype can move it."),
        above=Side(
        "attention-below",
        f"Past the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) have climbed above attention, "
        f"which stays at {att} FLOP/B whatever the batch: attention is now the least intense op." + time,
        "Below the flip batch the weight GEMMs are the least intense ops, and adding sequences raises "
        "their intensity for free; above it, more batch no longer helps the op that limits the step."))
