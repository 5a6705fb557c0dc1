"""InfiniBand or RoCE, in dollars per GPU."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, Side
from solvers.units import format_number


def _fat_tree_tiers(gpus: int, radix: int) -> int:
    """The fewest tiers of a non-blocking fat tree of `radix`-port switches that hold `gpus`
    endpoints: t tiers hold 2·(k/2)^t (integer arithmetic, so 2,048 on 64 ports is exactly 2)."""
    if radix < 4:  # (k/2)^t never grows: no depth holds the fleet
        raise ValueError(f"a fat tree that grows with its tiers needs switches of 4 ports or more, not {radix}")
    tiers = 1
    while 2 * (radix // 2) ** tiers < gpus:
        tiers += 1
    return tiers


HOURS_PER_YEAR, MONTHS_PER_YEAR = 8760, 12
SO_CLOSE = sympy.Rational(102, 100)  # the per-GPU costs' own tolerance: closer than this the choice is a coin toss
SHARP = "SHARP shortening every training step by {sharp_gain}"
STORM = "a pause storm a month idling the whole fleet for {storm_hours}"
AI_ETHERNET = "AI Ethernet's switches (Spectrum-X class) costing {ai_premium} more than plain Ethernet's"


def _outweighs(s: Sheet, G, Y, P, k, S_eth, total_saving) -> None:
    """What the per-GPU costs leave out, each priced for the whole fleet over the life and set against RoCE's
    whole switch saving: the headline number, which none of them depends on (a tie does not outweigh). Not the
    net saving after the extra engineers: that is negative wherever InfiniBand wins, and every item would then
    'outweigh' it. (The GPUs' own price, an always-true option, is gone: read7.)"""
    c_h = s.param("c_h", "gpu_hour")
    hours = s.given("H_y", HOURS_PER_YEAR * 3600, "h", "hours in a year")
    sharp = s.step("sharp_value", "What SHARP's faster steps are worth over the life", "V_sharp",
                   s.param("g_sharp", "sharp_gain") * G * hours * Y * c_h, "$",
                   "the same work in fewer GPU-hours: that share of every hour the fleet runs")
    storm = s.step("storm_cost", "What a monthly pause storm costs over the life", "V_storm",
                   s.param("h_storm", "storm_hours") * MONTHS_PER_YEAR * G * Y * c_h, "$",
                   "every GPU idle while it lasts, every month")
    premium = s.step("ai_premium_cost", "What AI Ethernet's switch premium costs the fleet", "V_ai",
                     s.param("p_ai", "ai_premium") * G * P * S_eth / k, "$", "the premium on every switch port")
    against = f"RoCE's switch saving of {s.text(total_saving)}"
    for option, value in ((SHARP, sharp), (STORM, storm), (AI_ETHERNET, premium)):
        more = s.compare(value, total_saving) > 0
        s.judge("outweighs", option, more, f"{s.text(value)} against {against}"
                + (": it matters more than the headline saving" if more else ""))


def _flip_depth(s: Sheet, extra, dS, k, radix: int) -> tuple[int, bool]:
    """The tree depth at which RoCE first pays, and whether it pays only from that depth's first fleet.

    RoCE's edge over the fleet, G·(2t−1)·ΔS/k − extra, grows with G and jumps up where the tree gains a tier,
    so the flip is the first depth t whose own break-even, extra ÷ ((2t−1)·ΔS/k), is a fleet that depth
    holds (at most 2·(k/2)^t); a break-even below the depth's first fleet means RoCE already pays at its
    start: the flip is the tier boundary itself."""
    tiers = 1
    while s.compare(extra / ((2 * tiers - 1) * dS / k), 2 * (radix // 2) ** tiers) > 0:
        tiers += 1
    low = 2 * (radix // 2) ** (tiers - 1) if tiers > 1 else 0
    return tiers, s.compare(extra / ((2 * tiers - 1) * dS / k), low) <= 0


def _fleet_regime(s: Sheet, G, flip, ib, roce) -> None:
    fleet, boundary = format_number(s.value(G)), format_number(s.value(flip), 3)
    per_gpu = f"{s.text(ib)} on InfiniBand against {s.text(roce)}"
    small = (f"At {fleet} GPUs the switch saving per GPU does not pay for RoCE's extra engineers: {per_gpu} "
             "on RoCE. InfiniBand is lossless by design (credit flow control, no PFC to tune), so the small team "
             "buys it; its credits can still back up behind a stuck HCA, which switch timeouts bound.")
    if s.compare(G, flip) == 0:  # an exact tie: neither is cheaper, and nothing pays for the lossless-Ethernet work
        small = (f"At {fleet} GPUs the two cost exactly the same, {per_gpu} on RoCE: with no saving to "
                 "pay for the extra engineers, keep the fabric that is lossless by design.")
    s.regime_by(G, flip, tie="below", above=Side(
        "large-fleet-roce",
        f"At {fleet} GPUs the per-port saving, summed over the fleet, outgrows the engineers who keep RoCE "
        f"lossless: {per_gpu} on RoCE.",
        f"At {boundary} GPUs or fewer (the tree as deep as that fleet needs) the fixed cost of configuring "
        "and watching PFC/ECN on every port is spread over too few GPUs, and InfiniBand is cheaper."), below=Side(
        "small-fleet-infiniband",
        small,
        f"Above {boundary} GPUs (the tree as deep as that fleet needs) the per-port saving outgrows the "
        "fixed cost of running lossless Ethernet, and RoCE is cheaper; each tier the fleet adds multiplies "
        "the saving per GPU and brings the flip closer."))


def solve(p, s: Sheet) -> None:
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
    saving = s.step("saving", "What RoCE saves per GPU in switch ports", "d_h", P * (S_ib - S_eth) / k, "$",
                    "the NIC and the links cancel: only the switch ports' price differs")
    total_saving = s.step("total_saving", "RoCE's switch saving over the fleet", "D_h", G * saving, "$",
                          "every GPU's share of the cheaper switch ports")
    s.step("engineers_paid", "Engineers that saving pays for over the life", "E_star", total_saving / (w * Y), "",
           "the fleet's whole saving over one engineer's cost for the service life")
    F_ib = s.step("ib_staff_cost", "InfiniBand operations over the life", "F_ib", n_ib * w * Y, "$",
                  "the engineers who run the fabric, for as long as it is in service")
    F_roce = s.step("roce_staff_cost", "RoCE operations over the life", "F_roce", (n_ib + n_extra) * w * Y, "$",
                    "the same team plus the engineers who keep PFC, ECN and DCQCN right on every port")
    ib = s.step("ib_per_gpu", "InfiniBand cost per GPU", "c_ib", hw_ib + F_ib / G, "$",
                "hardware per GPU plus the operations cost shared by every GPU")
    roce = s.step("roce_per_gpu", "RoCE cost per GPU", "c_roce", hw_eth + F_roce / G, "$",
                  "cheaper per port, with a larger fixed cost shared by every GPU")
    depth, at_boundary = _flip_depth(s, F_roce - F_ib, S_ib - S_eth, k, p.radix)
    t_f = s.given("t_f", depth, "", "tiers of the smallest fleet on which RoCE pays")
    if at_boundary:
        flip = s.step("flip_fleet", "Fleet size above which RoCE is cheaper", "G_star", 2 * (k / 2) ** (t_f - 1),
                      "GPUs",
                      "the most GPUs one tier fewer holds: at that depth the switch saving never pays for the extra "
                      "engineers, and the first fleet that needs the next tier already does")
    else:
        flip = s.step("flip_fleet", "Fleet size above which RoCE is cheaper", "G_star",
                      (F_roce - F_ib) / ((2 * t_f - 1) * (S_ib - S_eth) / k), "GPUs",
                      "the extra engineers' cost over the per-GPU switch saving at the depth a fleet that size needs "
                      "(shallower trees never pay it back): InfiniBand's own team, the NIC and the links cancel")
    if s.compare(ib, roce * SO_CLOSE) < 0 and s.compare(roce, ib * SO_CLOSE) < 0:
        # Per-GPU costs inside their own tolerance of each other: figures a grader accepts order either way.
        s.refuse_if_asked(["regime"], "the two fabrics cost within 2% of each other per GPU: too close to call")

    s.assume("Both fabrics are non-blocking fat trees of 64-port 400G switches with one 400G NIC per GPU; the "
             "tree has the fewest tiers that hold the fleet. Switches are counted by the ports each GPU uses, "
             "so a partly filled top tier is prorated. This is generous to InfiniBand: a 51.2 Tb/s Ethernet "
             "switch (Tomahawk 5, Spectrum-4) has 128 × 400G ports against Quantum-2's 64, so two tiers hold "
             "8,192 GPUs and a 4,096-GPU RoCE fleet needs 3 ports and 2 links a GPU, not 5 and 3.")
    s.assume("Prices are the ones stated (street prices vary by deal). The same ConnectX-7 card runs either "
             "protocol, and a link is priced the same on both, so only the switch price differs per port; "
             "NVIDIA's LinkX InfiniBand optics usually cost more than third-party Ethernet optics, which "
             "would widen RoCE's saving.")
    s.assume("Operations staff are a fixed cost over the service life, whatever the fleet size; RoCE's extra "
             "engineers own the lossless configuration (PFC priorities, ECN thresholds, DCQCN, watchdogs) on "
             "every port. Power, space and performance differences are left out.")
    s.assume("The per-GPU costs leave out what the last select prices: SHARP's faster all-reduces and a monthly "
             "pause storm (the blast radius of one PFC mistake; see pause-storm-origin), each in GPU-hours at the "
             "stated worth of an hour, and AI Ethernet's (Spectrum-X, Ultra Ethernet) dearer switches, each set "
             "against the switch saving alone. Adaptive routing, lock-in and hiring are left to the recall.")
    s.slip("staff cost for one year, not the service life", p.years, on="engineers_paid")
    s.slip("staff cost for one year, not the service life", on="ib_per_gpu",
           factor=s.evaluate(hw_ib + F_ib / (G * Y)) / s.value(ib))
    s.slip("staff cost for one year, not the service life", on="roce_per_gpu",
           factor=s.evaluate(hw_eth + F_roce / (G * Y)) / s.value(roce))
    s.slip("one switch port per GPU instead of 2t−1", 1 / s.value(P), on=("saving", "engineers_paid"))
    s.slip("one switch port per GPU instead of 2t−1", on="ib_per_gpu",
           factor=s.evaluate(c_nic + S_ib / k + t * c_link + F_ib / G) / s.value(ib))
    s.slip("one switch port per GPU instead of 2t−1", on="roce_per_gpu",
           factor=s.evaluate(c_nic + S_eth / k + t * c_link + F_roce / G) / s.value(roce))

    _outweighs(s, G, Y, P, k, S_eth, total_saving)
    _fleet_regime(s, G, flip, ib, roce)

