"""What the memory questions share: the inputs of vLLM's profile run."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.formulas.common import given_hbm_bytes, given_model_params, given_weight_bytes


def profile_run_inputs(p, s: Sheet, utilization: float, peak: str = "A", tp: str = "n") -> tuple[sympy.Symbol, ...]:
    """What vLLM's start-up accounting works from: total memory, the utilisation cap, the TP group,
    the weights per GPU and what the profile run measured besides them (the activation peak's symbol
    `peak` and the group's width `tp`, for a sheet that also times a step: its A is attention's FLOPs per
    query-key pair, and its TP the group)."""
    M = given_hbm_bytes(s, p.gpu)
    u = s.given("u", utilization, "", "gpu_memory_utilization")
    n = s.given(tp, p.tp, "", "tensor-parallel GPUs")
    N = given_model_params(s, p.model)
    b_w = given_weight_bytes(s, p.weight_dtype)
    A = s.param(peak, "activation_peak")
    T = s.param("T", "non_torch")
    w = s.step("weights_per_gpu", "Weights per GPU", "w", N * b_w / n, "GiB",
               "tensor parallelism shards every weight matrix evenly over the group")
    return M, u, n, A, T, w
