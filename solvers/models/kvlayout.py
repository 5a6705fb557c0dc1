"""What the KV-layout questions share: a GPU's usable memory, and the note on FP8 latents."""
from __future__ import annotations

import sympy

from solvers.data import Record
from solvers.derivation import Sheet
from solvers.models.common import (
    GPU_MEMORY_UTILIZATION,
    hbm_bytes,
)


def usable_memory(s: Sheet, gpu: Record) -> sympy.Symbol:
    M = s.given("M", hbm_bytes(gpu), "GB", f"{gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable fraction of HBM")
    return s.step("usable", "Usable memory per GPU", "M_use", M * u, "GB",
                  "the engine's memory cap (vLLM's gpu_memory_utilization)")


def fp8_latent_note(s: Sheet, kv_dtype: str) -> None:
    if kv_dtype == "fp8":
        s.assume("fp8 latents are costed at one byte per element; real fp8 MLA caches carry scales and keep the RoPE "
                 "key in bf16 (FlashMLA's fp8 layout: 656 B per token per layer against 576 here).")

