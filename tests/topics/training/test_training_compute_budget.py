"""training-compute-budget: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from solvers.topics.training.training_compute_budget import least_loss_interval
from tests.by_hand import DAY, param_values

# Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): 466 interruptions in 54 days on 16,384 H100.
LLAMA3_RATE_PER_GPU_DAY = 466 / (54 * 16_384)


def _wall_clock_by_hand(p: dict) -> tuple[float, float]:
    """Compute seconds and wall-clock seconds: W = T_c (1 + C/tau) + a W (R + tau/2), a per second of the job."""
    compute = 6 * p["params"] * p["tokens"] / (p["gpus"] * p["gpu"].bf16_dense_tflops * 1e12 * p["mfu"])
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    stall = 16 * p["params"] / p["ckpt_bw"]  # the whole training state written at the storage's rate
    wall = compute * (1 + stall / p["ckpt_interval"]) / (1 - rate * (p["restart"] + p["ckpt_interval"] / 2))
    return compute, wall


def test_compute_budget_default_matches_catalogue(variant):
    """400B x 10T on 16,384 H100 at 40% MFU: ~43 days (the keys are pinned in the question file), ~380
    interruptions over those compute days."""
    results = variant("training-compute-budget@default").sheet.results
    days = 2.4e25 / (16_384 * 989.4e12 * 0.40) / DAY
    # The catalogue's "about 380" counts the compute days; Llama 3's own rate gives 370, 2.7% below it.
    assert results["interruptions_compute"] == pytest.approx(16_384 * days * LLAMA3_RATE_PER_GPU_DAY)
    assert results["interruptions_compute"] == pytest.approx(380, rel=0.05)


def test_compute_budget_more_gpus_fail_more_often(variant):
    """Doubling the GPUs halves the compute days but doubles the interruptions per day: the schedule
    shrinks by less than half."""
    full = variant("training-compute-budget@default").expected
    double = variant("training-compute-budget@default+gpus=32768+slack=25").expected
    assert double["days"] == pytest.approx(full["days"] / 2)
    assert full["wall_days"] / 2 < double["wall_days"] < full["wall_days"]


def _wall(compute: float, stall: float, interval: float, rate: float, restart: float) -> float:
    return compute * (1 + stall / interval) / (1 - rate * (restart + interval / 2))


def _least_loss_by_search(compute: float, stall: float, rate: float, restart: float) -> float:
    """The interval with the least wall-clock, found by a golden-section search on W(τ) (no closed form)."""
    lo, hi = 1e-3 * stall + 1.0, (1 / rate - restart) * 2 * 0.999
    for _ in range(200):
        a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        if _wall(compute, stall, a, rate, restart) < _wall(compute, stall, b, rate, restart):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


@pytest.mark.parametrize("seed", ["default", *range(20)])
def test_compute_budget_levers_win_back_a_share_of_the_lost_days(variant, seed):
    """Reader: 'four times the GPUs' held in every listing and options sat at 4.93% against a 5% line. Each lever
    is judged in plain Python on the share of the lost days (wall minus compute) it wins back, 20% or more; one
    within two points of the line is not listed."""
    solution = variant(f"training-compute-budget@{seed}")
    p = param_values(solution)
    compute, wall = _wall_clock_by_hand(p)
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    C, tau, R = 16 * p["params"] / p["ckpt_bw"], p["ckpt_interval"], p["restart"]
    best = _least_loss_by_search(compute, C, rate, R)
    after = {
        "checkpointing twice as often": _wall(compute, C, tau / 2, rate, R),
        "checkpointing half as often": _wall(compute, C, 2 * tau, rate, R),
        "halving the restart time": _wall(compute, C, tau, rate, R / 2),
        "asynchronous checkpoint saves (no stall)": _wall(compute, 0, tau, rate, R),
        "checkpointing at the interval that loses the least time": _wall(compute, C, best, rate, R),
    }
    judged = solution.sheet.results["levers"]
    assert set(judged) == set(after)  # no lever anyone lacks (four times the GPUs) is in the pool
    for option, new_wall in after.items():
        won = (wall - new_wall) / (wall - compute)
        assert judged[option] == (None if abs(won - 0.2) < 0.02 else won >= 0.2), option


def test_compute_budget_levers_label_reads_the_solvers_share(variant):
    """The label's share is the parameter the solver compares against, and says what it is a share of."""
    solution = variant("training-compute-budget@default")
    assert solution.question.answer("levers").shown_label == \
        "Which of these would win back 20% or more of the days lost to checkpoints and failures?"


