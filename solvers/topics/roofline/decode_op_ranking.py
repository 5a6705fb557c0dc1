"""Which matmul of a decode step is least intense, and what can fix it."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.collective import AllReduceTerms, all_reduce_terms, tp_all_reduce
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_kv_bytes,
    given_model_params,
    given_peak_flops,
    given_weight_bytes,
    hbm_bytes,
)
from solvers.formulas.roofline import require_full_xgmi_ring
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import max_of
from solvers.units import figures_against, format_number


def _gemm_intensity(s: Sheet, tag: str, name: str, d_in, d_out, B, b_w) -> sympy.Symbol:
    """One weight GEMM of a decode step: its weight bytes, then FLOPs per byte."""
    shape = " × ".join(format_number(s.evaluate(side)) for side in (d_in, d_out))
    W = s.step("", f"{name}: weight bytes per layer", f"W_{tag}", d_in * d_out * b_w, "MB",
               f"{shape} weights, read once per step whatever the batch")
    return s.step(f"{tag}_intensity", f"{name}: arithmetic intensity", f"I_{tag}", 2 * B * d_in * d_out / W,
                  "FLOP/B", "one multiply-add per weight for each of the B tokens, over the weight bytes")


TOO_CLOSE_TO_CALL = 0.05  # KV reads this close (relative) to the weights': which sets the step is a tie
# rf-s2 (@42's push to batch 200 landed 1.08x past the boundary, and 15 of 200 pushes within 1.1x): where the
# regime is asked (only the push asks it), the KV reads must sit at least this factor from the weights', so the
# engine's search goes on to a value past it (a pool too small to get there is refused by kv_side_fits).
CLEAR_OF_THE_LINE = sympy.Rational(11, 10)
# A lever's gain this close to the bar (relative) is refused: the truth would turn on the model's small terms.
LEVER_MARGIN = 0.03
# The all-reduce latency per call is the one figure of the step model that published measurements spread widely
# (10-20 us and more on one node): a lever whose truth turns on it is refused, checked at half and twice the card's.
LATENCY_SPREAD = (sympy.Rational(1, 2), 2)
# Twice the batch's KV this close under the KV pool (relative) is not called: the pool leaves out the activation
# workspace and the engine's buffers, which take a GB or two a GPU.
FIT_MARGIN = sympy.Rational(5, 100)

BATCH = "twice the batch"
KV_HALF = "the KV cache at half its bytes per token"
WEIGHTS_HALF = "the weights at half their bytes"
OVERLAP = "an overlapped, CUDA-graphed engine that hides the step's {overhead} of CPU overhead"


def _decode_step_levers(s: Sheet, p, *, step: sympy.Expr, weights: sympy.Expr, cache: sympy.Expr, flops: sympy.Expr,
                        comm: AllReduceTerms, n: sympy.Expr, bandwidth: sympy.Expr, peak: sympy.Expr,
                        batch: sympy.Expr, overhead: sympy.Expr) -> None:
    """Which single change raises this decode step's total tokens/s (every sequence's together) by the parameter
    `raise_by`: the answer follows from the KV cache's share of the bytes and the all-reduces' share of the
    step, not from the ranking by intensity. Each lever's gain is an expression of the sheet's symbols, judged
    exactly against 1 + raise_by; a lever whose gain is within LEVER_MARGIN of it, or whose side moves with the
    all-reduce latency, is judged undecidable here and not listed."""
    share = format_number(100 * s.evaluate(cache / (weights + cache)), 2) + "%"
    target = 1 + exact(p.raise_by)

    def gain(w=weights, kv=cache, f=flops, b=batch, oh=overhead, latency=1) -> sympy.Expr:
        def time(w, kv, f, b, oh):
            return (max_of((w + kv) / (n * bandwidth), f / (n * peak)) + latency * comm.fixed + comm.per_token * b
                    + oh)
        return (b / time(w, kv, f, b, oh)) / (batch / time(weights, cache, flops, batch, overhead))

    # The KV pool: each GPU's usable HBM (the device's reported total at the usable-hbm share) less its share of
    # the weights; twice the batch needs twice the KV cache in it.
    pool = exact(hbm_bytes(p.gpu)) * exact(GPU_MEMORY_UTILIZATION) - weights / n
    doubled = 2 * cache / n
    need = f"its {format_number(s.evaluate(doubled) / 1e9, 3)} GB of KV a GPU"
    room = f"the {format_number(s.evaluate(pool) / 1e9, 3)} GB KV pool left after the weights"
    moves = {BATCH: dict(kv=2 * cache, f=2 * flops, b=2 * batch), KV_HALF: dict(kv=cache / 2),
             WEIGHTS_HALF: dict(w=weights / 2), OVERLAP: dict(oh=0)}
    def too_close(option: str) -> str:
        """Why this lever cannot be called in this variant, or ''."""
        ratio = gain(**moves[option])
        if s.compare(ratio, target * (1 - LEVER_MARGIN)) > 0 and s.compare(ratio, target * (1 + LEVER_MARGIN)) < 0:
            return f"it gains {format_number(s.evaluate(ratio), 4)}x, too near the bar to call on a roofline"
        if len({s.compare(gain(**moves[option], latency=k), target) >= 0 for k in LATENCY_SPREAD}) > 1:
            return "it clears the bar or not as the all-reduce latency per call is halved or doubled"
        return ""

    def say(option: str, why: str, lead: str = "") -> None:
        if reason := too_close(option):
            s.judge("levers", option, None, f"{lead}, but {reason}" if lead else reason)
            return
        ratio = gain(**moves[option])
        shown = s.evaluate(ratio)
        s.judge("levers", option, s.compare(ratio, target) >= 0,
                f"{why}: {format_number(shown, figures_against(shown, 1 + p.raise_by))}x the total tokens/s")

    if s.compare(doubled, pool) > 0:
        s.judge("levers", BATCH, False, f"{need} overflow {room}: it does not fit, so it cannot help")
    elif s.compare(doubled, pool * (1 - FIT_MARGIN)) > 0:
        s.judge("levers", BATCH, None, f"{need} come within 5% of {room}: activations and buffers decide it")
    else:
        say(BATCH, f"{need} fit {room}; the KV reads ({share} of the bytes) double with it, only the weight reads "
            "are shared", lead=f"{need} fit {room}")
    if p.kv_dtype == "fp8" and "fp4_dense_tflops" not in p.gpu:
        # Half of an fp8 KV cache is fp4, which only a GPU with an fp4 datapath (Blackwell) serves; elsewhere the
        # lever does not exist, and is not listed.
        s.judge("levers", KV_HALF, None, f"an fp8 KV cache at half its bytes is fp4, which {p.gpu.name} does not run")
    else:
        say(KV_HALF, f"the KV cache is {share} of the step's bytes")
    say(WEIGHTS_HALF,
        f"the weights are {format_number(100 - 100 * s.evaluate(cache / (weights + cache)), 2)}% of the step's bytes")
    say(OVERLAP, f"the step's {s.text(overhead)} of CPU overhead is "
        f"{format_number(100 * s.evaluate(overhead / step), 2)}% of it, and no byte moves")


def _ranking(s: Sheet, B, B_star, I_gemm, I_att) -> None:
    """Stage 1's choice: which op is least intense, by the batch against the flip."""
    gemm, att = format_number(s.value(I_gemm), 3), format_number(s.value(I_att), 3)
    flip = format_number(s.value(B_star))
    if s.compare(B, B_star) < 0:
        s.choose("ranking", "attention-above",
                 f"Below the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) are the least intense matmuls: "
                 f"attention ({att} FLOP/B) sits above them.")
    else:
        s.choose("ranking", "attention-below",
                 f"Past the flip batch of {flip}, the weight GEMMs ({gemm} FLOP/B) have climbed above attention, "
                 f"which stays at {att} FLOP/B whatever the batch: attention is the least intense matmul (the norms "
                 "and elementwise ops sit lower still, under 1 FLOP/B, but move only the batch's activations).")


