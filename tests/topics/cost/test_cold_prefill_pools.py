"""cold-prefill-pools: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.interview import stage_run
from tests.by_hand import value_of
from tests.topics.cost.replica_by_hand import OVERHEAD, SEEDS, Replica


def test_cold_prefill_attention_term_is_the_card_and_chinchilla(variant):
    """The card's A·T²/2 with A = 4·L·H·d_h is the teaser's 2·L·d·T² (H·d_h = d for Llama): Chinchilla's
    App. F counts 2·L·d·T attention FLOPs per token in the forward pass, over a causal half."""
    model = value_of(variant("cold-prefill-pools@default"), "model")
    assert model.heads * model.head_dim == model.hidden
    A = 4 * model.layers * model.heads * model.head_dim
    assert A * 32768**2 / 2 == 2 * model.layers * model.hidden * 32768**2


def by_hand_warm_share(solution):
    """The warm fraction by bisection on the prefill time, independent of the closed-form root."""
    g = Replica(value_of(solution, "model"), value_of(solution, "gpu"), value_of(solution, "tp"))
    g.fr = g.fr_att = (value_of(solution, "tp") * value_of(solution, "mfu")
                       * value_of(solution, "gpu").bf16_dense_tflops * 1e12)
    T, tau = value_of(solution, "prompt"), value_of(solution, "ttft") * (1 - value_of(solution, "queue_share"))

    def time(h):
        return g.step((1 - h) * T, (T**2 - (h * T) ** 2) / 2, h * T)

    if time(0) <= tau:
        return 0.0, time(0)
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if time(mid) > tau else (low, mid)
    return high, time(0)


def test_cold_prefill_default_pools(variant):
    """At a 0.5 s target the cache must serve 67% of each prompt (the pools are pinned in the question file); the
    decode replicas' batch is what the KV pool caps, 43 requests of 32K context (40 against the 80 GB label)."""
    assert variant("cold-prefill-pools@default").sheet.results["batch"] == 43


def test_cold_prefill_refuses_a_whole_pool(variant):
    """A prefill pool whose busy figure lands on a whole number of replicas would leave the ceiling to float
    noise: such draws are refused (it was a certainty when the pool was sized at τ itself)."""
    for seed in SEEDS:
        solution = variant(f"cold-prefill-pools@{seed}")
        busy = value_of(solution, "rate") * solution.sheet.results["warm_ttft"] / value_of(solution, "ceiling")
        assert abs(busy - round(busy)) > 1e-6 * busy


@pytest.mark.parametrize("seed", range(20))
def test_cold_prefill_warm_share_by_bisection(variant, seed):
    solution = variant(f"cold-prefill-pools@{seed}")
    warm, cold = by_hand_warm_share(solution)
    results = solution.sheet.results
    assert results["warm_needed"] == pytest.approx(warm, abs=1e-9)
    assert results["cold_ttft"] == pytest.approx(cold, rel=1e-9)
    budget = value_of(solution, "ttft") * (1 - value_of(solution, "queue_share"))
    assert results["regime"] == ("cold-fits" if cold <= budget else "warm-required")


# 8, 30 and the 65K prompt on H200s (seed 9103's draw when targets ran to 3 s): the ones the whole-math halving flipped
FP8_CASE = "default+gpu=h200-sxm+prompt=65536+mfu=50+ttft=1.2+rate=9"
FP8_OPTION = ("with fp8 weight GEMMs at {fp8_gain} the bf16 GEMMs' rate (attention still bf16), a new session's first, "
              "all-cold turn makes it")
FP8_GAIN = 1.6  # twice the peak at a lower share of it (step-compute-fp8's 50% against 60%: 1.67x)


def fp8_cold_time(solution, gain):
    g = Replica(value_of(solution, "model"), value_of(solution, "gpu"), value_of(solution, "tp"))
    g.fr = value_of(solution, "tp") * value_of(solution, "mfu") * value_of(solution, "gpu").bf16_dense_tflops * 1e12
    T = value_of(solution, "prompt")
    math_time = 2 * g.N * T / (gain * g.fr) + g.A * T**2 / 2 / g.fr
    return max(g.weights / 2 / g.br, math_time) + g.ar0 + g.ar_tok * T + OVERHEAD