@pytest.mark.parametrize("seed", range(20))
def test_compute_budget_matches_plain_arithmetic(variant, seed):
    solution = variant(f"training-compute-budget@{seed}")
    p = param_values(solution)
    compute, wall = _wall_clock_by_hand(p)
    assert solution.expected["flops"] == pytest.approx(6 * p["params"] * p["tokens"], rel=1e-12)
    assert solution.expected["days"] == pytest.approx(compute, rel=1e-12)
    assert solution.expected["wall_days"] == pytest.approx(wall, rel=1e-12)
    interruptions = p["gpus"] * wall / DAY * LLAMA3_RATE_PER_GPU_DAY
    assert solution.expected["interruptions"] == math.floor(interruptions + 0.5)  # a count: whole interruptions
    deadline = compute * (1 + p["slack"])
    assert (solution.expected["regime"] == "fits-deadline") == (wall <= deadline)
    assert 5 * DAY <= compute <= 200 * DAY  # days to months: a plan, not hours or years
    # The deadline is never settled by compute alone: the stalls and failures decide it.
    assert compute < deadline
    assert 20 <= p["tokens"] / p["params"] <= 2000  # Chinchilla's 20 to Llama 3 8B's ~1,900 tokens a parameter


@pytest.mark.parametrize("seed", range(40))
def test_compute_budget_replica_is_the_least_power_of_two_that_holds_the_state(variant, seed):
    """16 bytes a parameter over the share of HBM (as the device reports it) kept for state: the replica is
    the least power of two of GPUs that holds it, so half as many would not."""
    solution = variant(f"training-compute-budget@{seed}")
    p = param_values(solution)
    room = p["state_share"] * p["gpu"].hbm_mib * 2**20
    mp = solution.expected["mp_gpus"]
    assert math.log2(mp).is_integer()
    assert mp * room >= 16 * p["params"] > mp / 2 * room


def test_compute_budget_says_which_hbm_sizes_the_replica(variant):
    """Review r12: at @52014 (140B on B200s) the state fills 15.5 GPUs of the reported 183,359 MiB (192.3e9 B),
    so 16, but 16.6 of the 180 GB label, so 32; the words said "each GPU's HBM". They say the device's figure, not
    the label, and the label's 32 is the slip the key names."""
    solution = variant("training-compute-budget@52014")
    words = " ".join(solution.question.stages[1].say.split())
    assert "HBM as the device reports it, not its label" in words
    p = param_values(solution)
    state = 16 * p["params"]
    assert state / (p["state_share"] * p["gpu"].hbm_mib * 2**20) == pytest.approx(15.53, abs=0.01)
    assert state / (p["state_share"] * p["gpu"].hbm_gb * 1e9) == pytest.approx(16.59, abs=0.01)
    assert solution.expected["mp_gpus"] == 16
    slips = {slip.label: slip.factor for slip in solution.sheet.slips["mp_gpus"]}
    assert slips["HBM read at its datasheet label, not as the device reports it"] == 2


def test_compute_budget_refuses_a_schedule_on_its_deadline(variant):
    """The default's 47.85 wall-clock days against 12% (47.98 days) or 15% (49.27 days) over its 42.84 compute
    days is inside the 3% a wall-clock answer may miss by: no fit to grade; 20% (51.41 days) is outside it and
    fits, 8% (46.27 days) misses."""
    for slack in (12, 15):
        with pytest.raises(VariantError, match="within the wall-clock's tolerance"):
            variant(f"training-compute-budget@default+slack={slack}")
    assert variant("training-compute-budget@default").expected["regime"] == "fits-deadline"
    assert variant("training-compute-budget@default+slack=8").expected["regime"] == "misses-deadline"


@pytest.mark.parametrize("seed", range(30))
def test_compute_budget_regime_why_names_what_decides(variant, seed):
    """The key's why says what the stalls and failures took against what was allowed, from the same figures:
    a miss is never put down to compute (the allowance is over the compute days)."""
    solution = variant(f"training-compute-budget@{seed}")
    results = solution.sheet.results
    summary = solution.sheet.regime.summary
    lost = float(results["wall_days"] - results["days"]) / DAY
    assert f"{lost:.4g}"[:3] in summary
    missed = "more than the" in summary or "against the" in summary
    assert missed == (solution.expected["regime"] == "misses-deadline")


