"""What the quantisation questions share: a generator seeded from the variant, percentages as they
print."""
from __future__ import annotations

import zlib

import numpy as np

from solvers.units import format_number


def variant_rng(p, *names: str) -> np.random.Generator:
    """A generator seeded from these parameters' values: the same variant draws the same sample,
    a follow-up that moves one parameter draws a new one."""
    key = "|".join(f"{name}={getattr(getattr(p, name), 'name', getattr(p, name))}" for name in names)
    return np.random.default_rng(zlib.crc32(key.encode()))


def pct_text(value: float) -> str:
    return format_number(100 * value, 3) + "%"

