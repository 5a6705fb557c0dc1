"""Golden checks for the network questions: ib-vs-roce, incast-buffer, pause-storm-origin."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantCode, make_variant
from solvers.followup import follow_up

US = 1e-6

# --- ib-vs-roce ------------------------------------------------------------------------------


def test_ib_vs_roce_default(variant):
    """4,096 GPUs need a 3-tier tree of 64-port switches: 5 switch ports and 3 links per GPU."""
    results = variant("ib-vs-roce@default").sheet.results
    assert results["ports_per_gpu"] == 5
    assert results["switches"] == pytest.approx(320)
    hardware_ib = 1500 + 5 * 36_000 / 64 + 3 * 1280
    hardware_roce = 1500 + 5 * 20_000 / 64 + 3 * 1280
    assert results["ib_per_gpu"] == pytest.approx(hardware_ib + 2 * 300_000 * 4 / 4096)  # $8,738
    assert results["roce_per_gpu"] == pytest.approx(hardware_roce + 4 * 300_000 * 4 / 4096)  # $8,074
    assert results["flip_fleet"] == pytest.approx(2 * 300_000 * 4 / (hardware_ib - hardware_roce)) == 1920
    assert results["regime"] == "large-fleet-roce"


@pytest.mark.parametrize("gpus, tiers, switches, switch_cost, cable_cost", [
    (1024, 2, 48, 1_728_000, 2_621_440),  # 128 nodes
    (32_768, 3, 2560, 92_160_000, None),  # 4,096 nodes
])
def test_ib_vs_roce_matches_cluster_cost_spreadsheet(variant, gpus, tiers, switches, switch_cost, cable_cost):
    """The "H100 Freakonomics" spreadsheet (Aug 2024) prices 64-port NDR switches at $36,000: 48 of them
    ($1.728M) and $2.62M of cables for 1,024 GPUs, 2,560 of them ($92.16M) for 32,768."""
    staff = "+ib_staff=4" if gpus > 16_384 else ""  # one engineer per 8,192 GPUs at least
    results = variant(f"ib-vs-roce@default+gpus={gpus}{staff}").sheet.results
    assert results["ports_per_gpu"] == 2 * tiers - 1
    assert results["switches"] == pytest.approx(switches)
    assert results["switches"] * 36_000 == pytest.approx(switch_cost)
    if cable_cost:
        assert tiers * 1280 * gpus == pytest.approx(cable_cost)  # one $1,280 link per tier per GPU


def test_ib_vs_roce_three_tier_capacity_is_k_cubed_over_four(variant):
    """Al-Fares et al. (2008): a 3-tier fat tree of k-port switches holds k³/4 hosts."""
    assert variant("ib-vs-roce@default").sheet.results["tree_capacity"] == 64**3 / 4


def test_ib_vs_roce_small_fleet_keeps_infiniband(variant):
    """1,024 GPUs fit two tiers: the $750 per-GPU saving needs 3,200 GPUs to pay for two engineers."""
    expected = variant("ib-vs-roce@default+gpus=1024").expected
    assert expected["flip_fleet"] == pytest.approx(2_400_000 / (3 * 16_000 / 64))
    assert expected["regime"] == "small-fleet-infiniband"


@pytest.mark.parametrize("seed", range(20))
def test_ib_vs_roce_matches_plain_arithmetic(variant, seed):
    solution = variant(f"ib-vs-roce@{seed}")
    p = {param.name: param.value for param in solution.params}
    tiers = next(t for t in range(1, 5) if 2 * 32**t >= p["gpus"])
    ports = 2 * tiers - 1
    ib = p["nic"] + ports * p["ib_switch"] / 64 + tiers * p["link"]
    roce = p["nic"] + ports * p["eth_switch"] / 64 + tiers * p["link"]
    staff = p["staff_cost"] * p["years"]
    assert solution.expected["ib_per_gpu"] == pytest.approx(ib + p["ib_staff"] * staff / p["gpus"], rel=1e-12)
    roce_total = roce + (p["ib_staff"] + p["roce_extra"]) * staff / p["gpus"]
    assert solution.expected["roce_per_gpu"] == pytest.approx(roce_total, rel=1e-12)
    assert solution.expected["flip_fleet"] == pytest.approx(p["roce_extra"] * staff / (ib - roce), rel=1e-12)
    cheaper_roce = roce_total <= solution.expected["ib_per_gpu"]
    assert (solution.expected["regime"] == "large-fleet-roce") == cheaper_roce


def test_ib_vs_roce_pinned_seed(variant):
    solution = variant("ib-vs-roce@1")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"gpus": 3700, "radix": 64, "ib_switch": 31_000, "eth_switch": 24_000, "nic": 1900, "link": 1200,
                   "ib_staff": 3, "roce_extra": 2, "staff_cost": 260_000, "years": 5}
    # 3 tiers: 5 × $7,000 / 64 per GPU saved against 2 × $260,000 × 5 years.
    assert solution.expected["flip_fleet"] == pytest.approx(2 * 260_000 * 5 / (5 * 7_000 / 64))  # 4,754
    assert solution.expected["regime"] == "small-fleet-infiniband"


def _cheaper_fleets(solution):
    return {option for option, holds in solution.sheet.results["cheaper_fleets"].items() if holds}


def test_ib_vs_roce_each_depth_has_its_own_flip(variant):
    """The default's 3-tier flip is 1,920 GPUs, but a 2,048-GPU fleet fits two tiers, saves 3 ports' worth
    per GPU instead of 5, and flips only at 3,200: RoCE is cheaper from 3,072 (three tiers) up, not at 2,048.
    Seed 1 flips at 4,754 (3 tiers) and 7,924 (2 tiers): of the fleets listed only 65,536 goes to RoCE."""
    assert _cheaper_fleets(variant("ib-vs-roce@default")) == {"3,072 GPUs", "4,096 GPUs", "65,536 GPUs"}
    assert _cheaper_fleets(variant("ib-vs-roce@1")) == {"65,536 GPUs"}


def test_ib_vs_roce_staff_grows_with_the_fleet(variant):
    """The first version staffed a 5,300-GPU fabric with one engineer (@7) and 32,768 GPUs with three at most:
    now every draw has at least one engineer per 8,192 GPUs, and no more than one per 1,024 past the first."""
    for seed in range(100):
        raw = {param.name: param.raw for param in variant(f"ib-vs-roce@{seed}").params}
        assert raw["ib_staff"] * 8192 >= raw["gpus"] >= (raw["ib_staff"] - 1) * 1024, seed


# --- incast-buffer ---------------------------------------------------------------------------


def test_incast_default_fills_in_microseconds(variant):
    """32 senders at 400 Gb/s: the queue grows at 31 × 50 GB/s = 1.55 TB/s."""
    solution = variant("incast-buffer@default")
    expected = solution.expected
    assert solution.sheet.results["excess"] == pytest.approx(31 * 50e9)
    assert expected["t_ecn"] == pytest.approx(400e3 / 1.55e12)  # 0.26 µs
    assert expected["t_xoff"] == pytest.approx(4e6 / 1.55e12)  # 2.6 µs
    assert 1 * US < expected["t_xoff"] < 10 * US
    # 3.6 MB of headroom holds 7.2 senders' excess for one 10 µs round trip: 8 senders fit, 9 do not.
    assert expected["n_pfc"] == 9
    assert expected["regime"] == "pfc-first"


def test_incast_grades_a_whole_sender_count(variant):
    """The first version graded "8.2 senders"; the key is now the first whole count that sets off PFC,
    and the boundary it names splits 8 (ECN in time) from 9 (PFC first)."""
    assert float(variant("incast-buffer@default").expected["n_pfc"]).is_integer()
    assert variant("incast-buffer@default+senders=8").expected["regime"] == "ecn-first"
    assert variant("incast-buffer@default+senders=9").expected["regime"] == "pfc-first"


def test_incast_exact_tie_leaves_ecn_in_time(variant):
    """XOFF − ECN = 8.1 MB = 6 × 50 GB/s × 27 µs: with 7 senders the queue reaches XOFF exactly as DCQCN's
    cut lands (not past it), so ECN still acts first and PFC fires from 8 senders. In floats the room is
    5.999999999999999, whose floor would give 7."""
    assert math.floor((8.2 * 1e6 - 100 * 1e3) / (50e9 * (27 * 1e-6))) == 5
    tie = "incast-buffer@default+ecn_threshold=100+xoff_threshold=8.2+rtt=27+senders="
    expected = variant(tie + "7").expected
    assert expected["n_pfc"] == 8 and expected["regime"] == "ecn-first"
    assert variant(tie + "8").expected["regime"] == "pfc-first"


@pytest.mark.parametrize("nic, gbit_s", [("connectx-7", 400), ("connectx-8", 800)])
def test_incast_prompt_fixes_the_units(variant, nic, gbit_s):
    """Read as KiB and MiB, the default's thresholds move t_ecn by 2.4% and t_xoff by 4.9%, past the 2%
    tolerance: the prompt names the decimal-units card, and gives the line rate it expects."""
    solution = variant(f"incast-buffer@default+nic={nic}")
    assert "decimal-units card" in solution.prompt
    assert f"({gbit_s} Gb/s)" in solution.prompt
    binary = 4 * 2**20 / ((32 - 1) * gbit_s * 1e9 / 8)
    assert abs(binary / solution.expected["t_xoff"] - 1) > 0.02


def test_incast_few_senders_leave_ecn_in_time(variant):
    """Eight senders fit under the 9-sender boundary: the round trip ends before XOFF."""
    expected = variant("incast-buffer@default+senders=8").expected
    assert expected["regime"] == "ecn-first"


PAUSE_COUNTERS = {"pause frames sent by the switch on the senders' ingress ports (per priority)",
                  "pause frames received by the senders' NICs on the RDMA priority"}
MARK_COUNTERS = {"ECN-marks on the receiver's egress queue, and the CNPs they send back to the senders' NICs"}


@pytest.mark.parametrize("senders, pauses", [(8, False), (9, True), (32, True)])
def test_incast_counters_follow_the_mechanism(variant, senders, pauses):
    """Marks and CNPs rise in every burst past the ECN threshold; pause counters only where PFC fired;
    drops and retransmissions never on the lossless priority."""
    judged = variant(f"incast-buffer@default+senders={senders}").sheet.results["counters"]
    rising = {option for option, holds in judged.items() if holds}
    assert rising == MARK_COUNTERS | (PAUSE_COUNTERS if pauses else set())


@pytest.mark.parametrize("seed", range(20))
def test_incast_matches_closed_form(variant, seed):
    solution = variant(f"incast-buffer@{seed}")
    p = {param.name: param.value for param in solution.params}
    rate = p["nic"].gbit_s * 1e9 / 8
    excess = (p["senders"] - 1) * rate
    assert solution.expected["t_ecn"] == pytest.approx(p["ecn_threshold"] / excess, rel=1e-12)
    assert solution.expected["t_xoff"] == pytest.approx(p["xoff_threshold"] / excess, rel=1e-12)
    headroom = p["xoff_threshold"] - p["ecn_threshold"]
    # ECN wins when the queue one round trip after the first mark is still at or below XOFF.
    fits = [n for n in range(2, 200) if (n - 1) * rate * p["rtt"] <= headroom * (1 + 1e-12)]
    assert solution.expected["n_pfc"] == max(fits, default=1) + 1
    ecn_first = p["ecn_threshold"] + excess * p["rtt"] <= p["xoff_threshold"] * (1 + 1e-12)
    assert (solution.expected["regime"] == "ecn-first") == ecn_first


def test_incast_pinned_seed(variant):
    solution = variant("incast-buffer@1")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"senders": 12, "nic": "connectx-8", "ecn_threshold": 140, "xoff_threshold": 14, "rtt": 7.5}
    assert solution.expected["t_xoff"] == pytest.approx(14e6 / (11 * 100e9))  # 12.7 µs
    assert solution.expected["n_pfc"] == 20  # 13.86 MB over 100 GB/s × 7.5 µs = 18.5: 19 senders fit
    assert solution.expected["regime"] == "ecn-first"


# --- pause-storm-origin ----------------------------------------------------------------------

LINK_ENDS = [("node1", "leaf1"), ("leaf1", "node1"), ("node2", "leaf1"), ("leaf1", "node2"),
             ("node3", "leaf2"), ("leaf2", "node3"), ("node4", "leaf2"), ("leaf2", "node4"),
             ("leaf1", "spine"), ("spine", "leaf1"), ("leaf2", "spine"), ("spine", "leaf2")]
LEAF_OF = {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}


def _sent(solution):
    """Pause frames sent on each link end, as the parameter table shows them."""
    return {(a, b): solution.param(f"{a}_to_{b}").value for a, b in LINK_ENDS}


def _paused(solution):
    return {node for node, holds in solution.sheet.results["paused"].items() if holds}


def test_pause_storm_default(variant):
    """node4 stopped draining; node3 and node2 were paused, node1 was idle."""
    solution = variant("pause-storm-origin@default")
    assert solution.expected["origin"] == "node4"
    assert _paused(solution) == {"node2", "node3"}
    frames = 69_038 + 58_371
    lost = frames * 65_535 * 512 / 10  # bits per second
    assert solution.expected["lost_bandwidth"] == pytest.approx(lost / 8)  # 427.5 Gb/s, held in B/s
    assert solution.expected["lost_share"] == pytest.approx(lost / (2 * 400e9))  # 53%
    assert _pauses_shrink_upstream(_sent(solution), "node4")


def test_pause_storm_counters_are_parameters(variant):
    """The first version printed a 12-row table inside a 28-line prompt; the counters are now the twelve
    link ends' parameters, which a follow-up's new storm also reaches, and the prompt fits 8 lines."""
    solution = variant("pause-storm-origin@default")
    shown = {param.label for param in solution.problem_data()}
    assert {f"pause frames sent, {a} → {b}" for a, b in LINK_ENDS} <= shown
    assert "pause frames per link end" not in shown  # the storm behind them is not data
    assert "|" not in solution.prompt


def test_pause_frame_of_max_quanta_lasts_84_us_at_400g(variant):
    """802.1Qbb: 65,535 quanta × 512 bit times = 83.9 µs at 400 Gb/s (335.5 µs at 100 Gb/s)."""
    results = variant("pause-storm-origin@default").sheet.results
    assert results["paused_time"] / (69_038 + 58_371) == pytest.approx(83.886e-6, rel=1e-4)


def _pauses_shrink_upstream(sent, origin):
    """A switch holds an ingress paused only while the egress it feeds is paused: no device but the
    origin sends more pause frames on any port than it receives (the first version's leaf1 sent 92,684
    to node2 while receiving 48,141 from the spine)."""
    received = {}
    for (_, receiver), frames in sent.items():
        received[receiver] = max(received.get(receiver, 0), frames)
    return all(frames <= received.get(sender, 0) for (sender, _), frames in sent.items()
               if frames > 0 and sender != origin)


def _check_storm(solution):
    sent = _sent(solution)
    origin = solution.expected["origin"]
    # The origin: a node that sends pauses and receives none.
    assert origin.startswith("node") and sent[(origin, LEAF_OF[origin])] > 0
    assert all(frames == 0 for (_, receiver), frames in sent.items() if receiver == origin)
    assert _pauses_shrink_upstream(sent, origin)
    paused = {node for node in LEAF_OF if sent[(LEAF_OF[node], node)] > 0}
    assert _paused(solution) == paused and origin not in paused
    p = {param.name: param.value for param in solution.params}
    lost_bits = sum(sent[(LEAF_OF[node], node)] for node in paused) * 65_535 * 512 / p["window"]
    assert solution.expected["lost_bandwidth"] == pytest.approx(lost_bits / 8, rel=1e-12)
    share = lost_bits / (len(paused) * p["line_rate"] * 8)
    assert solution.expected["lost_share"] == pytest.approx(share, rel=1e-12)
    assert 0.35 < share < 0.95 + 0.01  # every paused link is paused for 37-95% of the window


@pytest.mark.parametrize("seed", range(30))
def test_pause_storm_reads_back_to_a_node(variant, seed):
    _check_storm(variant(f"pause-storm-origin@{seed}"))


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("change", ["window=60", "line_rate=100", "window=10+line_rate=200"])
def test_pause_storm_override_changes_only_the_seeds_draw(variant, seed, change):
    """An override modifies the seed's accepted draw: the other parameters stay the seed's, and the
    counters are drawn again for the new window or line rate, so the key still follows from what is
    shown (the first version keyed a storm drawn for other figures than the ones printed)."""
    base, changed = variant(f"pause-storm-origin@{seed}"), variant(f"pause-storm-origin@{seed}+{change}")
    names = {item.split("=")[0] for item in change.split("+")}
    for param in ("line_rate", "window"):
        if param not in names:
            assert changed.param(param).raw == base.param(param).raw
    _check_storm(changed)


def test_pause_storm_origin_lands_on_every_node(variant):
    origins = {variant(f"pause-storm-origin@{seed}").expected["origin"] for seed in range(50)}
    assert origins == {"node1", "node2", "node3", "node4"}


def test_pause_storm_follow_up_is_a_new_storm(bank, catalog):
    """The default's follow-up reads a fresh storm over 60 s from the parameter table."""
    solution = make_variant(bank, catalog, VariantCode.parse("pause-storm-origin@default"))
    pushed = follow_up(solution, catalog)
    assert pushed is not None and pushed.solution.param("window").raw == 60
    assert set(pushed.ask) == {"origin", "paused", "lost_bandwidth", "fixes"}
    _check_storm(pushed.solution)
    assert NIC_STALL in _fixes(pushed.solution)  # a storm over 60 s outlasts the NIC's 8 s default