@pytest.mark.parametrize("seed", ["default", "default+restart=30", *range(30)])
def test_compute_budget_least_loss_interval_never_loses_time(variant, seed):
    """Reader (read7, 1): the option 'checkpointing at the interval that loses the least time' was priced at Young's
    √(2·C·MTBF) and lost 0.018 days in the default push (R = 30 min). It is now the exact minimum of W(τ): it
    matches a numeric search and never loses time against today's interval."""
    solution = variant(f"training-compute-budget@{seed}")
    p = param_values(solution)
    compute, wall = _wall_clock_by_hand(p)
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    C = 16 * p["params"] / p["ckpt_bw"]
    best = _least_loss_by_search(compute, C, rate, p["restart"])
    closed = least_loss_interval(C, rate, p["restart"])
    assert float(closed) == pytest.approx(best, rel=1e-4)
    assert _wall(compute, C, float(closed), rate, p["restart"]) <= wall * (1 + 1e-12)
    why = solution.sheet.reasons["levers"]["checkpointing at the interval that loses the least time"]
    assert "more lost" not in why, why


def test_compute_budget_default_push_least_loss_interval_is_below_young(variant):
    """At R = 30 min the optimum is 11.56 min, under Young's 13.34: the restart's share pulls it down."""
    solution = variant("training-compute-budget@default+restart=30")
    p = param_values(solution)
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    C = 16 * p["params"] / p["ckpt_bw"]
    assert float(least_loss_interval(C, rate, p["restart"])) / 60 == pytest.approx(11.56, rel=1e-3)
    assert math.sqrt(2 * C / rate) / 60 == pytest.approx(13.34, rel=1e-3)


@pytest.mark.parametrize("seed", ["default", *range(20)])
def test_compute_budget_stall_is_the_state_over_the_write_bandwidth(variant, seed):
    """Reader (read7, 2): the stall was drawn with no link to the state (0.5 min for 6.4 TB, 5 min for 240 GB).
    It is now the 16 B a parameter written at the drawn bandwidth, and the interval a team would set from it."""
    solution = variant(f"training-compute-budget@{seed}")
    p = param_values(solution)
    stall = 16 * p["params"] / p["ckpt_bw"]
    assert float(solution.sheet.results["ckpt_write"]) == pytest.approx(stall, rel=1e-12)
    assert 20e9 <= p["ckpt_bw"] <= 2000e9
    young = math.sqrt(2 * stall * DAY / (p["gpus"] * LLAMA3_RATE_PER_GPU_DAY))
    assert young / 3 <= p["ckpt_interval"] <= 3 * young


def test_compute_budget_push_gives_a_reason_and_no_ratio_against_a_bound(variant):
    """Reader (read7, 3, 5, 6, 7): the push speaks as an interviewer, not the engine's template; the replica's key
    names ZeRO-1; Meta's 16.7 min is an upper bound, said in the assumptions, not graded as a ratio; the A100 and
    B200 fleets are taken to fail at the H100 rate, said."""
    solution = variant("training-compute-budget@default")
    push = solution.question.stages[-1]
    assert "Let's change" not in push.say and "ops review" in push.say
    assert [r.answer for r in solution.question.reality] == ["wall_days"]
    steps = {step.key: step for step in solution.sheet.steps if step.key}
    assert "ZeRO-1" in steps["mp_gpus"].why
    assumptions = " ".join(solution.sheet.assumptions)
    assert "16.7 min" in assumptions and "upper bound" in assumptions and "A100" in assumptions


@pytest.mark.parametrize("seed", [473, 1315])
def test_compute_budget_seeds_the_sampler_gave_up_on_yield_a_variant(variant, seed):
    """Drawn over 1K-32K GPUs, 7-500B, 1-30T tokens, 5% allowances and 90-min intervals, 2.6% of raw draws
    were a plan the constraints and the solver accept, and these seeds found none in 256 redraws."""
    assert variant(f"training-compute-budget@{seed}").regime_name in ("fits-deadline", "misses-deadline")


def test_compute_budget_raw_draws_solve_four_times_as_often(bank, catalog):
    """A tenth of raw draws now solve (the ranges real pretraining plans use), four times the old share: the
    sampler's 256 redraws cannot run out. The rest are refused by the allowance (within 2x of the stretch),
    Young's interval, the tokens per parameter and the 3% tolerance at the deadline."""
    import numpy as np

    from solvers.derivation import Reject
    from solvers.engine import solve_values
    from solvers.sampling import draw_values

    question, rng, solved = bank.get("training-compute-budget"), np.random.default_rng(0), 0
    for _ in range(400):
        try:
            solve_values(question, draw_values(question, rng), catalog, quick=True)
            solved += 1
        except Reject:
            pass
    assert solved >= 0.07 * 400
