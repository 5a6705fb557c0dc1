"""loss-plateau-triage: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from solvers.derivation import Sheet
from solvers.engine import VariantCode, make_variant
from solvers.formulas.triage import CAUSE_OF_CHECK, CHECKS, lr_at
from solvers.interview import stage_run
from tests.by_hand import param_values


def _cosine_lr(step, peak, warmup, decay, floor_share):
    floor = floor_share * peak
    if step < warmup:
        return peak * step / warmup
    if step > decay:
        return floor
    return floor + (peak - floor) * (1 + math.cos(math.pi * (step - warmup) / (decay - warmup))) / 2


def _readings(solution):
    """The log as the parameter table lists it: (09:00, 11:00) per signal, ranks at 11:00."""
    value = param_values(solution)
    nine = {"step": value["step_0900"], "loss scale": value["scale_0900"], "skipped steps": value["skipped_0900"]}
    eleven = {"step": value["step_1100"], "loss scale": value["scale_1100"], "skipped steps": value["skipped_1100"],
              "grad norm": value["grad_norm"], "ranks": value["rank_norms"]}
    return nine, eleven


def _checks(solution):
    return [check for check in CHECKS if solution.sheet.results["checks"][check]]


@pytest.mark.parametrize("step, lr", [
    (4000, 4e-5),  # halfway through the warmup
    (8000, 8e-5),  # the peak
    (604_000, (8e-5 + 8e-7) / 2),  # the cosine's midpoint
    (1_200_000, 8e-7),  # the floor
    (1_500_000, 8e-7),  # held there
])
def test_plateau_lr_follows_llama3_schedule(step, lr):
    """Llama 3 405B: peak 8e-5, 8,000 warmup steps, cosine to 8e-7 over 1.2M steps."""
    s = Sheet()
    eta, W = s.given("eta", 8e-5), s.given("W", 8000)
    T, rho = s.given("T", 1_200_000), s.given("rho", 0.01)
    assert s.value(lr_at(s, s.given("s_1", step), eta, W, T, rho)) == pytest.approx(lr, rel=1e-9)


def _diagnose(nine, eleven, p):
    """The checks in order, from the readings alone; the first that fails names the cause."""
    lr = _cosine_lr(nine["step"], p["peak_lr"], p["warmup"], p["decay_steps"], p["lr_floor"])
    epochs = eleven["step"] * p["batch"] * p["seq_len"] / p["dataset"]
    failing = {
        "job-not-stepping": eleven["step"] == nine["step"],
        "lr-or-grad-zero": lr <= 1.0001 * p["lr_floor"] * p["peak_lr"] or eleven["grad norm"] < 1e-4,
        "data-repeating": epochs > 4,  # past about four passes (Muennighoff et al. 2023), not past one
        "loss-scale-collapsed": eleven["loss scale"] == 1,
        "rank-sending-zeros": min(eleven["ranks"]) == 0,
    }
    return [cause for cause, fails in failing.items() if fails]


@pytest.mark.parametrize("seed", range(40))
def test_plateau_readings_point_to_one_cause(variant, seed):
    solution = variant(f"loss-plateau-triage@{seed}")
    p = param_values(solution)
    nine, eleven = _readings(solution)
    cause = solution.expected["cause"]
    assert _diagnose(nine, eleven, p) == ([] if cause == "healthy-run" else [cause])
    found = list(CAUSE_OF_CHECK.values()).index(cause) if cause != "healthy-run" else len(CHECKS) - 1
    assert _checks(solution) == list(CHECKS[:found + 1])  # in order, up to the one that finds the cause
    lr = _cosine_lr(nine["step"], p["peak_lr"], p["warmup"], p["decay_steps"], p["lr_floor"])
    assert solution.expected["lr_plateau"] == pytest.approx(lr, rel=1e-12)
    epochs = eleven["step"] * p["batch"] * p["seq_len"] / p["dataset"]
    assert solution.expected["epochs"] == pytest.approx(epochs, rel=1e-12)
    assert "halvings" not in solution.expected and "kind" not in solution.expected  # read7 #2, #6: dropped


def test_plateau_states_its_two_readings(variant):
    """key-check-2: lr-or-grad-zero is keyed where the LR sits at its 1% floor (6% of draws), and the checks were
    asked "in order" but graded as a set. The assumptions say the floor fails the LR check; the order is the
    recall stage's, self-graded, and the select asks which checks are looked at, not an order."""
    question = variant("loss-plateau-triage@default").question
    assert "in order" not in question.answer("checks").label
    recall = next(stage for stage in question.stages if stage.kind == "recall")
    assert recall.ask == ("triage_order",) and "most decisive first" in question.answer("triage_order").label
    at_floor = 0
    for seed in range(200):
        solution = variant(f"loss-plateau-triage@{seed}")
        if solution.sheet.results["lr_share"] <= 0.01:
            at_floor += 1
            assert solution.expected["cause"] == "lr-or-grad-zero", seed
            assert any("An LR at its floor fails the learning-rate check" in a for a in solution.sheet.assumptions)
    assert at_floor >= 5