@pytest.mark.parametrize("seed", [*range(20), 8, 30, FP8_CASE])
def test_cold_prefill_fp8_speeds_only_the_weight_gemms(variant, seed):
    """fp8 weight GEMMs at 1.6x the bf16 rate (and half the weight bytes): attention over the bf16 cache keeps the
    bf16 peak (matmul-precision). The first key halved all the math and said a cold prompt makes it on the 65K H200
    draw (2.55 s against its 2.7 s target then); by hand 3.555 s at 1.6x."""
    solution = variant(f"cold-prefill-pools@{seed}")
    assert value_of(solution, "fp8_gain") == FP8_GAIN
    budget = value_of(solution, "ttft") * (1 - value_of(solution, "queue_share"))
    assert solution.sheet.results["facts"][FP8_OPTION] == (fp8_cold_time(solution, FP8_GAIN) <= budget)
    if seed == FP8_CASE:
        assert fp8_cold_time(solution, FP8_GAIN) == pytest.approx(3.555, abs=5e-4)
        assert "leave 3.555 s" in solution.sheet.reasons["facts"][FP8_OPTION]


def test_cold_prefill_fp8_is_not_twice_bf16(variant):
    """read7 #7: the option took fp8 GEMMs at twice the bf16 rate, which measured FP8 never reaches (TensorRT-LLM's
    70B FP8 TTFT is 42% of the FP8 peak). At 1.6x some draws that twice made 'cold makes it' no longer do, and
    the option's truth still varies over the draws."""
    flipped, seen = 0, set()
    for seed in SEEDS:
        solution = variant(f"cold-prefill-pools@{seed}")
        budget = value_of(solution, "ttft") * (1 - value_of(solution, "queue_share"))
        holds = solution.sheet.results["facts"][FP8_OPTION]
        seen.add(holds)
        flipped += (fp8_cold_time(solution, 2) <= budget) and not holds
    assert flipped > 0 and seen == {True, False}


def pushed(solution, catalog):
    runs = [stage_run(solution, catalog, i) for i, stage in enumerate(solution.question.stages) if stage.push]
    return [run for run in runs if run is not None]


def test_cold_prefill_push_shortens_the_prompt(variant, catalog):
    """From the warm side the agents trim their prompts to 8K and their turns to 1K: on the default's 8 x H100 a
    cold prompt then fits; the push for the other side is not asked. 370.3 live prefixes (a 37.03 s turn cycle)
    over 176 a replica keeps need 3 warm replicas against 5 cold."""
    asked = pushed(variant("cold-prefill-pools@default"), catalog)
    assert len(asked) == 1 and set(asked[0].moved) == {"prompt", "appended"}
    assert asked[0].solution.expected["regime"] == "cold-fits"
    assert asked[0].solution.expected["cold_prefill_replicas"] == 5
    assert asked[0].solution.expected["prefill_replicas"] == 3


def test_cold_prefill_trimmed_push_asks_the_cold_pool_not_a_zero_warm_share(variant, catalog):
    """read7 #4: the trimmed-prompt push graded the warm fraction, 0% wherever it crossed to cold-fits. read10:
    its next ask, the GPUs the cache saves, was zero or one replica's TP (a parameter) in about half the pushed
    draws once the pool held every turn's cycle. It asks the cold pool and the pool run (the smaller, where cold
    fits); the saving stays a derivation step, never negative where cold fits, and zero in under a fifth of the
    pushed draws. read11: refusing first turns past 8x the target drops long prompts, whose trims saved most; the
    pool run and the cold pool now tie in up to a quarter of the pushed draws (two distinct asked figures that agree,
    not a zero answer: the saving is not asked)."""
    stage = next(stage for stage in variant("cold-prefill-pools@default").question.stages
                 if stage.push and stage.when == "warm-required")
    assert "warm_needed" not in stage.ask and "gpus_saved" not in stage.ask
    assert {"cold_prefill_replicas", "prefill_replicas"} <= set(stage.ask)
    zeros = pushes = 0
    for seed in range(60):
        solution = variant(f"cold-prefill-pools@{seed}")
        if solution.sheet.results["regime"] != "warm-required":
            continue
        (run,) = pushed(solution, catalog)
        results, tp = run.solution.sheet.results, value_of(run.solution, "tp")
        assert results["gpus_saved"] == tp * (results["cold_prefill_replicas"] - results["prefill_replicas"])
        assert results["gpus_saved"] >= 0 or results["regime"] == "warm-required"  # required, whatever it costs
        pushes += 1
        zeros += results["gpus_saved"] == 0
    assert pushes >= 30 and zeros <= pushes / 4