def _reads_regime(s: Sheet, T, T_star, share) -> None:
    """Which reads set the step's length: the KV cache's (past the context at which they equal the weights')
    or the weights'."""
    part = format_number(100 * s.value(share), 2) + "%"
    edge = format_number(s.value(T_star), 2)
    s.regime_by(T, T_star, tie="above", below=Side(
        "weight-reads",
        f"Under {edge} tokens of context the weight reads outweigh the KV cache's: attention is {part} of the "
        "bytes, so whatever its intensity the weights set the step, and sharing them over more sequences (or "
        "shrinking them) is the lever.",
        f"Past {edge} tokens the KV reads outweigh the weights: each sequence brings its own bytes, twice the "
        "batch buys little, and only fewer KV bytes per token (fp8, fewer KV heads, MLA) shortens the step."),
        above=Side(
        "kv-reads",
        f"Past {edge} tokens of context the KV reads outweigh the weights': attention is {part} of the step's "
        f"reads, and every sequence added brings its own; fewer KV bytes per "
        "token (fp8, fewer KV heads, MLA) are the lever, not the batch.",
        f"Under {edge} tokens the weight reads dominate again, and the batch that shares them is the lever."))


def solve(p, s: Sheet) -> None:
    model = p.model
    require_full_xgmi_ring(p.gpu, p.tp)
    B = s.param("B", "batch")
    T = s.param("T", "context")
    n = s.param("TP", "tp")
    d = given_config(s, model, "hidden")  # "h", as the all-reduce model states it
    H = given_config(s, model, "heads")
    H_kv = given_config(s, model, "kv_heads")
    d_h = given_config(s, model, "head_dim")
    f = s.given("d_ff", model.ffn, "", "FFN size")
    L = given_config(s, model, "layers")
    N = given_model_params(s, model)
    b_w = given_weight_bytes(s, p.weight_dtype)
    b_kv = given_kv_bytes(s, p.kv_dtype)

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
    s.step("gemm_ratio", "Weight GEMMs' intensity over attention's at this batch", "R_GA", I_gemm / I_att, "x",
           "the batch over the flip batch: above one, attention is the lower")
    if s.compare(B, B_star) == 0:
        raise Reject("the batch sits exactly at the flip: attention and the GEMMs tie")
    P = given_peak_flops(s, p.gpu, "bf16")
    BW = given_hbm_bandwidth(s, p.gpu)
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
    T_star = s.step("kv_equal_context", "Context at which the KV reads equal the weights'", "T_eq",
                    W / (L * 2 * B * H_kv * d_h * b_kv), "tokens",
                    "past it each step reads more KV than weights")
    if s.compare(abs(KV / W - 1), TOO_CLOSE_TO_CALL) < 0:
        raise Reject("the KV reads are within 5% of the weights': which set the step would read as a tie")
    if s.compare(KV, W * CLEAR_OF_THE_LINE) < 0 and s.compare(W, KV * CLEAR_OF_THE_LINE) < 0:
        s.refuse_if_asked(["regime"], "the KV reads are within 10% of the weights': the push would land on a hairline")
    F = s.step("", "FLOPs of the step", "F", 2 * N * B + L * F_att, "TFLOP", "the GEMMs' 2·N per token plus attention")
    eta_bw = given_step_bandwidth(s)
    eta_c, _ = given_compute_efficiencies(s, p.gpu, "bf16", "bf16")
    t_oh = given_step_overhead(s, p.overhead)
    ar = tp_all_reduce(s, model, p.gpu, p.tp, B, tag="dec", label="decode step")
    t = s.step("step_time", "Time of the decode step", "t",
               max_of((W + KV) / (n * eta_bw * BW), F / (n * eta_c * P)) + ar + t_oh, "ms",
               "each GPU reads 1/TP of the weights and KV heads at the achievable bandwidth; the slower of reading "
               "and math" + ("" if p.tp == 1 else ", then the all-reduces") + ", plus the step's fixed overhead")
    s.step("per_user", "Tokens per second per user", "X_user", 1 / t, "tokens/s", "one token per sequence per step")
    _decode_step_levers(s, p, step=t, weights=W, cache=KV, flops=F, comm=all_reduce_terms(s, model, p.gpu, p.tp),
                        n=n, bandwidth=eta_bw * BW, peak=eta_c * P, batch=B, overhead=t_oh)

    s.assume("Weight bytes only for the GEMMs: the activations they read and write (B·(d_in + d_out) values) "
             "are small next to d_in·d_out weights at decode batch sizes.")
    s.assume("The ops ranked are the matmuls. RMSNorm, SiLU·mul, RoPE and the residual adds run under 1 FLOP/B, "
             "lower than any of them, but read and write only the batch's activations (B·h values, kilobytes "
             "against the weights' and KV's gigabytes): they set no part of the step worth ranking.")
    s.assume("Attention FLOPs count the two matmuls (QKᵀ and PV); softmax, masking and RoPE are left out. "
             "Attention is fused (scores stay on chip) and its math runs in bf16 (an fp8 KV cache is widened on load, "
             "as most decode kernels do), so it is set against the bf16 ridge. fp8 weights run W8A8 on Hopper and "
             "Blackwell, whose fp8 ridge is twice the bf16 one: decode GEMMs sit far below either, so no key "
             "turns on which.")
    s.assume("Dense decoder with grouped-query attention; tensor parallelism splits weights, heads and FLOPs "
             "alike, so no intensity changes with it; its all-reduces follow the tp-all-reduce card.")
    s.assume("The step time is the bank's step model: the roofline of the reads at the achievable share of HBM "
             "bandwidth and of the math at the achievable share of the bf16 peak, then the TP all-reduces with "
             "their latency per call, then the fixed per-step overhead (scheduling, sampling, launch gaps), which "
             "an overlapped, CUDA-graphed engine hides. Activation traffic is left out. Speculative decoding, "
             "which raises the GEMMs' and attention's intensity alike, is left out.")
    s.assume("The levers are judged on the step's total tokens/s, every sequence's together (batch over step time): "
             "per user, twice the batch is always slower. A lever whose gain sits within 3% of the bar, or whose "
             "side of it moves when the all-reduce latency per call is halved or doubled, is not listed; nor is one "
             "the drawn dtype and GPU do not have (an fp8 KV cache at half its bytes is fp4, which only Blackwell "
             "runs).")
    s.slip("per query head instead of per KV head: the sharing forgotten", on="attention_intensity",
           factor=model.kv_heads / model.heads)
    s.slip("per query head instead of per KV head: the sharing forgotten", on=("attention_gap", "gemm_ratio"),
           factor=model.heads / model.kv_heads)
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 0.5, on="attention_intensity")
    s.slip("K and V bytes counted, but only the QKᵀ FLOPs", 2.0, on=("attention_gap", "gemm_ratio"))
    s.slip("one layer's KV taken for the whole step", on="attention_share",
           factor=s.evaluate(W_att / (W + W_att)) / s.value(share))
    _ranking(s, B, B_star, I_gemm, I_att)
    _reads_regime(s, T, T_star, share)

