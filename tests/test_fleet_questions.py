"""Checks for the fleet questions: restart-goodput, fleet-gpu-count, nic-bandwidth-per-gpu,
cluster-bill-of-materials."""
from __future__ import annotations

import math
import random
import re
from collections import Counter

import numpy as np
import pytest
import sympy

from solvers.engine import VariantError

MIN, HOUR, DAY = 60, 3_600, 86_400

# --- restart-goodput -------------------------------------------------------------------------


def test_restart_default_matches_catalogue(variant):
    """Runs of 12 h between failures, 5 min of recovery after each (the keys are pinned in the question file):
    the steps beside them."""
    results = variant("restart-goodput@default").sheet.results
    assert results["mtbf"] == pytest.approx(12 * HOUR)
    saves = 1 / math.expm1((20 * MIN + 20) / (12 * HOUR))  # 34.91 completed saves per run
    assert results["saves_per_run"] == pytest.approx(saves)
    # The interval's part today: 1.61% stalls + 1.40% redone work = 3.0%, against 0.69% of fixed recovery.
    wall = 12 * HOUR + 5 * MIN
    assert results["interval_loss"] == pytest.approx((saves * 20 + 12 * HOUR - saves * (20 * MIN + 20)) / wall)
    assert results["failure_floor"] == pytest.approx(5 * MIN / wall)


@pytest.mark.parametrize("seed", range(10))
def test_restart_young_interval_minimises_the_loss(variant, seed):
    """Young's closed form against a brute-force minimum of stalls + rewound work, C/τ + τ/(2M)."""
    solution = variant(f"restart-goodput@{seed}")
    p = {param.name: param.value for param in solution.params}
    mtbf = 1 / p["restarts"]
    taus = np.geomspace(1, 100 * HOUR, 400_001)
    for stall, key in ((p["ckpt_storage"], "young_storage"), (p["ckpt_memory"], "young_memory")):
        best = taus[np.argmin(stall / taus + taus / (2 * mtbf))]
        assert solution.expected[key] == pytest.approx(best, rel=1e-4)


def test_restart_stage_names_youngs_first_order_rule(variant, catalog):
    """key-check-2: "the best interval" read as Daly's higher-order estimate, √(2CM)·(1 + ⅓·√(C/2M) + C/18M) − C,
    sits past the 3% tolerance from Young's in some draws (a long save against a short MTBF). The stage that
    asks it names Young's first-order rule, the minimum of the question's own first-order loss (tested above),
    and the asynchronous interval is asked by the same rule."""
    from solvers.interview import stage_run
    solution = variant("restart-goodput@default")
    asks = {key: run.say for index in range(len(solution.question.stages))
            if (run := stage_run(solution, catalog, index)) is not None for key in run.ask}
    assert "Young's first-order rule" in asks["young_storage"] and "the same rule" in asks["young_memory"]
    gaps = []
    for seed in range(100):
        solution = variant(f"restart-goodput@{seed}")
        p = {param.name: param.value for param in solution.params}
        C, M = p["ckpt_storage"], 1 / p["restarts"]
        daly = (2 * C * M) ** 0.5 * (1 + (C / (2 * M)) ** 0.5 / 3 + C / (18 * M)) - C
        gaps.append(abs(daly / solution.expected["young_storage"] - 1))
    assert max(gaps) > 0.03


def _restart_exact(p):
    """Per failure: the run's mean M, its completed saves N and the wall clock M + F it takes with recovery."""
    mtbf, fixed = 1 / p["restarts"], p["detect"] + p["reschedule"] + p["reload"]
    cycle = p["interval"] + p["ckpt_storage"]
    saves = 1 / math.expm1(cycle / mtbf)
    return mtbf, fixed, cycle, saves, mtbf + fixed


def _restart_parts(p):
    """The loss today split by what sets it: the interval (stalls and redone work) or each failure."""
    mtbf, fixed, cycle, saves, wall = _restart_exact(p)
    return (saves * p["ckpt_storage"] + mtbf - saves * cycle) / wall, fixed / wall


@pytest.mark.parametrize("seed", range(20))
def test_restart_matches_plain_arithmetic(variant, seed):
    solution = variant(f"restart-goodput@{seed}")
    p = {param.name: param.value for param in solution.params}
    mtbf, fixed, cycle, saves, wall = _restart_exact(p)
    lost = fixed + mtbf - saves * cycle
    assert solution.expected["lost_per_restart"] == pytest.approx(lost, rel=1e-12)
    assert solution.expected["restart_loss"] == pytest.approx(lost / wall, rel=1e-12)
    today = (saves * p["ckpt_storage"] + lost) / wall
    assert solution.expected["today_loss"] == pytest.approx(today, rel=1e-12)


def test_restart_regime_compares_the_interval_part_with_the_failure_part(variant):
    """Over 301 seeds: interval-bound exactly when stalls + redone work outweigh the fixed recovery, and no draw
    stalls more than 5% of training time. The first version compared τ/2 with F alone and keyed 112 of 301
    variants the other way (e.g. a 110 s save every 5 minutes as failure-bound)."""
    regimes = Counter()
    for seed in range(301):
        solution = variant(f"restart-goodput@{seed}")
        p = {param.name: param.value for param in solution.params}
        assert p["ckpt_storage"] / p["interval"] <= 0.05
        interval_part, failure_part = _restart_parts(p)
        expected = "interval-bound" if interval_part > failure_part else "failure-bound"
        assert solution.expected["regime"] == expected, seed
        regimes[expected] += 1
    assert min(regimes.values()) >= 30