def test_cold_prefill_cache_and_handover_by_hand(variant):
    """The expert reading's two missing costs: whole prompts a replica's HBM keeps beside its weights, and the KV
    rate the prefill pool ships to decode (about 107 GB/s at the default)."""
    for seed in ["default", *range(10)]:
        solution = variant(f"cold-prefill-pools@{seed}")
        g = Replica(value_of(solution, "model"), value_of(solution, "gpu"), value_of(solution, "tp"))
        T, rate = value_of(solution, "prompt"), value_of(solution, "rate")
        results = solution.sheet.results
        assert results["cached_prompts"] == math.floor(g.pool / (g.kv * T))
        model = value_of(solution, "model")
        kv_token = 2 * model.layers * model.kv_heads * model.head_dim * 2  # every KV head, bf16
        assert results["kv_transfer"] == pytest.approx(rate * T * kv_token, rel=1e-9)


def test_cold_prefill_handover_is_judged_against_the_replicas_nics(variant):
    """read7 #6: the pool's KV rate was a multiplication judged against nothing. Graded now: one prompt's KV over
    its prefill replica's NICs (a 400 Gb/s ConnectX-7 a GPU), 26.84 ms at the default; judged: the share of the
    replica's NIC time the pool's handovers take, over a tenth or not (5.4% at the default over its 5 prefill
    replicas), varying by draw."""
    option = "the KV handover keeps a prefill replica's NICs over a twentieth busy"
    seen = set()
    for seed in ["default", *SEEDS]:
        solution = variant(f"cold-prefill-pools@{seed}")
        model, tp = value_of(solution, "model"), value_of(solution, "tp")
        T, rate = value_of(solution, "prompt"), value_of(solution, "rate")
        ship = T * 2 * model.layers * model.kv_heads * model.head_dim * 2 / (tp * 400e9 / 8)
        results = solution.sheet.results
        assert results["ship_time"] == pytest.approx(ship, rel=1e-9)
        busy = rate * ship / results["prefill_replicas"]
        assert results["facts"][option] == (busy > 0.05)
        seen.add(busy > 0.05)
        if seed == "default":
            assert ship == pytest.approx(26.84e-3, rel=1e-3) and busy == pytest.approx(0.0298, rel=1e-2)
    assert seen == {True, False}


def test_cold_prefill_rate_falls_with_the_prompt(variant):
    """read7 #10: 43 requests/s of 64K prompts (2.8M prompt tokens/s) drew a fleet of hundreds of B200s. Draws keep
    the prompt tokens a second at 600K or under, so the fleets stay in the tens of replicas."""
    for seed in SEEDS:
        solution = variant(f"cold-prefill-pools@{seed}")
        assert value_of(solution, "rate") * value_of(solution, "prompt") <= 600_000
        results = solution.sheet.results
        assert results["prefill_replicas"] + results["decode_replicas"] < 100


def test_cold_prefill_says_why_the_target_is_fixed_and_the_title_names_no_length(variant):
    """read7 #8 and #5: the TTFT target does not scale with the prompt on purpose (an interactive agent loop), and
    the assumptions say so; the title names no prompt length (it read '32K' on 16K and 64K draws)."""
    solution = variant("cold-prefill-pools@default")
    assert any("the same whatever the prompt's length" in line for line in solution.sheet.assumptions)
    assert not any(ch.isdigit() for ch in solution.question.title)


def test_cold_prefill_keeps_a_queueing_allowance_and_sizes_the_pool_at_the_sessions_hit_rate(variant):
    """read7 #1: h* was solved so the warm prefill took exactly τ, leaving nothing for queueing, and the pool was
    then ceil(λτ/u), three parameters with no cache in it (8 at the default). The warm share is now solved
    against the prefill's share of the target, (1 − 20%)·τ (74.0% at the default, was 67.1%), and the pool is
    sized at what returning sessions bring, all but a turn's new tokens warm (93.9%: 2 replicas of compute; the
    cache then sizes the default's pool, see below)."""
    solution = variant("cold-prefill-pools@default")
    results = solution.sheet.results
    assert results["prefill_budget"] == pytest.approx(0.4)
    assert results["prefill_compute_replicas"] == 2 != math.ceil(10 * 0.5 / 0.7)
    for seed in ["default", *range(15)]:
        solution = variant(f"cold-prefill-pools@{seed}")
        g = Replica(value_of(solution, "model"), value_of(solution, "gpu"), value_of(solution, "tp"))
        g.fr = g.fr_att = (value_of(solution, "tp") * value_of(solution, "mfu")
                           * value_of(solution, "gpu").bf16_dense_tflops * 1e12)
        T, new = value_of(solution, "prompt"), value_of(solution, "appended")
        h = 1 - new / T
        warm = g.step(new, (T**2 - (h * T) ** 2) / 2, h * T)
        results = solution.sheet.results
        assert results["warm_ttft"] == pytest.approx(warm, rel=1e-9)
        assert results["warm_ttft"] <= value_of(solution, "ttft") * (1 - value_of(solution, "queue_share"))
        rate, ceiling = value_of(solution, "rate"), value_of(solution, "ceiling")
        assert results["prefill_compute_replicas"] == math.ceil(rate * warm / ceiling)
    more = variant("cold-prefill-pools@default+appended=6000").sheet.results["prefill_compute_replicas"]
    assert more > 2  # the pool follows the cache's hit rate


