"""incast-buffer: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError


def test_incast_default_fills_in_microseconds(variant):
    """32 senders at 400 Gb/s: the queue grows at 31 × 50 GB/s = 1.55 TB/s (the times and the sender count are
    pinned in the question file)."""
    assert variant("incast-buffer@default").sheet.results["excess"] == pytest.approx(31 * 50e9)


def test_incast_grades_a_whole_sender_count(variant):
    """The first version graded "8.2 senders"; the key is now the first whole count that sets off PFC (5 senders
    are ECN-first, 6 PFC-first: pinned in the question file)."""
    assert float(variant("incast-buffer@default").expected["n_pfc"]).is_integer()


@pytest.mark.parametrize("nic, gbit_s", [("connectx-7", 400), ("connectx-8", 800)])
def test_incast_units_are_decimal_and_the_card_is_in_play(variant, nic, gbit_s):
    """Read as KiB and MiB, the default's thresholds move t_xoff by 4.9%, past the 2% tolerance: the decimal-units
    card is listed on the screen (named by the assumptions, not the interviewer), and the line rate is printed."""
    solution = variant(f"incast-buffer@default+nic={nic}")
    assert "decimal-units" in solution.cards()
    assert "decimal-units" not in solution.prompt
    assert f"{gbit_s} Gb/s" in solution.prompt
    binary = 4 * 2**20 / ((32 - 1) * gbit_s * 1e9 / 8)
    assert abs(binary / solution.expected["t_xoff"] - 1) > 0.02


def _simulated_peak(senders: int, rate: float, ecn: float, rtt: float, steps: int = 400) -> float:
    """The queue stepped in time: every sender at its rate, the port draining one line rate; a round trip after
    the queue first passes the marking threshold every sender halves, and again each round trip it stays past it,
    until they send no more than the line rate. The deepest the queue gets."""
    dt = rtt / steps
    queue, sending, marked_at, peak, t = 0.0, rate, None, 0.0, 0.0
    while True:
        if marked_at is None and queue > ecn:
            marked_at = t
        if marked_at is not None and t >= marked_at + rtt - dt / 2 and queue > ecn:
            sending, marked_at = sending / 2, marked_at + rtt
        growth = (senders * sending - rate) * dt
        if growth <= 0:
            return peak
        queue += growth
        peak, t = max(peak, queue), t + dt


@pytest.mark.parametrize("seed", range(12))
def test_incast_peak_matches_a_stepped_queue(variant, seed):
    """The closed form, K + R·RTT·(N(2 − 2^(1−k)) − k), against the queue stepped through the halvings (the review:
    the first cut alone does not end the growth, @default+senders=8)."""
    solution = variant(f"incast-buffer@{seed}")
    p = {param.name: param.value for param in solution.params}
    rate = p["nic"].gbit_s * 1e9 / 8
    peak = _simulated_peak(p["senders"], rate, p["ecn_threshold"], p["rtt"])
    assert solution.expected["queue_peak"] == pytest.approx(peak, rel=0.01)


@pytest.mark.parametrize("seed", range(20))
def test_incast_matches_closed_form(variant, seed):
    solution = variant(f"incast-buffer@{seed}")
    p = {param.name: param.value for param in solution.params}
    rate = p["nic"].gbit_s * 1e9 / 8
    excess = (p["senders"] - 1) * rate
    assert solution.expected["t_ecn"] == pytest.approx(p["ecn_threshold"] / excess, rel=1e-12)
    assert solution.expected["t_xoff"] == pytest.approx(p["xoff_threshold"] / excess, rel=1e-12)
    room = (p["xoff_threshold"] - p["ecn_threshold"]) / (rate * p["rtt"])

    def growth(n: int) -> float:
        k = math.ceil(math.log2(n))
        return sum(n / 2**j - 1 for j in range(k))

    assert solution.expected["n_pfc"] == next(n for n in range(2, 5000) if growth(n) > room * (1 + 1e-12))
    assert (solution.expected["regime"] == "ecn-first") == (growth(p["senders"]) <= room * (1 + 1e-12))


def test_incast_refuses_first_cnps_at_xoff(variant):
    """A re-deriver: at 8 senders on 800 Gb/s, 180 KB marking, 7.9 MB XOFF and an 11 us round trip the queue holds
    0.18 + 7 × 100 GB/s × 11 us = 7.88 MB when the first CNPs land, 0.25% under XOFF: the 'CNPs before XOFF'
    option turned on a rounding. Draws within 2% are refused; the rest sit clear of it."""
    with pytest.raises(VariantError, match="knife edge"):
        variant("incast-buffer@default+nic=connectx-8+ecn_threshold=180+xoff_threshold=7.9+rtt=11+senders=8")
    for seed in range(100):
        p = {param.name: param.value for param in variant(f"incast-buffer@{seed}").params}
        first_cnp = p["ecn_threshold"] + (p["senders"] - 1) * p["nic"].gbit_s * 1e9 / 8 * p["rtt"]
        assert abs(first_cnp / p["xoff_threshold"] - 1) > 0.02, seed


def test_incast_counters_follow_more_than_the_regime(variant):
    """The review: the counters select had two right sets, the regime's. Whether the first CNPs beat XOFF and how
    many cuts each sender takes now decide options of their own."""
    sets = set()
    for seed in range(60):
        judged = variant(f"incast-buffer@{seed}").sheet.judged("counters")
        sets.add(frozenset(option for option, holds in judged.items() if holds))
    assert len(sets) >= 4
