"""Checks for slo-goodput and decode-op-ranking."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.engine import VariantError
from solvers.followup import generated_push

GiB = 2**30

# --- slo-goodput ---------------------------------------------------------------------------


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


@pytest.mark.parametrize("seed", range(30))
def test_slo_goodput_matches_closed_forms(variant, seed):
    solution = variant(f"slo-goodput@{seed}")
    p = {param.name: param.value for param in solution.params}
    by_hand = _model_by_hand(p)
    for key, value in by_hand.items():
        assert solution.sheet.results[key] == pytest.approx(value, rel=1e-9), key
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
                         ("shedding {big_shed} of arrivals at admission", mu - 0.75 * lam)):
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
    p = {param.name: param.value for param in solution.params}
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
    p = {param.name: param.value for param in solution.params}
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
        p = {param.name: param.value for param in solution.params}
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
    generated push that asks the goodput, the attainment and the verdict again; the median TPOT is a worked step,
    not a box."""
    question = variant("slo-goodput@default").question
    assert [list(stage.ask) for stage in question.stages] == [
        ["ttft_p50", "ttft_p99", "knee_load", "ttft_levers"], ["tpot_p99", "attainment", "max_rate", "regime"],
        ["max_rate", "attainment", "regime"]]
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


# --- decode-op-ranking ---------------------------------------------------------------------

OVERLAP = "an overlapped, CUDA-graphed engine that hides the step's CPU overhead"


def test_decode_op_ranking_default(variant):
    """Llama-3-70B in bf16 at batch 32, TP 4 on H100: every GEMM at 2B/2 = 32 FLOP/B (the graded keys are
    pinned in the question file)."""
    results = variant("decode-op-ranking@default").sheet.results
    for op in ("qkv", "out", "up_gate", "down"):
        assert results[f"{op}_intensity"] == pytest.approx(32)


def test_decode_op_ranking_ties_at_batch_8(variant):
    """Batch 7 ranks attention above the GEMMs, batch 9 below (pinned in the question file); at 8 they tie."""
    with pytest.raises(VariantError):  # at 8 the ops tie: no ranking to ask about
        variant("decode-op-ranking@default+batch=8")


@pytest.mark.parametrize("seed", range(15))
def test_decode_op_ranking_matches_plain_arithmetic(variant, seed):
    """FLOPs and bytes of each op recomputed from the model config, shapes included; the step from its bytes."""
    solution = variant(f"decode-op-ranking@{seed}")
    p = {param.name: param.value for param in solution.params}
    m, gpu, tp, B, T = p["model"], p["gpu"], p["tp"], p["batch"], p["context"]
    b_w = {"bf16": 2, "fp8": 1}[p["weight_dtype"]]
    b_kv = {"bf16": 2, "fp8": 1}[p["kv_dtype"]]
    shapes = {"qkv": (m.hidden, (m.heads + 2 * m.kv_heads) * m.head_dim), "out": (m.heads * m.head_dim, m.hidden),
              "up_gate": (m.hidden, 2 * m.ffn), "down": (m.ffn, m.hidden)}
    for op, (d_in, d_out) in shapes.items():
        assert solution.sheet.results[f"{op}_intensity"] == pytest.approx(2 * B * d_in * d_out / (d_in * d_out * b_w))
    attention = (4 * B * T * m.heads * m.head_dim) / (2 * B * T * m.kv_heads * m.head_dim * b_kv)
    assert solution.expected["attention_intensity"] == pytest.approx(attention)
    gemm = solution.sheet.results["gemm_intensity"]
    assert solution.expected["ranking"] == ("attention-above" if attention > gemm else "attention-below")
    # "The first batch at which the GEMMs reach attention": the least whole batch with 2B/b_w >= attention's.
    assert solution.expected["flip_batch"] == next(b for b in range(1, 1000) if 2 * b / b_w >= attention)
    weights, kv = m.params_b * 1e9 * b_w, m.layers * 2 * B * T * m.kv_heads * m.head_dim * b_kv
    assert weights + kv <= 0.9 * tp * gpu.hbm_mib * 2**20  # the review's bug: the weights and the batch fit
    assert solution.expected["attention_share"] == pytest.approx(kv / (weights + kv))
    flops = 2 * m.params_b * 1e9 * B + m.layers * 4 * B * T * m.heads * m.head_dim
    comm = 0 if tp == 1 else 2 * m.layers * (10e-6 + 2 * (tp - 1) / tp * B * m.hidden * 2 / (gpu.nvlink_gb_s * 1e9 / 2))
    # The bank's step model: reads at 80% of HBM bandwidth, math at 60% of the bf16 peak, the all-reduces, 2 ms.
    step = max((weights + kv) / (0.8 * tp * gpu.hbm_tb_s * 1e12), flops / (0.6 * tp * gpu.bf16_dense_tflops * 1e12)) \
        + comm + 2e-3
    assert solution.expected["per_user"] == pytest.approx(1 / step, rel=1e-9)
    # Which reads set the step: the KV cache's once its bytes pass the weights'.
    assert solution.sheet.regime.name == ("kv-reads" if kv > weights else "weight-reads")