def test_cold_prefill_pool_holds_every_live_prefix(variant):
    """read7 #2 graded the prompts a replica keeps; review r12 (@61027): the pool was still sized on compute alone,
    every session returning warm, while its one replica's cache held 62 prompts against 117.5 live sessions. The
    pool now holds every live prefix, λ × gap (Little's law) over the prompts a replica keeps, where a cold prompt
    misses the target; where it fits, it runs cold instead if that takes fewer replicas. At the default 200 live
    prefixes over 44 a replica need 5 replicas, where the compute needs 2. read10: a prefix lives a whole turn's
    cycle (prefill, reply streaming, think time), 362.6 live at the default: 9 replicas. The option that says the
    cache sizes the pool varies with the draw."""
    option = "the prefill pool's size is set by the live prefixes its HBM must hold, not by its compute"
    default = variant("cold-prefill-pools@default").sheet.results
    assert (default["prefill_compute_replicas"], default["prefill_cache_replicas"], default["prefill_replicas"]) \
        == (2, 9, 9)
    assert default["facts"][option] is True
    at_61027 = variant("cold-prefill-pools@61027").sheet.results
    assert at_61027["live_sessions"] > 117.5  # r12's draw (62 cached) is redrawn since read10's cycle
    assert at_61027["pool_cache"] >= at_61027["live_sessions"]
    seen = set()
    for seed in SEEDS:
        solution = variant(f"cold-prefill-pools@{seed}")
        results = solution.sheet.results
        live = value_of(solution, "rate") * (results["warm_ttft"] + value_of(solution, "reply") * results["decode_step"]
                                             + value_of(solution, "gap"))
        compute, hold = results["prefill_compute_replicas"], math.ceil(live / results["cached_prompts"])
        warm, cold = max(compute, hold), results["cold_prefill_replicas"]
        fits = results["regime"] == "cold-fits"
        assert results["prefill_replicas"] == (min(warm, cold) if fits else warm)
        if results["prefill_replicas"] == warm:
            assert results["prefill_replicas"] * results["cached_prompts"] >= live
        by_cache = results["prefill_replicas"] == warm and hold > compute
        assert results["facts"][option] == by_cache
        seen.add(by_cache)
    assert seen == {True, False}


def test_cold_prefill_says_the_session_model(variant):
    """Review r12: prompts stayed at T while each turn 'added' its new tokens, a context silently truncated. A
    session resends the same prompt with its last T_new tokens new, and the words and assumptions say so."""
    solution = variant("cold-prefill-pools@default")
    words = " ".join(solution.question.stages[2].say.split())
    assert "same prompt, last {appended}" in words
    assert any("keeps its length T" in line for line in solution.sheet.assumptions)


@pytest.mark.parametrize(("seed", "replicas", "live"), [(8, 9, 216.17)])
def test_cold_prefill_a_prefix_lives_a_whole_turn_cycle(variant, seed, replicas, live):
    """read10: live sessions were λ x the gap alone, as if a session came back every 8.1 s (@7) while its 630-token
    reply took 24.4 s to stream (38.77 ms a token); the gap is now the think time after the reply ends, and a
    prefix lives its prefill, the reply and the think time. By hand @7: 4.4 x (0.1067 + 630 x 0.03877 + 8.1) =
    143.6 live over 22 a replica: 7 replicas, not 2. (The reader's @31, 4 replicas with the cycle in, now has
    every fact holding and is redrawn; read11 refuses @7's old draw, a 126K first turn 16x its target, and @8 stands
    in: 6.6 x (0.09918 + 550 x 0.03028 + 16) = 216.2 live over 25 a replica, 9 replicas against 2 of compute.)"""
    solution = variant(f"cold-prefill-pools@{seed}")
    results = solution.sheet.results
    cycle = results["warm_ttft"] + value_of(solution, "reply") * results["decode_step"] + value_of(solution, "gap")
    assert results["session_cycle"] == pytest.approx(cycle, rel=1e-9)
    assert results["live_sessions"] == pytest.approx(live, rel=1e-3)
    assert results["live_sessions"] > value_of(solution, "rate") * value_of(solution, "gap") * 1.5
    assert results["prefill_replicas"] == replicas
    if seed == 8:
        assert results["prefill_replicas"] == math.ceil(6.6 * (0.09918 + 550 * 0.03028 + 16) / 25)
        assert results["prefill_compute_replicas"] == 2


