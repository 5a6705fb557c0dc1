"""nvl72-boundary: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError
from tests.by_hand import param_values


def test_nvl72_dispatch_bytes_match_deepep(variant):
    """DeepEP's low-latency benchmark (128 tokens, hidden 7,168, top-8, FP8 dispatch, BF16 combine) prints
    latency and bandwidth, EP 64 on CX7: dispatch 173 us at 43 GB/s, combine 314 us at 46 GB/s. The solver's
    bytes over those latencies give the printed rates within 2% (its 16 B header per copy is left out)."""
    results = variant("nvl72-boundary@default").sheet.results
    assert results["dispatch_bytes"] / 173e-6 == pytest.approx(43e9, rel=0.02)
    assert results["combine_bytes"] / 314e-6 == pytest.approx(46e9, rel=0.02)
    # The scales are the card's (moe-all-to-all), in play, never named in the words: without them 7.34 MB.
    solution = variant("nvl72-boundary@default")
    assert "moe-all-to-all" in solution.cards()
    assert not any("moe-all-to-all" in stage.say for stage in solution.question.stages)
    assert results["dispatch_bytes"] > 1.03 * 128 * 8 * 7168


@pytest.mark.parametrize("seed", range(25))
def test_nvl72_boundary_matches_plain_arithmetic(variant, seed):
    solution = variant(f"nvl72-boundary@{seed}")
    p, r = param_values(solution), solution.sheet.results
    nic = p["nic"].gbit_s / 8 * 1e9
    copies = p["tokens"] * 8 * 7168 * (2 + 1 + 4 / 128)
    ep = p["ep"]

    def layer(domain, nvlink):
        latency = 50e-6 if ep > domain else 10e-6
        return max(copies * min(ep, domain) / ep / nvlink, copies * max(ep - domain, 0) / ep / nic) + 2 * latency

    assert r["a2a_step_before"] == pytest.approx(58 * layer(8, p["gpu"].nvlink_gb_s / 2 * 1e9))
    assert r["a2a_step_after"] == pytest.approx(58 * layer(72, 900e9))
    assert r["a2a_step_after"] < r["a2a_step_before"]
    in_rack = ep + p["prefill_gpus"] <= 72
    assert r["kv_after"] == pytest.approx(70_272 * p["context"] / (900e9 if in_rack else nic))
    assert (r["regime"] == "handoff-on-nvlink") == in_rack
    assert r["crosses"]["the KV handoff from a prefill pool twice this size"] == (ep + 2 * p["prefill_gpus"] > 72)
    assert r["crosses"]["the KV handoff from a prefill pool half this size"] == (ep + p["prefill_gpus"] / 2 > 72)
    assert r["crosses"]["the all-to-all of an EP group half again this size"] == (1.5 * ep > 72)
    faults = 30 * ep * 419 / (54 * 16384)
    assert r["down_no_spare"] == pytest.approx(faults * p["tray_swap"])
    assert r["down_spare"] == pytest.approx(faults * p["restart"])


@pytest.mark.parametrize("seed", range(60))
def test_nvl72_draws_never_make_stages_two_and_three_degenerate(variant, seed):
    """read7 #1 and #5: groups of 72 and more made the handoff and the stall figures the same before and after,
    and EP 72 sat on the boundary. A draw's group now fits a rack with room (EP 64 at most), its pools never fill
    a rack exactly, and the stall asks compare the spare against none, never equal."""
    solution = variant(f"nvl72-boundary@{seed}")
    p, r = param_values(solution), solution.sheet.results
    assert p["ep"] <= 64
    assert p["ep"] + p["prefill_gpus"] != 72
    assert r["down_no_spare"] > 3 * r["down_spare"]
    assert r["crosses"]["this decode group's EP all-to-all"] is False


def test_nvl72_regime_splits_draws_on_the_handoff(variant):
    """read7 #9: the opening's old regime (EP ≤ 72) was read off a parameter. The graded decision is now whether
    the prefill pool and decode group fit one rack: both sides are drawn."""
    regimes = {variant(f"nvl72-boundary@{seed}").sheet.results["regime"] for seed in range(40)}
    assert regimes == {"handoff-on-nvlink", "handoff-on-nic"}


def test_nvl72_options_vary_and_tp8_fact_is_gone(variant):
    """read7 #2: the TP-8 option was false in every draw; each listed option but the one declared fact now varies."""
    solution = variant("nvl72-boundary@default")
    assert "the TP all-reduces of a TP-8 attention group" not in solution.sheet.results["crosses"]
    assert solution.sheet.facts["crosses"] == {"this decode group's EP all-to-all"}
    seen: dict[str, set[bool]] = {}
    for seed in range(60):
        for option, holds in variant(f"nvl72-boundary@{seed}").sheet.results["crosses"].items():
            seen.setdefault(option, set()).add(holds)
    assert all(truths == {True, False} for option, truths in seen.items()
               if option != "this decode group's EP all-to-all")


