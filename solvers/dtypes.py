"""Bytes per element of the number formats the bank uses."""
from __future__ import annotations

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
