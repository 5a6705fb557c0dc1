"""What the memory questions share: the profile run's inputs, and PagedAttention's waste figure."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.models.common import (
    dtype_bytes,
    hbm_bytes,
    model_params,
)


def profile_run_inputs(p, s: Sheet, utilization: float) -> tuple[sympy.Symbol, ...]:
    """What vLLM's start-up accounting works from: total memory, the utilisation cap, the TP group,
    the weights per GPU and what the profile run measured besides them."""
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} total memory (datasheet)")
    u = s.given("u", utilization, "", "gpu_memory_utilization")
    n = s.given("n", p.tp, "", "tensor-parallel GPUs")
    N = s.given("N", model_params(p.model), "", "parameters")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    A = s.param("A", "activation_peak")
    T = s.param("T", "non_torch")
    w = s.step("weights_per_gpu", "Weights per GPU", "w", N * b_w / n, "GiB",
               "tensor parallelism shards every weight matrix evenly over the group")
    return M, u, n, A, T, w


PAPER_PAGED_WASTE = 0.04  # PagedAttention (SOSP 2023): vLLM wastes under 4% of its KV memory

