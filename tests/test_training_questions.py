"""Checks for the training questions: training-compute-budget, training-state-bytes."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError

DAY = 86_400

# --- training-compute-budget -----------------------------------------------------------------

# Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): 466 interruptions in 54 days on 16,384 H100.
LLAMA3_RATE_PER_GPU_DAY = 466 / (54 * 16_384)


def _wall_clock_by_hand(p: dict) -> tuple[float, float]:
    """Compute seconds and wall-clock seconds: W = T_c (1 + C/tau) + a W (R + tau/2), a per second of the job."""
    compute = 6 * p["params"] * p["tokens"] / (p["gpus"] * p["gpu"].bf16_dense_tflops * 1e12 * p["mfu"])
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    wall = compute * (1 + p["ckpt_write"] / p["ckpt_interval"]) / (1 - rate * (p["restart"] + p["ckpt_interval"] / 2))
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


@pytest.mark.parametrize("seed", ["default", *range(20)])
def test_compute_budget_levers_win_back_a_share_of_the_lost_days(variant, seed):
    """Reader: 'four times the GPUs' held in every listing and options sat at 4.93% against a 5% line. Each lever
    is judged in plain Python on the share of the lost days (wall minus compute) it wins back, 20% or more; one
    within two points of the line is not listed."""
    solution = variant(f"training-compute-budget@{seed}")
    p = {param.name: param.value for param in solution.params}
    compute, wall = _wall_clock_by_hand(p)
    rate = p["gpus"] * LLAMA3_RATE_PER_GPU_DAY / DAY
    C, tau, R = p["ckpt_write"], p["ckpt_interval"], p["restart"]
    after = {
        "checkpointing twice as often": _wall(compute, C, tau / 2, rate, R),
        "checkpointing half as often": _wall(compute, C, 2 * tau, rate, R),
        "halving the restart time": _wall(compute, C, tau, rate, R / 2),
        "asynchronous checkpoint saves (no stall)": _wall(compute, 0, tau, rate, R),
        "checkpointing at the interval that loses the least time": _wall(compute, C, math.sqrt(2 * C / rate), rate, R),
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
    p = {param.name: param.value for param in solution.params}
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


def test_compute_budget_pinned_seed(variant):
    """Pins the sampling: a change in the ranges or the draw order shows up here (the keys are pinned in the
    question file)."""
    solution = variant("training-compute-budget@1")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"params": 460, "tokens": 26, "gpus": 16384, "gpu": "b200", "mfu": 44, "slack": 25,
                   "ref_interruptions": 466, "ref_days": 54, "ref_gpus": 16_384, "ckpt_interval": 15,
                   "ckpt_write": 0.8, "restart": 40, "shorter": 20, "state_share": 75}


@pytest.mark.parametrize("seed", range(40))
def test_compute_budget_replica_is_the_least_power_of_two_that_holds_the_state(variant, seed):
    """16 bytes a parameter over the share of HBM (as the device reports it) kept for state: the replica is
    the least power of two of GPUs that holds it, so half as many would not."""
    solution = variant(f"training-compute-budget@{seed}")
    p = {param.name: param.value for param in solution.params}
    room = p["state_share"] * p["gpu"].hbm_mib * 2**20
    mp = solution.expected["mp_gpus"]
    assert math.log2(mp).is_integer()
    assert mp * room >= 16 * p["params"] > mp / 2 * room


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


# --- training-state-bytes --------------------------------------------------------------------


def test_state_bytes_default_matches_catalogue(variant):
    """100B params x 16 B = 1.6 TB against an H100 node of 8 x 81,559 MiB as the devices report it, 684.2 GB (the
    keys are pinned in the question file)."""
    assert variant("training-state-bytes@default").sheet.results["node_hbm"] == pytest.approx(8 * 81_559 * 2**20)


@pytest.mark.parametrize("seed", range(40))
def test_state_bytes_matches_plain_arithmetic(variant, seed):
    solution = variant(f"training-state-bytes@{seed}")
    p = {param.name: param.value for param in solution.params}
    per_param = 16 + (4 if p["grad_accum"] == "fp32" else 0)
    state = p["params"] * per_param
    room = p["gpus_per_node"] * p["gpu"].hbm_mib * 2**20 * p["usable"]
    least = math.ceil(state / room)
    job = p["gpus"] // p["gpus_per_node"]
    nodes = min(n for n in range(least, job + 1) if job % n == 0)  # the job in whole sharding groups
    assert solution.expected["bytes_per_param"] == per_param
    assert solution.expected["state"] == pytest.approx(state, rel=1e-12)
    assert solution.sheet.results["nodes"] == nodes >= least >= 2
    assert solution.expected["state_per_gpu"] == pytest.approx(state / (nodes * p["gpus_per_node"]), rel=1e-12)
    # FSDP: rings over the group's k GPUs, each node's hop out carrying (k-1)/k of 3 x the bf16 weights over its
    # NICs; then each GPU's 1/k of the bf16 gradients all-reduces across the job's R copies of the group.
    k, replicas, link = nodes * p["gpus_per_node"], job // nodes, p["nic"].gbit_s * 1e9 / 8
    rings = 3 * 2 * p["params"] * (k - 1) / k / p["nics_per_node"]
    copies = 2 * (replicas - 1) / replicas * 2 * p["params"] / k * p["gpus_per_node"] / p["nics_per_node"]
    comm = (rings + copies) / link
    compute = 6 * p["params"] * p["batch_tokens"] / p["gpus"] / (p["gpu"].bf16_dense_tflops * 1e12 * p["mfu"])
    bubble = (nodes - 1) / (p["microbatches"] + nodes - 1)
    assert solution.expected["fsdp_comm"] == pytest.approx(comm, rel=1e-12)
    assert solution.expected["step_compute"] == pytest.approx(compute, rel=1e-12)
    assert solution.expected["bubble"] == pytest.approx(bubble, rel=1e-12)
    pipeline = compute / (1 - bubble) + max(0.0, copies / link - 2 * compute / 3)
    fsdp_wins = max(comm, compute) <= pipeline
    assert solution.expected["regime"] == ("fsdp-across-nodes" if fsdp_wins else "pipeline-across-nodes")
    assert abs(max(comm, compute) / pipeline - 1) >= 0.03  # never a call on rounding


def test_state_bytes_fsdp_pays_the_all_reduce_across_copies(variant):
    """Review 2: the FSDP side is hybrid sharding (a group of nodes, copies across the job), yet only the
    pipeline side paid the gradients' all-reduce across the copies. Both pay the same bytes now, and FSDP's
    share of the step is a worked step, not a graded answer (it was 0 in 150 of 200 draws)."""
    for seed in range(20):
        results = variant(f"training-state-bytes@{seed}").sheet.results
        assert results["replicas"] >= 2 and results["dp_nic"] > 0
        # the pipeline's all-reduce time is the same bytes over the same NIC as FSDP's share of its traffic
        assert results["pp_dp"] / results["fsdp_comm"] == pytest.approx(results["dp_nic"] / results["fsdp_nic"],
                                                                        rel=1e-12)
    assert "fsdp_loss" not in variant("training-state-bytes@default").expected


def test_state_bytes_pinned_seed(variant):
    """Seed 4 draws these parameters (its keys are pinned in the question file)."""
    solution = variant("training-state-bytes@4")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"params": 830, "gpu": "h200-sxm", "grad_accum": "fp32", "usable": 60, "gpus_per_node": 8,
                   "nics_per_node": 8, "nic": "connectx-7", "gpus": 4096, "batch_tokens": 16_000_000, "mfu": 38,
                   "microbatches": 64}


def _one_f_one_b(stages: int, microbatches: int, forward: int = 1, backward: int = 2) -> float:
    """A 1F1B pipeline step simulated op by op: each stage runs its warm-up forwards, then one forward and one
    backward in turn, then its last backwards; an op starts once its stage is free and its input has arrived
    (a forward from the stage before, a backward from the stage after). Returns the idle share of the step."""
    done: dict[tuple[str, int, int], int] = {}
    orders = []
    for stage in range(stages):
        warm = min(stages - stage - 1, microbatches)
        order = [("F", j) for j in range(warm)]
        for j in range(microbatches - warm):
            order += [("F", warm + j), ("B", j)]
        orders.append(order + [("B", j) for j in range(microbatches - warm, microbatches)])
    free, cursor = [0] * stages, [0] * stages
    while any(cursor[s] < len(orders[s]) for s in range(stages)):
        for s in range(stages):
            while cursor[s] < len(orders[s]):
                kind, j = orders[s][cursor[s]]
                need = ("F", s - 1, j) if kind == "F" else ("B", s + 1, j) if s < stages - 1 else ("F", s, j)
                if not (kind == "F" and s == 0) and need not in done:  # the first stage's forwards need nothing
                    break
                start = max(free[s], done.get(need, 0))
                free[s] = done[(kind, s, j)] = start + (forward if kind == "F" else backward)
                cursor[s] += 1
    return 1 - microbatches * (forward + backward) / max(free)


@pytest.mark.parametrize("seed", range(100))
def test_training_state_bubble_matches_a_simulated_1f1b_schedule(variant, seed):
    """The bubble's closed form (p − 1)/(m + p − 1), against the 1F1B schedule simulated op by op."""
    solution = variant(f"training-state-bytes@{seed}")
    stages = round(solution.sheet.results["nodes"])
    microbatches = round(solution.param("microbatches").value)
    assert solution.expected["bubble"] == pytest.approx(_one_f_one_b(stages, microbatches), rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_state_bytes_links_key_the_copies_all_reduce_in_either_layout(variant, seed):
    """Key check: the pipeline's own step puts each stage's gradient all-reduce across the job's copies on the NICs,
    yet "a reduce-scatter of the whole model's gradients" was keyed false for it. The select now names that
    all-reduce, true in both layouts, and the reduce-scatter over the group, FSDP's alone."""
    solution = variant(f"training-state-bytes@{seed}")
    keyed = set(solution.expected["links"])
    fsdp = solution.expected["regime"] == "fsdp-across-nodes"
    assert ("an all-reduce of gradients across the job's copies" in keyed) == (solution.sheet.results["dp_nic"] > 0)
    assert ("a reduce-scatter of every layer's gradients over the group" in keyed) == fsdp
    assert ("activations and their gradients at stage boundaries" in keyed) == (not fsdp)
