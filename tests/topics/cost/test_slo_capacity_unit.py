"""slo-capacity-unit: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from solvers.interview import stage_run
from tests.by_hand import value_of
from tests.topics.cost.replica_by_hand import OVERHEAD, SEEDS, Replica


def decode_by_hand(g, S, budget):
    """Batch, step time and output tokens/s of a replica whose decode steps must fit `budget`."""
    room = budget - OVERHEAD - g.ar0
    B = math.floor(min((room - g.weights / g.br) / (g.kv * S / g.br + g.ar_tok),
                       room / ((2 * g.N + g.A * S) / g.fr + g.ar_tok), g.pool / (g.kv * S)))
    t = g.step(B, B * S, B * S)
    return B, t, B / t


def capacity_by_hand(solution):
    model, tp = value_of(solution, "model"), value_of(solution, "tp")
    P, R, tpot = (value_of(solution, n) for n in ("prompt", "reply", "tpot"))
    n_old, n_new = value_of(solution, "old_replicas"), value_of(solution, "new_replicas")
    units, batches, speeds = {}, {}, {}
    for tag in ("old", "new"):
        batches[tag], step, rate = decode_by_hand(Replica(model, value_of(solution, f"{tag}_gpu"), tp), P + R / 2, tpot)
        units[tag] = rate / R
        speeds[tag] = 1 / step
    fleet = n_old * units["old"] + n_new * units["new"]
    ratio = units["new"] / units["old"]
    prices = value_of(solution, "new_price") / value_of(solution, "old_price")
    return {"batch_old": batches["old"], "batch_new": batches["new"], "per_user_old": speeds["old"],
            "per_user_new": speeds["new"], "unit_old": units["old"],
            "unit_new": units["new"], "unit_ratio": ratio, "fleet_capacity": fleet,
            "count_routing_limit": (n_old + n_new) * units["old"], "new_share": n_new * units["new"] / fleet,
            "replacement": math.ceil(n_old * units["old"] / units["new"]),
            "regime": "buy-new" if ratio > prices else "buy-old"}


def test_capacity_datasheet_ratios(variant):
    """B200 over H100 on the datasheets: 2,250 / 989.4 = 2.27x dense bf16, 8 / 3.35 = 2.39x HBM bandwidth."""
    results = variant("slo-capacity-unit@default").sheet.results
    assert results["compute_ratio"] == pytest.approx(2250 / 989.4)
    assert results["bandwidth_ratio"] == pytest.approx(8 / 3.35)


@pytest.mark.parametrize("seed", range(15))
def test_capacity_matches_plain_arithmetic(variant, seed):
    solution = variant(f"slo-capacity-unit@{seed}")
    for key, value in capacity_by_hand(solution).items():
        got = solution.sheet.results[key]
        assert got == (value if isinstance(value, (str, int)) else pytest.approx(value, rel=1e-9)), key


def test_capacity_routing_by_count_never_beats_units(variant):
    """An even split saturates the slower pool first: it can only match routing by units when the two units
    are equal, and the share routed to the new pool is its share of the capacity."""
    for seed in SEEDS:
        results = variant(f"slo-capacity-unit@{seed}").sheet.results
        assert results["count_routing_limit"] <= results["fleet_capacity"] * (1 + 1e-12)
        alone = results["facts"]["the new pool alone could carry the traffic at which routing by count breaks"]
        assert alone in (None, results["new_pool_capacity"] >= results["count_routing_limit"])


def test_capacity_options_do_not_restate_keys(variant):
    """read12: 'the old pool carries over half the fleet's capacity' was 1 − the new pool's share graded in the
    same stage, and 'over half the new pool idle at the old pool's limit' the stage-2 unit ratio past 2. Both are
    gone; the new option (could the new pool alone carry today's count-routed limit, i.e. retire the old pool?)
    follows the numbers both ways."""
    options = variant("slo-capacity-unit@default").question.answer("facts").pool
    assert not any("carries over half" in o or "idle at the old pool" in o for o in options)
    seen = {variant(f"slo-capacity-unit@{seed}").sheet.results["facts"].get(
        "the new pool alone could carry the traffic at which routing by count breaks") for seed in range(40)}
    assert {True, False} <= seen


def test_capacity_option_is_not_listed_on_a_hairline(variant):
    """read12 @42: 'worth more old ones than the bandwidth ratio: 1.43 against 1.43', false on a difference the
    printed figures cannot show. Within the unit ratio's own 3% such an option is judged undecidable (never listed);
    elsewhere it is at least 3% from its threshold."""
    facts = variant("slo-capacity-unit@42").sheet.results["facts"]
    assert facts["a new replica is worth more old ones than the bandwidth ratio"] is None
    for seed in SEEDS:
        r = variant(f"slo-capacity-unit@{seed}").sheet.results
        for option, ratio in (("bandwidth ratio", r["bandwidth_ratio"]), ("compute ratio", r["compute_ratio"])):
            held = r["facts"][f"a new replica is worth more old ones than the {option}"]
            if held is not None:
                assert abs(r["unit_ratio"] / ratio - 1) >= 0.03, (seed, option)


def test_capacity_buying_is_the_unit_ratio_against_the_price_ratio(variant, catalog):
    """Buy-new exactly when the new GPU's price per unit is lower. The push asks the regime and the newer GPU's
    hourly price at which the purchase flips (the unit ratio times the older GPU's price), never the prices per
    million tokens stage 3's key already said (the reader's @12011: the push re-graded an unchanged $0.3104)."""
    for seed in SEEDS:
        solution = variant(f"slo-capacity-unit@{seed}")
        results = solution.sheet.results
        assert (results["regime"] == "buy-new") == (results["unit_cost_new"] < results["unit_cost_old"])
        assert results["breakeven_price"] == pytest.approx(results["unit_ratio"] * value_of(solution, "old_price"))
    solution = variant("slo-capacity-unit@default")
    push = stage_run(solution, catalog, len(solution.question.stages) - 1)
    assert push is not None and push.ask == ("regime", "breakeven_price")
    assert push.solution.expected["breakeven_price"] == pytest.approx(
        push.solution.expected["unit_ratio"] * value_of(push.solution, "old_price"))
    assert "unit_cost_old" not in {a.key for a in solution.question.answers}
    with pytest.raises(VariantError, match="newer_costs_more"):
        variant("slo-capacity-unit@default+new_gpu=h200-sxm+new_price=2.8+old_price=3")


def test_capacity_purchase_is_never_a_coin_toss(variant):
    """The step model's error against measured systems is 1.1-1.4x: draws where the unit ratio is within a tenth
    of the price ratio are refused. The reader's push, H200s at $3 beside B200s at $6 (1.839x against 2x, 8%),
    is refused now; at $2.50 (2.4x) it is a clear buy-old."""
    for seed in SEEDS:
        results = variant(f"slo-capacity-unit@{seed}").sheet.results
        assert abs(results["unit_ratio"] / results["price_ratio"] - 1) >= 0.10
    for code in ("default+new_gpu=h200-sxm+new_price=5.4", "default+old_gpu=h200-sxm"):
        with pytest.raises(VariantError, match="no verdict"):
            variant(f"slo-capacity-unit@{code}")
    assert variant("slo-capacity-unit@default+old_gpu=h200-sxm+old_price=2.5").sheet.results["regime"] == "buy-old"


def test_capacity_caps_are_never_a_coin_flip_nor_past_an_engine(variant):
    """The reader's @12012: the KV pool allowed 4,102 and compute 4,101, keyed "compute", at a batch of 4,100
    and a 79 ms TPOT. A cap within 3% of the binding one is refused, and so is a batch past vLLM's 1,024
    sequences; the TPOT target is drawn at 20-60 ms."""
    for seed in range(60):
        solution = variant(f"slo-capacity-unit@{seed}")
        results = solution.sheet.results
        assert 0.020 <= value_of(solution, "tpot") <= 0.060
        for tag in ("old", "new"):
            least, runner = sorted(results[f"{cap}_{tag}"] for cap in ("batch_by_pool", "batch_by_bandwidth",
                                                                        "batch_by_compute"))[:2]
            assert runner >= least * 1.03
            assert results[f"batch_{tag}"] <= 1024
    with pytest.raises(VariantError, match="coin flip|1024"):
        variant("slo-capacity-unit@default+old_gpu=h200-sxm+tp=8+prompt=760+reply=330+tpot=60+old_price=2.6"
                "+new_price=5.5+old_replicas=12+new_replicas=15")


@pytest.mark.parametrize("seed", [11, 42, 77])
def test_capacity_push_gives_an_interviewers_reason(variant, catalog, seed):
    """read12: the generated push said "Let's change one thing: older GPU price per GPU-hour from $4.6/h to
    $2/h. What changes, and what matters now?" at @11. Its `reasons:` now say why the figure moved (a reserved
    deal ending, a tighter target), and the search moves only figures with a reason."""
    solution = variant(f"slo-capacity-unit@{seed}")
    push = stage_run(solution, catalog, len(solution.question.stages) - 1)
    assert push is not None
    assert "Let's change one thing" not in push.say and "What changes, and what matters now" not in push.say
    assert set(push.moved) <= {"old_price", "new_price", "tpot", "reply", "prompt"}
    assert "at what hourly price" in push.say


def test_capacity_newer_gpu_rents_for_more(variant):
    """read12 @11: an H100 at $4.6/h beside a B200 at $4.7/h (1.02x), each inside its market range but a pair no
    one provider quotes. The newer GPU now costs at least a tenth more an hour, in every draw."""
    with pytest.raises(VariantError):
        variant("slo-capacity-unit@default+old_price=4.6+new_price=4.7")
    for seed in SEEDS:
        solution = variant(f"slo-capacity-unit@{seed}")
        assert value_of(solution, "new_price") >= 1.1 * value_of(solution, "old_price") * (1 - 1e-12), seed