def test_restart_stall_bound_interval_says_checkpoint_less_often(variant):
    """A 14 s save every 5 minutes stalls 4.4% of the wall clock: the interval is too short, not too long. The
    rewound work alone (2.6 min) is below the 5-minute fixed recovery, yet the interval sets the loss (the
    question file pins interval-bound)."""
    solution = variant("restart-goodput@default+interval=5+ckpt_storage=14")
    interval_part, failure_part = _restart_parts({param.name: param.value for param in solution.params})
    assert interval_part == pytest.approx(0.0477, abs=1e-4)  # 4.41% stalls + 0.36% redone work
    assert interval_part > failure_part  # 0.69%
    assert "checkpoint less often" in solution.sheet.regime.summary


def test_restart_rejects_a_save_that_stalls_a_third_of_training(variant):
    """A 110 s save every 5 minutes (the first version's @42) would stall 37% of training: no team runs that."""
    with pytest.raises(VariantError, match="5% of training"):
        variant("restart-goodput@default+interval=5+ckpt_storage=110")


@pytest.mark.parametrize("seed", [682, 885, 1079, 1188, 2197])
def test_fleet_a_draw_where_every_margin_statement_holds_is_drawn_again(variant, seed):
    """Key check 2: on these seeds' first draws all six margin options held, and the engine raised a
    RuntimeError (an export failed, the app said "No follow-up: RuntimeError"). Such a draw has nothing to
    pick, so it is refused and the seed draws again; what it lists has a true and a false option."""
    solution = variant(f"fleet-gpu-count@{seed}")
    truth = solution.sheet.results["margin"]
    assert {truth[o] for o in solution.shown["margin"]} == {True, False}


def _holding(solution, key):
    return {option for option, holds in solution.sheet.results[key].items() if holds}


def test_restart_async_save_is_named_as_such(variant, catalog):
    """The review: async checkpointing to storage also cuts the stall, so the cheap save is an asynchronous
    one, not "in-memory instead of storage". Re-derivation r2: a save every 40-55 s is doubtful if the
    background copy goes to storage (minutes for a pretraining checkpoint), so it goes to a peer's host memory
    (a gigabyte or two per GPU over the NIC), and an assumption says the copy fits inside the interval. The
    stage quotes no earlier key (a sheet printed whole would give stage 1's answer away)."""
    from solvers.interview import stage_run
    solution = variant("restart-goodput@default")
    run = stage_run(solution, catalog, 2)
    assert run is not None and "young_memory" in run.ask
    assert "host memory, copied to a peer's in the background" in run.say and "instead" not in run.say
    assert "{today_loss}" not in solution.question.stages[2].say
    assert solution.question.answer("young_memory").label == "Best interval, asynchronous saves"
    assert any("inside the asynchronous interval" in a for a in solution.sheet.assumptions)


def test_restart_words_say_the_exact_model(variant, catalog):
    """Re-derivation r2 read the first-order model (R·(F + τ/2), over running time: 25.5% against 22.5% at
    @7301): the opening says the wall clock counts the recoveries, and the boxes say the shares are of wall
    clock and the redone run is its exact mean for memoryless failures, not first order."""
    from solvers.interview import stage_run
    solution = variant("restart-goodput@7301")
    run = stage_run(solution, catalog, 0)
    assert run is not None and "share of wall clock, recoveries in it" in run.say
    question = solution.question
    assert "exact mean for memoryless failures, not first order" in question.answer("lost_per_restart").label
    assert "runs plus recoveries" in question.answer("restart_loss").label
    for key in ("today_loss", "residual"):
        assert "Share of wall clock" in question.answer(key).label
    x = solution.expected
    assert x["restart_loss"] == pytest.approx(0.2251, rel=2e-3)  # 71.26 min / (28.5 min + 4.8 h)


def test_restart_pinned_seed(variant):
    """Seed 7 draws these parameters (its keys are pinned in the question file). Detection's saving sits within
    3% of a fifth of the loss: the draw was refused until such a lever was judged too close to call and left
    unlisted instead; its old redraw is pinned by its parameters."""
    solution = variant("restart-goodput@7")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"restarts": 5, "detect": 6.5, "reschedule": 10, "reload": 3.5, "interval": 10,
                   "ckpt_storage": 11, "ckpt_memory": 0.2}
    detection = "detection in seconds (a watchdog instead of the collective timeout)"
    assert solution.sheet.judged("levers")[detection] is None and detection not in solution.shown["levers"]


def _restart_stage_runs(solution, catalog):
    from solvers.interview import stage_run
    return [run for index in range(len(solution.question.stages))
            if (run := stage_run(solution, catalog, index)) is not None]


