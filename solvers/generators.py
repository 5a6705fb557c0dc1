"""Seeded generators for list-valued parameters (e.g. a batch's output lengths).

Each takes the variant's numpy Generator first, then the arguments the question file
gives, and returns rounded values, so the prompt shows exactly what the solver uses.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

GENERATORS: dict[str, Callable[..., list]] = {}


def generator(name: str):
    def register(function: Callable[..., list]) -> Callable[..., list]:
        GENERATORS[name] = function
        return function

    return register


@generator("lognormal_ints")
def lognormal_ints(rng: np.random.Generator, n: int, median: float, sigma: float,
                   low: int = 1, high: int = 10**7) -> list[int]:
    """n integers, log-normal around `median`; sigma 0 gives identical values, 1.5 a heavy tail."""
    draws = rng.lognormal(mean=np.log(median), sigma=sigma, size=int(n))
    return [int(v) for v in np.clip(np.rint(draws), low, high)]
