"""What the KV transfer questions share (fetching a cached prefix against recomputing it, and the
link a disaggregated prefill pool needs): the model's active parameters and its FLOPs per query-key pair.

Both turn on one figure of the model, the FLOPs it spends per byte of KV it produces: 2N/KV.
Recomputing a token costs 2N FLOPs at the group's achievable rate; moving it costs KV bytes over
a link. Per GPU under tensor parallelism both shrink by TP (each GPU computes 1/TP and holds
and moves its own KV heads), so TP cancels. The achievable compute is the step-time model's
(steptime.StepConstants, the conventions card's step-compute) unless the question draws a matmul
efficiency."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.formulas.common import given_active_params, given_config, given_model_params


def active_params(s: Sheet, model) -> sympy.Symbol:
    """Parameters a token's forward pass multiplies by: all of them, or an MoE's active share."""
    if model.get("active_params_b") is None:
        return given_model_params(s, model)
    return given_active_params(s, model, "N")


def attention_pair_flops(s: Sheet, model) -> sympy.Symbol:
    """The attention-flops card: 4·d_h FLOPs per query head per layer for each query-key pair."""
    L = given_config(s, model, "layers")
    H = given_config(s, model, "heads")
    d_h = given_config(s, model, "head_dim")
    return s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 4 * L * H * d_h, "FLOP",
                  "QKᵀ and PV, a multiply-add per head dimension each, for every query head in every layer")

