"""restart-goodput: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math
import random
import re
from collections import Counter

import numpy as np
import pytest
import sympy

from solvers.engine import VariantError
from tests.by_hand import HOUR, MIN, param_values


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
    p = param_values(solution)
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
        p = param_values(solution)
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
    p = param_values(solution)
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
        p = param_values(solution)
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
    interval_part, failure_part = _restart_parts(param_values(solution))
    assert interval_part == pytest.approx(0.0477, abs=1e-4)  # 4.41% stalls + 0.36% redone work
    assert interval_part > failure_part  # 0.69%
    assert "checkpoint less often" in solution.sheet.regime.summary


def test_restart_rejects_a_save_that_stalls_a_third_of_training(variant):
    """A 110 s save every 5 minutes (the first version's @42) would stall 37% of training: no team runs that."""
    with pytest.raises(VariantError, match="5% of training"):
        variant("restart-goodput@default+interval=5+ckpt_storage=110")


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
    clock. (rf-t: the label no longer dictates the exact mean over the first order; the keys accept both.)"""
    from solvers.interview import stage_run
    solution = variant("restart-goodput@7301")
    run = stage_run(solution, catalog, 0)
    assert run is not None and "of wall clock (recoveries included)" in run.say
    question = solution.question
    assert "first order" not in question.answer("lost_per_restart").label
    assert "runs plus recoveries" in question.answer("restart_loss").label
    for key in ("today_loss", "residual"):
        assert "Share of wall clock" in question.answer(key).label
    x = solution.expected
    assert x["restart_loss"] == pytest.approx(0.2251, rel=2e-3)  # 71.26 min / (28.5 min + 4.8 h)


def test_restart_seed_7_leaves_detection_unlisted(variant):
    """Seed 7 draws these parameters (its keys are pinned in the question file). Detection's saving sits within
    3% of a fifth of the loss: the draw was refused until such a lever was judged too close to call and left
    unlisted instead; its old redraw is pinned by its parameters."""
    solution = variant("restart-goodput@7")
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


def test_restart_goodput_never_keys_a_lever_on_a_knife_edge(variant):
    """An independent check found a lever keyed ✗ at 2.5000% against a bar of 2.5003% (seed 44): a lever within
    8% of a fifth of the loss (rf-t: 3% until the keys accepted the half-cycle estimate, which moves a win by
    up to about 5%; @77 keyed one 6% short) is judged too close to call and never listed, so every listed
    reason quotes a saving at least 8% from the bar, and each unlisted one a saving within it."""
    unlisted = 0
    for seed in range(0, 150, 3):
        solution = variant(f"restart-goodput@{seed}")
        judged, reasons = solution.sheet.judged("levers"), solution.sheet.reasons["levers"]
        for option, why in reasons.items():
            win, bar = (float(x) for x in re.findall(r"([\d.]+)%", why)[:2])
            if judged[option] is None:
                unlisted += 1
                assert option not in solution.shown["levers"] and abs(win / bar - 1) <= 0.09, (seed, why)
            else:
                assert abs(win / bar - 1) >= 0.07, (seed, why)  # 8% before rounding to three figures
    assert unlisted >= 1


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


def test_restart_keys_accept_the_half_cycle_answer(variant):
    """rf-t #1: the opening's label demanded "the redone run's exact mean for memoryless failures, not first
    order", graded to 2%, so F + (τ + C)/2 (what a strong candidate says, and the order Young's rule itself
    works to) failed in 16% of draws (@42: 63.3 against 60.7 min). The keys now take 4% (5% for the total, whose
    stall share also moves) and a draw where half a cycle is further off is refused."""
    for seed in range(0, 200, 2):
        solution = variant(f"restart-goodput@{seed}")
        r, p = solution.sheet.results, {param.name: param.value for param in solution.params}
        F, M, tau, C = r["fixed_recovery"], r["mtbf"], p["interval"], p["ckpt_storage"]
        half = F + (tau + C) / 2
        assert abs(half / r["lost_per_restart"] - 1) <= 0.04, seed
        assert abs(half / (M + F) / r["restart_loss"] - 1) <= 0.04, seed
        first_order_total = (C / (tau + C) * M + half) / (M + F)
        assert abs(first_order_total / r["today_loss"] - 1) <= 0.05, seed
    question = variant("restart-goodput@default").question
    tolerances = {key: question.answer(key).tolerance for key in ("lost_per_restart", "restart_loss", "today_loss")}
    assert tolerances == {"lost_per_restart": 0.04, "restart_loss": 0.04, "today_loss": 0.05}


def test_restart_push_labels_do_not_say_today(variant):
    """rf-t #5: the push re-asks the regime and the total loss after the change, under labels that said "today"."""
    question = variant("restart-goodput@default").question
    for key in ("regime", "today_loss"):
        assert "today" not in question.answer(key).label
