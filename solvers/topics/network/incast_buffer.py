"""Incast against the switch buffer (ECN or PFC first)."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.units import count_text, format_number

EDGE = sympy.Rational(2, 100)  # the queue at the first CNPs this near XOFF is refused: too close to call
MAX_SENDERS = 4096  # the search for the first sender count PFC fires from stops here: no port has more peers

# What an on-call engineer reads to tell which mechanism acted: whether the first CNPs beat XOFF (an ordering,
# asked as "which of these happen", not as a counter), pause frames
# only where PFC fired, the rate cuts each sender takes (from how many senders there are), and the one declared
# fact, no drops on a lossless priority. ECN marks rise in every burst: said in the keys, never an option.
EARLY_CNPS = "the first CNPs land at the senders before the queue reaches XOFF"
PAUSES = ("pause frames, sent by the leaf on the senders' ports and received by their NICs on the RDMA "
          "priority")
CUTS = "each sender's NIC handling CNPs for {cuts_shown} or more rate cuts before the queue stops growing"
DROPS = "drops on the RDMA priority's egress queue, or the retransmissions (out-of-sequence NAKs) they cause"


def _growth(N: sympy.Expr, k: int) -> sympy.Expr:
    """Round trips' worth of one line rate the queue gains from the first mark until the cuts stop it: in the
    j-th round trip after the mark the senders send N/2^j line rates into a port that drains one."""
    return N * (2 - sympy.Rational(2) ** (1 - k)) - k


def _cuts(n: int) -> int:
    """Halvings until n senders send no more than one line rate: ⌈log₂ n⌉."""
    return (n - 1).bit_length()


def _peak(N: sympy.Expr, k: int, K, R, RTT) -> sympy.Expr:
    """The deepest the queue gets: the first marked packet queues behind the K bytes ahead of it (K/R) before it
    leaves, so the first round lasts RTT + K/R at N − 1 excess line rates (N − 1 more K), then the later rounds
    one RTT each: K + (N − 1)·K + R·RTT·growth = N·K + R·RTT·growth."""
    return N * K + R * RTT * _growth(N, k)


def _first_pfc(s: Sheet, K, R, RTT, X) -> int:
    """The fewest senders whose queue passes XOFF before the cuts stop it, decided exactly; the peak rises with
    the senders, so the first one that passes is the boundary."""
    for n in range(2, MAX_SENDERS + 1):
        if s.compare(_peak(sympy.Integer(n), _cuts(n), K, R, RTT), X) > 0:
            return n
    raise Reject(f"PFC would not fire below {MAX_SENDERS} senders")


def _incast_counters(s: Sheet, pfc_first: bool, early: bool, k: int, cuts_shown: int, many_cuts: bool) -> None:
    s.judge("counters", EARLY_CNPS, early,
            "the first round's growth, N − 1 line rates for the marked packet's wait and a round trip, fits "
            "between the thresholds: the first CNPs land before XOFF" if early else
            "the queue passes XOFF within the first round after the mark, before any CNP lands")
    s.judge("counters", PAUSES, pfc_first,
            "the queue passes XOFF before the cuts stop it, so the switch pauses the senders' links" if pfc_first
            else "the cuts stop the queue at or below XOFF: no pause frame is sent")
    s.judge("counters", CUTS, many_cuts,
            f"{count_text(k, 'halving')} bring{'s' if k == 1 else ''} the senders to one line rate, "
            f"against {cuts_shown}")
    s.judge("counters", DROPS, False, "the RDMA priority is lossless: PFC pauses before the buffer overflows, so "
            "nothing is dropped and nothing is retransmitted (ECN marks and CNPs rise in every such burst)",
            fact=True)


def _incast_regime(s: Sheet, Q, X, N, n_pfc: int, RTT, k) -> None:
    senders, boundary, rtt = s.text(N), format_number(n_pfc), s.text(RTT)
    peak, xoff, cuts = s.text(Q), s.text(X), count_text(int(s.value(k)), 'halving')
    s.regime_by(Q, X, tie="below", above=Side(
        "pfc-first",
        f"{senders} senders take the queue to {peak}, past XOFF at {xoff}, before DCQCN's {cuts}, one a "
        f"{rtt} round trip, bring them down to the line rate (PFC fires from {boundary} senders): the switch pauses "
        "the upstream ports first. PFC is fast because it is hop by hop, and that is the danger: it stops every "
        "flow on the paused links, not just the incast, and the pauses can spread switch by switch.",
        f"Below {boundary} senders (or with more room between the thresholds, or a shorter round trip) ECN's "
        "cuts stop the queue in time: the slow end-to-end loop slows only the senders that caused the incast "
        "and PFC stays a backstop that never fires; the pause counters stay flat while ECN marks and CNPs rise.",
        near=f"{senders} senders take the queue to {peak}, just past XOFF at {xoff} (PFC fires from {boundary} "
             "senders): one sender fewer, or a slightly shorter round trip, and ECN would have held it. A fabric "
             "tuned this close pauses on every slightly larger collective."),
        below=Side(
        "ecn-first",
        f"{senders} senders take the queue only to {peak}, within XOFF at {xoff}, by the time DCQCN's {cuts}, "
        f"one a {rtt} round trip, bring{'s' if s.value(k) == 1 else ''} them to the line rate (PFC fires only "
        f"from {boundary} senders): ECN's end-to-end cuts absorb the incast and no pause is sent.",
        f"From {boundary} senders (or with a faster line or a longer round trip) the queue reaches XOFF before "
        "DCQCN has cut enough: PFC pauses the upstream ports, which stops innocent flows sharing them "
        "(head-of-line blocking) and can spread hop by hop. The pause counters start to rise beside the ECN marks.",
        near=f"{senders} senders take the queue to {peak}, just within XOFF at {xoff}: from {boundary} senders "
             "PFC fires first, so a slightly larger collective starts pausing the fabric."))


def solve(p, s: Sheet) -> None:
    if p.xoff_threshold <= p.ecn_threshold:
        raise Reject("PFC would fire at or below the ECN threshold")
    N = s.param("N", "senders")
    R = s.given("R", p.nic.gbit_s * 1e9 / 8, "Gb/s", f"line rate ({p.nic.name})")
    K = s.param("K", "ecn_threshold")
    X = s.param("X", "xoff_threshold")
    RTT = s.param("RTT", "rtt")
    cuts_shown = s.param("c", "cuts_shown")

    E = s.step("excess", "Rate the queue grows", "E", (N - 1) * R, "Tb/s",
               "N senders arrive at line rate and the port drains one line rate")
    s.step("t_ecn", "Time to the ECN threshold", "t_ecn", K / E, "ns",
           "the queue crosses the marking threshold; the senders hear of it only after the marked packet's wait and a "
           "round trip")
    s.step("t_xoff", "Time to the PFC XOFF threshold", "t_xoff", X / E, "ns",
           "at this depth the switch pauses its upstream ports, whatever ECN is doing")
    k_value = _cuts(int(p.senders))
    k = s.step("cuts", "Rate cuts each sender takes before the queue stops growing", "k",
               sympy.Integer(k_value), "",
               "⌈log₂ N⌉: each cut halves every sender's rate, and the queue grows until the N senders together "
               "send one line rate")
    s.step("first_loop", "First CNPs land after", "T_1", RTT + K / R, "us",
           "the first marked packet drains through the K bytes queued ahead of it (marking at enqueue), then the "
           "round trip: only then does the first cut start")
    Q = s.step("queue_peak", "Deepest the queue gets if nothing pauses", "Q", _peak(N, k_value, K, R, RTT), "MB",
               "the first round, RTT + K/R, at N−1 excess line rates (N−1 more K and N−1 round trips of one line "
               "rate), then N/2 − 1, N/4 − 1, ... a round trip each until the cuts bring the senders to the line "
               "rate: N·K + R·RTT·(N(2 − 2^(1−k)) − k)")
    n = _first_pfc(s, K, R, RTT, X)
    s.step("n_pfc", "Fewest senders that set off PFC first", "N_pfc", sympy.Integer(n), "senders",
           "the first whole sender count whose peak, N·K + R·RTT·(N(2 − 2^(1−k)) − k), passes XOFF: "
           + ("even two senders pass it, so every incast here pauses" if n == 2 else
              f"{format_number(n - 1)} senders stay within it; reaching XOFF exactly is not passing it"))

    s.assume("Senders and receiver sit on one leaf (a rail leaf), so the leaf's pauses land on the senders' NICs; "
             "with the senders on other leaves it would pause its spine ports instead, and the NICs would see a "
             "pause only as it spreads.")
    s.assume("Both thresholds are read against the one congested egress queue, as this switch is configured "
             "(the stem says so). Most switches count PFC per ingress port and priority, keep XOFF headroom for "
             "the frames in flight, and shrink dynamic thresholds as the shared buffer fills: with the incast "
             "spread over N ingress ports, each holds about 1/N of the queue and XOFF fires later, so the "
             "sender count from which PFC fires first is this simple picture's. Sizes and rates are decimal "
             "(decimal-units).")
    s.assume("ECN marks at enqueue, as most shared-buffer switches do: the first marked packet waits behind the "
             "K bytes ahead of it, K/R, before the receiver sees it. A switch that marks at dequeue saves that "
             "K/R, and its queue peaks (N − 1)·K lower.")
    s.assume("The depth 'if nothing paused' is the buffer the burst would need. Draws keep it within about 100 MB, "
             "the order of what a 51.2 Tb/s switch shares among all its ports; a single queue rarely gets all of "
             "it, and past what it gets a lossy queue would drop, which is why PFC is there.")
    s.assume("DCQCN as its paper starts it (α = 1): the first CNP halves a sender's rate, and while the queue stays "
             "past the marking threshold each further round trip brings another CNP and another halving, until the "
             "senders together send one line rate. A NIC that spaces its CNPs wider than the round trip (the "
             "paper's 50 us) cuts more slowly, so this is a best case for ECN.")
    s.assume("All senders start at once at line rate and the egress drains at line rate; no other traffic.")
    s.slip("N senders instead of N−1 (the port drains one line rate)", on=("t_ecn", "t_xoff"),
           factor=(p.senders - 1) / p.senders)
    s.slip("one sender's rate instead of the excess of all of them", p.senders - 1, on=("t_ecn", "t_xoff"))
    first_cnp = K + (N - 1) * (K + R * RTT)  # the queue when the first CNPs land
    s.slip("the first cut taken to end the growth", on="queue_peak", factor=s.evaluate(first_cnp) / s.value(Q))
    s.slip("the marked packet's own wait behind K left out of the first round", on="queue_peak",
           factor=s.evaluate(K + R * RTT * _growth(N, k_value)) / s.value(Q))

    pfc_first = s.compare(Q, X) > 0
    early = s.compare(first_cnp, X) <= 0
    if s.compare(abs(first_cnp - X), EDGE * X) <= 0:
        raise Reject("the first CNPs land within 2% of XOFF: which comes first is a knife edge")
    _incast_counters(s, pfc_first, early, k_value, int(p.cuts_shown), s.compare(k, cuts_shown) >= 0)
    _incast_regime(s, Q, X, N, n, RTT, k)
