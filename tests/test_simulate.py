"""The seeded simulation helpers against closed forms, with samples large enough to be tight."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.derivation import Reject, Sheet
from solvers.simulate import (
    Run,
    count_both_within,
    exponential,
    mm1_wait,
    quantile,
    share_sigma,
    shifted_exponential,
)

N = 1_000_000


def _lindley_waits(rng: np.random.Generator, n: int, arrival_rate: float, service_rate: float) -> np.ndarray:
    """Waits of n consecutive requests in a FCFS single-server queue, simulated in order:
    W[k] = max(0, W[k-1] + S[k-1] - A[k]) (Lindley), written as a running minimum."""
    gaps = rng.exponential(1 / arrival_rate, n)
    services = rng.exponential(1 / service_rate, n)
    steps = np.concatenate(([0.0], services[:-1] - gaps[1:]))
    walk = np.cumsum(steps)
    return walk - np.minimum.accumulate(np.minimum(walk, 0.0))


def test_run_reproduces_its_draws():
    first = exponential(Run(seed=11, requests=5).rng(), 5, 1.0)
    again = exponential(Run(seed=11, requests=5).rng(), 5, 1.0)
    other = exponential(Run(seed=12, requests=5).rng(), 5, 1.0)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_measured_figure_is_a_labelled_given():
    sheet = Sheet()
    symbol = Run(seed=3, requests=1000).measured(sheet, "x_sim", 0.25, "s", "p99 TTFT")
    assert sheet.value(symbol) == 0.25
    assert "seed 3" in sheet.givens[-1].label and "1,000 requests" in sheet.givens[-1].label


@pytest.mark.parametrize("rho", [0.3, 0.7, 0.9])
def test_mm1_wait_plus_service_is_exponential(rho):
    """M/M/1 FCFS: wait plus own service is exponential with rate mu - lambda (Kleinrock)."""
    mu = 5.0
    lam = rho * mu
    rng = np.random.default_rng(1)
    waits = mm1_wait(rng, N, lam, mu)
    sojourn = waits + exponential(rng, N, 1 / mu)
    assert np.mean(waits > 0) == pytest.approx(rho, abs=0.002)  # an arrival finds the server busy w.p. rho
    assert np.mean(waits) == pytest.approx(rho / (mu - lam), rel=0.01)  # M/M/1 mean wait
    for q in (0.5, 0.9, 0.99):
        assert quantile(sojourn, q) == pytest.approx(-math.log(1 - q) / (mu - lam), rel=0.01)


def test_mm1_wait_matches_a_queue_simulated_in_order():
    """The stationary draws have the distribution of a long FCFS queue run request by request."""
    mu, lam = 5.0, 3.0
    ordered = _lindley_waits(np.random.default_rng(2), 4 * N, lam, mu)[N:]  # drop the start-up transient
    drawn = mm1_wait(np.random.default_rng(3), N, lam, mu)
    assert np.mean(ordered > 0) == pytest.approx(np.mean(drawn > 0), abs=0.005)
    for q in (0.5, 0.9, 0.99):
        assert quantile(ordered, q) == pytest.approx(quantile(drawn, q), rel=0.03)


def test_mm1_wait_rejects_an_unstable_queue():
    with pytest.raises(Reject):
        mm1_wait(np.random.default_rng(0), 10, 5.0, 5.0)


def test_shifted_exponential_quantiles_and_floor():
    floor, excess = 0.025, 0.005
    sample = shifted_exponential(np.random.default_rng(4), N, floor, excess)
    assert sample.min() >= floor
    for q in (0.5, 0.99):
        assert quantile(sample, q) == pytest.approx(floor - excess * math.log(1 - q), rel=0.005)


def test_joint_attainment_of_independent_latencies_is_the_product():
    rng = np.random.default_rng(5)
    first = exponential(rng, N, 0.8)
    second = shifted_exponential(rng, N, 0.02, 0.01)
    both = count_both_within(first, 1.0, second, 0.04) / N
    expected = (1 - math.exp(-1.0 / 0.8)) * (1 - math.exp(-(0.04 - 0.02) / 0.01))
    assert both == pytest.approx(expected, rel=0.005)


def test_share_sigma_is_the_spread_of_repeated_counts():
    """The standard error of a share counted over n requests matches the spread of many such counts."""
    share, n = 0.9, 100_000
    counts = np.random.default_rng(6).binomial(n, share, 20_000) / n
    assert share_sigma(share, n) == pytest.approx(np.std(counts), rel=0.02)
    assert share_sigma(share, n) == pytest.approx(math.sqrt(0.09 / n))


def test_quantile_is_numpys_linear_quantile():
    values = np.array([4.0, 1.0, 3.0, 2.0])
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 1.0) == 4.0