def test_pause_storm_pinned_seed(variant):
    solution = variant("pause-storm-origin@1")
    raw = {param.name: param.raw for param in solution.params if param.name in ("line_rate", "window", "quanta")}
    assert raw == {"line_rate": 400, "window": 60, "quanta": 65_535}
    assert solution.expected["origin"] == "node4"
    paused = 388_428 + 521_307  # node2 and node3 (the spine's 454,763 to leaf1 reaches no node)
    assert solution.expected["lost_bandwidth"] * 8 == pytest.approx(paused * 65_535 * 512 / 60)
    assert math.isclose(solution.expected["lost_share"], 0.63594, rel_tol=1e-4)


WATCHDOG = "a PFC watchdog on the switches (Junos defaults: a stall after 200 ms)"
NIC_STALL = "the origin NIC's PFC stall prevention at its mlx5 default (8 s)"
LOSSY_SPINE = "PFC off on the leaf-spine links (lossless only inside a leaf)"
NEVER = {"tuning the leaves' queues: more buffer headroom, a higher XOFF, ECN marking at a lower threshold, "
         "or every sender rate-limited to half its line rate"}


def _fixes(solution):
    judged = solution.sheet.results["fixes"]
    assert set(judged) == {WATCHDOG, NIC_STALL, LOSSY_SPINE} | NEVER
    return {option for option, holds in judged.items() if holds}