def test_restart_push_crosses_from_either_side(variant, catalog):
    """Each side has its push: an hour's rescheduling (no spare node left) tips an interval-bound job; a watchdog,
    booted spares and reloads from peers' memory (a minute's recovery in all) a failure-bound one. Over 60 seeds
    each side is reached, nine draws in ten get their side's declared push (the rest, refused or not crossing,
    the engine's push), and nine in ten cross (validate counts 200)."""
    sides, declared, crossed = Counter(), 0, 0
    for seed in range(60):
        solution = variant(f"restart-goodput@{seed}")
        runs = _restart_stage_runs(solution, catalog)
        assert [run.ask for run in runs[:3]] == [("lost_per_restart", "restart_loss", "today_loss"),
                                                  ("regime", "young_storage"),
                                                  ("young_memory", "residual", "levers")]
        push, side = runs[3], solution.regime_name
        assert push.kind == "push" and push.before == side and "regime" in push.ask
        if push.declared:
            declared += 1
            moved = {name: push.solution.param(name).raw for name in push.moved}
            assert push.ask == ("regime", "today_loss")
            assert moved == ({"reschedule": 60} if side == "interval-bound" else
                             {"detect": 0.25, "reschedule": 0.25, "reload": 0.5})
        sides[side] += 1
        crossed += push.solution.regime_name != side
    assert min(sides.values()) >= 6 and declared >= 54 and crossed >= 54, (sides, declared, crossed)


def test_restart_regime_key_gives_no_later_answer_away(variant, catalog):
    """Stage 2's regime line is shown before stage 3 asks the asynchronous interval and what is left lost: it
    quotes neither (it once said "a cheaper asynchronous save lets the interval shrink to 1.095 min")."""
    for seed in range(0, 120, 4):
        solution = variant(f"restart-goodput@{seed}")
        summary = solution.sheet.regime.summary
        for key in ("young_memory", "residual"):
            symbol = sympy.Symbol(next(step.symbol for step in solution.sheet.steps if step.key == key))
            for digits in (3, 4):
                shown = solution.sheet.text(symbol, digits)
                assert shown not in summary, (seed, key, shown)


# --- fleet-gpu-count -------------------------------------------------------------------------


def _given(solution, symbol):
    return next(g.value for g in solution.sheet.givens if g.symbol == symbol)


def test_fleet_default_matches_catalogue(variant):
    """Llama-3-70B (70.55B) on 15T tokens (the keys are pinned in the question file): its FLOPs are a given from
    training-compute-budget, not re-derived."""
    assert _given(variant("fleet-gpu-count@default"), "F") == pytest.approx(6 * 70.55e9 * 15e12)


def _holding(solution, key):
    return {option for option, holds in solution.sheet.results[key].items() if holds}


def test_fleet_margin_default_is_judged_on_spares_and_restarts(variant):
    """Issue #12: the margin was a bare percentage. At the default the 8,192-GPU job runs on 1,024 nodes: at
    one failure per 240 node-days it sees 1,024/240 = 4.27 failures a day, each costing 15 min, so restarts
    take 4.27 x 15 / 1,440 = 4.44% of its time. Nodes out at once: 1,024 x 3/240 = 12.8 (Little's law); the pool
    12.8 + 2 x sqrt(12.8) = 19.96, up to 20 nodes. The margin holds 1,232/8 = 154 nodes (the judgements are pinned
    in the question file)."""
    results = variant("fleet-gpu-count@default").sheet.results
    assert results["job_nodes"] == 1_024
    assert results["failure_rate"] * DAY == pytest.approx(1_024 / 240)
    assert results["restart_loss"] == pytest.approx(1_024 / 240 * 15 / 1_440)  # 4.44%
    assert results["nodes_down"] == pytest.approx(12.8)
    assert results["spare_pool"] == 20 and results["margin_nodes"] == 154


def test_fleet_margin_short_mtbf_and_long_repairs_outgrow_it(variant):
    """Nodes failing once per 60 days and out for 14 on a 10% margin: 1,024 x 14/60 = 238.9 nodes out, a pool
    of 238.9 + 2 x sqrt(238.9) = 269.8, up to 270, against a margin of 8 x ceil(9,011.2/8) - 8,192 = 824 GPUs,
    103 nodes; 1,024/60 = 17.1 failures a day (the judgements are pinned in the question file)."""
    results = variant("fleet-gpu-count@default+node_mtbf=60+repair=14+margin=10").sheet.results
    assert results["spare_pool"] == 270 and results["margin_nodes"] == 103
    assert results["restart_loss"] == pytest.approx(1_024 / 60 * 15 / 1_440)


def test_fleet_rejects_a_run_that_restarts_away_half_of_its_time(variant):
    """At one failure per 60 node-days and 30 min each, the 16,384-GPU job for 24T tokens (2,048 nodes) would
    lose 2,048/60 x 30/1,440 = 71% of its time: no plan, a recovery problem."""
    with pytest.raises(VariantError, match="more than half"):
        variant("fleet-gpu-count@default+tokens=24+node_mtbf=60+restart_cost=30")