def test_nvl72_blast_radius_is_the_group_not_the_rack(variant):
    """read7 #3: a fault drains its tray, not the rack. The stall counts only the group's GPUs; counting the rack's
    72 is the declared slip, and a spare tray turns the swap's hours into a restart's minutes."""
    solution = variant("nvl72-boundary@default")
    r = solution.sheet.results
    assert r["group_faults"] == pytest.approx(30 * 64 * 419 / (54 * 16384))
    assert "blast_after" not in r
    assert "stalls its whole rack" not in solution.question.stages[2].say
    slips = {slip.label: slip.factor for slip in solution.sheet.slips["down_no_spare"]}
    assert slips["every GPU of the rack counted as stalling the group"] == pytest.approx(72 / 64)


def test_nvl72_nic_is_the_one_these_systems_ship(variant):
    """read7 #4: ConnectX-8 was drawn beside H100 hosts and GB200 racks, which ship ConnectX-7."""
    nics = {param_values(variant(f"nvl72-boundary@{seed}"))["nic"].name for seed in range(30)}
    assert nics == {"ConnectX-7"}


def test_nvl72_pushes_say_why_and_cross(variant):
    """read7 #6: the push to EP 144 said the model grows; it now says traffic grows, and the expert slots. Every
    draw's push crosses: EP 144 puts the handoff (and half the copies) on the NIC, EP 32 takes it off."""
    stages = variant("nvl72-boundary@default").question.stages
    assert "model grows" not in stages[3].say and "Traffic grows" in stages[3].say
    assert "expert slots" in stages[3].say
    fit = variant("nvl72-boundary@default+ep=144+prefill_gpus=8").sheet.results
    assert fit["regime"] == "handoff-on-nic"
    assert fit["a2a_step_after"] == pytest.approx(58 * (128 * 8 * 21728 * 0.5 / 50e9 + 100e-6))
    assert variant("nvl72-boundary@default+ep=32").sheet.results["regime"] == "handoff-on-nvlink"


def test_nvl72_group_past_a_rack_is_only_the_push(variant):
    """EP 144 stands in the choices for the push; as a draw it is refused (no spare, no room for prefill)."""
    refusals = variant("nvl72-boundary@default+ep=144+prefill_gpus=8").sheet.refusals_if_asked
    assert refusals and "crosses" in refusals[0][0] and "regime" not in refusals[0][0]
    assert not variant("nvl72-boundary@default").sheet.refusals_if_asked


def test_the_opening_says_the_all_to_all_pays_a_latency_per_call(variant):
    """r11 priced the all-to-all on bytes alone (16.13 against 21.93 ms): the MoE all-to-all card pays no fixed
    latency unless the question adds one, and only a hint added it. The opening now says so."""
    say = variant("nvl72-boundary@default").question.stages[0].say
    assert "fixed latency" in say and "dispatch and\n      combine" not in say


@pytest.mark.parametrize("seed", [*range(20), "default"])
def test_nvl72_stall_words_fit_the_placement(variant, seed):
    """read8 #3: stage 2 leaves the decode rack with GPUs the pools do not take (EP 64 beside a prefill pool in
    another rack leaves 8, two trays), yet stage 3 asked the stall 'with no spare tray'. The words now say the
    left-over trays run other work and ask for a tray held free, and the assumptions say so, in every draw that
    leaves GPUs over."""
    try:
        solution = variant(f"nvl72-boundary@{seed}")
    except VariantError:
        return
    p = param_values(solution)
    stall = next(stage for stage in solution.question.stages if "down_no_spare" in stage.ask)
    assert "no spare tray" not in stall.say and "held free" in stall.say and "run other work" in stall.say
    in_rack = p["ep"] + p["prefill_gpus"] <= 72
    left_over = 72 - (p["ep"] + p["prefill_gpus"] if in_rack else p["ep"])
    if left_over > 0:
        assert "run other work" in " ".join(solution.sheet.assumptions)


def test_nvl72_fault_rate_says_whose_record_it_is(variant):
    """read12 (rf-m): the stall uses Llama 3's H100 record for GB200 trays without saying it is a stand-in."""
    assumptions = variant("nvl72-boundary@default").sheet.assumptions
    assert any("H100 fleet's record standing in for GB200 trays" in a for a in assumptions)
