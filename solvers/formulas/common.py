"""Helpers shared by the topic solvers: dtypes, datasheet lookups, engine defaults, typed results, and
the datasheet and model figures as givens, each with its unit and label said here once."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value
from solvers.data import Record, hbm_bytes
from solvers.derivation import Reject, Sheet
from solvers.dtypes import DTYPE_BYTES
from solvers.units import format_exact

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


def hbm_bandwidth(gpu: Record) -> float:
    return gpu.hbm_tb_s * 1e12


def model_params(model: Record) -> float:
    return model.params_b * 1e9


def given_peak_flops(s: Sheet, gpu: Record, dtype: str, symbol: str = "P") -> sympy.Symbol:
    return s.given(symbol, peak_flops(gpu, dtype), "TFLOP/s", f"{gpu.name} dense {dtype} peak")


def attention_dtype(gpu: Record, kv_dtype: str) -> str:
    """The dtype attention's matmuls (QKᵀ and PV) run in: the KV cache's, where the GPU has tensor cores
    for it (the card's matmul-precision); else the cache is dequantised and attention runs in bf16."""
    return kv_dtype if gpu.get(_PEAK_FIELD[kv_dtype]) is not None else "bf16"


def matmul_peaks(gpu: Record, weight_dtype: str, kv_dtype: str) -> tuple[float, float]:
    """Dense peaks in FLOP/s of (the weight GEMMs, attention): the weights' dtype and the cache's
    (conventions card, matmul-precision)."""
    return peak_flops(gpu, weight_dtype), peak_flops(gpu, attention_dtype(gpu, kv_dtype))


def given_matmul_peaks(s: Sheet, gpu: Record, weight_dtype: str, kv_dtype: str, symbol: str = "P",
                       attention_symbol: str = "P_att") -> tuple[sympy.Symbol, sympy.Symbol]:
    """matmul_peaks as givens: (P for the weight GEMMs, P_att for QKᵀ and PV). Where the two peaks are
    the same figure, one given serves both (the returned symbols are the same)."""
    weights = given_peak_flops(s, gpu, weight_dtype, symbol)
    att = attention_dtype(gpu, kv_dtype)
    if peak_flops(gpu, att) == peak_flops(gpu, weight_dtype):
        return weights, weights
    return weights, s.given(attention_symbol, peak_flops(gpu, att), "TFLOP/s",
                            f"{gpu.name} dense {att} peak (attention over the {kv_dtype} KV cache)")


_EFFICIENCY_CARD = {"bf16": "step-compute", "fp16": "step-compute", "fp8": "step-compute-fp8",
                   "fp4": "step-compute-fp8"}


def compute_efficiency(dtype: str) -> float:
    """The share of the `dtype` dense peak a step's matmuls reach end to end: the step-compute card for
    bf16, step-compute-fp8 for the 8-bit and narrower formats (fp4 has no measurement; it takes FP8's)."""
    return convention_value(_EFFICIENCY_CARD[dtype])


def given_compute_efficiencies(s: Sheet, gpu: Record, weight_dtype: str, kv_dtype: str,
                               stated: float | None = None) -> tuple[sympy.Symbol, sympy.Symbol]:
    """(η_c for the weight GEMMs, η_att for attention's matmuls) as givens, each the card of the precision
    that matmul runs at (matmul-precision); a question's `stated` MFU serves every precision. Where the
    two are the same figure, one given serves both, as given_matmul_peaks does for the peaks."""
    att = attention_dtype(gpu, kv_dtype)
    if stated is not None:
        weights = attention = stated
        label = "achievable fraction of peak compute"
    else:
        weights, attention = compute_efficiency(weight_dtype), compute_efficiency(att)
        label = ("achievable fraction of peak compute" if _EFFICIENCY_CARD[weight_dtype] == "step-compute"
                 else f"achievable fraction of the {weight_dtype} dense peak ({_EFFICIENCY_CARD[weight_dtype]})")
    eta_c = s.given("η_c", weights, "%", label)
    if attention == weights:
        return eta_c, eta_c
    return eta_c, s.given("η_att", attention, "%",
                          f"achievable fraction of the {att} dense peak in attention ({_EFFICIENCY_CARD[att]})")


def given_hbm_bandwidth(s: Sheet, gpu: Record, symbol: str = "BW") -> sympy.Symbol:
    return s.given(symbol, hbm_bandwidth(gpu), "TB/s", f"{gpu.name} HBM bandwidth")


def given_usable_share(s: Sheet, symbol: str = "u") -> sympy.Symbol:
    """The share of a GPU's HBM that weights and KV may fill: the conventions card's usable-hbm."""
    return s.given(symbol, GPU_MEMORY_UTILIZATION, "%", "usable share of HBM (the card's usable-hbm)")


def given_hbm_bytes(s: Sheet, gpu: Record, symbol: str = "M") -> sympy.Symbol:
    """A GPU's HBM as the device reports it, its datasheet label named beside it (decimal-units card)."""
    return s.given(symbol, hbm_bytes(gpu), "GB", f"{gpu.name} HBM ({hbm_label(gpu)})")


def hbm_label(gpu: Record) -> str:
    """'80 GB, 81,559 MiB as the device reports it': the label and the figure the solvers use."""
    if gpu.get("hbm_mib") is None:
        return f"{format_exact(gpu.hbm_gb)} GB"
    return f"{format_exact(gpu.hbm_gb)} GB label, {format_exact(gpu.hbm_mib)} MiB as the device reports it"


def fabric_name(gpu: Record) -> str:
    """The GPU's scale-up fabric by name (hardware.yaml's `fabric`; NVLink where an entry gives none)."""
    return str(gpu.get("fabric") or "NVLink")


def given_nvlink(s: Sheet, gpu: Record, symbol: str = "BW_NVL") -> sympy.Symbol:
    """A GPU's scale-up bandwidth each way: half the datasheet's figure, which counts both directions."""
    return s.given(symbol, gpu.nvlink_gb_s * 1e9 / 2, "GB/s", f"{gpu.name} {fabric_name(gpu)} per GPU, each direction")


def given_nic(s: Sheet, nic: Record, symbol: str = "BW_NIC") -> sympy.Symbol:
    """A NIC's line rate in bytes, each way: one NIC per GPU."""
    return s.given(symbol, nic.gbit_s * 1e9 / 8, "GB/s", f"{nic.name} per GPU, each direction")


def given_model_params(s: Sheet, model: Record, symbol: str = "N") -> sympy.Symbol:
    return s.given(symbol, model_params(model), "", f"{model.name} parameters")


def given_active_params(s: Sheet, model: Record, symbol: str = "N_act") -> sympy.Symbol:
    return s.given(symbol, model.active_params_b * 1e9, "", f"{model.name} active parameters per token")


def given_weight_bytes(s: Sheet, dtype: str, symbol: str = "b_w") -> sympy.Symbol:
    return s.given(symbol, dtype_bytes(dtype), "B", f"bytes per weight ({dtype})")


def given_kv_bytes(s: Sheet, dtype: str, symbol: str = "b_kv") -> sympy.Symbol:
    return s.given(symbol, dtype_bytes(dtype), "B", f"bytes per KV value ({dtype})")


# A model's config fields as givens: the symbol formulas call each by, and its label.
CONFIG_FIELDS = {
    "layers": ("L", "layers"),
    "heads": ("H_q", "query heads"),
    "kv_heads": ("H_kv", "KV heads"),
    "head_dim": ("d_h", "head dim"),
    "hidden": ("h", "hidden size"),
    "kv_lora_rank": ("d_c", "KV latent rank (kv_lora_rank)"),
    "qk_rope_head_dim": ("d_r", "decoupled RoPE key dim"),
    "experts": ("E", "routed experts per MoE layer"),
    "experts_per_token": ("k", "routed experts each token picks"),
    "expert_ffn": ("f_x", "FFN width of one expert"),
    "attention_layers": ("L_A", "attention layers"),
    "mamba_layers": ("L_M", "Mamba-2 layers"),
    "ssm_heads": ("n_h", "SSM heads"),
    "ssm_head_dim": ("d_p", "SSM head dim"),
    "ssm_state": ("d_s", "SSM state size"),
    "ssm_groups": ("n_g", "B/C groups"),
    "conv_kernel": ("K", "conv width"),
}


def given_config(s: Sheet, model: Record, field: str, symbol: str | None = None) -> sympy.Symbol:
    default, label = CONFIG_FIELDS[field]
    return s.given(symbol or default, getattr(model, field), "", label)


def require_context(model: Record, tokens: int) -> None:
    """Reject a draw that asks a model for a longer context than it serves."""
    limit = model.get("max_context")
    if limit is not None and tokens > limit:
        raise Reject(f"{model.name} serves at most {limit} tokens")

