"""What the quantisation questions share: a generator seeded from the variant, percentages as they
print."""
from __future__ import annotations

import zlib

import numpy as np

from solvers.units import format_number


def variant_rng(p, *names: str) -> np.random.Generator:
    """A generator seeded from these parameters' values: the same variant draws the same sample,
    a follow-up that moves one parameter draws a new one."""
    return seeded_rng(variant_key(p, *names))


def variant_key(p, *names: str) -> str:
    """The text variant_rng seeds from: these parameters' values (a record by its name)."""
    return "|".join(f"{name}={getattr(getattr(p, name), 'name', getattr(p, name))}" for name in names)


def seeded_rng(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def pct_text(value: float) -> str:
    return format_number(100 * value, 3) + "%"

