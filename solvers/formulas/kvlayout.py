"""What the KV-layout questions share: the note on FP8 latents."""
from __future__ import annotations

from solvers.derivation import Sheet


def fp8_latent_note(s: Sheet, kv_dtype: str) -> None:
    if kv_dtype == "fp8":
        s.assume("fp8 latents are costed at one byte per element; real fp8 MLA caches carry scales and keep the RoPE "
                 "key in bf16 (FlashMLA's fp8 layout: 656 B per token per layer against 576 here).")
