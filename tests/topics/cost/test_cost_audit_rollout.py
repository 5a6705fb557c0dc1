"""cost-audit-rollout: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from solvers.interview import stage_run
from tests.by_hand import value_of
from tests.topics.cost.replica_by_hand import SEEDS


def audit_by_hand(solution):
    rows, slo = value_of(solution, "ledger"), value_of(solution, "slo")
    gate, noise = value_of(solution, "gate"), value_of(solution, "noise")
    cost = [row["$/GPU-h"] / 3600 / row["tokens/s per GPU"] * 1e6 for row in rows]
    real = {row["change"] for row, c in zip(rows[1:], cost[1:])
            if 1 - c / cost[0] > 2 * math.sqrt(2) * noise  # two standard deviations of a difference of two runs
            and row["p99 TPOT (ms)"] / 1e3 <= slo and -row["quality (pts)"] <= gate}
    headline = min(range(1, len(rows)), key=lambda i: cost[i])
    best = min((i for i in range(1, len(rows)) if rows[i]["change"] in real), key=lambda i: cost[i])
    top = rows[headline]
    regime = ("misses-slo" if top["p99 TPOT (ms)"] / 1e3 > slo else "fails-quality" if -top["quality (pts)"] > gate
              else "real")
    return {"baseline_cost": cost[0], "headline": top["change"], "headline_cost": cost[headline], "regime": regime,
            "rollout": rows[best]["change"], "rollout_saving": 1 - cost[best] / cost[0],
            "real_wins": real}


@pytest.mark.parametrize("seed", range(25))
def test_audit_matches_plain_arithmetic(variant, seed):
    solution = variant(f"cost-audit-rollout@{seed}")
    results = solution.sheet.results
    for key, value in audit_by_hand(solution).items():
        if key == "real_wins":
            assert {k for k, v in results[key].items() if v} == value
        else:
            assert results[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def test_audit_ledger_generator_stays_in_its_ranges():
    """The seeded ledger: the baseline meets every SLO drawn, every change's price, throughput and p99 are the
    baseline's times a multiplier within its declared range (rounding aside), and its quality delta in range."""
    import numpy as np

    from solvers.generators import LEDGER_CHANGES, cost_ledger

    for seed in range(200):
        rows = cost_ledger(np.random.default_rng(seed))
        base = rows[0]
        assert 24 <= base["p99 TPOT (ms)"] <= 36  # within every SLO drawn but 30 ms, which the solver checks
        for row in rows[1:]:
            price, tps, tpot, quality = LEDGER_CHANGES[row["change"]]
            quality = quality or (-0.2, 0.2)  # the default eval noise
            for field, (low, high), slack in (("$/GPU-h", price, 0.006), ("tokens/s per GPU", tps, 5.1),
                                              ("p99 TPOT (ms)", tpot, 0.051)):
                assert low * base[field] - slack <= row[field] <= high * base[field] + slack, field
            assert quality[0] - 0.05 <= row["quality (pts)"] <= quality[1] + 0.05


def test_audit_push_moves_a_gate_and_asks_what_ships_now(variant, catalog):
    """The push is the engine's search over the SLO and the gate (drawn over ranges, so a value between the top
    row's figure and the others' exists): at the default the SLO goes from 50 to 85 ms, the doubled batch cap
    (p99 54.1 ms) passes every gate and rolls out at 35.8% off. Where it finds a move it crosses; a week with
    none (about one in six) mostly has fp8 on top inside the tightest gate or past the loosest, as the nudge says."""

    default = variant("cost-audit-rollout@default")
    push = stage_run(default, catalog, 3)
    assert push is not None and push.moved == ("slo",) and value_of(push.solution, "slo") == pytest.approx(0.085)
    expected = push.solution.expected
    assert (expected["regime"], expected["rollout"]) == ("real", "twice the batch cap")
    assert expected["rollout_saving"] == pytest.approx(1 - 1310 / 2040)
    crossed, none = 0, []
    for seed in range(20):
        solution = variant(f"cost-audit-rollout@{seed}")
        push = stage_run(solution, catalog, 3)
        if push is None:  # the nudge's case: fp8 on top, inside the tightest gate or past the loosest
            results = solution.sheet.results
            assert results["headline"] == "fp8 weights and GEMMs", seed
            assert results["regime"] in ("real", "fails-quality"), seed
            none.append(seed)
            continue
        assert set(push.moved) <= {"slo", "gate", "noise"}
        crossed += push.regime != solution.regime_name
    assert len(none) <= 4 and crossed >= 16, (none, crossed)