@pytest.mark.parametrize("seed", range(20))
def test_fleet_margin_matches_plain_arithmetic(variant, seed):
    solution = variant(f"fleet-gpu-count@{seed}")
    p = {param.name: param.value for param in solution.params}
    expected = solution.expected
    need, job, fleet = expected["gpus_needed"], expected["job_gpus"], expected["fleet_gpus"]
    nodes, mtbf, repair = job // 8, p["node_mtbf"] / DAY, p["repair"] / DAY
    rate = nodes / mtbf  # failures a day
    loss = rate * p["restart_cost"] / DAY
    down = nodes * repair / mtbf
    pool, doubled = math.ceil(down + 2 * math.sqrt(down)), math.ceil(2 * down + 2 * math.sqrt(2 * down))
    room = (fleet - job) // 8
    assert solution.regime_name == ("margin-holds-spares" if pool <= room else "margin-short")
    truth = {"the margin would still hold the spare pool at twice the failure rate": doubled <= room,
             "the spare pool takes over half of the margin": 2 * pool > room,
             "the round-up's slack absorbs the time restarts cost": job * (1 - loss) >= need,
             "restarts cost the job more than a twentieth of its time": loss > 0.05,
             "the job loses a node more than once every four hours": rate > 6}
    assert solution.sheet.results["margin"] == truth


def test_fleet_margin_judgements_follow_the_variant(variant):
    """Over 200 draws every margin statement holds in some and fails in others, and the right sets differ."""
    sets = Counter()
    for seed in range(200):
        sets[frozenset(_holding(variant(f"fleet-gpu-count@{seed}"), "margin"))] += 1
    options = set().union(*sets)
    assert len(options) == 5 and all(any(option not in held for held in sets) for option in options)
    assert len(sets) >= 8 and max(sets.values()) < 0.5 * 200


def test_fleet_spares_clear_the_margin_by_more_than_a_node(variant):
    """An interviewer reader: @73051 sat on the line (7 spares, 7 margin nodes), so a 99th-percentile pool (8)
    flipped the verdict. Draws within a node are refused; the round-up the regime quotes is whole GPUs (it
    printed '158.6 GPUs'); the prompt gives the pool's rule and the pod and unit sizes the keys use."""
    for seed in range(120):
        solution = variant(f"fleet-gpu-count@{seed}")
        results = solution.sheet.results
        assert abs(results["spare_pool"] - results["margin_nodes"]) > 1, seed
        assert not re.search(r"rule's \d[\d,]*\.\d+ GPUs", solution.sheet.regime.summary), seed
    solution = variant("fleet-gpu-count@default")
    assert "256 GPUs" in solution.prompt and "3,072 GPUs" in solution.prompt
    assert "two standard deviations" in solution.question.stages[2].say


def test_fleet_matches_llama3_405b_flops(variant):
    """Llama 3 405B: 15.6T tokens, published as 3.8e25 FLOPs; 6·N·D with models.yaml's 405.85B agrees (on the
    78 days of the model card's GPU-hours: in 30 it would need 37K GPUs, past the published-scale rule)."""
    solution = variant("fleet-gpu-count@default+model=llama-3.1-405b+tokens=15.6+days=78")
    assert _given(solution, "F") == pytest.approx(3.8e25, rel=0.01)
    assert "training-compute-budget" in solution.sheet.prerequisites


def _job(need, p):
    if p["rule"] == "next-power-of-two":
        return 1 << math.ceil(math.log2(need))
    unit = p["pod"] if p["rule"] == "whole-pods" else p["block"]
    return unit * math.ceil(need / unit)


@pytest.mark.parametrize("seed", range(20))
def test_fleet_matches_plain_arithmetic(variant, seed):
    solution = variant(f"fleet-gpu-count@{seed}")
    p = {param.name: param.value for param in solution.params}
    rate = p["gpu"].bf16_dense_tflops * 1e12 * p["mfu"]
    need = 6 * p["model"].params_b * 1e9 * p["tokens"] / (p["days"] * rate)
    job = _job(need, p)
    fleet = 8 * math.ceil(job * (1 + p["margin"]) / 8)
    assert solution.expected["gpus_needed"] == pytest.approx(need, rel=1e-12)
    assert solution.expected["job_gpus"] == job
    assert solution.expected["fleet_gpus"] == fleet


def test_fleet_job_follows_the_stated_rule_not_a_power_of_two(variant):
    """The review's bug: @7 (Qwen2.5-72B, 29T tokens, 74 days, H100 at 38%) needs 5,263 GPUs and the old key
    rounded it to 8,192 (+56%) as a law. Each rule's job is pinned in the question file; the prompt states the
    variant's rule in words (the review: it printed the slug) rather than teaching one as a law."""
    units = variant("fleet-gpu-count@default+model=qwen2.5-72b+tokens=29+days=74+mfu=38+margin=20"
                    "+rule=whole-scheduler-units")
    assert "up to whole scheduler units" in units.prompt and "whole-scheduler-units" not in units.prompt


@pytest.mark.parametrize(("code", "pushed", "side"), [
    ("default", "default+node_mtbf=60+repair=14", "margin-short"),
    ("default+node_mtbf=60+repair=14+margin=10", "default+node_mtbf=60+repair=1+margin=10", "margin-holds-spares")])
def test_fleet_push_moves_the_failures_across_the_margin(variant, catalog, code, pushed, side):
    """The review: "which adds more, the rounding or the margin" was not a decision anyone makes. The regime is
    whether the margin holds the spare pool; a bad quarter (four times the failures, RMAs of two weeks) pushes a
    covered plan short, an on-site depot (repairs in a day) a short one back."""
    from solvers.interview import stage_run
    solution = variant(f"fleet-gpu-count@{code}")
    index = next(i for i, stage in enumerate(solution.question.stages)
                 if stage.push and stage.when == solution.regime_name)
    run = stage_run(solution, catalog, index)
    assert run is not None and str(run.solution.code) == f"fleet-gpu-count@{pushed}" and run.regime == side


