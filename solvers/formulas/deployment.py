"""Deployment regressions: why a model moved from H100 SXM to an H200 part can get slower, priced
mechanism by mechanism with the step-time model's constants (step-compute, step-bandwidth,
step-overhead) on both GPUs."""
from __future__ import annotations

from dataclasses import dataclass

from solvers.conventions import convention_value
from solvers.data import Record
from solvers.derivation import Sheet
from solvers.formulas.collective import all_reduce_terms
from solvers.formulas.common import (
    compute_efficiency,
    dtype_bytes,
    hbm_bandwidth,
)
from solvers.formulas.steptime import DEFAULT_CONSTANTS, STEP_OVERHEAD

# vLLM v0.10.1's largest CUDA-graph capture size by default: SchedulerConfig.cuda_graph_sizes = [min(2 x
# max_num_seqs, 512)] (PR #20628), and every draw's max_num_seqs is at least 256.
CAPTURE_LIMIT = 512


# Between NVLink bridge groups an H200 NVL ring runs over PCIe Gen5 x16 (the nvl-bridge-groups card).
PCIE_GEN5 = Record(name="PCIe Gen5 x16", gbit_s=convention_value("nvl-bridge-groups") * 8)


def device_name(gpu: Record) -> str:
    """What torch.cuda.get_device_name() reports, as vLLM v0.10.1 writes it into a config file name (spaces to
    underscores, nothing else). From PR #23642 (after v0.10.1.1) an H200 NVL reads the NVIDIA_H200 files."""
    return {"H100 SXM": "NVIDIA_H100_80GB_HBM3", "H200 SXM": "NVIDIA_H200", "H200 NVL": "NVIDIA_H200_NVL"}[gpu.name]


# The questions' KV cache is bf16: attention (QKᵀ, PV) runs at its peak, the weight GEMMs at the weights' dtype.
KV_DTYPE = "bf16"


@dataclass(frozen=True)
class Knobs:
    """Which mechanisms act on the H200 deployment: each can be switched off to price it alone."""

    peaks: tuple[float, float]  # dense peaks of the weight GEMMs and of attention, FLOP/s
    bridged: bool  # the TP ring crosses PCIe between NVLink bridge groups
    throttle: float  # compute throughput left under the power cap
    penalty: float  # MoE kernel time with default configs / with tuned ones
    batch: int
    graphs: bool  # False: a batch past the capture size runs eager


def bridge_ring(p, bridged: bool) -> tuple[float, float]:
    """The H200 group's all-reduce time per step and per token (tp-all-reduce), in seconds. Not bridged:
    the same ring as if every card of the group shared one NVLink fabric."""
    n = p.tp
    if n == 1:
        return 0.0, 0.0
    gpu = p.part if bridged else Record(p.part, nvlink_domain=max(n, p.part.nvlink_domain))
    scratch = Sheet()
    terms = all_reduce_terms(scratch, p.model, gpu, n, nic=PCIE_GEN5 if bridged else None)
    return scratch.evaluate(terms.fixed), scratch.evaluate(terms.per_token)


def step_times(p, knobs: Knobs, kv: float, context: float,
               rings: dict[bool, tuple[float, float]]) -> tuple[float, float]:
    """TTFT and TPOT of the H200 deployment for a set of knobs, in floats: the judgements' what-ifs,
    by the same formulas as the sheet's steps; `context` is every decoding sequence's (its mean)."""
    m, n, c = p.model, p.tp, DEFAULT_CONSTANTS
    W = m.params_b * 1e9 * dtype_bytes(p.dtype) / n  # each GPU's weight read
    bw = c.bandwidth * hbm_bandwidth(p.part)
    flops_share = 3 * m.layers * m.experts_per_token * m.hidden * m.ffn / (m.active_params_b * 1e9)
    expert_bytes = 3 * m.layers * m.experts * m.hidden * m.ffn / (m.params_b * 1e9) * W
    pair = 4 * m.layers * m.heads * m.head_dim
    stretch = knobs.penalty - 1
    p_gemm, p_att = (n * compute_efficiency(dtype) * peak * knobs.throttle
                     for dtype, peak in zip((p.dtype, KV_DTYPE), knobs.peaks))

    def kernels(read: float, gemm: float, attention: float) -> float:
        return max((read + expert_bytes * stretch) / bw,
                   gemm * (1 + flops_share * stretch) / p_gemm + attention / p_att)

    fixed, per_token = rings[knobs.bridged]
    gemm = 2 * m.active_params_b * 1e9
    ttft = kernels(W, gemm * p.prompt, pair * p.prompt**2 / 2) + fixed + per_token * p.prompt + STEP_OVERHEAD
    B = knobs.batch
    eager = m.layers * p.eager_per_layer if B > CAPTURE_LIMIT and not knobs.graphs else 0.0
    # Eager launches run ahead of the GPU (asynchronous): the step waits on the longer of the two.
    tpot = max(kernels(W + B * context * kv, gemm * B, pair * context * B) + fixed + per_token * B, eager) \
        + STEP_OVERHEAD
    return ttft, tpot
