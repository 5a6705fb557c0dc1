"""Helpers shared by the topic solvers: datasheet lookups and recurring derivation steps."""
from __future__ import annotations

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
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


def kv_bytes_per_token(sheet: Sheet, model: Record, kv_bytes: sympy.Symbol, key: str = "kv_per_token",
                       unit: str = "KiB") -> sympy.Symbol:
    """Per-token KV cache bytes across all layers: GQA/MHA/MQA, or MLA's shared latent."""
    layers = sheet.given("L", model.layers, "", "layers")
    if model.attention == "mla":
        latent = sheet.given("d_c", model.kv_lora_rank, "", "KV latent rank (kv_lora_rank)")
        rope = sheet.given("d_r", model.qk_rope_head_dim, "", "decoupled RoPE key dim")
        return sheet.step(key, "KV cache bytes per token (MLA: one latent per layer)", "KV_tok",
                          layers * (latent + rope) * kv_bytes, unit,
                          "MLA caches one compressed latent plus the RoPE key per layer, shared by all heads")
    kv_heads = sheet.given("H_kv", model.kv_heads, "", "KV heads")
    head_dim = sheet.given("d_h", model.head_dim, "", "head dim")
    return sheet.step(key, "KV cache bytes per token", "KV_tok", 2 * layers * kv_heads * head_dim * kv_bytes, unit,
                      "a key and a value vector per KV head in every layer")