def test_fleet_needs_stay_within_published_scale(variant):
    """The review's @162 keyed a 55,720-A100 need and a 65,536-GPU job. Needs now stay within the 24,576 GPUs of
    the largest published pretraining clusters, so every fleet is under 40K."""
    for seed in range(301):
        expected = variant(f"fleet-gpu-count@{seed}").expected
        assert expected["gpus_needed"] <= 24_576, seed
        assert expected["job_gpus"] < expected["fleet_gpus"] <= 40_000, seed
    with pytest.raises(VariantError, match="published_scale"):
        variant("fleet-gpu-count@default+model=llama-3-70b+tokens=22+days=20+gpu=a100-sxm-80gb+mfu=31")


def test_fleet_rejects_rounding_a_small_job_to_a_pod(variant):
    """Llama-3-8B on 2T tokens in 30 days needs about 160 H100s: no one rounds that to a 3,072-GPU pod."""
    with pytest.raises(VariantError, match="smaller than one pod"):
        variant("fleet-gpu-count@default+model=llama-3-8b+tokens=2+rule=whole-pods")


# --- nic-bandwidth-per-gpu -------------------------------------------------------------------


def test_nic_default_shows_both_windows(variant):
    """Llama-3-70B, TP 8 x PP 4, 128 replicas of 16 x 8,192-token micro-batches on H100 at 40% MFU (the two
    windows' bandwidths are pinned in the question file): the backward both windows divide."""
    results = variant("nic-bandwidth-per-gpu@default").sheet.results
    assert results["backward_time"] == pytest.approx(4 * 70.55e9 / 32 * 16 * 8192 / (989.4e12 * 0.4))  # 2.92 s


def test_nic_strict_need_does_not_depend_on_the_batch_or_the_shard(variant):
    """The port speed follows from one sequence's backward: (d−1)/d·P·MFU/S, whatever the micro-batch count,
    the model or the pipeline; the whole-step bound falls with the batch. key-check-2: the key added a
    stage-boundary send the prompt never mentions (the verdict flipped at @189, @370, @766, @986); the window
    graded is the first stage's, which has no earlier stage to send an activation gradient back to."""
    base = variant("nic-bandwidth-per-gpu@default").sheet.results
    assert base["bandwidth"] == pytest.approx(127 * 989.4e12 * 0.4 / (128 * 8192), rel=1e-12)
    fewer = variant("nic-bandwidth-per-gpu@default+microbatches=4").sheet.results
    assert fewer["bandwidth"] == pytest.approx(base["bandwidth"])
    assert fewer["bandwidth_step"] == pytest.approx(4 * base["bandwidth_step"], rel=0.01)
    for override in ("+model=llama-3.1-405b+pp=16", "+pp=8", "+pp=2"):
        other = variant(f"nic-bandwidth-per-gpu@default{override}").sheet.results
        assert other["bandwidth"] == pytest.approx(base["bandwidth"], rel=1e-12)
    # key-check-2's @189, by its parameters: 399.5 of 400 Gb/s, hidden only by the ring's 63/64 (read as 1, past
    # the line): refused as too close; a point lower it is hidden whichever way the ring is read.
    with pytest.raises(VariantError, match="too close to the line"):
        variant("nic-bandwidth-per-gpu@default+pp=16+dp=64+mfu=42")
    assert variant("nic-bandwidth-per-gpu@default+pp=16+dp=64+mfu=41").expected["regime"] == "comms-hidden"


def test_nic_share_survives_the_ring_read_as_two(variant):
    """An interviewer reader: near the line the share is a small difference (0.048% @73051), and reading the
    ring's 2(d−1)/d as 2 moved it 72%. Where the first stage's 2% accepts that reading (d ≥ 51), a draw is
    refused unless the share (or the verdict) survives it within the share's 10%; a bit/byte slip on the step
    moves only the wait past the window, not the whole step."""
    checked = 0
    for seed in range(150):
        sol = variant(f"nic-bandwidth-per-gpu@{seed}")
        r, d = sol.sheet.results, sol.param("dp").value
        if d < 51:
            continue
        checked += 1
        rough = max(r["comm_time"] * d / (d - 1) - r["micro_backward"], 0)
        assert (rough == 0) == (r["exposed_share"] == 0), seed
        if rough:
            share = rough / (r["pipeline_time"] + rough)
            assert share == pytest.approx(r["exposed_share"], rel=0.1), seed
    assert checked > 30
    at_50 = variant("nic-bandwidth-per-gpu@default+mfu=50").sheet
    slips = {slip.label[:2]: slip.factor for slip in at_50.slips["step_time"]}
    assert slips["x8"] == pytest.approx((4.162 + 8 * 0.175 - 0.14603) / 4.1909, rel=1e-3)


