"""Network questions: InfiniBand against RoCE in dollars, incast against the buffer, and a PFC
pause storm read back to its origin."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, floor_of
from solvers.units import format_number, format_quantity

BITS_PER_PAUSE_QUANTUM = 512  # IEEE 802.1Qbb / 802.3x: one pause quantum is 512 bit times
# PFC watchdogs, as shipped. Junos: polls every 100 ms, a queue paused through two polls is a stall (200 ms).
# mlx5 (ConnectX) PFC stall prevention: default timeout 8 s, range 80-8,000 ms, 100 ms on auto.
SWITCH_WATCHDOG_S = 0.2
NIC_STALL_TIMEOUT_S = 8


# --- ib-vs-roce ------------------------------------------------------------------------------


def _fat_tree_tiers(gpus: int, radix: int) -> int:
    """The fewest tiers of a non-blocking fat tree of `radix`-port switches that hold `gpus`
    endpoints: t tiers hold 2·(k/2)^t (integer arithmetic, so 2,048 on 64 ports is exactly 2)."""
    tiers = 1
    while 2 * (radix // 2) ** tiers < gpus:
        tiers += 1
    return tiers


def ib_vs_roce(p, s: Sheet) -> None:
    G, k, S_ib, S_eth, c_nic, c_link = (s.param(sym, name) for sym, name in (
        ("G", "gpus"), ("k", "radix"), ("S_ib", "ib_switch"), ("S_eth", "eth_switch"), ("c_nic", "nic"),
        ("c_link", "link")))
    n_ib, n_extra, w, Y = (s.param(sym, name) for sym, name in (
        ("n_ib", "ib_staff"), ("n_extra", "roce_extra"), ("w", "staff_cost"), ("Y", "years")))
    t = s.given("t", _fat_tree_tiers(p.gpus, p.radix), "", "fat-tree tiers (the fewest that hold the fleet)")

    s.step("tree_capacity", "GPUs the tree can hold", "C", 2 * (k / 2) ** t, "GPUs",
           "a non-blocking tree of k-port switches holds 2·(k/2)^t endpoints; fewer tiers would not hold the fleet")
    P = s.step("ports_per_gpu", "Switch ports per GPU", "P", 2 * t - 1, "",
               "one leaf down-port, then an up-port and the matching down-port at every tier above; the top "
               "tier has no up-ports")
    s.step("switches", "Switches in the fleet", "N_sw", P * G / k, "switches",
           "every switch contributes k ports; non-blocking, so each tier carries the full GPU bandwidth")
    hw_ib = s.step("ib_hardware", "InfiniBand hardware per GPU", "h_ib", c_nic + P * S_ib / k + t * c_link, "$",
                   "the NIC, the GPU's share of switch ports, and one link per tier")
    hw_eth = s.step("roce_hardware", "RoCE hardware per GPU", "h_roce", c_nic + P * S_eth / k + t * c_link, "$",
                    "same NIC, same tree and links; only the switch price differs")
    F_ib = s.step("ib_staff_cost", "InfiniBand operations over the life", "F_ib", n_ib * w * Y, "$",
                  "the engineers who run the fabric, for as long as it is in service")
    F_roce = s.step("roce_staff_cost", "RoCE operations over the life", "F_roce", (n_ib + n_extra) * w * Y, "$",
                    "the same team plus the engineers who keep PFC, ECN and DCQCN right on every port")
    ib = s.step("ib_per_gpu", "InfiniBand cost per GPU", "c_ib", hw_ib + F_ib / G, "$",
                "hardware per GPU plus the operations cost shared by every GPU")
    roce = s.step("roce_per_gpu", "RoCE cost per GPU", "c_roce", hw_eth + F_roce / G, "$",
                  "cheaper per port, with a larger fixed cost shared by every GPU")
    flip = s.step("flip_fleet", "Fleet size where the two cost the same", "G_star",
                  (F_roce - F_ib) / (hw_ib - hw_eth), "GPUs",
                  "the extra fixed cost over the per-GPU saving; NIC and link prices cancel")

    s.assume("Both fabrics are non-blocking fat trees of 64-port 400G switches with one 400G NIC per GPU; the "
             "tree has the fewest tiers that hold the fleet. Switches are counted by the ports each GPU uses, "
             "so a partly filled top tier is prorated.")
    s.assume("Prices are the ones stated (street prices vary by deal). The same ConnectX-7 card runs either "
             "protocol, and 400G optics cost the same on both, so only the switch price differs per port.")
    s.assume("Operations staff are a fixed cost over the service life, whatever the fleet size; RoCE's extra "
             "engineers own the lossless configuration (PFC priorities, ECN thresholds, DCQCN, watchdogs) on "
             "every port. Power, space and performance differences are left out.")
    s.assume("Not priced, and what an interviewer probes next: InfiniBand's SHARP in-network reductions and "
             "adaptive routing, the blast radius of one PFC mistake on RoCE (a pause storm stalls every job "
             "behind it; see pause-storm-origin), single-vendor lock-in on InfiniBand, and Ethernet fabrics "
             "built for AI (Spectrum-X, Ultra Ethernet) that narrow the operations gap.")
    s.slip("staff cost for one year, not the service life", 1 / p.years, on="flip_fleet")
    s.slip("staff cost for one year, not the service life", on="ib_per_gpu",
           factor=s.evaluate(hw_ib + F_ib / (G * Y)) / s.value(ib))
    s.slip("staff cost for one year, not the service life", on="roce_per_gpu",
           factor=s.evaluate(hw_eth + F_roce / (G * Y)) / s.value(roce))
    s.slip("one switch port per GPU instead of 2t−1", s.value(P), on="flip_fleet")
    s.slip("one switch port per GPU instead of 2t−1", on="ib_per_gpu",
           factor=s.evaluate(c_nic + S_ib / k + t * c_link + F_ib / G) / s.value(ib))
    s.slip("one switch port per GPU instead of 2t−1", on="roce_per_gpu",
           factor=s.evaluate(c_nic + S_eth / k + t * c_link + F_roce / G) / s.value(roce))

    _fleet_sizes(s, p, k, S_ib, S_eth, F_roce - F_ib)
    _fleet_regime(s, G, flip, ib, roce, _depth_caveat(s.value(flip), p.radix, s.value(t)))


FLEET_SIZES = (256, 1024, 1536, 2048, 3072, 4096, 65536)  # the select's options, as fleets of GPUs
# At any prices drawn, 256 GPUs save at most 3 × $38,000 / 64 a GPU, under $0.46M against at least $0.6M
# of extra staff, and 65,536 GPUs at least 5 × $2,000 / 64, over $10M against at most $8M: the two ends.
FLEET_FACTS = (256, 65536)


def _fleet_sizes(s: Sheet, p, k, S_ib, S_eth, extra_staff) -> None:
    """At which other fleet sizes RoCE is cheaper at these prices: each fleet takes its own tree
    depth, so the flip point moves with it (a 2-tier tree saves 3 ports' worth per GPU, 3 tiers 5)."""
    for gpus in FLEET_SIZES:
        tiers = _fat_tree_tiers(gpus, p.radix)
        saving = (2 * tiers - 1) * (S_ib - S_eth) / k
        cheaper = s.compare(gpus * saving, extra_staff) > 0  # a tie keeps InfiniBand, as the regime does
        flip = format_number(s.evaluate(extra_staff / saving), 3)
        s.judge("cheaper_fleets", f"{format_number(gpus)} GPUs", cheaper,
                f"{tiers} tiers: {format_quantity(s.evaluate(saving), '$')} saved per GPU, so RoCE pays for its "
                f"extra engineers from {flip} GPUs at this depth", fact=gpus in FLEET_FACTS)


def _depth_caveat(flip: float, radix: int, tiers: float) -> str:
    """Whether the flip point lies in the range of fleets this tree depth serves."""
    low, high = (2 * (radix // 2) ** (tiers - 1) if tiers > 1 else 0), 2 * (radix // 2) ** tiers
    if low < flip <= high:
        return ""
    served = f"{format_number(low + 1)}-{format_number(high)} GPUs a {int(tiers)}-tier tree serves"
    return (f" That point lies outside the {served}, so at these prices every fleet that needs this depth "
            "lands on the same side.")


def _fleet_regime(s: Sheet, G, flip, ib, roce, caveat: str) -> None:
    fleet, boundary = format_number(s.value(G)), format_number(s.value(flip), 3)
    per_gpu = f"{format_quantity(s.value(ib), '$')} on InfiniBand against {format_quantity(s.value(roce), '$')}"
    order = s.compare(G, flip)
    if order <= 0:
        summary = (f"At {fleet} GPUs the switch saving per GPU does not pay for RoCE's extra engineers: {per_gpu} "
                   "on RoCE. InfiniBand arrives lossless by design, so the small team buys it.")
        if order == 0:  # an exact tie: neither is cheaper, and nothing pays for the lossless-Ethernet work
            summary = (f"At {fleet} GPUs the two cost exactly the same, {per_gpu} on RoCE: with no saving to "
                       "pay for the extra engineers, keep the fabric that is lossless by design.")
        s.set_regime(
            "small-fleet-infiniband",
            summary,
            flip, G,
            f"Above about {boundary} GPUs (at this tree depth) the per-port saving outgrows the fixed cost of "
            "running lossless Ethernet, and RoCE is cheaper; a deeper tree multiplies the saving per GPU and "
            "brings the flip closer." + caveat)
    else:
        s.set_regime(
            "large-fleet-roce",
            f"At {fleet} GPUs the per-port saving, summed over the fleet, outgrows the engineers who keep RoCE "
            f"lossless: {per_gpu} on RoCE.",
            flip, G,
            f"Below about {boundary} GPUs (at this tree depth) the fixed cost of configuring and watching "
            "PFC/ECN on every port is spread over too few GPUs, and InfiniBand is cheaper." + caveat)


# --- incast-buffer ---------------------------------------------------------------------------


def incast_buffer(p, s: Sheet) -> None:
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
    senders, boundary = format_number(s.value(N)), format_number(s.value(n_pfc))
    rtt = format_quantity(s.value(RTT), "us")
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


# --- pause-storm-origin ----------------------------------------------------------------------


# Link ends in the order the question lists their counters: (sender, receiver).
_LINK_ENDS = (("node1", "leaf1"), ("leaf1", "node1"), ("node2", "leaf1"), ("leaf1", "node2"),
              ("node3", "leaf2"), ("leaf2", "node3"), ("node4", "leaf2"), ("leaf2", "node4"),
              ("leaf1", "spine"), ("spine", "leaf1"), ("leaf2", "spine"), ("spine", "leaf2"))
NODES = ("node1", "node2", "node3", "node4")


def _origin(sent: dict[tuple[str, str], int]) -> str:
    """Read the counters backward: a device pauses its upstream ports because something pauses it,
    except the origin, which sends pauses and receives none."""
    receiving = {receiver for (_, receiver), frames in sent.items() if frames > 0}
    origins = {sender for (sender, _), frames in sent.items() if frames > 0 and sender not in receiving}
    if len(origins) != 1:
        raise Reject(f"the counters show {len(origins)} pause origins, expected one")
    return origins.pop()


def pause_storm_origin(p, s: Sheet) -> None:
    sent = {(a, b): p[f"{a}_to_{b}"] for a, b in _LINK_ENDS}
    origin = _origin(sent)
    s.choose("origin", origin)
    leaf_of = {node: leaf for node, leaf in _LINK_ENDS[::2][:4]}
    victims = [node for node in NODES if sent[(leaf_of[node], node)] > 0]
    for node in NODES:
        received = format_number(sent[(leaf_of[node], node)])
        s.judge("paused", node, node in victims,
                "it stopped draining and started the storm; its own traffic is not counted" if node == origin else
                f"{leaf_of[node]} sent it {received} pause frames" if node in victims else
                f"{leaf_of[node]} sent it no pause frames: it was not sending into the storm")

    Q = s.param("Q", "quanta")
    b = s.given("b_q", BITS_PER_PAUSE_QUANTUM / 8, "b", "one quantum: 512 bit times (the pause-quanta card)")
    T = s.param("T", "window")
    R = s.param("R", "line_rate")
    frames = [s.param(f"f_{node}", f"{leaf_of[node]}_to_{node}") for node in victims]
    n_v = s.given("n_v", len(victims), "", "nodes whose sends were paused (their jobs stall)")

    F = s.step("victim_frames", "Pause frames the stalled nodes received", "F", sympy.Add(*frames), "",
               "only NIC ports count: inner links carry the same stall, counted once where a job feels it")
    pause_time = s.step("paused_time", "Node-seconds spent paused", "T_p", F * Q * b / R, "s",
                        "each frame stops the link for Q quanta of 512 bit times")
    lost = s.step("lost_bandwidth", "Bandwidth lost by the stalled jobs", "B_lost", pause_time * R / T, "Gb/s",
                  "paused time at line rate over the window (a quantum is bit times, so the rate cancels)")
    s.step("lost_share", "Share of the stalled nodes' line rate lost", "u_lost", lost / (n_v * R), "%",
           "what the paused nodes could have sent in the window")
    _pause_storm_fixes(p, s, origin, victims, leaf_of, Q, b, R)

    s.assume(f"The counters are the fabric's full pause counts over the window; every port runs at "
             f"{format_quantity(s.value(R), 'Gb/s')} and every pause frame asks for {format_number(p.quanta)} "
             "quanta and runs its full length (no early resume, no overlap).")
    s.assume("The origin is read from the counters: a switch sends pauses upstream because one of its ports "
             "is paused, so following the pauses back leads to the one device that sends pauses and "
             "receives none, a receiver that stopped draining (Guo et al., SIGCOMM 2016).")
    s.assume("Lost bandwidth is counted at the NICs of the nodes whose sends were paused; the origin's own "
             "traffic is not counted, since it is the node that stopped.")
    s.assume("The stuck NIC has paused its link without a break since it stopped draining, so the storm has "
             "lasted the origin's paused time; a watchdog that fires ends it for every node behind it.")
    s.slip("x8: a quantum taken as 512 bytes, not bits", 8, on=("lost_bandwidth", "lost_share"))


QUEUE_TUNING = ("tuning the leaves' queues: more buffer headroom, a higher XOFF, ECN marking at a lower threshold, "
                "or every sender rate-limited to half its line rate")


def _pause_storm_fixes(p, s: Sheet, origin: str, victims: list[str], leaf_of: dict[str, str],
                       Q: sympy.Symbol, b: sympy.Symbol, R: sympy.Symbol) -> None:
    """Which measure, in place before the storm, would have had every stalled node sending again
    before the counters were read: a watchdog that fires within the storm's length, or lossy spine
    links where no stalled node shares the origin's leaf. Buffer, ECN and rate limits never do."""
    home = leaf_of[origin]
    away = "leaf2" if home == "leaf1" else "leaf1"
    f_o = s.param("f_o", f"{origin}_to_{home}")
    storm = s.step("storm_time", f"How long {origin} has held {home} paused", "T_s", f_o * Q * b / R, "s",
                   "its pauses run back to back from the moment it stopped draining")
    lasted = format_quantity(s.value(storm), "s")
    w_sw = s.given("W_sw", SWITCH_WATCHDOG_S, "s", "switch PFC watchdog: stall after two 100 ms polls (Junos default)")
    w_nic = s.given("W_nic", NIC_STALL_TIMEOUT_S, "s", "NIC PFC stall prevention timeout (mlx5 default)")
    key = "fixes"
    s.judge(key, "a PFC watchdog on the switches (Junos defaults: a stall after 200 ms)", s.compare(storm, w_sw) > 0,
            f"{home} saw its queue to {origin} paused without a break for {lasted}: the watchdog fires 200 ms in, "
            f"drops that queue and stops pausing upstream, so every stalled node sends again within a second",
            fact=True)
    nic_fires = s.compare(storm, w_nic) > 0
    s.judge(key, "the origin NIC's PFC stall prevention at its mlx5 default (8 s)", nic_fires,
            f"{origin} has been stalled {lasted}, past 8 s: its NIC stops sending pauses at 8 s, "
            f"{format_quantity(s.value(storm) - NIC_STALL_TIMEOUT_S, 's')} before the counters were read"
            if nic_fires else
            f"{origin} has been stalled only {lasted}, under 8 s: its NIC is still sending pauses "
            "(the 100 ms auto setting would have caught it)")
    mates = [node for node in victims if leaf_of[node] == home]
    s.judge(key, "PFC off on the leaf-spine links (lossless only inside a leaf)", not mates,
            f"every stalled node ({', '.join(victims)}) hangs off {away}: with the spine links lossy, {home} drops "
            f"what arrives for {origin} instead of pausing the spine, so the storm stays on {home} "
            "(cross-leaf RDMA pays in drops and retransmissions)" if not mates else
            f"{', '.join(mates)} shares {home} with {origin} and received "
            f"{format_number(sum(p[f'{home}_to_{node}'] for node in mates))} pause frames on its own link: "
            f"lossy spine links spare only {away}'s nodes")
    per_mb = format_quantity(1e6 / s.value(R), "µs")  # one MB at line rate (R is held in bytes per second)
    # Two facts of any storm, one of each: a 200 ms watchdog always fires within storms of seconds, and no
    # queue tuning releases a receiver that drains nothing (ECN and rate limits in one option with buffer).
    s.judge(key, QUEUE_TUNING, False,
            f"{origin} drains nothing, so any buffer fills: each extra MB fills in {per_mb} at "
            f"{format_quantity(s.value(R), 'Gb/s')}, and at half the rate in "
            f"{format_quantity(2e6 / s.value(R), 'µs')}, against a storm of {lasted}; ECN slows senders only "
            f"through the CNPs {origin} would return, and it has received nothing: marks do not release a pause",
            fact=True)
