"""Seeded Monte Carlo for solvers whose answer is a measurement over many requests.

A question that simulates names its seed and its sample size as variant parameters, so the
solver stays a pure function of the variant and a variant code reproduces the same draws.
The simulation's own generator is seeded from that parameter alone: it never shares state
with the generator that drew the variant's other parameters.

The helpers draw per-request values from named distributions (vectorised numpy, no loops
over requests), summarise a sample (quantiles, requests meeting a pair of limits), and enter a
measured figure on a derivation sheet as a given whose label says it was simulated.
Nothing here does I/O or keeps state.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from solvers.derivation import Reject, Sheet
from solvers.units import format_number


@dataclass(frozen=True)
class Run:
    """One seeded simulation: its seed and how many requests it draws."""

    seed: int
    requests: int

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(int(self.seed))

    def measured(self, sheet: Sheet, symbol: str, value: float, unit: str, label: str) -> sympy.Symbol:
        """A figure read off the simulated sample, as a given the derivation can use."""
        return sheet.given(symbol, value, unit, f"{label} (seeded simulation: {format_number(self.requests)} "
                                                f"requests, seed {self.seed})")


def exponential(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    return rng.exponential(mean, int(n))


def shifted_exponential(rng: np.random.Generator, n: int, floor: float, mean_excess: float) -> np.ndarray:
    """A fixed floor plus an exponential excess: a latency that never beats `floor`."""
    return floor + rng.exponential(mean_excess, int(n))


def mm1_wait(rng: np.random.Generator, n: int, arrival_rate: float, service_rate: float) -> np.ndarray:
    """Queueing delays of n requests drawn from a FCFS M/M/1 queue in steady state.

    With utilisation rho = arrival_rate / service_rate < 1, a request finds the server idle with
    probability 1 - rho and waits nothing; otherwise its wait is exponential with rate
    service_rate - arrival_rate. Requests are drawn independently: a long simulated queue
    has the same marginal distribution but correlated neighbours, which in heavy traffic
    needs millions of requests for a stable tail.
    """
    rho = arrival_rate / service_rate
    if not 0 < rho < 1:
        raise Reject("the queue is unstable: arrivals at or above the service rate")
    waits = rng.random(int(n)) < rho
    return np.where(waits, rng.exponential(1 / (service_rate - arrival_rate), int(n)), 0.0)


def quantile(values: np.ndarray, q: float) -> float:
    """The sample's q-quantile (numpy's default linear interpolation)."""
    return float(np.quantile(values, q))


def share_sigma(share: float, requests: int) -> float:
    """Standard error of a share counted over `requests` independent requests (binomial): sqrt(p(1 - p)/n)."""
    return float(np.sqrt(share * (1 - share) / requests))


def count_both_within(first: np.ndarray, first_limit: float, second: np.ndarray, second_limit: float) -> int:
    """Requests whose two measurements both meet their limits (a joint SLO)."""
    return int(np.count_nonzero((first <= first_limit) & (second <= second_limit)))