def test_nic_ring_volume_matches_nccl_bus_bandwidth(variant):
    """nccl-tests PERFORMANCE.md: an all-reduce's bus bandwidth is algbw × 2(n−1)/n, i.e. each rank sends
    2(n−1)/n of the buffer. With 64 replicas that is 1.97 x the gradient bytes."""
    results = variant("nic-bandwidth-per-gpu@default+dp=64").sheet.results
    assert results["bytes_per_step"] / results["grad_bytes"] == pytest.approx(2 * 63 / 64)


def test_nic_pipeline_has_at_least_a_sequence_per_stage(variant):
    """The review: the first version drew PP 8-16 with a few thousand tokens per replica, fewer micro-batches
    than stages in 46% of draws. The bank's microbatches-cover-stages rule now holds in every draw, and a
    batch past 16M tokens is refused."""
    for seed in range(200):
        p = {param.name: param.value for param in variant(f"nic-bandwidth-per-gpu@{seed}").params}
        assert p["microbatches"] >= p["pp"], seed
        assert 2**20 <= p["dp"] * p["microbatches"] * p["seq"] <= 2**24, seed
    with pytest.raises(VariantError, match="micro-batches"):
        variant("nic-bandwidth-per-gpu@default+pp=16+microbatches=8")


def _one_f_one_b(stages: int, micro: int, fwd: float, bwd: float) -> list[tuple[float, float]]:
    """Each stage's last backward (start, end) under the one-forward-one-backward schedule, simulated: a stage
    runs its warm-up forwards, then alternates a backward and a forward, each op waiting for its input from the
    neighbouring stage and for the stage itself to be free."""
    f_end: dict[tuple[int, int], float] = {}
    b_end: dict[tuple[int, int], float] = {}
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, micro)
        order = [("F", i) for i in range(warm)]
        for i in range(micro - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(micro - warm, micro)]
        orders.append(order)
    free, pos, last = [0.0] * stages, [0] * stages, [(0.0, 0.0)] * stages
    while any(pos[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while pos[s] < len(orders[s]):
                kind, i = orders[s][pos[s]]
                if kind == "F":
                    ready = f_end.get((s - 1, i)) if s else 0.0
                else:
                    ready = b_end.get((s + 1, i)) if s < stages - 1 else f_end.get((s, i))
                if ready is None:
                    break
                start = max(free[s], ready)
                free[s] = start + (fwd if kind == "F" else bwd)
                (f_end if kind == "F" else b_end)[(s, i)] = free[s]
                if kind == "B" and i == micro - 1:
                    last[s] = (start, free[s])
                pos[s] += 1
                progressed = True
        assert progressed
    return last


@pytest.mark.parametrize("code", ["default", "default+gpu=b200", "default+mfu=50", "7", "42", "101", "150"])
def test_nic_step_matches_a_simulated_one_f_one_b_step(variant, code):
    """The closed form, (m + PP − 1) slots of 1.5 × the last backward plus what of the reduction outruns that
    backward, against the schedule simulated stage by stage: every stage starts its reduction with its last
    backward, and the step ends when the last reduction and the last backward have. The first stage's window
    binds: the later stages' last backwards end earlier."""
    solution = variant(f"nic-bandwidth-per-gpu@{code}")
    p = {param.name: param.value for param in solution.params}
    r = solution.sheet.results
    bwd = r["micro_backward"]  # s, as every result
    last = _one_f_one_b(p["pp"], p["microbatches"], bwd / 2, bwd)
    comm = r["comm_time"]
    end = max(max(stop, start + comm) for start, stop in last)
    assert end == pytest.approx(r["step_time"], rel=1e-9)
    assert last[0][1] == pytest.approx(max(stop for _, stop in last))
    assert r["exposed_share"] == pytest.approx(max(0.0, last[0][0] + comm - last[0][1]) / end, abs=1e-12)


def test_nic_pushes_move_the_port_or_the_gpu_with_the_side(variant):
    """The review: exposed was never priced and the engine's push at @7 did not cross. A hidden job moves to B200
    on the same 400G port (DGX B200's): exposed, a few percent of the step; an exposed one gets 800G: hidden."""
    hidden = variant("nic-bandwidth-per-gpu@default")
    assert hidden.regime_name == "comms-hidden"
    b200 = variant("nic-bandwidth-per-gpu@default+gpu=b200")
    assert b200.regime_name == "comms-exposed"
    assert 0.02 < b200.expected["exposed_share"] < 0.06
    exposed = variant("nic-bandwidth-per-gpu@default+mfu=50")
    assert exposed.regime_name == "comms-exposed" and exposed.expected["exposed_share"] < 0.01
    assert variant("nic-bandwidth-per-gpu@default+mfu=50+nic=connectx-8").regime_name == "comms-hidden"


# --- cluster-bill-of-materials ---------------------------------------------------------------


def test_bom_default_matches_catalogue(variant):
    """Llama 3.1 405B on 15T tokens in 110 days on H100 at 40% MFU (the keys are pinned in the question file):
    the steps beside them, 1,214 job nodes, the fat tree's tiers and a ≈5 TB checkpoint."""
    results = variant("cluster-bill-of-materials@default").sheet.results
    need = 6 * 405.85e9 * 15e12 / (110 * DAY * 989.4e12 * 0.40)
    assert results["job_nodes"] == math.ceil(need / 8) == 1_214
    assert results["nodes_down"] == pytest.approx(1_214 * 3 / 240)  # Little's law: 15.2 nodes out at any moment
    # 320 leaves (32 GPUs down, 32 up) + 320 spines + 10,240 uplinks / 2 (2:1) / 64 ports = 80 core.
    assert (results["leaves"], results["spines"], results["core"]) == (320, 320, 80)
    assert results["checkpoint"] == pytest.approx(405.85e9 * 12)  # 4.87 TB


def test_bom_derives_the_gpus_and_the_spares(variant):
    """The review: the GPU count was given, not derived from the FLOPs, and there was no spare pool. The FLOPs
    come from training-compute-budget; a longer repair time grows the pool (7 days: 35.4 nodes down, the 48
    spares pinned in the question file)."""
    solution = variant("cluster-bill-of-materials@default")
    assert "training-compute-budget" in solution.sheet.prerequisites
    assert "gpus" not in {param.name for param in solution.params}
    assert variant("cluster-bill-of-materials@default+repair=7+window=30").sheet.results["nodes_down"] == (
        pytest.approx(1_214 * 7 / 240))


@pytest.mark.parametrize("radix", [64, 128])
def test_bom_matches_full_k_ary_fat_tree(radix):
    """Al-Fares et al. (SIGCOMM 2008): a full fat tree of k-port switches has k³/4 hosts and 5k²/4 switches;
    two tiers reach k²/2 hosts with 3k/2 switches."""
    from solvers.derivation import Sheet
    from solvers.formulas.fleet import fat_tree_switches

    for hosts, tiers, switches in ((radix**3 // 4, True, 5 * radix**2 // 4), (radix**2 // 2, False, 3 * radix // 2)):
        sheet = Sheet()
        E, k, r = sheet.given("E", hosts), sheet.given("k", radix), sheet.given("r", 1)
        assert sheet.value(fat_tree_switches(sheet, E, k, r, tiers)) == switches


@pytest.mark.parametrize("seed", range(20))
def test_bom_matches_plain_arithmetic(variant, seed):
    solution = variant(f"cluster-bill-of-materials@{seed}")
    p = {param.name: param.value for param in solution.params}
    k = p["radix"]
    need = 6 * p["model"].params_b * 1e9 * p["tokens"] / (p["days"] * 989.4e12 * p["mfu"])
    job = math.ceil(need / 8)
    down = job * p["repair"] / p["node_mtbf"]
    wanted = 8 * (job + math.ceil(down + 2 * math.sqrt(down)))
    if wanted > k * k // 2:
        gpus = (k // 2) ** 2 * math.ceil(wanted / (k // 2) ** 2)
        pods = gpus // (k // 2) ** 2
        switches = 2 * gpus // (k // 2) + math.ceil(gpus / (p["oversub"] * k))
    else:
        gpus = k // 2 * math.ceil(wanted / (k // 2))
        leaves = gpus // (k // 2)
        switches, pods = leaves + _spines_two_tier(leaves), 1
    assert solution.sheet.results["gpus"] == gpus
    assert solution.expected["switches"] == switches
    assert solution.expected["pods"] == pods
    it_power = gpus / 8 * p["node_kw"] + switches * k * p["port_w"]
    assert solution.expected["it_power"] == pytest.approx(it_power, rel=1e-12)


def _spines_two_tier(leaves: int) -> int:
    """Each leaf spreads its uplinks evenly, so the spines divide k/2 (a power of two): the least one ≥ leaves/2."""
    return 1 << (math.ceil(leaves / 2) - 1).bit_length()


# @9101's draw before the token range reached 1T, by its parameters.
NINE_ONE_O_ONE = "default+model=llama-3-70b+tokens=6.5+days=40+mfu=47+radix=64+repair=3+node_mtbf=340+oversub=2"


@pytest.mark.parametrize("seed", [*range(30), NINE_ONE_O_ONE])
def test_bom_hint_counts_the_switches_the_key_counts(variant, seed):
    """Hint 3, followed: leaves = GPUs ÷ (k/2); two tiers, spines the least power of two ≥ leaves/2 (each leaf's
    k/2 uplinks spread evenly: an interviewer reader found 39 leaves of 32 uplinks on 20 spines, which cannot be
    wired evenly); three, spines = leaves and a core of the spine uplinks ÷ oversubscription ÷ k. It said
    "spines = leaves" for both and gave 110 switches at @9101 (1,760 GPUs on 64-port switches: 55 leaves, now 32
    spines, 87 in the key; that draw by its parameters)."""
    solution = variant(f"cluster-bill-of-materials@{seed}")
    p, results = {param.name: param.value for param in solution.params}, solution.sheet.results
    k, gpus = p["radix"], solution.sheet.results["gpus"]
    leaves = gpus // (k // 2)
    if results["regime"] == "two-tier":
        switches = leaves + _spines_two_tier(leaves)
    else:
        switches = 2 * leaves + math.ceil(leaves * (k // 2) / p["oversub"] / k)
    assert "least power of two ≥ leaves/2" in solution.question.stages[1].hints[1]
    assert solution.expected["switches"] == switches
    if seed == NINE_ONE_O_ONE:
        assert (leaves, switches) == (55, 87)


def test_bom_fabric_stage_defines_the_pod(variant, catalog):
    """The key counts pods of (k/2)² GPUs under a core tier and one pod for a two-tier fabric bought leaf by
    leaf: the stage that asks for the fabric says how it is bought, and its hint what a pod is."""
    from solvers.interview import stage_run
    solution = variant("cluster-bill-of-materials@default+radix=128+days=120+tokens=10")
    run = stage_run(solution, catalog, 1)
    assert run is not None and "whole pods (leaves, if two tiers do)" in run.say
    assert "(k/2)² GPUs" in solution.question.stages[1].hints[0]


def test_bom_larger_switch_option_is_not_listed_on_a_fabric_that_has_it(variant):
    """The review (@42): "with 128-port switches this fabric would need only two tiers" was listed on fabrics
    already built of 128-port switches. There it asks about nothing: judged undecidable, never listed."""
    option = "with {big_radix}-port switches this fabric would need only two tiers"
    big = variant("cluster-bill-of-materials@default+radix=128")
    assert big.sheet.judged("bom")[option] is None and option not in big.shown["bom"]
    assert variant("cluster-bill-of-materials@default").sheet.judged("bom")[option] is False


def test_bom_pod_loss_is_asked_only_of_a_fabric_of_pods(variant):
    """An interviewer reader: the select paired "losing one pod would shrink the job" with its exact complement,
    and in two-tier draws both were settled by "a two-tier fabric is one pod". One option is left, asked only
    under a core tier; a run short of compute-optimal tokens (405B on 1T, the old push) is no plan and refused."""
    option = "the job keeps its full size with one whole pod out"
    assert "losing one whole pod would shrink the job" not in variant("cluster-bill-of-materials@default").question \
        .answer("bom").pool
    two = variant("cluster-bill-of-materials@default+model=llama-3-70b+tokens=3+days=30")
    assert two.regime_name == "two-tier" and two.sheet.judged("bom")[option] is None
    assert option not in two.shown["bom"]
    assert variant("cluster-bill-of-materials@default").sheet.judged("bom")[option] is False
    with pytest.raises(VariantError, match="compute_optimal"):
        variant("cluster-bill-of-materials@default+tokens=1")


def test_bom_power_says_which_is_it_and_which_is_site(variant):
    """The teaser's "14 MW" is the IT load (13.98 MW); the site feed at PUE 1.2 is 16.8 MW."""
    steps = {step.key: step for step in variant("cluster-bill-of-materials@default").sheet.steps}
    assert "before cooling" in steps["it_power"].why and "feed" in steps["facility_power"].title


def test_restart_goodput_never_keys_a_lever_on_a_knife_edge(variant):
    """An independent check found a lever keyed ✗ at 2.5000% against a bar of 2.5003% (seed 44): a lever within
    3% of a fifth of the loss is judged too close to call and never listed, so every listed reason quotes a
    saving at least 3% from the bar, and each unlisted one a saving within it; some draws have one."""
    unlisted = 0
    for seed in range(0, 150, 3):
        solution = variant(f"restart-goodput@{seed}")
        judged, reasons = solution.sheet.judged("levers"), solution.sheet.reasons["levers"]
        for option, why in reasons.items():
            win, bar = (float(x) for x in re.findall(r"([\d.]+)%", why)[:2])
            if judged[option] is None:
                unlisted += 1
                assert option not in solution.shown["levers"] and abs(win / bar - 1) <= 0.04, (seed, why)
            else:
                assert abs(win / bar - 1) >= 0.02, (seed, why)  # 3% before rounding to three figures
    assert unlisted >= 1


def _restart_timeline(mtbf: float, recovery: float, interval: float, stall: float, failures: int,
                      rng: random.Random) -> tuple[float, float]:
    """A job's wall clock, failure by failure: it computes `interval`, stalls `stall` to save, and so on; a failure
    (Poisson, mean gap `mtbf` of running time) costs the fixed recovery plus the work since the last completed
    save (a save cut short saves nothing). Returns the shares of the wall clock lost to restarts and to the
    completed saves' stalls."""
    lost = stalls = wall = 0.0
    for _ in range(failures):
        running = rng.expovariate(1 / mtbf)  # running time until the next failure
        lost += recovery + running % (interval + stall)  # all since the last completed save
        stalls += running // (interval + stall) * stall
        wall += running + recovery
    return lost / wall, stalls / wall


def test_restart_loss_matches_a_simulated_failure_timeline(variant):
    """A simulated timeline of 20,000 failures per seed agrees with restart_loss and today_loss within 1.5% (about
    two standard errors of the sampling). The first-order key R·(F + τ/2) missed by up to 10% (@4: 16.6% against
    15.0% simulated): recovery is wall clock too, and the stall is part of the rewound cycle."""
    off = {}
    for seed in range(20):
        solution = variant(f"restart-goodput@{seed}")
        results = solution.sheet.results
        interval, stall = solution.param("interval").value, solution.param("ckpt_storage").value
        restarts, stalls = _restart_timeline(results["mtbf"], results["fixed_recovery"], interval, stall, 20_000,
                                             random.Random(seed))
        for key, simulated in (("restart_loss", restarts), ("today_loss", restarts + stalls)):
            if abs(simulated / results[key] - 1) > 0.015:
                off[seed, key] = simulated / results[key] - 1
    assert not off, off