@pytest.mark.parametrize("seed", range(20))
def test_pause_storm_fixes_follow_the_storm(variant, seed):
    """A watchdog ends the storm only if it fires before the counters are read: the origin's pauses run
    back to back, so the storm has lasted f_origin × 65,535 × 512 bit times. Lossy spine links spare every
    stalled node only where none shares the origin's leaf; buffer, ECN and rate limits never release a
    receiver that drains nothing."""
    solution = variant(f"pause-storm-origin@{seed}")
    sent = _sent(solution)
    origin = solution.expected["origin"]
    bits_per_s = solution.param("line_rate").value * 8
    storm = sent[(origin, LEAF_OF[origin])] * 65_535 * 512 / bits_per_s
    assert solution.sheet.results["storm_time"] == pytest.approx(storm, rel=1e-12)
    stalled = {node for node in LEAF_OF if sent[(LEAF_OF[node], node)] > 0}
    right = ({WATCHDOG} if storm > 0.2 else set()) | ({NIC_STALL} if storm > 8 else set())
    if all(LEAF_OF[node] != LEAF_OF[origin] for node in stalled):
        right.add(LOSSY_SPINE)
    assert _fixes(solution) == right
    assert right and not right & NEVER


@pytest.mark.parametrize("code, origin, storm, right", [
    # 75,454 frames × 83.9 µs: 6.33 s, under the NIC's 8 s; node3 shares leaf2 with node4.
    ("default", "node4", 6.3294, {WATCHDOG}),
    ("1", "node4", 44.890, {WATCHDOG, NIC_STALL}),  # 535,137 frames over 60 s at 400 Gb/s
    ("2", "node2", 8.5500, {WATCHDOG, NIC_STALL, LOSSY_SPINE}),  # 50,963 at 200 Gb/s: just past 8 s; only leaf2 stalled
    ("3", "node1", 7.5161, {WATCHDOG, LOSSY_SPINE}),  # 22,400 at 100 Gb/s; node2 idle
])
def test_pause_storm_fixes_pinned(variant, code, origin, storm, right):
    """One variant per right set. The first version graded the storm's conditions and the watchdog fix
    as a self-graded checklist, the same in every variant."""
    solution = variant(f"pause-storm-origin@{code}")
    assert solution.expected["origin"] == origin
    assert solution.sheet.results["storm_time"] == pytest.approx(storm, rel=1e-4)
    assert _fixes(solution) == right
    assert "why" not in solution.expected