def test_decode_op_ranking_prompt_states_the_ridge_inputs(variant, catalog):
    """The ridge comes from figures the stage that asks it states: A100's 2.039 TB/s, not a rounded 2.0, and
    B200's 2.25 PF (the question file pins the gaps they give)."""
    from solvers.interview import stage_run
    for gpu, shown in (("a100-sxm-80gb", ("312 TFLOP/s", "2.039 TB/s")), ("b200", ("2,250 TFLOP/s", "8 TB/s"))):
        solution = variant(f"decode-op-ranking@default+gpu={gpu}")
        run = stage_run(solution, catalog, 1)
        assert run is not None and "attention_gap" in run.ask
        assert all(figure in run.say for figure in shown)


def test_decode_op_ranking_refuses_weights_that_do_not_fit(variant):
    """The old draws put 405B in bf16 on one GPU (47% of them did not fit the GPU the prompt names)."""
    with pytest.raises(VariantError):
        variant("decode-op-ranking@default+model=llama-3.1-405b")  # 812 GB over 4 x 80 GB
    with pytest.raises(VariantError):
        variant("decode-op-ranking@default+batch=256+context=65000")  # 1.4 TB of KV


def test_decode_op_ranking_overlap_is_judged_on_the_overhead(variant):
    """The review: fusion and CUDA graphs were false by construction (no overhead in the model). Now the step
    carries its 2 ms of overhead, and hiding it is judged on its share: true in some draws, false in others."""
    seen = set()
    for seed in range(60):
        solution = variant(f"decode-op-ranking@{seed}")
        held = solution.sheet.judged("levers")[OVERLAP]
        step = 1 / solution.expected["per_user"]
        bar = 1 + {param.name: param.value for param in solution.params}["raise_by"]
        if held is not None:
            assert held == (step / (step - 2e-3) >= bar), seed
            seen.add(held)
    assert seen == {True, False}


def test_decode_op_ranking_pinned_seed(variant):
    """Seed 0 draws these parameters (its keys are pinned in the question file)."""
    solution = variant("decode-op-ranking@0")
    assert [p.raw for p in solution.params] == ["llama-3-70b", "h100-sxm", 8, "fp8", "bf16", 32, 2900, 40]


def _doubled_kv_fill(solution) -> float:
    """Twice the batch's KV cache a GPU over the KV pool (each GPU's 0.9 of the HBM it reports, less its share
    of the weights), in plain floats: over 1 it does not fit."""
    p = {param.name: param.value for param in solution.params}
    m, gpu, tp = p["model"], p["gpu"], p["tp"]
    b_w = {"bf16": 2, "fp8": 1}[p["weight_dtype"]]
    b_kv = {"bf16": 2, "fp8": 1}[p["kv_dtype"]]
    weights = m.params_b * 1e9 * b_w
    kv = m.layers * 2 * p["batch"] * p["context"] * m.kv_heads * m.head_dim * b_kv
    return 2 * kv / tp / (0.9 * gpu.hbm_mib * 2**20 - weights / tp)


