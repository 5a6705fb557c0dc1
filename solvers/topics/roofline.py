"""Roofline questions: arithmetic intensity against the ridge point of a GPU."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.topics.common import dtype_bytes, hbm_bandwidth, model_params, peak_flops
from solvers.units import format_number


def weight_read_intensity(p, s: Sheet) -> None:
    peak = peak_flops(p.gpu, p.dtype)
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    T = s.given("T", p.tokens, "tokens", "tokens per forward pass")
    b = s.given("b", dtype_bytes(p.dtype), "B", f"bytes per weight ({p.dtype})")
    P = s.given("P", peak, "TFLOP/s", f"{p.gpu.name} dense {p.dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")

    F = s.step("flops", "FLOPs per forward pass", "F", 2 * N * T, "TFLOP",
               "each weight does one multiply-add (2 FLOPs) per token in the pass")
    W = s.step("bytes", "Bytes read per forward pass", "W", N * b, "GB",
               "every weight is read from HBM once per pass, shared by all its tokens")
    I = s.step("intensity", "Arithmetic intensity", "I", F / W, "FLOP/B",
               "FLOPs per byte moved: 2T/b, so it grows with the tokens riding on one weight read")
    R = s.step("ridge", "Ridge point of the GPU", "I_ridge", P / BW, "FLOP/B",
               "below this intensity HBM cannot feed the tensor cores fast enough")
    Tc = s.step("crossover", "Crossover tokens per pass", "T_star", b * P / (2 * BW), "tokens",
                "solve 2T/b = P/BW for T: the batch at which the pass turns compute-bound")
    t = s.step("step_time", "Time per forward pass", "t", sympy.Max(W / BW, F / P), "ms",
               "the slower of streaming the weights and doing the math")
    s.step("throughput", "Tokens per second", "X", T / t, "tokens/s", "tokens in the pass over its time")

    s.assume("Peak datasheet figures, dense, no efficiency factor (real kernels reach 60-80% of both).")
    s.assume("Weights only: KV-cache reads and attention FLOPs over the context are left out, "
             "which is fair for short contexts and flatters long ones.")
    s.assume("One GPU's view: under tensor parallelism each GPU reads and computes an equal share, "
             "so intensity and ridge are unchanged; communication is ignored.")
    s.slip("x2: a bf16 weight counted as 1 byte, or FLOPs not doubled", 2.0)

    tokens, crossover = s.value(T), s.value(Tc)
    if tokens < crossover:
        s.set_regime(
            "memory-bound",
            f"{format_number(tokens)} tokens per pass sit below the crossover of {format_number(crossover)}: "
            "the pass waits on HBM, and extra tokens ride along almost for free.",
            Tc, T,
            "Above the crossover the tensor cores are the bottleneck: time per pass grows with every token "
            "and tokens/s stops rising. A prefill of a long prompt lives there; small-batch decode lives here.",
        )
    else:
        s.set_regime(
            "compute-bound",
            f"{format_number(tokens)} tokens per pass exceed the crossover of {format_number(crossover)}: "
            "the tensor cores are saturated and time grows with every token added.",
            Tc, T,
            "Below the crossover the pass is limited by reading the weights: time stays flat as tokens are "
            "removed, so a small decode batch wastes most of the GPU's compute.",
        )