def test_plateau_schedule_is_set_for_its_data(variant):
    """The review found the decay drawn apart from the dataset meant to last it: 35 epochs at @76, and 46% of
    schedules past two epochs by their end. The decay step is now drawn from the dataset's one pass (0.7 to
    2 times it): no draw sees more than two epochs by 11:00, or has a schedule past two passes."""
    for seed in range(200):
        solution = variant(f"loss-plateau-triage@{seed}")
        raw = {param.name: param.raw for param in solution.params}
        one_pass = raw["dataset"] * 1e12 / (raw["batch"] * raw["seq_len"])
        assert 0.69 <= raw["decay_steps"] / one_pass <= 2.01, seed
        assert solution.expected["epochs"] < 2, seed


def test_plateau_loss_scale_obeys_its_own_rules(variant):
    """The loss-scaling card: every halving is an overflow the skipped-steps counter counts, and only a clean
    stretch doubles the scale back. So from 2^p a scale of 2^k needs at least p − k skipped steps, and between
    the readings a halving needs a skip. The first version showed a scale of 1 after 9 skipped steps from
    2^32 in about 16% of draws."""
    for seed in range(400):
        solution = variant(f"loss-plateau-triage@{seed}")
        power = solution.param("scale_power").value
        nine, eleven = _readings(solution)
        for reading in (nine, eleven):
            scale = reading["loss scale"]
            assert scale >= 1 and math.log2(scale).is_integer(), seed
            assert reading["skipped steps"] >= power - math.log2(scale), seed
        new_skips = eleven["skipped steps"] - nine["skipped steps"]
        assert 0 <= new_skips <= eleven["step"] - nine["step"], seed
        assert new_skips >= math.log2(nine["loss scale"] / eleven["loss scale"]), seed
        if eleven["loss scale"] == 1 and nine["step"] != eleven["step"]:  # collapsed: every step skips
            assert new_skips == eleven["step"] - nine["step"], seed
        # read7 #2: a scaler at its ceiling overflows about once a 2,000-step growth interval, so the counter
        # holds at least one skip per interval run (the old log showed 21 skips by step 683,640).
        assert nine["skipped steps"] >= nine["step"] // 2000, seed


def test_plateau_log_is_in_the_parameter_table(variant):
    """The first version's prompt ran to 38 lines with the rules and a table in it; the log is in the
    parameter table."""
    solution = variant("loss-plateau-triage@default")
    assert "|" not in solution.prompt
    shown = {param.label for param in solution.problem_data()}
    assert {"step at 09:00", "step at 11:00", "loss scale at 11:00", "skipped steps by 11:00"} <= shown
    assert "the run's log" not in shown  # the incident behind the readings is not data


def test_plateau_push_is_a_sister_run(bank, catalog):
    """The default's push: a sister run on Megatron's defaults, its own readings listed, a nudge."""
    solution = make_variant(bank, catalog, VariantCode.parse("loss-plateau-triage@default"))
    push = stage_run(solution, catalog, len(solution.question.stages) - 1)
    assert push is not None and push.stage.nudge
    assert (push.solution.param("scale_power").raw, push.solution.param("warmup").raw) == (32, 2000)
    assert push.solution.expected["cause"] != "job-not-stepping"
    assert set(push.ask) == {"epochs", "checks", "cause"}


def test_plateau_stack_dumps_only_for_a_job_that_stopped(variant):
    """The select's second anchor is no fact: the stacks are where a frozen counter sends the triage, and
    nowhere else (the first version listed a restart, false in every draw, beside the always-run first check)."""
    for seed in range(100):
        solution = variant(f"loss-plateau-triage@{seed}")
        dumps = solution.sheet.results["checks"]["stack dumps of every rank (py-spy, the NCCL flight recorder)"]
        assert dumps == (solution.expected["cause"] == "job-not-stepping"), seed


def test_plateau_every_cause_is_drawn(variant):
    causes = Counter(variant(f"loss-plateau-triage@{seed}").expected["cause"] for seed in range(100))
    assert set(causes) == {"job-not-stepping", "lr-or-grad-zero", "healthy-run", "loss-scale-collapsed",
                           "rank-sending-zeros"}
    assert min(causes.values()) >= 10