def _lever_gains(solution, latency: float) -> dict[str, float | None]:
    """Each lever's gain in total tokens/s (all sequences: batch over the step), in plain floats, with the
    all-reduce latency per call at `latency` seconds; None where twice the batch does not fit."""
    p = {param.name: param.value for param in solution.params}
    m, gpu, tp, B, T = p["model"], p["gpu"], p["tp"], p["batch"], p["context"]
    b_w = {"bf16": 2, "fp8": 1}[p["weight_dtype"]]
    b_kv = {"bf16": 2, "fp8": 1}[p["kv_dtype"]]
    weights, kv = m.params_b * 1e9 * b_w, m.layers * 2 * B * T * m.kv_heads * m.head_dim * b_kv

    def rate(w, c, b, overhead=2e-3):
        flops = 2 * m.params_b * 1e9 * b + m.layers * 4 * b * T * m.heads * m.head_dim
        comm = 0 if tp == 1 else 2 * m.layers * (latency + 2 * (tp - 1) / tp * b * m.hidden * 2
                                                 / (gpu.nvlink_gb_s * 1e9 / 2))
        return b / (max((w + c) / (0.8 * tp * gpu.hbm_tb_s * 1e12), flops / (0.6 * tp * gpu.bf16_dense_tflops * 1e12))
                    + comm + overhead)

    today = rate(weights, kv, B)
    return {"twice the batch": rate(weights, 2 * kv, 2 * B) / today if _doubled_kv_fill(solution) <= 1 else None,
            "the KV cache at half its bytes per token": rate(weights, kv / 2, B) / today,
            "the weights at half their bytes": rate(weights / 2, kv, B) / today,
            OVERLAP: rate(weights, kv, B, overhead=0) / today}


@pytest.mark.parametrize("seed", range(0, 90, 3))
def test_decode_op_ranking_levers_are_total_tokens_and_clear_of_their_lines(variant, seed):
    """A re-derivation: "tokens/s" read per user flips the levers, and one lever's truth flipped between a 10 us
    and a 20 us all-reduce latency. The label says total tokens/s; every listed lever's gain, recomputed in plain
    floats, is at least 3% from the bar and on the same side at 5, 10 and 20 us; a lever that is not is not
    listed (judged None)."""
    solution = variant(f"decode-op-ranking@{seed}")
    bar = 1 + {param.name: param.value for param in solution.params}["raise_by"]
    judged = solution.sheet.judged("levers")
    at = {latency: _lever_gains(solution, latency) for latency in (5e-6, 10e-6, 20e-6)}
    p = {param.name: param.value for param in solution.params}
    for option, gain in at[10e-6].items():
        if option == "the KV cache at half its bytes per token" and p["kv_dtype"] == "fp8" \
                and "fp4_dense_tflops" not in p["gpu"]:
            assert judged[option] is None, seed  # fp4 KV: no such lever before Blackwell
        elif gain is None:
            assert judged[option] is False, (seed, option)  # twice the KV does not fit: it cannot help
        elif option == "twice the batch" and _doubled_kv_fill(solution) > 0.95:
            assert judged[option] is None, seed  # within 5% of the pool: the workspace decides
        elif judged[option] is None:
            assert abs(gain / bar - 1) < 0.03 or len({at[k][option] >= bar for k in at}) > 1, (seed, option)
        else:
            assert judged[option] == (gain >= bar), (seed, option)
            assert abs(gain / bar - 1) >= 0.03 and {at[k][option] >= bar for k in at} == {judged[option]}, seed