def test_audit_baseline_meets_the_slo(variant):
    """A 30 ms SLO is drawn, and a baseline (24-36 ms) that misses it is redrawn: no change is audited against a
    service that already fails its SLO; a push to 30 ms is refused for such a baseline."""
    for seed in range(60):
        solution = variant(f"cost-audit-rollout@{seed}")
        assert value_of(solution, "ledger")[0]["p99 TPOT (ms)"] / 1e3 <= value_of(solution, "slo")
    with pytest.raises(VariantError, match="baseline already misses"):
        variant("cost-audit-rollout@default+slo=30")  # the default baseline runs at 33.8 ms


def test_audit_cheaper_gpu_missing_the_slo_is_a_headline(variant, catalog):
    """The issue's featured trap: the A100 tops the ledger on price and misses the p99 SLO in a good share of
    weeks. The headline always clears the noise by far (its saving is at least 25%), so the noise floor is no
    option for the gates it fails; the rolled-out row's thin gates (asked in the push) vary with the week."""
    trap = thin_none = pushed = 0
    seeds = range(60)
    for seed in seeds:
        solution = variant(f"cost-audit-rollout@{seed}")
        results = solution.sheet.results
        trap += results["headline"] == "A100s instead of H100s" and results["regime"] == "misses-slo"
        assert 1 - results["headline_cost"] / results["baseline_cost"] > 0.2
        push = stage_run(solution, catalog, 3)
        if push is not None:
            pushed += 1
            thin_none += push.solution.sheet.results["thin_gates"]["none: both margins are wide"]
    assert trap >= 0.08 * len(seeds)
    assert 0.2 * pushed <= thin_none <= 0.7 * pushed


def test_audit_speculative_decoding_is_lossless_in_the_ledger(variant):
    """Speculative decoding keeps the target model's distribution (Leviathan et al. 2023): its quality delta
    is eval noise within the ±0.2 points the prompt states, like every row's but fp8's systematic drop (the
    ledger once showed it +0.3, a gain no lossless method makes)."""
    from solvers.generators import LEDGER_CHANGES

    lossless = ("speculative decoding with a draft model", "a new decode attention kernel", "A100s instead of H100s",
                "twice the batch cap")
    for change in lossless:
        assert LEDGER_CHANGES[change][3] is None, change  # drawn within the question's eval noise
    for seed in SEEDS:
        solution = variant(f"cost-audit-rollout@{seed}")
        noise = value_of(solution, "quality_noise")
        row = next(r for r in value_of(solution, "ledger") if r["change"] == "speculative decoding with a draft model")
        assert abs(row["quality (pts)"]) <= noise
        words = " ".join(stage.say for stage in solution.question.stages)
        assert "the\neval moves {quality_noise} points run to run" in words


def test_audit_regime_names_the_gate_that_stops_the_headline(variant):
    """The regime says what to tell whoever sorted the ledger: a real win, or which gate stops it (it used to be
    real/misleading beside a select of failed gates that said the same twice). At the default the doubled batch
    cap runs p99 54.1 ms against 50 ms: misses-slo, 1.082x (the verdicts are pinned in the question file); the
    draws reach all three."""
    assert variant("cost-audit-rollout@default").sheet.results["headline_slo_use"] == pytest.approx(54.1 / 50)
    seen = {variant(f"cost-audit-rollout@{seed}").expected["regime"] for seed in SEEDS}
    assert seen == {"real", "misses-slo", "fails-quality"}


def test_audit_a_tie_for_the_cheapest_row_is_redrawn(variant):
    """A ledger sorted by cost has no one top row when two rows cost exactly the same (about 1% of ledgers):
    such a draw is redrawn, and in the ones kept the headline and the rollout are strictly cheapest, exactly."""
    from fractions import Fraction

    for seed in range(60):
        solution = variant(f"cost-audit-rollout@{seed}")
        rows = value_of(solution, "ledger")
        cost = {r["change"]: Fraction(str(r["$/GPU-h"])) / Fraction(str(r["tokens/s per GPU"])) for r in rows[1:]}
        real = {k for k, v in solution.sheet.results["real_wins"].items() if v}
        for pick, pool in ((solution.expected["headline"], cost), (solution.expected["rollout"], real)):
            assert all(cost[other] > cost[pick] for other in pool if other != pick)


def test_audit_miss_wording_follows_the_margin(variant):
    """The reader's @12011: 43.6 ms against a 35 ms SLO (1.25x) was keyed "misses the SLO by a hair". The words
    now follow the margin: a hair under 5%, clearly past 15%."""
    summary = variant("cost-audit-rollout@12011").sheet.regime.summary
    assert "by a hair" not in summary and "clearly" in summary
    for seed in SEEDS:
        regime = variant(f"cost-audit-rollout@{seed}").sheet.regime
        use = regime.margin() if callable(regime.margin) else regime.margin
        if "by a hair" in regime.summary:
            assert use < 1.05


