"""Find the origin of a PFC pause storm."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet
from solvers.units import format_number, format_quantity

BITS_PER_PAUSE_QUANTUM = 512  # IEEE 802.1Qbb / 802.3x: one pause quantum is 512 bit times


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


EVERY_SWITCH = "a PFC watchdog on every switch, its action set to {pfcwd_action}"
WATCHDOG_ON = "a PFC watchdog on {watchdog_on} alone (Junos defaults: a stall after {switch_watchdog})"


QUEUE_TUNING = ("tuning the leaves' queues: more buffer headroom, a higher XOFF, ECN marking at a lower threshold, "
                "or every sender rate-limited to half its line rate")


def _pause_storm_fixes(p, s: Sheet, origin: str, victims: list[str], leaf_of: dict[str, str],
                       Q: sympy.Symbol, b: sympy.Symbol, R: sympy.Symbol) -> None:
    """Which measure, in place before the storm, would have had every stalled node sending again
    before the counters were read: a watchdog that fires within the storm's length, on the origin's leaf or
    where no stalled node shares the origin's leaf, or lossy spine links there. Buffer, ECN and rate limits
    never do."""
    home = leaf_of[origin]
    away = "leaf2" if home == "leaf1" else "leaf1"
    f_o = s.param("f_o", f"{origin}_to_{home}")
    storm = s.step("storm_time", f"How long {origin} has held {home} paused", "T_s", f_o * Q * b / R, "s",
                   "its pauses run back to back from the moment it stopped draining")
    lasted = s.text(storm)
    w_sw, w_nic = s.param("W_sw", "switch_watchdog"), s.param("W_nic", "nic_stall")
    nic = format_quantity(p.nic_stall, "s")
    key = "fixes"
    mates = [node for node in victims if leaf_of[node] == home]
    fires = s.compare(storm, w_sw) > 0
    acts = fires and p.pfcwd_action != "alert"
    s.judge(key, EVERY_SWITCH, acts,
            f"{home}'s queue to {origin} stayed paused for {lasted}: the watchdog fires "
            f"{format_quantity(p.switch_watchdog, 'ms')} in and {p.pfcwd_action}s what that queue holds instead of "
            "honouring the pause, so the pauses upstream stop" if acts else
            f"in alert mode the watchdog logs the stall on {home} and leaves the queue paused: the storm runs on")
    watched = p.watchdog_on
    frees = fires and (watched == home or not mates)
    s.judge(key, WATCHDOG_ON, frees,
            f"{home} saw its queue to {origin} paused without a break for {lasted}: a watchdog there fires "
            f"{format_quantity(p.switch_watchdog, 'ms')} in, drops that queue and stops pausing upstream, so every "
            "stalled node sends again within a second" if watched == home else
            f"{watched}'s queue toward {home} stayed paused for {lasted}: its watchdog fires and frees what sits "
            f"behind {watched}, and every stalled node ({', '.join(victims)}) does" if frees else
            f"a watchdog on {watched} frees only what its own paused queue holds back: "
            f"{', '.join(mates)} shares {home} with {origin}, and {home} keeps pausing it")
    nic_fires = s.compare(storm, w_nic) > 0
    s.judge(key, "the origin NIC's PFC stall prevention at its mlx5 default ({nic_stall})", nic_fires,
            f"{origin} has been stalled {lasted}, past {nic}: its NIC stops sending pauses at {nic}, "
            f"{format_quantity(s.value(storm) - p.nic_stall, 's')} before the counters were read"
            if nic_fires else
            f"{origin} has been stalled only {lasted}, under {nic}: its NIC is still sending pauses "
            "(the 100 ms auto setting would have caught it)")
    s.judge(key, "PFC off on the leaf-spine links (lossless only inside a leaf)", not mates,
            f"every stalled node ({', '.join(victims)}) hangs off {away}: with the spine links lossy, {home} drops "
            f"what arrives for {origin} instead of pausing the spine, so the storm stays on {home} "
            "(cross-leaf RDMA pays in drops and retransmissions)" if not mates else
            f"{', '.join(mates)} shares {home} with {origin} and received "
            f"{format_number(sum(p[f'{home}_to_{node}'] for node in mates))} pause frames on its own link: "
            f"lossy spine links spare only {away}'s nodes")
    per_mb = format_quantity(1e6 / s.value(R), "µs")  # one MB at line rate (R is held in bytes per second)
    # The one fact of any storm: no queue tuning releases a receiver that drains nothing (ECN and rate limits
    # in one option with buffer).
    s.judge(key, QUEUE_TUNING, False,
            f"{origin} drains nothing, so any buffer fills: each extra MB fills in {per_mb} at "
            f"{s.text(R)}, and at half the rate in "
            f"{format_quantity(2e6 / s.value(R), 'µs')}, against a storm of {lasted}; ECN slows senders only "
            f"through the CNPs {origin} would return, and it has received nothing: marks do not release a pause",
            fact=True)


def solve(p, s: Sheet) -> None:
    sent = {(a, b): p[f"{a}_to_{b}"] for a, b in _LINK_ENDS}
    origin = _origin(sent)
    leaf_of = {node: leaf for node, leaf in _LINK_ENDS[::2][:4]}
    s.choose("origin", origin, f"{origin} sends pauses and receives none: every other pause traces back to it"
             if origin in leaf_of else f"{origin} sends pauses and receives none")
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
             f"{s.text(R)} and every pause frame asks for {format_number(p.quanta)} "
             "quanta and runs its full length: on this fabric XOFF is re-sent only as the last pause runs out "
             "(the stage says so), with no early resume, so frames × quanta is the paused time and the origin's "
             "frames are the storm's length. Many switches and NICs refresh XOFF sooner (often at half the "
             "quanta), so frames overlap: the same counts then mean as little as half the time, the figures here "
             "become upper bounds, and the NIC-timeout verdict can move for a storm counted between one and two "
             "timeouts. An operator reads the paused time from the pause-duration counters (mlx5 "
             "rx_prio*_pause_duration, the switch's pause-time counters) where they exist.")
    s.assume("The NICs' own PFC stall prevention was off on this fabric (the stage says so): a storm longer "
             "than the mlx5 default of 8 s could not have run with it on; the fixes ask what it would have done.")
    s.assume("The origin is read from the counters: a switch sends pauses upstream because one of its ports "
             "is paused, so following the pauses back leads to the one device that sends pauses and "
             "receives none, a receiver that stopped draining (Guo et al., SIGCOMM 2016).")
    s.assume("Lost bandwidth is counted at the NICs of the nodes whose sends were paused; the origin's own "
             "traffic is not counted, since it is the node that stopped.")
    s.assume("The stuck NIC has paused its link without a break since it stopped draining, so the storm has "
             "lasted the origin's paused time; a watchdog that fires ends it for every node behind it.")
    s.assume("The watchdogs restore differently. The one-switch option keeps Junos's defaults: it turns PFC back on "
             "after its recovery timer whatever the NIC does, and while the NIC still pauses it fires again two "
             "polls later, so the nodes it frees send in bursts between stalls (counted as sending again). The "
             "every-switch option is SONiC's pfcwd, which holds its action until the pauses stop.")
    s.slip("x8: a quantum taken as 512 bytes, not bits", 8, on=("lost_bandwidth", "lost_share"))

