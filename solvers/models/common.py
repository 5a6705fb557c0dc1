"""Helpers shared by the topic solvers: dtypes, datasheet lookups, engine defaults, typed results."""
from __future__ import annotations

from solvers.conventions import convention_value
from solvers.data import Record
from solvers.derivation import Reject
from solvers.dtypes import DTYPE_BYTES

GPU_MEMORY_UTILIZATION = convention_value("usable-hbm")  # the conventions card says it once


_PEAK_FIELD = {"bf16": "bf16_dense_tflops", "fp16": "bf16_dense_tflops", "fp8": "fp8_dense_tflops",
               "fp4": "fp4_dense_tflops"}


def dtype_bytes(dtype: str) -> float:
    return DTYPE_BYTES[dtype]


def peak_flops(gpu: Record, dtype: str) -> float:
    """Dense tensor-core peak in FLOP/s for `dtype`; Reject if the GPU has none."""
    figure = gpu.get(_PEAK_FIELD[dtype])
    if figure is None:
        raise Reject(f"{gpu.name} has no {dtype} tensor cores")
    return figure * 1e12


def hbm_bytes(gpu: Record) -> float:
    return gpu.hbm_gb * 1e9


def hbm_bandwidth(gpu: Record) -> float:
    return gpu.hbm_tb_s * 1e12


def model_params(model: Record) -> float:
    return model.params_b * 1e9


def require_context(model: Record, tokens: int) -> None:
    """Reject a draw that asks a model for a longer context than it serves."""
    limit = model.get("max_context")
    if limit is not None and tokens > limit:
        raise Reject(f"{model.name} serves at most {limit} tokens")

