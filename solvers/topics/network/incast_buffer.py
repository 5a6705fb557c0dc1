"""Incast against the switch buffer (ECN or PFC first)."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import floor_of
from solvers.units import format_number

# Counters an on-call engineer reads to tell which mechanism acted: ECN marks and CNPs rise in
# every incast that passes the marking threshold; pause frames only where PFC fired; drops and
# retransmissions never on a lossless priority.
# Beside the two pause counters, which the burst decides, one counter that rises in every burst and one
# that never does, declared facts: two pairs of constants would outnumber what the numbers decide.
_ALWAYS = ("ECN-marks on the receiver's egress queue, and the CNPs they send back to the senders' NICs",)


_IF_PFC = ("pause frames sent by the switch on the senders' ingress ports (per priority)",
           "pause frames received by the senders' NICs on the RDMA priority")


_NEVER = ("drops on the RDMA priority's egress queue, or the retransmissions (out-of-sequence NAKs) they cause",)


def _incast_counters(s: Sheet, pfc_first: bool) -> None:
    for option in _ALWAYS:
        s.judge("counters", option, True, "the queue passes the marking threshold in every such burst, so "
                "DCQCN's marks and CNPs rise whichever mechanism acts first", fact=True)
    why = ("the queue passes XOFF before DCQCN's cut arrives, so the switch pauses the senders' links" if pfc_first
           else "DCQCN's cut arrives before the queue reaches XOFF: no pause frame is sent")
    for option in _IF_PFC:
        s.judge("counters", option, pfc_first, why)
    for option in _NEVER:
        s.judge("counters", option, False, "the RDMA priority is lossless: PFC pauses before the buffer "
                "overflows, so nothing is dropped and nothing is retransmitted", fact=True)


def _incast_regime(s: Sheet, N, n_pfc, RTT) -> None:
    senders, boundary = s.text(N), format_number(s.value(n_pfc))
    rtt = s.text(RTT)
    s.regime_by(N, n_pfc, tie="above", above=Side(
        "pfc-first",
        f"{senders} senders reach XOFF before DCQCN's {rtt} round trip ends (PFC fires from {boundary} senders): "
        "the switch pauses the upstream ports before the senders slow. PFC is fast because it is hop by hop, "
        "and that is the danger: it stops every flow on the paused links, not just the incast.",
        f"Below {boundary} senders (or with more room between the thresholds, or a shorter round trip) ECN's "
        "marks reach the senders in time: the slow end-to-end loop does the work and PFC stays a backstop that "
        "never fires; the pause counters stay flat while ECN marks and CNPs rise.",
        near=f"{senders} senders reach XOFF just before DCQCN's {rtt} round trip ends (PFC fires from {boundary} "
             "senders): one or two senders fewer and ECN would have acted in time. A fabric tuned this close "
             "pauses on every slightly larger collective."),
        below=Side(
        "ecn-first",
        f"{senders} senders leave the queue below XOFF when DCQCN's cut arrives after {rtt} (PFC fires only "
        f"from {boundary} senders): ECN's end-to-end rate cut absorbs the incast and no pause is sent.",
        f"From {boundary} senders (or with a faster line or a longer round trip) the queue reaches XOFF before "
        "DCQCN reacts: PFC pauses the upstream ports, which stops innocent flows sharing them (head-of-line "
        "blocking) and can spread hop by hop. The pause counters start to rise beside the ECN marks.",
        near=f"{senders} senders leave the queue just below XOFF when DCQCN's cut arrives after {rtt}: from "
             f"{boundary} senders PFC fires first, so a slightly larger collective starts pausing the fabric."))


def solve(p, s: Sheet) -> None:
    if p.xoff_threshold <= p.ecn_threshold:
        raise Reject("PFC would fire at or below the ECN threshold")
    N = s.param("N", "senders")
    R = s.given("R", p.nic.gbit_s * 1e9 / 8, "Gb/s", f"line rate ({p.nic.name})")
    K = s.param("K", "ecn_threshold")
    X = s.param("X", "xoff_threshold")
    RTT = s.param("RTT", "rtt")

    E = s.step("excess", "Rate the queue grows", "E", (N - 1) * R, "Tb/s",
               "N senders arrive at line rate and the port drains one line rate")
    s.step("t_ecn", "Time to the ECN threshold", "t_ecn", K / E, "us",
           "the queue crosses the marking threshold; the senders hear of it a round trip later")
    s.step("t_xoff", "Time to the PFC XOFF threshold", "t_xoff", X / E, "us",
           "at this depth the switch pauses its upstream ports, whatever ECN is doing")
    s.step("window", "Time ECN has before PFC fires", "t_w", (X - K) / E, "us",
           "from the first mark to XOFF, the queue still grows at the excess rate")
    s.step("queue_at_reaction", "Queue ECN alone would let build", "Q_r", K + E * RTT, "MB",
           "the queue keeps growing for one round trip after the first mark; past XOFF, PFC steps in first")
    room = s.step("room", "Extra senders the headroom absorbs in one round trip", "m", (X - K) / (R * RTT), "",
                  "(N−1)·R·RTT ≤ X − K keeps the queue at or below XOFF when DCQCN's cut arrives")
    n_pfc = s.step("n_pfc", "Fewest senders that set off PFC first", "N_pfc", floor_of(room) + 2, "senders",
                   "the first whole sender count with (N−1)·R·RTT > X − K: reaching XOFF exactly is not passing it")

    s.assume("Both thresholds are read against the one congested egress queue, as the switch is configured "
             "here. Real switches count PFC per ingress port and priority, keep XOFF headroom for the frames "
             "in flight, and shrink dynamic thresholds as the shared buffer fills, so this is the simplest "
             "picture of which fires first.")
    s.assume("DCQCN reacts one round trip after the first mark (switch marks, receiver NIC sends a CNP, sender "
             "cuts its rate), and the cut is assumed to end the growth: a best case, since one CNP cuts a rate "
             "only partly.")
    s.assume("All senders start at once at line rate and the egress drains at line rate; no other traffic.")
    s.slip("N senders instead of N−1 (the port drains one line rate)", on=("t_ecn", "t_xoff"),
           factor=(p.senders - 1) / p.senders)
    s.slip("N senders instead of N−1 (the port drains one line rate)", on="n_pfc",
           factor=s.evaluate(floor_of(room) + 1) / s.value(n_pfc))
    s.slip("one sender's rate instead of the excess of all of them", p.senders - 1, on=("t_ecn", "t_xoff"))

    pfc_first = s.compare(N, n_pfc) >= 0
    _incast_counters(s, pfc_first)
    _incast_regime(s, N, n_pfc, RTT)