def test_decode_op_ranking_twice_the_batch_is_judged_on_the_kv_pool(variant):
    """read2-RH: twice the batch must fit the KV pool (usable HBM less the weights, a GPU) to help. Over 200 seeds
    against a plain fit check: over the pool it is false and says so, within 5% under it it is not listed, and
    below that its gain decides; the reason names the doubled KV and the pool. @9501's push (30 sequences of 16K
    fp8 on 4 A100s) needs 39.3 GB a GPU against a 42.0 GB pool: it fits (the review took 80e9 B, not the
    81,920 MiB the device reports)."""
    seen = set()
    for seed in range(200):
        solution = variant(f"decode-op-ranking@{seed}")
        held = solution.sheet.judged("levers")["twice the batch"]
        why = solution.sheet.reasons["levers"]["twice the batch"]
        fill = _doubled_kv_fill(solution)
        assert "GB of KV a GPU" in why and "KV pool left after the weights" in why, seed
        if fill > 1:
            assert held is False and "does not fit" in why, seed
        elif fill > 0.95:
            assert held is None, seed
        else:
            assert "does not fit" not in why, seed
        seen.add((fill > 1, held))
    assert {(True, False), (False, True), (False, False)} <= seen
    pushed = variant("decode-op-ranking@9501+batch=30")
    assert _doubled_kv_fill(pushed) == pytest.approx(39.32e9 / 42.03e9, rel=2e-3)
    assert pushed.sheet.judged("levers")["twice the batch"] is True


def test_decode_op_ranking_lists_no_fp4_kv_before_blackwell(variant):
    """read3-R2: an fp8 KV cache at half its bytes is fp4, no shipping lever on Hopper: not listed there, and
    judged on its gain on B200 (which runs fp4)."""
    hopper = variant("decode-op-ranking@default+kv_dtype=fp8")
    assert hopper.sheet.judged("levers")["the KV cache at half its bytes per token"] is None
    assert "fp4" in hopper.sheet.reasons["levers"]["the KV cache at half its bytes per token"]
    assert "the KV cache at half its bytes per token" not in hopper.shown["levers"]
    blackwell = variant("decode-op-ranking@default+kv_dtype=fp8+gpu=b200")
    assert blackwell.sheet.judged("levers")["the KV cache at half its bytes per token"] is not None


def test_decode_op_ranking_push_crosses_at_9603(variant, catalog):
    """read3-R2: @9603 (28 sequences of 5,700 tokens, Llama-3.1-70B on 4 H100s) was pushed to batch 10, crossing
    nothing: the push asked which levers clear the 40% bar, and at the crossing none does, so the search fell back.
    The push no longer asks the levers: it moves the context past 15,379 tokens (KV 165 GB beside 141 GB of
    weights, within the 167 GB pool) into kv-reads, and asks the reads' share that moved."""
    from solvers.interview import stage_run
    solution = variant("decode-op-ranking@9603")
    run = stage_run(solution, catalog, 2)
    assert run is not None and solution.regime_name == "weight-reads" and run.regime == "kv-reads"
    assert "attention_share" in run.ask and "levers" not in run.ask
    assert run.solution.expected["attention_share"] > 0.5 > solution.expected["attention_share"]


def test_decode_op_ranking_says_total_and_per_user(bank):
    """Which tokens/s each answer means is in its label: the levers are judged on the total, the speed is one
    stream's; the flip batch is the first batch at which the GEMMs reach attention."""
    labels = {answer.key: answer.label for answer in bank.get("decode-op-ranking").answers}
    assert "total tokens/s (all sequences together)" in labels["levers"]
    assert "per user" in labels["per_user"] and labels["flip_batch"].startswith("First batch at which")


def test_decode_op_ranking_lever_sets_vary(variant):
    """The review: one lever set in 147/200 draws. The bar drawn (20-60%) moves which levers clear it: no set
    holds in more than two thirds of the draws, and at least five sets occur."""
    from collections import Counter
    sets = Counter(tuple(sorted(o for o, h in variant(f"decode-op-ranking@{seed}").sheet.judged("levers").items()
                                if h)) for seed in range(120))
    assert max(sets.values()) <= 80 and len(sets) >= 5