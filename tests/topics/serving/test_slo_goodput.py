"""slo-goodput: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.engine import VariantError
from solvers.followup import generated_push
from tests.by_hand import by_hand_test, param_values


def test_slo_goodput_default(variant):
    """200 ms prefills at 85% load: mu = 5/s, lambda = 4.25/s (the keys are pinned in the question file)."""
    results = variant("slo-goodput@default").sheet.results
    assert results["capacity"] == pytest.approx(5.0)
    assert results["arrival_rate"] == pytest.approx(4.25)


def _model_by_hand(p: dict) -> dict:
    """The closed forms in plain Python: exponential TTFT with rate mu - lambda, shifted-exponential TPOT."""
    mu = 1 / p["prefill_mean"]
    rate = mu - p["load"] * mu
    ttft_ok = 1 - math.exp(-rate * p["ttft_slo"])
    tpot_ok = 1 - math.exp(-(p["tpot_slo"] - p["tpot_floor"]) / p["tpot_tail"])
    return {
        "ttft_p50": math.log(2) / rate,
        "ttft_p99": math.log(100) / rate,
        "tpot_p50": p["tpot_floor"] + p["tpot_tail"] * math.log(2),
        "tpot_p99": p["tpot_floor"] + p["tpot_tail"] * math.log(100),
        "attainment": ttft_ok * tpot_ok,
        "max_rate": mu + math.log(1 - p["target"] / tpot_ok) / p["ttft_slo"],
        "knee_load": 1 - math.log(100) / (mu * p["ttft_slo"]),
    }


test_slo_goodput_matches_closed_forms = by_hand_test("slo-goodput", range(30),
                                                     lambda solution: _model_by_hand(param_values(solution)))


@pytest.mark.parametrize("seed", range(30))
def test_slo_goodput_regime_and_levers_follow_the_closed_forms(variant, seed):
    solution = variant(f"slo-goodput@{seed}")
    p = param_values(solution)
    by_hand = _model_by_hand(p)
    within = p["load"] / p["prefill_mean"] <= by_hand["max_rate"]
    assert solution.expected["regime"] == ("goal-met" if within else "throughput-high-goodput-low")
    levers = solution.sheet.results["ttft_levers"]
    assert levers["p99 TTFT already meets its SLO at today's load"] == (p["load"] <= by_hand["knee_load"])
    # p99 past its SLO is more than 1 request in 100 past it: the two options never agree
    assert levers["more than one request in a hundred waits past the TTFT SLO today"] == (
        not levers["p99 TTFT already meets its SLO at today's load"])
    assert not levers["halving the decode pool's TPOT excess would shorten p99 TTFT"]
    # The stage-1 notes no longer print the share past the TTFT SLO (with the TPOT share, stage 2's attainment).
    assert not any("%" in why.replace("within 3% of", "") for why in solution.sheet.reasons["ttft_levers"].values())
    mu, lam, need = 1 / p["prefill_mean"], p["load"] / p["prefill_mean"], math.log(100) / p["ttft_slo"]
    met = p["load"] <= by_hand["knee_load"]
    for option, rate in (("prefill time per prompt cut by {big_cut}", mu / 0.8 - lam),
                         ("prefill time per prompt cut by {small_cut}", mu / 0.9 - lam),
                         ("shedding {shed} of arrivals at admission", mu - 0.9 * lam),
                         ("shedding {big_shed} of arrivals at admission", mu - 0.75 * lam),
                         ("splitting today's traffic over two such instances", mu - lam / 2)):
        judged = levers[option + " would put p99 TTFT within its SLO"]
        if met:  # p99 already within its SLO: a lever would hold by default, so none is listed
            assert judged is None, option
        elif judged is None:  # too near the SLO to call: not listed
            assert abs(math.log(100) / rate / p["ttft_slo"] - 1) < 0.03, option
        else:
            assert judged == (rate >= need) and abs(math.log(100) / rate / p["ttft_slo"] - 1) >= 0.03, option


def test_slo_goodput_p99_matches_a_simulated_fifo_queue(variant):
    """A seeded M/M/1 FIFO queue run in arrival order (Lindley's recursion): its p99 TTFT matches
    ln 100 / (mu - lambda) within 3%, the closed form the question grades."""
    solution = variant("slo-goodput@default")
    p = param_values(solution)
    rng = np.random.default_rng(7)
    n, mu = 400_000, 1 / p["prefill_mean"]
    gaps = rng.exponential(1 / (p["load"] * mu), n)
    service = rng.exponential(1 / mu, n)
    wait = np.zeros(n)
    for i in range(1, n):
        wait[i] = max(0.0, wait[i - 1] + service[i - 1] - gaps[i])
    ttft = (wait + service)[n // 10:]  # past the warm-up
    assert np.quantile(ttft, 0.99) == pytest.approx(solution.expected["ttft_p99"], rel=0.03)
    assert np.mean(ttft <= p["ttft_slo"]) == pytest.approx(solution.sheet.results["ttft_attainment"], rel=0.02)


def test_slo_goodput_has_no_simulation_noise(variant, bank):
    """The review's bug: a dashboard simulation (its seed shown as a parameter) moved the graded attainment
    by sampling noise. The attainment is now the closed form, and the parameters are the problem's only."""
    names = {spec.name for spec in bank.get("slo-goodput").parameters}
    assert not names & {"sim_seed", "requests"}
    solution = variant("slo-goodput@default")
    assert solution.expected["attainment"] == pytest.approx(
        solution.sheet.results["ttft_attainment"] * solution.sheet.results["tpot_attainment"], rel=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_slo_goodput_verdicts_are_clear(variant, seed):
    """The regime sits clear of a tie (3%, the goodput's own tolerance), the goal holds to 30% of the capacity (a
    miss means a busy queue), p99 TTFT can meet its SLO at some load (the SLO is at least five prefills), and the
    TPOT SLO binds: it alone misses 0.5-8% of requests, so the attainment is never the TTFT share alone."""
    solution = variant(f"slo-goodput@{seed}")
    results = solution.sheet.results
    p = param_values(solution)
    assert (results["attainment"] >= p["target"]) == (results["regime"] == "goal-met")
    assert results["max_rate"] >= 0.3 * results["capacity"]
    tpot_miss = math.exp(-(p["tpot_slo"] - p["tpot_floor"]) / p["tpot_tail"])
    assert math.exp(-5.3) <= tpot_miss <= math.exp(-2.5)
    assert results["attainment"] <= 0.999  # at least 1 request in 1,000 misses: something to diagnose
    assert results["knee_load"] > 0
    assert abs(results["arrival_rate"] / results["max_rate"] - 1) >= 0.03
    assert abs(results["ttft_p99"] / p["ttft_slo"] - 1) >= 0.03  # "already meets its SLO" is no tie either


def test_slo_goodput_goal_met_says_when_p99_is_past_its_slo(variant):
    """A re-derivation: some "healthy" variants already had p99 TTFT over the SLO. The side is now named for
    what it is (the attainment goal met), and its words say where p99 is past the SLO all the same."""
    seen = 0
    for seed in range(80):
        solution = variant(f"slo-goodput@{seed}")
        if solution.regime_name != "goal-met":
            continue
        p = param_values(solution)
        past = solution.sheet.results["ttft_p99"] > p["ttft_slo"]
        assert ("past its" in solution.sheet.regime.summary) == past, seed
        seen += past
    assert seen >= 5  # the case is common: a 90% goal leaves room for a tail past the SLO
    at_72 = variant("slo-goodput@default+load=72")  # pinned goal-met in the file, p99 3.29 s against 2 s
    assert at_72.regime_name == "goal-met" and "3.289 s, is past its 2 s" in at_72.sheet.regime.summary


def test_slo_goodput_refuses_a_load_past_capacity(variant):
    with pytest.raises(VariantError, match="grows without bound"):
        variant("slo-goodput@default+load=100")


def test_slo_goodput_stages(variant):
    """The interview: TTFT and its knee with the levers, then TPOT, attainment, goodput and the verdict, then a
    generated push that asks p99 TTFT, the goodput, the attainment and the verdict again; the median TPOT is a
    worked step, not a box."""
    question = variant("slo-goodput@default").question
    assert [list(stage.ask) for stage in question.stages] == [
        ["ttft_p50", "ttft_p99", "knee_load", "ttft_levers"], ["tpot_p99", "attainment", "max_rate", "regime"],
        ["ttft_p99", "max_rate", "attainment", "regime"]]
    assert question.stages[2].generated and "goodput" in question.stages[1].say
    assert question.chart[0] == "ttft_slo"


def test_slo_goodput_push_recomputes_the_goodput(variant, catalog):
    """The generated push moves the chart's x, the TTFT SLO, where that crosses the verdict (else the load or the
    prefill time): its keys are the closed forms again at the pushed figures, not the stage-2 keys, and the
    verdict crosses in nearly every draw."""
    pushes = moved_slo = crossed = 0
    for seed in range(40):
        first = variant(f"slo-goodput@{seed}")
        followup = generated_push(first, catalog, tuple(first.question.stages[2].ask))
        if followup is None:
            continue
        pushes += 1
        pushed = followup.solution
        p = {param.name: param.value for param in pushed.params}
        by_hand = _model_by_hand(p)
        assert pushed.expected["max_rate"] == pytest.approx(by_hand["max_rate"], rel=1e-9), seed
        assert pushed.expected["attainment"] == pytest.approx(by_hand["attainment"], rel=1e-9), seed
        within = p["load"] / p["prefill_mean"] <= by_hand["max_rate"]
        assert pushed.expected["regime"] == ("goal-met" if within else "throughput-high-goodput-low"), seed
        moved = [name for name, _ in pushed.code.overrides]
        if moved == ["ttft_slo"]:
            moved_slo += 1
            assert pushed.expected["max_rate"] != pytest.approx(first.expected["max_rate"], rel=0.03), seed
        crossed += pushed.regime_name != first.regime_name
    assert pushes >= 36 and crossed >= 0.9 * pushes and moved_slo >= pushes // 2


def test_slo_goodput_push_asks_a_figure_the_move_changes(variant, catalog):
    """read12: a push on the load re-graded the goodput, which the load does not move (@11: 2.675/s before and
    after), and asked nothing the move changed but the attainment. The push now asks p99 TTFT beside the goodput:
    a load push moves p99 TTFT, an SLO push the goodput, a prefill-time push both, so every push grades a figure
    the candidate has not been given."""
    seen = set()
    for seed in range(40):
        first = variant(f"slo-goodput@{seed}")
        followup = generated_push(first, catalog, tuple(first.question.stages[2].ask))
        if followup is None:
            continue
        pushed = followup.solution
        moved = [name for name, _ in pushed.code.overrides]
        seen.update(moved)
        asked = [key for key in first.question.stages[2].ask if key in ("ttft_p99", "max_rate")]
        changed = [key for key in asked if pushed.expected[key] != pytest.approx(first.expected[key], rel=0.03)]
        assert changed, (seed, moved)
    assert {"load", "ttft_slo"} <= seen


def test_slo_goodput_push_words_give_the_reason_not_the_givens(variant, catalog):
    """read12: the push read "Now the TTFT SLO is 1.7 s, prefills average 190 ms and the instance is busy 40% of
    the time", restating two figures that had not moved. It now says why the one figure moved, then asks."""
    from solvers.interview import stage_run
    run = stage_run(variant("slo-goodput@11"), catalog, 2)
    assert run.moved == ("load",)
    assert run.say.startswith("Admission control now holds the prefill instance to 40% busy.")
    assert "1.7 s" not in run.say and "190 ms" not in run.say
    stage = variant("slo-goodput@default").question.stages[2]
    assert {name for name, _, _ in stage.reasons} >= {"load", "ttft_slo", "prefill_mean"}


def test_slo_goodput_second_instance_is_a_lever(variant):
    """read12: the first lever a strong interviewer names after "p99 TTFT is 8.75 s" is a second prefill
    instance. Two instances each take half the arrivals: mu - lambda/2. At @11 (190 ms, 90%) that is
    5.263 - 2.368 = 2.895/s, p99 1.59 s inside 1.7 s, while a 20% faster prefill leaves 2.5 s."""
    levers = variant("slo-goodput@11").sheet.results["ttft_levers"]
    split = "splitting today's traffic over two such instances would put p99 TTFT within its SLO"
    assert levers[split] is True
    assert levers["prefill time per prompt cut by {big_cut} would put p99 TTFT within its SLO"] is False
    outcomes = {variant(f"slo-goodput@{seed}").sheet.results["ttft_levers"][split] for seed in range(60)}
    assert {True, False} <= outcomes  # it follows the numbers


def test_slo_goodput_assumptions_name_the_batching_prefill(variant):
    """read12: M/M/1 serving one prompt at a time is a textbook stand-in; real prefill batches, and DistServe
    uses M/D/1. The assumption says so, and which way the stand-in errs."""
    text = " ".join(variant("slo-goodput@default").sheet.assumptions)
    assert "M/D/1" in text and "batches prompts" in text
