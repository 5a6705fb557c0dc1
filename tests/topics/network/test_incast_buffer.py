"""incast-buffer: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from tests.by_hand import param_values


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
    """The queue stepped in time: every sender at its rate, the port draining one line rate. The packet enqueued
    when the queue first passes the marking threshold is marked and waits behind the bytes ahead of it (ecn/rate)
    before it leaves; a round trip after that every sender halves, and again each round trip the queue stays past
    the threshold, until they send no more than the line rate. The deepest the queue gets."""
    dt = rtt / steps
    queue, sending, next_cut, peak, t = 0.0, rate, None, 0.0, 0.0
    while True:
        if next_cut is None and queue > ecn:
            next_cut = t + ecn / rate + rtt
        if next_cut is not None and t >= next_cut - dt / 2 and queue > ecn:
            sending, next_cut = sending / 2, next_cut + rtt
        growth = (senders * sending - rate) * dt
        if growth <= 0:
            return peak
        queue += growth
        peak, t = max(peak, queue), t + dt


@pytest.mark.parametrize("seed", range(12))
def test_incast_peak_matches_a_stepped_queue(variant, seed):
    """The closed form, N·K + R·RTT·(N(2 − 2^(1−k)) − k), against the queue stepped through the halvings (the
    review: the first cut alone does not end the growth, @default+senders=8; read7: the marked packet's own wait
    behind K belongs to the first round)."""
    solution = variant(f"incast-buffer@{seed}")
    p = param_values(solution)
    rate = p["nic"].gbit_s * 1e9 / 8
    peak = _simulated_peak(p["senders"], rate, p["ecn_threshold"], p["rtt"])
    assert solution.expected["queue_peak"] == pytest.approx(peak, rel=0.01)


@pytest.mark.parametrize("seed", range(20))
def test_incast_matches_closed_form(variant, seed):
    solution = variant(f"incast-buffer@{seed}")
    p = param_values(solution)
    rate = p["nic"].gbit_s * 1e9 / 8
    excess = (p["senders"] - 1) * rate
    assert solution.expected["t_ecn"] == pytest.approx(p["ecn_threshold"] / excess, rel=1e-12)
    assert solution.expected["t_xoff"] == pytest.approx(p["xoff_threshold"] / excess, rel=1e-12)
    xoff = p["xoff_threshold"]

    def peak(n: int) -> float:
        k = math.ceil(math.log2(n))
        return n * p["ecn_threshold"] + rate * p["rtt"] * sum(n / 2**j - 1 for j in range(k))

    assert solution.expected["n_pfc"] == next(n for n in range(2, 5000) if peak(n) > xoff * (1 + 1e-12))
    assert (solution.expected["regime"] == "ecn-first") == (peak(p["senders"]) <= xoff * (1 + 1e-12))


def test_incast_refuses_first_cnps_at_xoff(variant):
    """A re-deriver: the 'first CNPs before XOFF' option turned on a rounding. At the default's 5 senders the queue
    holds 0.4 + 4 × (0.4 + 0.5) = 4.0 MB when the first CNPs land (the marked packet's 8 us wait, then the
    round trip), XOFF exactly. Draws within 2% are refused; the rest sit clear of it."""
    with pytest.raises(VariantError, match="knife edge"):
        variant("incast-buffer@default+senders=5")
    for seed in range(100):
        p = {param.name: param.value for param in variant(f"incast-buffer@{seed}").params}
        rate = p["nic"].gbit_s * 1e9 / 8
        first_cnp = p["ecn_threshold"] + (p["senders"] - 1) * (p["ecn_threshold"] + rate * p["rtt"])
        assert abs(first_cnp / p["xoff_threshold"] - 1) > 0.02, seed


def test_incast_counters_follow_more_than_the_regime(variant):
    """The review: the counters select had two right sets, the regime's. Whether the first CNPs beat XOFF and how
    many cuts each sender takes now decide options of their own."""
    sets = set()
    for seed in range(60):
        judged = variant(f"incast-buffer@{seed}").sheet.judged("counters")
        sets.add(frozenset(option for option, holds in judged.items() if holds))
    assert len(sets) >= 4


def test_incast_first_round_includes_the_marked_packets_wait(variant):
    """read7 #2: a packet marked at enqueue drains through the K bytes ahead of it before the receiver sees it
    (8 us at 400 KB and 400 Gb/s, almost the 10 us round trip). The old model left it out (28.9 MB, PFC from 6);
    with it the default peaks at 41.3 MB and PFC fires first from 5 senders (pinned in the question file)."""
    solution = variant("incast-buffer@default")
    assert solution.sheet.results["first_loop"] == pytest.approx(10e-6 + 400e3 / 50e9)
    assert solution.expected["queue_peak"] == pytest.approx(41.3e6)
    assert solution.expected["n_pfc"] == 5


def test_incast_select_asks_what_happens_not_a_timing_as_a_counter(variant):
    """read7 #1: "which counters rise" held a timing claim (CNPs before XOFF) that no counter shows, so a candidate
    who ticked CNPs in a PFC-first burst (CNPs rise in every burst) was marked wrong. The select now asks which
    of these happen, and the ordering says so in its words."""
    spec = next(a for a in variant("incast-buffer@default").question.answers if a.key == "counters")
    assert "counters" not in spec.label.lower()
    assert any(option.startswith("the first CNPs land") for option in spec.pool)
    assert not any(option.startswith("CNPs reaching") for option in spec.pool)


def test_incast_stem_states_the_topology_and_where_xoff_is_counted(variant):
    """read7 #3, #4, #6: the keys hold only where XOFF is read on the congested egress queue and senders and
    receiver share one leaf (the pause lands on the senders' NICs), and a DCQCN cut comes at best once a round
    trip: the stems say so, and the assumptions say what real switches do instead."""
    solution = variant("incast-buffer@default")
    opening, second = solution.question.stages[0].say, solution.question.stages[1].say
    assert "one leaf" in opening and "same queue" in opening
    assert "at best once a round trip" in second and "enqueue" in second
    assumptions = " ".join(solution.sheet.assumptions)
    assert "per ingress port" in assumptions and "dequeue" in assumptions


@pytest.mark.parametrize("seed", range(200))
def test_incast_depth_stays_within_a_switch_buffer(variant, seed):
    """read7 #5: the depth 'if nothing paused' reached 182 MB at @12012, past the whole shared buffer of a
    51.2 Tb/s switch. Draws now keep it within 100 MB."""
    assert variant(f"incast-buffer@{seed}").expected["queue_peak"] <= 100e6


def test_the_depth_stage_says_a_marked_packet_waits_out_the_queue(variant):
    """r11 left out the marked packet's own wait (11.8 against 13.55 MB at @15200): marking at enqueue was said,
    what it implies was not. The stage now says the marked packet waits out the queue ahead of it."""
    say = variant("incast-buffer@default").question.stages[1].say
    assert "Marked at enqueue, a packet waits out the queue ahead of it" in say