def test_plateau_seed_4_readings(variant):
    """Seed 4 draws these parameters and readings (its cause is pinned in the question file)."""
    solution = variant("loss-plateau-triage@4")
    nine, eleven = _readings(solution)
    assert (nine["step"], eleven["step"]) == (442_190, 442_661)
    assert (nine["loss scale"], eleven["loss scale"]) == (1, 1)
    # 442,190 // 2,000 = 221 growth intervals' skips plus 50; all 471 steps between the readings skip
    assert (nine["skipped steps"], eleven["skipped steps"]) == (271, 742)


def test_loss_plateau_lr_is_at_its_floor_or_well_above_it(variant):
    """An independent check found data-repeating incidents logged at 1.02% of peak beside a 1% floor:
    indistinguishable from an LR at its floor. Every variant's LR is at the floor or above a tenth of peak."""
    for seed in range(0, 400, 7):
        solution = variant(f"loss-plateau-triage@{seed}")
        share, floor = solution.sheet.results["lr_share"], solution.param("lr_floor").value
        assert share <= floor * (1 + 1e-9) or share >= 0.1, seed


def test_loss_plateau_grades_the_job_or_training_call_once(variant):
    """read7 #6: "the cause" (job-not-stepping) and "a training problem or a job not training?" were one decision
    graded twice; the second is gone, and stage 3 no longer asks it. read7 #2: the fewest-overflows count
    (log2 of the scale's fall, a lower bound with a handful of values) is no longer graded."""
    solution = variant("loss-plateau-triage@default")
    keys = {answer.key for answer in solution.question.answers}
    assert "kind" not in keys and "halvings" not in keys
    third = solution.question.stages[2]
    assert list(third.ask) == ["checks", "cause"] and "training problem" not in third.say
    assert solution.param("skipped_1100").value == 362  # 683,640 steps: 341 growth intervals' skips, plus 21


def test_loss_plateau_says_fp16_is_the_banks_recipe(variant):
    """read7 #3: a 405B-class run in the H100 era is bf16 with no scaler; the assumptions say so."""
    assumptions = " ".join(variant("loss-plateau-triage@default").sheet.assumptions)
    assert "trains in bf16 and keeps no loss scaler" in assumptions


def test_plateau_stem_claims_no_pass_the_default_schedule_overruns(variant):
    """read7 (1): the stem said the dataset was 'meant to last the schedule', yet the default's 1.2M steps of 2,048
    x 8,192 tokens read 20.1T of a 15.6T dataset (Llama 3 ramped its batch). The stem no longer claims it; the
    assumptions say the epochs are the check and name the ramp."""
    solution = variant("loss-plateau-triage@default")
    p = param_values(solution)
    assert p["decay_steps"] * p["batch"] * p["seq_len"] / p["dataset"] == pytest.approx(1.29, rel=0.01)
    assert "meant to last" not in solution.question.stages[0].say
    assumptions = " ".join(solution.sheet.assumptions)
    assert "batch ramp" in assumptions and "20.1T" in assumptions


def test_plateau_epochs_slip_is_one_a_candidate_makes(variant):
    """read7 (7): 'epochs from sequences, not tokens' (8.975e-5 at the default) is no slip anyone makes; the slip
    offered is the epochs of the whole schedule, the decay step's, not the steps run."""
    solution = variant("loss-plateau-triage@default")
    slips = [slip.label for slip in solution.sheet.slips.get("epochs", [])]
    assert not any("sequences, not tokens" in label for label in slips)
    assert any("whole schedule" in label for label in slips)


def test_plateau_a_second_pass_is_no_cause(variant):
    """rf-t #1: @11 keyed "data-repeating" at 1.107 epochs under a schedule that planned 1.77 passes, and a second
    pass lowers a training loss rather than flattening it (up to about four passes train nearly as well as fresh
    data: Muennighoff et al. 2023). No draw keys repetition under four passes; a run re-reading its data with
    every other check clean is keyed a healthy run, every check run and none failing. The incidents past one pass
    were then exactly the healthy runs (the generator planted repetition as a cause): a second pass now falls to
    healthy runs and faults alike, so it tells a candidate nothing."""
    healthy, past_one_pass = 0, set()
    for seed in range(120):
        solution = variant(f"loss-plateau-triage@{seed}")
        assert solution.expected["cause"] != "data-repeating", seed
        if solution.expected["epochs"] > 1:
            past_one_pass.add(solution.expected["cause"])
        if solution.expected["cause"] == "healthy-run":
            healthy += 1
            assert _checks(solution) == list(CHECKS), seed
    assert healthy >= 10
    assert "healthy-run" in past_one_pass and len(past_one_pass) >= 3
    assert "data-repeating" in variant("loss-plateau-triage@0").question.answer("cause").choices  # the tempting slip

