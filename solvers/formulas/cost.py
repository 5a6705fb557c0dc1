"""The serving-cost model the cost questions share, on the step-time model (steptime.py): what a
request costs in replica-seconds and dollars, where the bill comes from, and the levers on it.

Each question prices a replica (one TP group) by the time its work holds it: a prompt holds
it for its prefill step, an output token for its share of a decode step at the batch the
per-user speed target allows. A lever is judged by re-running the sheet's formulas in floats with
one input changed (ledger_time); a test holds the two to the same value."""
from __future__ import annotations

import math

from solvers.units import format_quantity


def pct_text(value: float) -> str:
    return format_quantity(value, "%", 3)


def ledger_time(g: dict[str, float], warm: float = 0.0) -> float:
    """Replica-seconds per request over the ceiling, in floats: the sheet's formulas, re-run for a lever
    (evaluating them symbolically with a given changed costs sympy seconds). `warm`: the share of each
    prompt read from a prefix cache instead of computed. The weight GEMMs run at `fr`, attention at
    `fr_att`, the rate of the cache's dtype (the card's matmul-precision)."""
    P, R, N, A = g["P"], g["R"], g["N"], g["A"]
    new = P * (1 - warm)

    def math_time(weight_flops: float, attention_flops: float) -> float:
        return weight_flops / g["fr"] + attention_flops / g["fr_att"]

    t_pre = (max(g["W_gpu"] / g["br"], math_time(2 * N * new, A * (P**2 - (P - new) ** 2) / 2))
             + g["ar0"] + g["ar_tok"] * new + g["t_oh"])
    S = P + R / 2
    room = 1 / g["v"] - g["t_oh"] - g["ar0"]
    caps = ((room - g["W_gpu"] / g["br"]) / (g["KV"] * S / g["br"] + g["ar_tok"]),
            room / (math_time(2 * N, A * S) + g["ar_tok"]), g["pool"] / (g["KV"] * S))
    B = math.floor(min(caps))
    if B < 1:
        return math.inf
    t_dec = (max((g["W_gpu"] + g["KV"] * B * S) / g["br"], math_time(2 * N * B, A * B * S))
             + g["ar0"] + g["ar_tok"] * B + g["t_oh"])
    return (t_pre + R * t_dec / B) / g["u"]


LAYOUTS = {1: "one GPU", 2: "TP 2", 4: "TP 4", 8: "TP 8"}