def test_cold_prefill_says_the_gap_is_think_time(variant):
    """read10: the words said 'a session returns every {gap}'; they now say it comes back {gap} after its reply
    ends, and the assumptions say a prefix is held for the whole turn."""
    solution = variant("cold-prefill-pools@default")
    words = " ".join(solution.question.stages[2].say.split())
    assert "{gap} after a reply ends" in words
    assert any("cannot come back before its reply has streamed" in line for line in solution.sheet.assumptions)


def test_cold_prefill_checks_a_returning_sessions_warm_share(variant):
    """read10: nothing showed that a returning session's own warm share, 1 − T_new/T, clears the one the target
    needs. The derivation states the margin, and it is at least 3 points in every draw (the rest are refused)."""
    for seed in ["default", *SEEDS]:
        results = variant(f"cold-prefill-pools@{seed}").sheet.results
        assert results["warm_margin"] == pytest.approx(results["warm_real"] - results["warm_needed"])
        assert results["warm_margin"] >= 0.03


def test_cold_prefill_ttft_push_asks_the_first_turn_not_the_unchanged_pool(variant):
    """read10: the 0.3 s TTFT push asked the prefill replicas, which stayed where stage 3's key put them in about
    four pushed draws in five. It asks whether a new session's first turn (cold) makes it, and the warm share."""
    stage = next(stage for stage in variant("cold-prefill-pools@default").question.stages
                 if stage.push and stage.when == "cold-fits")
    assert "prefill_replicas" not in stage.ask and {"regime", "warm_needed"} <= set(stage.ask)
    assert "first turn" in stage.say


def test_cold_prefill_cold_pool_option_says_throughput(variant):
    """read10: 'without the cache the pool would be twice as large' compared against a cold pool that misses the
    SLO at any size; the option says the cold pool is sized for throughput alone."""
    facts = variant("cold-prefill-pools@default").sheet.results["facts"]
    assert "sized for throughput alone, the cold prefill pool would be at least twice the one you run" in facts
    assert not any(option.startswith("without the cache") for option in facts)


def test_cold_prefill_read11_stage_three_says_the_cache_rules(variant):
    """read11 report 1: stage 3 graded a cache model the candidate was never told: prefixes held only in the prefill
    replicas' HBM, each session routed back to its replica (a host-DRAM tier, Mooncake's, would size the pool on
    compute). The words say both; the MFU is said to leave the all-reduces apart (they are added on top, not
    counted twice); the first, all-cold turn of a new session is what the fp8 option and the trimmed-prompt push ask."""
    question = variant("cold-prefill-pools@12").question
    words = " ".join(question.stages[2].say.split())
    assert "Prefixes live only in prefill HBM" in words and "come back to their replica" in words
    assert "all-reduces apart" in " ".join(question.stages[0].say.split())
    assert "all-reduces apart" in question.parameter("mfu").label
    assert any("first, all-cold turn" in option for option in question.answer("facts").pool)
    assert "first turn, all cold" in " ".join(question.stages[4].say.split())


def test_cold_prefill_read11_first_turn_misses_at_most_eight_times(variant):
    """read11 report 1 (@77: a 65K prompt against 0.58 s, 92.7% warm needed; seed 7 drew 126K against 0.72 s, a
    cold first turn of 9.1 s, 16x the 0.576 s left): a new session's first turn is cold, and a target it misses by
    an order of magnitude is no product's. Draws past 8x the prefill's share are refused."""
    from solvers.engine import VariantError

    with pytest.raises(VariantError):
        variant("cold-prefill-pools@default+gpu=h200-sxm+prompt=129024+ttft=0.72+tp=8+mfu=65+rate=4.4+appended=1000")
    for seed in SEEDS:
        solution = variant(f"cold-prefill-pools@{seed}")
        results = solution.sheet.results
        assert float(results["cold_ttft"]) <= 8 * float(results["prefill_budget"])