def test_audit_no_row_is_graded_on_a_knife_edge(variant, catalog):
    """read7 #4: a saving of 4.38% against a 4.24% floor was keyed a real win, a 50.7 ms p99 against a 50 ms SLO a
    miss, fp8 at -2.2 against a 2-point gate a fail (a gap the size of the eval noise). A week where any row sits
    within a tenth of the noise floor, 5% of the SLO or the eval noise of the gate is redrawn, in the draws and
    in the pushes (the push moves a gate; one that lands a row in a band is not made)."""
    def clear(solution):
        rows, slo = value_of(solution, "ledger"), value_of(solution, "slo")
        gate, noise, qn = value_of(solution, "gate"), value_of(solution, "noise"), value_of(solution, "quality_noise")
        floor = 2 * math.sqrt(2) * noise
        base = rows[0]["$/GPU-h"] / rows[0]["tokens/s per GPU"]
        for row in rows[1:]:
            saving = 1 - row["$/GPU-h"] / row["tokens/s per GPU"] / base
            assert abs(saving - floor) >= 0.1 * floor, row["change"]
            assert abs(row["p99 TPOT (ms)"] / 1e3 / slo - 1) >= 0.05, row["change"]
            assert abs(row["quality (pts)"] + gate) > qn + 1e-9, row["change"]

    for seed in range(40):
        solution = variant(f"cost-audit-rollout@{seed}")
        clear(solution)
        push = stage_run(solution, catalog, 3)
        if push is not None:
            clear(push.solution)
    with pytest.raises(VariantError, match="p99 is within 5% of the SLO"):
        variant("cost-audit-rollout@default+slo=55")  # the doubled batch cap's 54.1 ms
    variant("cost-audit-rollout@default+slo=60")  # 54.1 ms is 10% under it: graded


def test_audit_eval_noise_decides_the_quality_gate(variant):
    """read7 #5: the stated eval noise was never used. A quality delta within it of the gate is re-measured, not
    graded: fp8's -1.0 against a 1.0 or 1.2-point gate is refused (it once passed 1.0 on a tie), against 1.3 it
    passes; lossless rows (within the noise of zero) never meet a gate, which starts at half a point."""
    for gate in ("1.0", "1.2"):
        with pytest.raises(VariantError, match="within the eval noise of the gate"):
            variant(f"cost-audit-rollout@default+gate={gate}")
    assert variant("cost-audit-rollout@default+gate=1.3").sheet.results["real_wins"]["fp8 weights and GEMMs"]
    for seed in range(40):
        assert value_of(variant(f"cost-audit-rollout@{seed}"), "gate") >= 0.5


def test_audit_noise_floor_is_two_standard_deviations(variant):
    """read7 #6: saving > √2·ε is a one-sigma test. The floor is 2√2·ε: at the default (ε = 3%) 8.49%, so
    speculative decoding's 4.38% is inside the noise and only the kernel's 12.7% is real."""
    results = variant("cost-audit-rollout@default").sheet.results
    assert results["noise_floor"] == pytest.approx(2 * math.sqrt(2) * 0.03)
    assert not results["real_wins"]["speculative decoding with a draft model"]
    assert results["real_wins"]["a new decode attention kernel"]


def test_audit_push_gives_the_interviewer_reason_and_names_the_row_rolled_out(variant, catalog):
    """read7 #8, #9: the push said "Let's change one thing ... What changes, and what matters now?" and asked
    "which of its gates" where the headline and the row shipped differ. It now says product's reason for the new
    SLO, and the thin-gates label names the row you roll out."""
    push = stage_run(variant("cost-audit-rollout@default"), catalog, 3)
    assert "Product has looked at the traces" in push.say and "Let's change one thing" not in push.say
    label = push.solution.question.answer("thin_gates").label
    assert "the row you roll out" in label


def test_audit_checklist_names_what_a_strong_candidate_raises(variant):
    """read7 #10: TTFT and queueing, capacity actually released, and eval coverage against production."""
    items = " ".join(variant("cost-audit-rollout@default").question.answer("misleading_checks").points)
    for needed in ("TTFT and queueing", "GPUs are released", "eval coverage"):
        assert needed in items


def test_audit_a_missed_slo_names_what_to_try_before_dropping_the_row(variant):
    """read7 #7: latency headroom can be spent on batch, and a cap between 1x and 2x may meet the SLO. A doubled
    batch cap that misses says both; an A100 that misses is told of a smaller batch, not a batch cap."""
    batch = variant("cost-audit-rollout@default").sheet.regime.summary
    assert "between the baseline's and twice it" in batch and "spend it on batch" in batch
    for seed in range(80):
        solution = variant(f"cost-audit-rollout@{seed}")
        if solution.expected["regime"] == "misses-slo" and solution.expected["headline"].startswith("A100"):
            assert "smaller batch" in solution.sheet.regime.summary and "twice it" not in solution.sheet.regime.summary
            break
    else:
        pytest.fail("no A100 headline missing the SLO in 80 weeks")
