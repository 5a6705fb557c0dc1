"""Roofline questions: arithmetic intensity against the ridge point, what a new GPU speeds up, and
how the ops of one decode step rank as the batch grows."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, max_of
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


def weight_read_intensity(p, s: Sheet) -> None:
    peak = peak_flops(p.gpu, p.dtype)
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    T = s.param("T", "tokens")
    b = s.given("b", dtype_bytes(p.dtype), "B", f"bytes per weight ({p.dtype})")
    P = s.given("P", peak, "TFLOP/s", f"{p.gpu.name} dense {p.dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")

    F = s.step("flops", "FLOPs per forward pass", "F", 2 * N * T, "TFLOP",
               "each weight does one multiply-add (2 FLOPs) per token in the pass")
    W = s.step("bytes", "Bytes read per forward pass", "W", N * b, "GB",
               "every weight is read from HBM once per pass, shared by all its tokens")
    s.step("intensity", "Arithmetic intensity", "I", F / W, "FLOP/B",
               "FLOPs per byte moved: 2T/b, so it grows with the tokens riding on one weight read")
    s.step("ridge", "Ridge point of the GPU", "I_ridge", P / BW, "FLOP/B",
               "below this intensity HBM cannot feed the tensor cores fast enough")
    Tc = s.step("crossover", "Crossover tokens per pass", "T_star", b * P / (2 * BW), "tokens",
                "solve 2T/b = P/BW for T: the batch at which the pass turns compute-bound")
    t = s.step("step_time", "Time per forward pass", "t", max_of(W / BW, F / P), "ms",
               "the slower of streaming the weights and doing the math")
    X = s.step("throughput", "Tokens per second", "X", T / t, "tokens/s", "tokens in the pass over its time")
    t_mem = s.step("", "Time to stream the weights", "t_W", W / BW, "ms", "HBM's side of the roofline")
    t_math = s.step("", "Time for the math", "t_F", F / P, "ms", "the tensor cores' side")
    if s.compare(t_mem, t_math) == 0:
        raise Reject("exactly on the ridge: no single lever moves the pass")
    _weight_read_levers(s, T, X, t_mem, t_math)

    s.assume("Peak datasheet figures, dense, no efficiency factor (real kernels reach 60-80% of both).")
    s.assume("Weights only: KV-cache reads and attention FLOPs over the context are left out, "
             "which is fair for short contexts and flatters long ones.")
    s.assume("One GPU's view: under tensor parallelism each GPU reads and computes an equal share, "
             "so intensity and ridge are unchanged; communication is ignored.")
    # Two mistakes of a factor 2, which move the answers in opposite directions.
    s.slip("x2: FLOPs not doubled", 0.5, on=("flops", "intensity"))
    s.slip("x2: FLOPs not doubled", 2.0, on="crossover")
    if p.dtype == "bf16":
        s.slip("x2: a bf16 weight counted as 1 byte", 0.5, on=("bytes", "crossover"))
        s.slip("x2: a bf16 weight counted as 1 byte", 2.0, on="intensity")

    tokens, crossover = format_number(s.value(T)), format_number(s.value(Tc))
    s.regime_by(T, Tc, tie="above", below=Side(
        "memory-bound",
        f"{tokens} tokens per pass sit below the crossover of {crossover}: the pass waits on HBM, and extra "
        "tokens ride along almost for free.",
        "Above the crossover the tensor cores are the bottleneck: time per pass grows with every token and "
        "tokens/s stops rising. A prefill of a long prompt lives there; small-batch decode lives here.",
        near=f"{tokens} tokens per pass sit just below the crossover of {crossover}: the weight reads still set "
             "the pace, but the math takes nearly as long, so a few more tokens make the pass compute-bound."),
        above=Side(
        "compute-bound",
        f"{tokens} tokens per pass exceed the crossover of {crossover}: the tensor cores are saturated and time "
        "grows with every token added.",
        "Below the crossover the pass is limited by reading the weights: time stays flat as tokens are removed, "
        "so a small decode batch wastes most of the GPU's compute.",
        near=f"{tokens} tokens per pass sit just past the crossover of {crossover}: the math now sets the pace, "
             "with the weight reads nearly as long; tokens/s has all but stopped rising."))


def _weight_read_levers(s: Sheet, T, X, t_mem, t_math) -> None:
    """Which changes raise tokens/s follows from which side of the roofline the pass is on."""
    memory, math = format_quantity(s.value(t_mem), "ms"), format_quantity(s.value(t_math), "ms")
    doubled = s.evaluate(2 * T / max_of(t_mem, 2 * t_math))
    memory_bound = s.compare(t_mem, t_math) > 0
    side = f"{memory} of weight reads vs {math} of math"
    reads = ("the reads set the pace and get shorter" if memory_bound
             else "the math sets the pace; the reads only idle more")
    s.judge("levers", "twice the tokens per pass", doubled > s.value(X),
            f"{side}: twice the tokens give {format_quantity(doubled, 'tokens/s')}")
    s.judge("levers", "a weight format half the size (same tensor peak)", memory_bound, f"{side}: {reads}")
    s.judge("levers", "a GPU with twice the HBM bandwidth", memory_bound, f"{side}: {reads}")
    math_side = "the math already waits on the reads" if memory_bound else "the math sets the pace and halves"
    s.judge("levers", "a GPU with twice the tensor peak", not memory_bound, f"{side}: {math_side}")
    s.judge("levers", "overlapping the weight reads with the math", False,
            "the roofline time max(t_W, t_F) already assumes full overlap: the slower side sets the pace")


_REGIMES = ("compute", "bandwidth", "capacity")  # tie order: the simpler explanation first


def _gpu_givens(s: Sheet, gpu, tag: str) -> tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol]:
    P = s.given(f"P_{tag}", peak_flops(gpu, "bf16"), "TFLOP/s", f"{gpu.name} dense bf16 peak")
    BW = s.given(f"BW_{tag}", hbm_bandwidth(gpu), "TB/s", f"{gpu.name} HBM bandwidth")
    M = s.given(f"M_{tag}", hbm_bytes(gpu), "GB", f"{gpu.name} HBM capacity")
    return P, BW, M


def _pass_time(s: Sheet, key: str, title: str, symbol: str, moved, flops, n, BW, P, why: str) -> sympy.Symbol:
    """Roofline time of one pass split over n GPUs: the slower of moving the bytes and doing the math."""
    return s.step(key, title, symbol, max_of(moved / (n * BW), flops / (n * P)), "ms", why)


def datasheet_speedup_regimes(p, s: Sheet) -> None:
    old, new = p.old_gpu, p.new_gpu
    require_context(p.model, p.context)
    if old.id == new.id:
        raise Reject("same GPU twice")
    if peak_flops(new, "bf16") < peak_flops(old, "bf16") or hbm_bandwidth(new) < hbm_bandwidth(old):
        raise Reject("not an upgrade: the new GPU is slower in peak or bandwidth")

    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per value (bf16 weights and KV cache)")
    n = s.given("n", p.gpus, "", "GPUs per replica (tensor parallel)")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable fraction of HBM")
    C = s.given("C", p.context, "tokens", "context per request")
    B_s = s.given("B_s", p.small_batch, "requests", "fixed small decode batch")
    P_o, BW_o, M_o = _gpu_givens(s, old, "old")
    P_n, BW_n, M_n = _gpu_givens(s, new, "new")

    W = s.step("weights", "Weight bytes", "W", N * b, "GB", "one copy of the weights, split across the replica's GPUs")
    kv_tok = kv_bytes_per_token(s, p.model, b)
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GB",
                    "every token of the context keeps its keys and values")

    # Compute-bound workload: a prompt's tokens all share one read of the weights.
    pre_o = _pass_time(s, "prefill_old", f"Prefill time on {old.name}", "t_pre_old", W, 2 * N * C, n, BW_o, P_o,
                       "thousands of tokens per weight read: the math term dominates")
    pre_n = _pass_time(s, "prefill_new", f"Prefill time on {new.name}", "t_pre_new", W, 2 * N * C, n, BW_n, P_n,
                       "same bytes and FLOPs on the new GPU")
    S_c = s.step("speedup_compute", "Speedup, compute-bound (prefill)", "S_compute", pre_o / pre_n, "x",
                 "both passes are compute-bound, so this is the ratio of peak FLOP/s")

    # Bandwidth-bound workload: a small batch cannot amortise the weight read.
    small_bytes = W + B_s * kv_req
    dec_o = _pass_time(s, "small_decode_old", f"Decode step at the small batch on {old.name}", "t_bw_old",
                       small_bytes, 2 * N * B_s, n, BW_o, P_o,
                       "weights plus the batch's KV read every step; a few tokens per weight read sit far "
                       "below the ridge")
    dec_n = _pass_time(s, "small_decode_new", f"Decode step at the small batch on {new.name}", "t_bw_new",
                       small_bytes, 2 * N * B_s, n, BW_n, P_n, "the same bytes, read faster")
    S_b = s.step("speedup_bandwidth", "Speedup, bandwidth-bound (small-batch decode)", "S_bandwidth",
                 dec_o / dec_n, "x", "both steps read the same bytes, so this is the ratio of HBM bandwidths")

    # Capacity-bound workload: the batch is whatever fits next to the weights.
    batch_o = s.step("batch_old", f"Largest batch on {old.name}", "B_old", sympy.floor((n * M_o * u - W) / kv_req),
                     "requests", "usable HBM of the replica minus the weights, in whole requests' KV caches")
    batch_n = s.step("batch_new", f"Largest batch on {new.name}", "B_new", sympy.floor((n * M_n * u - W) / kv_req),
                     "requests", "the weights cost the same, so every extra byte of HBM goes to KV cache")
    if min(s.value(batch_o), s.value(batch_n)) < p.small_batch:
        raise Reject("the small batch does not fit on one of the GPU types")
    ratio = s.step("batch_ratio", "Batch ratio", "R_B", batch_n / batch_o, "x",
                   "grows faster than the memory ratio, because the weights are a fixed cost")
    cap_o = _pass_time(s, "capacity_decode_old", f"Decode step at the largest batch on {old.name}", "t_cap_old",
                       W + batch_o * kv_req, 2 * N * batch_o, n, BW_o, P_o, "the step reads nearly all of usable HBM")
    cap_n = _pass_time(s, "capacity_decode_new", f"Decode step at the largest batch on {new.name}", "t_cap_new",
                       W + batch_n * kv_req, 2 * N * batch_n, n, BW_n, P_n, "more bytes per step, read faster")
    X_o = s.step("throughput_old", f"Decode throughput on {old.name}", "X_old", batch_o / cap_o, "tokens/s",
                 "one token per request per step")
    X_n = s.step("throughput_new", f"Decode throughput on {new.name}", "X_new", batch_n / cap_n, "tokens/s",
                 "one token per request per step")
    S_k = s.step("speedup_capacity", "Speedup, capacity-bound (decode at the largest batch)", "S_capacity",
                 X_n / X_o, "x",
                 "with both steps memory-bound: batch ratio × bandwidth ratio ÷ ratio of bytes per step")

    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM holds weights plus KV cache (vLLM's "
             "gpu_memory_utilization default before v0.21); activations and CUDA graphs are ignored.")
    s.assume("Datasheet dense bf16 peaks and HBM bandwidths with no efficiency factor: an equal efficiency "
             "on both GPUs cancels in the ratios.")
    s.assume("FLOPs from the weight matmuls only (2 per parameter per token); attention FLOPs over the context "
             "would add to prefill and leave decode just as memory-bound.")
    s.assume("Tensor parallelism splits weights, KV heads and FLOPs evenly over the replica's GPUs; "
             "communication is ignored. In the capacity case every request holds its full context.")
    s.slip("memory ratio taken as the capacity speedup", on="speedup_capacity",
           factor=(hbm_bytes(new) / hbm_bytes(old)) / s.value(S_k))
    s.slip("batch ratio taken as the capacity speedup (the longer step forgotten)", on="speedup_capacity",
           factor=s.value(ratio) / s.value(S_k))

    new_compute_bound = s.evaluate(2 * N * batch_n / (n * P_n)) > s.evaluate((W + batch_n * kv_req) / (n * BW_n))
    _speedup_regime(s, {"compute": S_c, "bandwidth": S_b, "capacity": S_k}, batch_o, batch_n, ratio, new_compute_bound)


TIE = 0.02  # speedups closer than this give no clear winner


def _speedup_regime(s: Sheet, speedups: dict[str, sympy.Symbol], batch_o, batch_n, ratio,
                    new_compute_bound: bool) -> None:
    value = {name: s.value(sym) for name, sym in speedups.items()}
    best, second = sorted(value.values(), reverse=True)[:2]
    if second >= best * (1 - TIE):
        # Within the answers' tolerance a candidate could not tell which workload wins.
        raise Reject("two workloads gain within 2%: no clear winner")
    # Equal memory makes the capacity and bandwidth speedups identical: name the bandwidth.
    winner = next(name for name in _REGIMES if value[name] >= best * (1 - 1e-9))
    runner_up = max((name for name in _REGIMES if name != winner), key=value.get)
    shown = {name: format_number(v, 3) for name, v in value.items()}
    fit = f"{format_number(s.value(batch_n))} requests fit instead of {format_number(s.value(batch_o))}"
    if s.value(batch_n) == s.value(batch_o):
        fit = f"the same {format_number(s.value(batch_n))} requests fit on both"
    capacity_stalls = ("the new GPU's largest batch is compute-bound, so FLOP/s, not memory, caps its tokens/s"
                       if new_compute_bound else f"{fit}, so capacity adds nothing")
    summary = {
        "capacity": f"Decode at the largest batch gains most ({shown['capacity']}x): {fit} "
                    f"({format_number(s.value(ratio), 3)}x, the weights being a fixed cost). Small-batch decode "
                    f"gains {shown['bandwidth']}x and prefill {shown['compute']}x.",
        "compute": f"Prefill gains most ({shown['compute']}x, the peak ratio): decode gains {shown['bandwidth']}x "
                   f"at a small batch and {shown['capacity']}x at the largest batch ({fit}).",
        "bandwidth": f"Small-batch decode gains most ({shown['bandwidth']}x, the bandwidth ratio), prefill "
                     f"{shown['compute']}x, the largest batch only {shown['capacity']}x: {capacity_stalls}.",
    }[winner]
    other_side = (
        "When both largest-batch steps are memory-bound and memory is full, the capacity speedup is the batch "
        "ratio × the bandwidth ratio ÷ the memory ratio. The batch grows faster than the memory (the weights take "
        "a fixed bite), so capacity beats bandwidth whenever the new GPU has more memory; bandwidth wins only if "
        "the new GPU has less memory, or if at short contexts the larger batch turns compute-bound and tokens/s "
        "stop at n·peak/(2N). Compute wins when the peak ratio is the largest, as for A100 to H100: equal memory, "
        "so no larger batch, and far more FLOP/s. One 'x faster' figure for all workloads is wrong both ways."
    )
    s.set_regime(winner, summary, speedups[runner_up], speedups[winner], other_side)


# --- decode-op-ranking ---------------------------------------------------------------------

# What each symptom of a decode step needs: fusion (with CUDA graphs, which replay a step's launches at
# once) removes launch gaps and round trips through HBM; it cannot change how many FLOPs each byte of
# weights or KV feeds. The architecture lever covers the attention design and the KV format.
DECODE_LEVERS = {
    "the GPU idling between the dozens of small kernels launched for every layer": "kernel-fusion",
    "RMSNorm, RoPE and the SiLU-multiply each reading and writing the activations through HBM": "kernel-fusion",
    "the attention scores written to HBM and read back for the softmax": "kernel-fusion",
    "every weight matrix streamed from HBM to serve only a handful of tokens": "bigger-batch",
    "every sequence's whole KV cache streamed from HBM for a single query token": "architecture",
}
FEW_TOKENS = 16  # the weight-streaming symptom speaks of a handful of tokens: only drawn at batches up to this


def _gemm_intensity(s: Sheet, tag: str, name: str, d_in, d_out, B, b_w) -> sympy.Symbol:
    """One weight GEMM of a decode step: its weight bytes, then FLOPs per byte."""
    shape = " × ".join(format_number(s.evaluate(side)) for side in (d_in, d_out))
    W = s.step("", f"{name}: weight bytes per layer", f"W_{tag}", d_in * d_out * b_w, "MB",
               f"{shape} weights, read once per step whatever the batch")
    return s.step(f"{tag}_intensity", f"{name}: arithmetic intensity", f"I_{tag}", 2 * B * d_in * d_out / W,
                  "FLOP/B", "one multiply-add per weight for each of the B tokens, over the weight bytes")


def decode_op_ranking(p, s: Sheet) -> None:
    model = p.model
    lever = DECODE_LEVERS[p.symptom]
    if lever == "bigger-batch" and p.batch > FEW_TOKENS:
        raise Reject("weights streamed for a handful of tokens does not describe a large batch")
    B = s.given("B", p.batch, "sequences", "sequences in the decode batch")
    T = s.given("T", p.context, "tokens", "tokens of context per sequence")
    d = s.given("d", model.hidden, "", "hidden size")
    H = s.given("H_q", model.heads, "", "query heads")
    H_kv = s.given("H_kv", model.kv_heads, "", "KV heads")
    d_h = s.given("d_h", model.head_dim, "", "head dim")
    f = s.given("d_ff", model.ffn, "", "FFN size")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    b_kv = s.given("b_kv", dtype_bytes(p.kv_dtype), "B", f"bytes per KV element ({p.kv_dtype})")

    for tag, name, d_in, d_out in (("qkv", "QKV projection", d, (H + 2 * H_kv) * d_h),
                                   ("out", "Output projection", H * d_h, d),
                                   ("up_gate", "Up and gate projections", d, 2 * f),
                                   ("down", "Down projection", f, d)):
        _gemm_intensity(s, tag, name, d_in, d_out, B, b_w)
    I_gemm = s.step("gemm_intensity", "Every weight GEMM", "I_GEMM", 2 * B / b_w, "FLOP/B",
                    "the matrix shape cancels: all four tie at 2B/b_w, and grow with the batch")
    W_att = s.step("", "Attention: KV bytes read per layer", "W_att", 2 * B * T * H_kv * d_h * b_kv, "MB",
                   "each sequence reads its own keys and values: nothing is shared across the batch")
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
    s.choose("lever", lever)

    s.assume("Weight bytes only for the GEMMs: the activations they read and write (B·(d_in + d_out) values) "
             "are small next to d_in·d_out weights at decode batch sizes.")
    s.assume("Attention FLOPs count the two matmuls (QKᵀ and PV); softmax, masking and RoPE are left out. "
             "Attention is fused (scores stay on chip) and its math runs in bf16, so the bf16 ridge applies.")
    s.assume("Dense decoder with grouped-query attention; tensor parallelism splits weights, heads and FLOPs "
             "alike, so no intensity changes with it.")
    s.assume("Levers: kernel fusion includes CUDA graphs, the usual fix for launch gaps; the architecture lever "
             "covers the attention design (query heads per KV head, MLA) and the KV format (fp8 KV halves the "
             "bytes), which raise FLOPs per KV byte rather than stop the streaming. Speculative decoding, which "
             "verifies several tokens per sequence in one step, raises the GEMMs' and attention's intensity alike "
             "and is left out of the choices.")
    s.slip("per query head instead of per KV head: the sharing forgotten", on=("attention_intensity", "flip_batch"),
           factor=model.kv_heads / model.heads)
    s.slip("per query head instead of per KV head: the sharing forgotten", on="attention_gap",
           factor=model.heads / model.kv_heads)
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 0.5, on=("attention_intensity", "flip_batch"))
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 2.0, on="attention_gap")
    _ranking_regime(s, B, B_star, I_gemm, I_att)


def _ranking_regime(s: Sheet, B, B_star, I_gemm, I_att) -> None:
    gemm, att = format_number(s.value(I_gemm), 3), format_number(s.value(I_att), 3)
    flip = format_number(s.value(B_star))
    if s.compare(B, B_star) < 0:
        s.set_regime(
            "attention-above",
            f"Below the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) are the least intense ops: "
            f"attention ({att} FLOP/B) sits above them, and batching more sequences is the lever.",
            B_star, B,
            "Past the flip batch the GEMMs keep climbing with B while attention stays where it is: attention "
            "becomes the least intense op, and only the architecture or the KV dtype can move it.")
    else:
        s.set_regime(
            "attention-below",
            f"Past the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) have climbed above attention, "
            f"which stays at {att} FLOP/B whatever the batch: attention is now the least intense op.",
            B_star, B,
            "Below the flip batch the weight GEMMs are the least intense ops, and adding sequences raises "
            "their intensity for free; above it, more batch no longer helps the op that limits the step.")
