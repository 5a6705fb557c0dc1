"""Checks for the speculative-decoding questions (group D) and their shared helper
solvers/formulas/speculation.py: the closed forms against a seeded simulation of acceptance, the
draws against the step model recomputed here in plain Python, and the decisions near their
boundaries (the default variants' figures are pinned in the question files)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.formulas.speculation import expected_tokens

SEEDS = range(80)


def _value(solution, name):
    return solution.param(name).value


# --- the helper ---------------------------------------------------------------------------


def test_expected_tokens_closed_form_and_its_limit():
    """E = (1 − α^(γ+1))/(1 − α): 3.3616 at α = 0.8, γ = 4; γ + 1 at α = 1; 1 at α = 0."""
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert expected_tokens(1, 4) == 5
    assert expected_tokens(0.0, 7) == 1
    assert expected_tokens(1 - 1e-9, 4) == pytest.approx(5, rel=1e-6)  # continuous at the limit


@pytest.mark.parametrize("alpha, gamma", [(0.5, 2), (0.8, 4), (0.9, 8), (0.6, 3)])
def test_simulated_acceptance_matches_the_closed_form(alpha, gamma):
    """A seeded simulation of rounds: drafts accepted i.i.d. with probability α until the first
    rejection, plus the target's own token. The mean lands within 4 standard errors of E."""
    rng = np.random.default_rng(1234)
    accepted = rng.random((200_000, gamma)) < alpha
    run = np.cumprod(accepted, axis=1).sum(axis=1)  # drafts kept: the prefix before the first rejection
    tokens = run + 1
    se = tokens.std() / np.sqrt(tokens.size)
    assert abs(tokens.mean() - expected_tokens(alpha, gamma)) < 4 * se


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 0.99), st.integers(1, 12))
def test_expected_tokens_is_the_geometric_sum(alpha, gamma):
    assert expected_tokens(alpha, gamma) == pytest.approx(sum(alpha**i for i in range(gamma + 1)), rel=1e-9)


# --- spec-decode-batch-ceiling --------------------------------------------------------------


def _ceiling_by_hand(solution):
    model, gpu = _value(solution, "model"), _value(solution, "gpu")
    dtype = _value(solution, "dtype")
    alpha, gamma, c, batch = (_value(solution, n) for n in ("alpha", "gamma", "draft_cost", "batch"))
    b_w = 2 if dtype == "bf16" else 1
    peak = (gpu.bf16_dense_tflops if dtype == "bf16" else gpu.fp8_dense_tflops) * 1e12
    bw = gpu.hbm_tb_s * 1e12
    n = model.params_b * 1e9
    e = expected_tokens(alpha, gamma)

    def step(tokens):
        return max(n * b_w / bw, 2 * n * tokens / peak)

    plain, verify = step(batch), step(batch * (gamma + 1))
    ceiling = int(b_w * peak / bw / (2 * (gamma + 1)))
    round_at_ceiling = step(ceiling * (gamma + 1)) + gamma * c * step(ceiling)
    return {
        "tokens_per_round": e,
        "ceiling": ceiling,
        "speedup": e * plain / (verify + gamma * c * plain),
        "per_user_ceiling": e / round_at_ceiling,
        "break_even": b_w * peak / (2 * bw) * (e - gamma * c) / (gamma + 1),
        "per_user": e / (verify + gamma * c * plain),
    }


def test_batch_ceiling_default_is_59_on_an_h100_in_bf16(variant):
    """The catalogue's figure, γ = 4 keeping the verify pass memory-bound while B·5 ≤ 295, is pinned in the question
    file. The drafter's c is of a plain step at the batch (2.17x cheaper than the verify pass there): the prompt
    says so."""
    assert "costing 0.05 of a plain step at the same batch" in variant("spec-decode-batch-ceiling@default").prompt


def test_batch_ceiling_draws_match_plain_arithmetic(variant):
    for seed in SEEDS:
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        for key, value in _ceiling_by_hand(solution).items():
            assert solution.expected[key] == pytest.approx(value, rel=1e-9), (seed, key)
        helps = _value(solution, "batch") < solution.expected["break_even"]
        assert solution.expected["regime"] == ("helps" if helps else "hurts")
        assert (solution.expected["speedup"] > 1) == helps
        # No verdict within the break-even answer's 3%: a candidate's rounding cannot flip it.
        assert abs(_value(solution, "batch") / solution.expected["break_even"] - 1) >= 0.03, seed


def test_the_ceiling_is_exact_and_within_it_the_speedup_is_the_batch1_one(variant):
    """At the ceiling the verify pass is still at or under the ridge, one sequence more and it is
    over; at the ceiling a round is one weight read plus the drafts (the batch-1 speedup's round), and a
    batch within it is refused (stage 3 would repeat stage 1's figures)."""
    base = variant("spec-decode-batch-ceiling@default")
    ceiling = int(base.expected["ceiling"])
    steps = {step.key: step.value for step in base.sheet.steps}
    assert 2 * ceiling * 5 / 2 <= steps["ridge"] < 2 * (ceiling + 1) * 5 / 2
    gamma, c = _value(base, "gamma"), _value(base, "draft_cost")
    read = steps["plain_step"]  # batch 128 is below plain decode's ridge: the step is the weight read
    assert base.expected["per_user_ceiling"] == pytest.approx(
        base.expected["tokens_per_round"] / ((1 + gamma * c) * read), rel=1e-12)
    with pytest.raises(Exception, match="within the verify pass's ceiling"):
        variant(f"spec-decode-batch-ceiling@default+batch={ceiling}")
    past = variant(f"spec-decode-batch-ceiling@default+batch={ceiling + 1}")
    assert past.expected["speedup"] < past.expected["speedup_batch1"]


def test_break_even_is_where_the_speedup_crosses_one(variant):
    """By hand the speedup is 1 at the keyed break-even (168.39 at the default); the nearest batches outside the
    answer's 3% (which the solver refuses as knife edges) sit on either side, and the sheet agrees."""
    base = variant("spec-decode-batch-ceiling@default")
    even = base.expected["break_even"]
    from solvers.data import Record
    from solvers.formulas.common import hbm_bandwidth, peak_flops
    p = Record({q.name: q.value for q in base.params})
    at = _speedup_by_hand(p, p.alpha, p.gamma, p.draft_cost, even, peak_flops(p.gpu, p.dtype), hbm_bandwidth(p.gpu))
    assert at == pytest.approx(1, rel=1e-9)
    below = variant(f"spec-decode-batch-ceiling@default+batch={math.floor(0.97 * even)}")
    above = variant(f"spec-decode-batch-ceiling@default+batch={math.ceil(1.03 * even)}")
    assert below.expected["speedup"] > 1 > above.expected["speedup"]
    assert (below.expected["regime"], above.expected["regime"]) == ("helps", "hurts")
    with pytest.raises(Exception, match="within the break-even"):
        variant(f"spec-decode-batch-ceiling@default+batch={round(even)}")


def _speedup_by_hand(p, alpha: float, gamma: int, c: float, batch: float, peak: float, bandwidth: float) -> float:
    """The batch-ceiling speedup in plain arithmetic: E tokens a round over a verify pass and γ draft passes."""
    from solvers.formulas.common import dtype_bytes, model_params
    weights = model_params(p.model) * dtype_bytes(p.dtype)
    plain = max(weights / bandwidth, 2 * model_params(p.model) * batch / peak)
    verify = max(weights / bandwidth, 2 * model_params(p.model) * batch * (gamma + 1) / peak)
    return expected_tokens(alpha, gamma) * plain / (verify + gamma * c * plain)


def test_levers_stay_real_and_off_the_20_percent_line(variant):
    """The acceptance lever goes halfway to 1 (α 0.9 plus 0.1 was a perfect drafter), and no lever's gain
    sits within 1% of the 1.2x line (seed 7 once judged 1.203x)."""
    from solvers.data import Record
    from solvers.formulas.common import hbm_bandwidth, peak_flops
    for seed in range(40):
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        p = Record({q.name: q.value for q in solution.params})
        base = dict(alpha=p.alpha, gamma=p.gamma, c=p.draft_cost, batch=p.batch,
                    peak=peak_flops(p.gpu, p.dtype), bandwidth=hbm_bandwidth(p.gpu))
        now = _speedup_by_hand(p, **base)
        levers = solution.sheet.results["levers"]
        for option, change in (("acceptance halfway to 1", {"alpha": (1 + p.alpha) / 2}),
                               ("a drafter half as costly", {"c": p.draft_cost / 2}),
                               ("a GPU with twice the tensor peak", {"peak": 2 * base["peak"]})):
            ratio = _speedup_by_hand(p, **(base | change)) / now
            assert abs(ratio / 1.2 - 1) >= 0.01 and levers[option] == (ratio >= 1.2), (seed, option)
        assert (1 + p.alpha) / 2 < 1


# --- spec-decode-by-load --------------------------------------------------------------------

ETA_C, ETA_BW, OVERHEAD, AR_LATENCY = 0.6, 0.8, 2e-3, 10e-6  # the conventions card's step model


class _ByHand:
    """The step-time model of a TP group in plain Python from the catalogue records (bf16, tp ≤ KV heads)."""

    def __init__(self, solution):
        m, g = _value(solution, "model"), _value(solution, "gpu")
        self.tp, self.m, self.g = _value(solution, "tp"), m, g
        self.n = m.params_b * 1e9
        self.kv = 2 * m.layers * (m.kv_heads // self.tp) * m.head_dim * 2  # per GPU per token
        self.pair = 4 * m.layers * m.heads * m.head_dim
        self.bw = ETA_BW * g.hbm_tb_s * 1e12
        self.rate = self.tp * ETA_C * g.bf16_dense_tflops * 1e12
        self.link = g.nvlink_gb_s * 1e9 / 2

    def kernels(self, batch, tokens, context):
        reads = (self.n * 2 / self.tp + self.kv * batch * context) / self.bw
        math = (2 * self.n + self.pair * context) * batch * tokens / self.rate
        comm = 0 if self.tp == 1 else 2 * self.m.layers * (
            AR_LATENCY + 2 * (self.tp - 1) / self.tp * batch * tokens * self.m.hidden * 2 / self.link)
        return max(reads, math) + comm

    def speedup(self, batch, context, gamma, alpha, c):
        plain = self.kernels(batch, 1, context)
        return expected_tokens(alpha, gamma) * (plain + OVERHEAD) / (
            self.kernels(batch, gamma + 1, context) + OVERHEAD + gamma * c * plain)

    def room(self, context, gamma):
        """Sequences whose KV fits: each holds slots for its context and the round's γ+1 verify tokens."""
        return int((0.9 * self.g.hbm_mib * 2**20 - self.n * 2 / self.tp) // (self.kv * (context + gamma + 1)))


def test_by_load_default_triples_at_night_and_costs_a_third_at_peak(variant):
    """The catalogue's Llama 3.3 70B on 8 H100, α 0.8, γ 4: ≈3x at batch 1, 0.707x at the peak batch (pinned in the
    question file), above its compute-bound limit E/(γ+1+γc) = 3.3616/5.08 = 0.662, which the regime names."""
    solution = variant("spec-decode-by-load@default")
    limit = expected_tokens(0.8, 4) / (5 + 4 * 0.02)
    assert limit == pytest.approx(0.662, abs=0.001) and limit < solution.expected["speedup_peak"]
    assert "0.662x" in solution.sheet.regime.summary and "0.707x" in solution.sheet.regime.summary


def _rule(g, batch, context, gamma_max, alpha, c, tie=0.01):
    """The question's draft length at a batch: the shortest (off at 1x the shortest of all) within `tie` of the best."""
    speedups = {0: 1.0} | {k: g.speedup(batch, context, k, alpha, c) for k in range(1, gamma_max + 1)}
    line = max(speedups.values()) * (1 - tie)
    chosen = min(k for k, x in speedups.items() if x >= line)
    return chosen, speedups[chosen]


def test_by_load_draws_match_plain_arithmetic(variant):
    for seed in range(40):
        solution = variant(f"spec-decode-by-load@{seed}")
        g = _ByHand(solution)
        alpha, gamma, c, context = (_value(solution, n) for n in ("alpha", "gamma", "draft_cost", "context"))
        room = g.room(context, gamma)
        peak = min(room, _value(solution, "max_num_seqs"))
        x = solution.expected
        assert x["kv_room"] == room
        assert x["speedup_batch1"] == pytest.approx(g.speedup(1, context, gamma, alpha, c), rel=1e-9)
        assert x["speedup_peak"] == pytest.approx(g.speedup(peak, context, gamma, alpha, c), rel=1e-9)
        assert x["regime"] == ("keep-on" if x["speedup_peak"] > 1 else "turn-off")
        chosen, speedup = _rule(g, 64, context, 8, alpha, c)
        assert (x["gamma_large"], x["speedup_large"]) == (chosen, pytest.approx(speedup, rel=1e-9)), seed
        # What sets the peak step, by hand: the cap, speculation at half the peak batch, each pass's math against
        # its reads.
        reads = (g.n * 2 / g.tp + g.kv * peak * context) / g.bw
        math = (2 * g.n + g.pair * context) * peak / g.rate
        held = {"the KV pool, not max_num_seqs, caps the batch": room < _value(solution, "max_num_seqs"),
                "speculation left on would pay at half the peak batch":
                    g.speedup(peak // 2, context, gamma, alpha, c) > 1,
                "a plain step's math outlasts its reads": math > reads,
                "the verify pass's math outlasts its reads": (gamma + 1) * math > reads,
                "the best draft length there is shorter than {gamma} (or off)":
                    _rule(g, peak, context, 8, alpha, c)[0] < gamma}
        assert solution.sheet.results["peak_reasons"] == held, seed


def test_by_load_shorter_draft_wins_a_near_tie(variant):
    """@default+context=8192 at batch 64: γ 5 gives 2.922x and γ 6 2.918x (0.16% apart); the stated rule (within
    1%, the shorter wins) keys 5, and the keyed speedup is γ 5's. Where the longest best is more than 1% ahead, it
    stands; no graded draw sits within 0.1% of the rule's line, where a candidate's rounding could cross it."""
    solution = variant("spec-decode-by-load@default+context=8192")
    g = _ByHand(solution)
    s5, s6 = (g.speedup(64, 8192, k, 0.8, 0.02) for k in (5, 6))
    assert 0 < (s5 - s6) / s5 < 0.01 and solution.expected["gamma_large"] == 5
    shorter = 0
    for seed in range(40):
        solution = variant(f"spec-decode-by-load@{seed}")
        g = _ByHand(solution)
        alpha, c, context = (_value(solution, n) for n in ("alpha", "draft_cost", "context"))
        speedups = [1.0] + [g.speedup(64, context, k, alpha, c) for k in range(1, 9)]
        line = max(speedups) * 0.99
        assert all(abs(x - line) >= 0.001 * max(speedups) for x in speedups), seed
        shorter += speedups[int(solution.expected["gamma_large"])] < max(speedups)
    assert 0 < shorter < 40  # the rule decides some draws, not all


@pytest.mark.parametrize("qid", ["spec-decode-by-load", "spec-decode-step-accounting"])
def test_speculating_sequences_hold_their_verify_slots_in_both_questions(variant, qid):
    """The two questions count a speculating sequence's KV alike: its context and the γ+1 slots the engine allocates
    for the verify tokens before the pass (vLLM's allocate_slots). At by-load@default+gpu=b200+context=4300 that is
    881 sequences, where the context alone gives 882: with the answer's tolerance at 1e-5 the two readings cannot
    both be keyed."""
    for seed in range(20):
        solution = variant(f"{qid}@{seed}")
        steps = {step.key: step.value for step in solution.sheet.steps}
        assert steps["kv_room"] == _ByHand(solution).room(_value(solution, "context"), _value(solution, "gamma")), seed
    if qid == "spec-decode-by-load":
        solution = variant("spec-decode-by-load@default+gpu=b200+context=4300")
        assert solution.expected["kv_room"] == 881 == _ByHand(solution).room(4300, 4)
        assert _ByHand(solution).room(4300 - 5, 4) == 882  # the context alone


def test_by_load_best_draft_length_falls_with_the_batch(variant):
    """SmartSpec's observation: the best draft length shrinks as load grows, to 0 at high load: the worked table's
    batch-16 length is never below the graded batch-64 one."""
    for seed in range(40):
        solution = variant(f"spec-decode-by-load@{seed}")
        small = next(g.value for g in solution.sheet.givens if g.symbol == "γ_16")
        assert small >= solution.expected["gamma_large"], seed


def test_by_load_push_moves_the_context_across_break_even(bank, catalog, variant):
    """The push is the engine's crossing search on the context (the chart's axis), which its words name: in at least
    90% of 40 draws (the bar's rate; a context whose batch-64 draft length sits on the tie line is refused) it moves
    the context, and only the context, and the verdict flips."""
    from solvers.interview import stage_run

    crossed = []
    for seed in range(40):
        solution = variant(f"spec-decode-by-load@{seed}")
        pushed = stage_run(solution, catalog, 3)
        assert pushed is not None, seed
        if pushed.moved == ("context",) and pushed.solution.regime_name != solution.regime_name:
            crossed.append(seed)
    assert len(crossed) >= 36, crossed


# --- spec-decode-step-accounting --------------------------------------------------------------


def test_rollback_discards_the_expected_tail(variant):
    """A seeded simulation of verify passes: the positions after the first rejection are discarded;
    their mean is γ + 1 − E, the closed form the key uses."""
    rng = np.random.default_rng(7)
    for alpha, gamma in ((0.8, 4), (0.6, 6), (0.9, 2)):
        accepted = np.cumprod(rng.random((200_000, gamma)) < alpha, axis=1).sum(axis=1)
        discarded = gamma - accepted  # γ+1 positions scored, accepted + 1 kept
        se = discarded.std() / np.sqrt(discarded.size)
        assert abs(discarded.mean() - (gamma + 1 - expected_tokens(alpha, gamma))) < 4 * se


def test_step_accounting_break_even_is_where_the_speedup_crosses_one(variant):
    """The region formula's root, checked by hand: the speedup is 1 there, above 1 below it, under 1 past it."""
    for seed in range(40):
        solution = variant(f"spec-decode-step-accounting@{seed}")
        g = _ByHand(solution)
        alpha, gamma, c, context = (_value(solution, n) for n in ("alpha", "gamma", "draft_cost", "context"))
        x = solution.expected
        even = x["break_even"]
        assert g.speedup(even, context, gamma, alpha, c) == pytest.approx(1, rel=1e-9), seed
        assert g.speedup(0.97 * even, context, gamma, alpha, c) > 1 > g.speedup(1.03 * even, context, gamma, alpha, c)
        assert x["speedup"] == pytest.approx(g.speedup(_value(solution, "batch"), context, gamma, alpha, c), rel=1e-9)
        helps = _value(solution, "batch") < even
        assert x["regime"] == ("helps" if helps else "hurts")
        assert (x["speedup"] > 1) == helps, seed
        assert abs(_value(solution, "batch") / even - 1) >= 0.03, seed  # no verdict inside the answer's tolerance
        batch = _value(solution, "batch")
        plain = g.kernels(batch, 1, context) + OVERHEAD
        rounds = g.kernels(batch, gamma + 1, context) + OVERHEAD + gamma * c * (plain - OVERHEAD)
        assert x["per_user"] == pytest.approx(expected_tokens(alpha, gamma) / rounds, rel=1e-9)


def test_step_accounting_holds_by_hand(variant):
    """Each option of the push's select, worked again in plain arithmetic from the variant's figures."""
    for seed in range(40):
        solution = variant(f"spec-decode-step-accounting@{seed}")
        g = _ByHand(solution)
        batch, gamma, budget, prompt, alpha, context = (_value(solution, n) for n in (
            "batch", "gamma", "budget", "prompt", "alpha", "context"))
        reads = (g.n * 2 / g.tp + g.kv * batch * context) / g.bw
        math = (2 * g.n + g.pair * context) * batch / g.rate
        spec, plain = -(-prompt // (budget - batch * (gamma + 1))), -(-prompt // (budget - batch))
        held = {"speculating at least doubles the steps the waiting prompt's prefill takes": spec >= 2 * plain,
                "the whole batch could speculate inside half the budget": 2 * batch * (gamma + 1) <= budget,
                "the verify pass would be compute-bound even with a single draft token": 2 * math > reads,
                "the plain decode step at this batch is compute-bound": math > reads,
                "over a third of the verify tokens are thrown away":
                    3 * (gamma + 1 - expected_tokens(alpha, gamma)) > gamma + 1}
        assert solution.sheet.results["holds"] == held, seed


def test_step_accounting_budget_counts_every_verify_token(variant):
    for seed in range(40):
        solution = variant(f"spec-decode-step-accounting@{seed}")
        batch, gamma, budget, prompt = (_value(solution, n) for n in ("batch", "gamma", "budget", "prompt"))
        x = solution.expected
        assert x["prefill_left"] == budget - batch * (gamma + 1)
        assert x["prefill_steps_spec"] == -(-prompt // (budget - batch * (gamma + 1)))
        assert x["prefill_steps_plain"] == -(-prompt // (budget - batch))
        assert x["prefill_steps_spec"] > x["prefill_steps_plain"], seed  # the prompt's cost shows in every draw
        # Verify tokens may fill the budget exactly; and the batch where speculation starts losing is one the
        # budget lets speculate (a draw past it has no engine that reaches it).
        steps = {step.key: step.value for step in solution.sheet.steps}
        assert steps["max_spec_batch"] == budget // (gamma + 1)
        assert x["break_even"] <= steps["max_spec_batch"], seed


def test_accounting_lists_every_card_the_key_uses_and_the_batch_fits(variant):
    """At TP 8 the key adds two all-reduces per layer (leaving them out moves per-user speed by ~40%) and
    attention math at the context: the conventions in play list those cards (the words name none). Every batch
    and break-even fits the KV."""
    for seed in range(12):
        solution = variant(f"spec-decode-step-accounting@{seed}")
        cards = solution.cards()
        if _value(solution, "tp") > 1:
            assert "tp-all-reduce" in cards and "all-reduce-latency-nvlink" in cards
        assert "attention-flops" in cards and "attention-flops" not in solution.prompt
        steps = {step.key: step.value for step in solution.sheet.steps}
        assert _value(solution, "batch") <= steps["kv_room"] and steps["break_even"] <= steps["kv_room"]


# --- spec-decode-tail -----------------------------------------------------------------------


SELECTIVE = "speculate only where the request's acceptance beats the break-even for the current batch"
CHAT_ONE = "a draft length of 1 for chat, {gamma} for code"


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0001, 8.99), st.integers(1, 8))
def test_break_even_alpha_inverts_the_expected_tokens(tokens, gamma):
    from solvers.formulas.speculation import break_even_alpha
    if tokens >= gamma + 1:
        return
    assert expected_tokens(break_even_alpha(tokens, gamma), gamma) == pytest.approx(tokens, rel=1e-9)


def test_tail_p99_matches_a_seeded_sample_of_requests(variant):
    """The closed form (sort the four cells, add their shares to 1%) against a seeded sample of 100,000
    requests drawn by class and moment: the sample's p99 TPOT is the cell the key names."""
    for seed in range(0, 30, 3):
        solution = variant(f"spec-decode-tail@{seed}")
        g, x = _ByHand(solution), solution.expected
        gamma, c, context = (_value(solution, n) for n in ("gamma", "draft_cost", "context"))
        rng = np.random.default_rng(seed)
        low = rng.random(100_000) < _value(solution, "low_share")
        peak = rng.random(100_000) < _value(solution, "peak_share")
        cell = {}
        for is_peak, batch in ((False, _value(solution, "batch_low")), (True, _value(solution, "batch_peak"))):
            plain = g.kernels(batch, 1, context)
            round_ = g.kernels(batch, gamma + 1, context) + OVERHEAD + gamma * c * plain
            for is_low, alpha in ((False, _value(solution, "alpha_high")), (True, _value(solution, "alpha_low"))):
                cell[(is_low, is_peak)] = round_ / expected_tokens(alpha, gamma)
        tpot = np.where(low, np.where(peak, cell[(True, True)], cell[(True, False)]),
                        np.where(peak, cell[(False, True)], cell[(False, False)]))
        assert np.quantile(tpot, 0.99, method="higher") == pytest.approx(x["p99_on"], rel=1e-9), seed


def test_mixed_round_is_the_uniform_round_when_every_class_drafts_alike(variant):
    """The mixed round with one γ for both classes is the sheet's round; with nobody drafting it is the
    plain step; and a class that drafts less never makes the round longer than all drafting the most."""
    from solvers.data import Record
    from solvers.formulas.speculation import LoadModel
    for seed in range(0, 40, 4):
        solution = variant(f"spec-decode-tail@{seed}")
        model = LoadModel.of(Record({p.name: p.value for p in solution.params}))
        rounds = {step.key: step.value for step in solution.sheet.steps}
        gamma, c, share = (int(_value(solution, "gamma")), _value(solution, "draft_cost"),
                           _value(solution, "low_share"))
        for tag, batch in (("lo", _value(solution, "batch_low")), ("pk", _value(solution, "batch_peak"))):
            uniform = model.mixed_round(batch, ((1 - share, gamma), (share, gamma)), c)
            assert uniform == pytest.approx(rounds[f"round_{tag}"], rel=1e-9)
            assert model.mixed_round(batch, ((1 - share, 0), (share, 0)), c) == pytest.approx(model.plain(batch))
            assert model.mixed_round(batch, ((1 - share, gamma), (share, 0)), c) < uniform


def test_tail_policies_hold_to_their_definitions(variant):
    from solvers.data import Record
    from solvers.formulas.speculation import LoadModel
    for seed in range(40):
        solution = variant(f"spec-decode-tail@{seed}")
        policy = solution.sheet.results["policy"]
        x = solution.expected
        p99_off = {step.key: step.value for step in solution.sheet.steps}["p99_off"]
        assert (x["regime"] == "slowdown") == (x["speedup_worst"] < 1)
        assert policy["keep speculation on for every request"] == (x["p99_on"] <= p99_off)
        # Only code drafting, chat waits the mixed round for one token at peak: a declared fact of the select.
        assert x["tpot_chat_mixed"] > p99_off and not policy["speculate on code requests only (chat never drafts)"]
        assert "any request off-peak" not in x["owners"]  # the select's declared fact
        # Chat switched off at peak while code drafts: chat waits the mixed round for one token.
        if _value(solution, "alpha_low") < x["alpha_even_peak"] < _value(solution, "alpha_high"):
            assert x["tpot_chat_mixed"] > p99_off
            assert policy[SELECTIVE] in (False, None)  # None: the same plan as code only, not listed
        # Chat at one draft token beside code's γ, by hand: the peak round verifies code's γ+1 and chat's 2 tokens
        # a sequence, its first draft pass runs over every sequence and the other γ-1 over code's; off-peak the same.
        model = LoadModel.of(Record({p.name: p.value for p in solution.params}))
        gamma, c, f = int(_value(solution, "gamma")), _value(solution, "draft_cost"), _value(solution, "low_share")
        a_hi, a_lo, m = (_value(solution, n) for n in ("alpha_high", "alpha_low", "peak_share"))
        cells, plain = [], []
        for batch, share in ((_value(solution, "batch_low"), 1 - m), (_value(solution, "batch_peak"), m)):
            tokens = (1 - f) * (gamma + 1) + 2 * f
            drafts = (model.kernels(batch, 1, model.context)
                      + (gamma - 1) * model.kernels((1 - f) * batch, 1, model.context))
            round_ = model.kernels(batch, tokens, model.context) + model.overhead + c * drafts
            cells += [(round_ / expected_tokens(a_hi, gamma), share * (1 - f)), (round_ / (1 + a_lo), share * f)]
            plain += [(model.plain(batch), share)]
        top, p99 = 0.0, None
        for tpot, share in sorted(cells, reverse=True):
            top += share
            if top >= 0.01:
                p99 = tpot
                break
        mean, mean_off = sum(t * w for t, w in cells), sum(t * w for t, w in plain)
        assert policy[CHAT_ONE] == (p99 <= p99_off and mean < mean_off), seed
        # No two listed options grade the same plan: the draft length equal to γ is not listed beside "keep on".
        if _value(solution, "gamma") in (3, 5):
            assert policy[f"a draft length of {int(_value(solution, 'gamma'))} for every request"] is None, seed


def test_tail_mean_weighs_every_cell_by_its_share(variant):
    """The mean TPOT always on, by hand from the four cells: the p99 is one cell, the mean all four."""
    for seed in range(0, 40, 4):
        solution = variant(f"spec-decode-tail@{seed}")
        steps = {step.key: step.value for step in solution.sheet.steps}
        gamma, f, m = (_value(solution, n) for n in ("gamma", "low_share", "peak_share"))
        hi, lo = (expected_tokens(_value(solution, n), gamma) for n in ("alpha_high", "alpha_low"))
        by_hand = sum(w * r / e for r, w0 in ((steps["round_lo"], 1 - m), (steps["round_pk"], m))
                      for e, w in ((hi, w0 * (1 - f)), (lo, w0 * f)))
        assert solution.expected["mean_on"] == pytest.approx(by_hand, rel=1e-9), seed


def test_tail_break_even_acceptance_by_hand(variant):
    """The break-even acceptance at each moment makes a round yield what its time costs in plain steps, by hand."""
    for seed in range(20):
        solution = variant(f"spec-decode-tail@{seed}")
        g, x = _ByHand(solution), solution.expected
        gamma, c, context = (_value(solution, n) for n in ("gamma", "draft_cost", "context"))
        plain = g.kernels(_value(solution, "batch_peak"), 1, context)
        round_ = g.kernels(_value(solution, "batch_peak"), gamma + 1, context) + OVERHEAD + gamma * c * plain
        assert expected_tokens(x["alpha_even_peak"], gamma) == pytest.approx(round_ / (plain + OVERHEAD), rel=1e-9)


def test_tail_regime_label_names_the_reading_it_keys(variant):
    """Read after the code-only answer, "chat at peak" always slows (its mixed round beats a plain step, asserted
    above); the key reads it with speculation always on, where chat speeds up in some draws: the label says so."""
    sped_up = [seed for seed in range(40) if variant(f"spec-decode-tail@{seed}").expected["regime"] == "speedup"]
    assert sped_up
    assert "speculation always on" in variant("spec-decode-tail@0").question.answer("regime").label


def test_tail_fixed_draft_length_options_follow_the_variant(variant):
    """A draft length of 8 for every request never kept the p99 and cut the mean (0 in 80 draws): 5 does in some.
    One for every request did in every pushed draw (1 + α tokens for a verify pass of two): the select asks one
    for chat beside code's γ instead, which chat's acceptance and the peak round decide."""
    seen = {option: set() for option in (*(f"a draft length of {g} for every request" for g in (3, 5)), CHAT_ONE)}
    for seed in range(40):
        results = variant(f"spec-decode-tail@{seed}").sheet.results["policy"]
        for option in seen:
            seen[option].add(results[option])
    assert all(truths - {None} == {True, False} for truths in seen.values()), seen


# --- adaptive-draft-length --------------------------------------------------------------------

MENU = (1, 2, 4, 8, 16)


def _adaptive_by_hand(p):
    """The question's figures in plain arithmetic from the model and GPU records: batch 1 by the closed form at
    each class's acceptance, then a batch of B at context S in reads of the batch (weights and KV once, the verify
    free to the ridge, then linear; code's draft sets the drafter's passes)."""
    f, a_code, a_chat, c = p.code_share, p.alpha_code, p.alpha_chat, p.draft_cost

    def E(a, g):
        return sum(a ** i for i in range(g + 1))

    def tau1(a, g):
        return (g * c + 1) / E(a, g)

    g_code = min(MENU, key=lambda g: tau1(a_code, g))
    g_chat = min(MENU, key=lambda g: tau1(a_chat, g))
    mix = {g: f * tau1(a_code, g) + (1 - f) * tau1(a_chat, g) for g in MENU}
    g_fixed = min(mix, key=mix.get)
    gain_class = mix[g_fixed] / (f * tau1(a_code, g_code) + (1 - f) * tau1(a_chat, g_chat)) - 1
    m, gpu = p.model, p.gpu
    N = m.params_b * 1e9
    kv = 2 * m.layers * m.kv_heads * m.head_dim * 2
    flop_per_byte = 0.6 * gpu.bf16_dense_tflops / (0.8 * gpu.hbm_tb_s)
    R = flop_per_byte * (2 * N + p.batch * p.context * kv) / (2 * N + 4 * m.layers * m.heads * m.head_dim * p.context)
    plain = max(1, p.batch / R)

    def per_token(share, g1, g2):
        tokens = p.batch * (share * (g1 + 1) + (1 - share) * (g2 + 1))
        return (c * max(g1, g2) * plain + max(1, tokens / R)) * (share / E(a_code, g1) + (1 - share) / E(a_chat, g2))

    rule = per_token(f, g_code, g_chat)
    single = {0: plain} | {g: per_token(f, g, g) for g in MENU}
    g_batch = min(single, key=single.get)
    # Each replica picks the best length (0 = off) for its own one-class batch.
    split = (f * min([plain] + [per_token(1, g, g) for g in MENU])
             + (1 - f) * min([plain] + [per_token(0, g, g) for g in MENU]))
    return {"gamma_code": g_code, "gamma_chat": g_chat, "gamma_fixed": g_fixed, "gain_class": gain_class,
            "ridge": R, "gamma_batch": g_batch, "speedup_rule": plain / rule, "gain_batch": single[g_batch] / rule,
            "gain_split": single[g_batch] / split, "speedup_batch": plain / single[g_batch],
            "regime": "faster" if plain / rule > 1 else "slower"}


def _params(solution):
    from solvers.data import Record
    return Record({q.name: q.value for q in solution.params})


def test_adaptive_keys_are_the_hand_arithmetic(variant):
    """Every graded figure of 60 draws recomputed in plain arithmetic from the model's config and the GPU's
    datasheet (the default and four other variants are pinned by hand in the question file)."""
    regimes, picks = set(), set()
    for seed in range(60):
        solution = variant(f"adaptive-draft-length@{seed}")
        x, hand = solution.expected, _adaptive_by_hand(_params(solution))
        for key, value in hand.items():
            assert x[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), (seed, key)
        regimes.add(x["regime"])
        picks.add((x["gamma_code"], x["gamma_chat"], x["gamma_fixed"], x["gamma_batch"]))
    assert regimes == {"faster", "slower"} and len(picks) >= 6, picks


def test_adaptive_picks_have_a_clear_best_and_the_regime_a_clear_side(variant):
    """Each graded draft length has its runner-up at least 0.5% slower (a hand calculation can tell), and the class
    lengths' speedup over no drafter sits at least 5% (its tolerance) from break-even, so a figure within tolerance
    decides the same regime."""
    for seed in range(0, 80, 2):
        solution = variant(f"adaptive-draft-length@{seed}")
        p, x = _params(solution), solution.expected
        assert abs(x["speedup_rule"] - 1) >= 0.05, seed
        c = p.draft_cost
        for key, alpha in (("gamma_code", p.alpha_code), ("gamma_chat", p.alpha_chat)):
            times = sorted((g * c + 1) / expected_tokens(alpha, g) for g in MENU)
            assert times[1] >= 1.005 * times[0], (seed, key)


def test_adaptive_drafter_costs_what_real_drafters_measure(variant):
    """Review: c = 0.0058 was below any drafter's pass on the bank's own step model. The draws keep c within an EAGLE
    head's or a small draft model's 0.03-0.15 of a target step, and the per-request Beta spread is gone: code and
    chat are two classes at one acceptance each."""
    costs = {_params(variant(f"adaptive-draft-length@{seed}")).draft_cost for seed in range(80)}
    assert min(costs) >= 0.03 and max(costs) <= 0.15 and len(costs) >= 8


def test_adaptive_ridge_counts_the_kv_read_and_attention(variant):
    """MagicDec's point: the KV read, shared by a sequence's γ + 1 queries, raises the verify tokens that ride free;
    attention's math (4·L·H·d_h a key) lowers them. At the default (64 × 4,096 on H100) 331.2 tokens against 221.5
    on the weights alone, and the ridge does not depend on TP (each GPU reads and computes its 1/TP)."""
    from solvers.topics.speculation.adaptive_draft_length import ridge_tokens, weights_ridge
    p = _params(variant("adaptive-draft-length@default"))
    assert weights_ridge(p) == pytest.approx(0.6 * 989.4 / (0.8 * 3.35), rel=1e-12)
    assert ridge_tokens(p) == pytest.approx(331.157, rel=1e-5)
    longer = _params(variant("adaptive-draft-length@default+context=16000"))
    assert ridge_tokens(longer) > 1.5 * ridge_tokens(p)  # the KV read outgrows attention's math 8 to 1 at 64
    one = _params(variant("adaptive-draft-length@default+batch=16"))
    assert ridge_tokens(one) < ridge_tokens(p)


def test_adaptive_words_state_what_the_keys_rest_on(variant, catalog):
    """The opening says the drafter's cost and batch 1 (one request at a time) and nothing of batches; the batch
    stage names the target, the GPU, the batch and the context; the labels say time per token is averaged over
    requests and what a draft pass costs in a batch."""
    from solvers.interview import stage_run
    solution = variant("adaptive-draft-length@default")
    opening, batches, split = (stage_run(solution, catalog, i).say for i in range(3))
    assert "0.12 of a target step" in opening and "one request at a time" in opening and "batch" not in opening
    assert "Llama-3.1-70B on TP 8 × H100 SXM" in batches and "random batches of 64" in batches
    assert "4,096 tokens" in batches
    assert "replicas of their own" in split
    answer = solution.question.answer
    assert "averaged over requests" in answer("gain_class").label
    assert "c of the batch's plain step" in answer("gain_batch").label
    assert "attention's math counted" in answer("ridge").label


def test_class_lengths_lose_to_codes_length_while_the_verify_rides_free():
    """Why the class lengths lose in batches: under the ridge the round is 1 + c·γ_code whoever drafts less, so
    giving chat code's length costs nothing and brings it more tokens. A property of the round, over random
    shares, acceptances, costs and ridges."""
    from solvers.topics.speculation.adaptive_draft_length import Batches

    rng = np.random.default_rng(7)
    for _ in range(500):
        g_chat, g_code = sorted(rng.choice(MENU, 2))
        if g_code == g_chat:
            continue
        b = Batches(rng.uniform(0.3, 0.7), rng.uniform(0.85, 0.92), rng.uniform(0.5, 0.7), rng.uniform(0.03, 0.15),
                    float(rng.choice([16, 32, 64])), 1e6)
        assert b.per_token(g_code, g_code) < b.per_token(g_code, g_chat)


def _random_batches(p, g_code, g_chat, rounds=20_000, seed=11):
    """The process the closed form summarises: batches drawn at random from the mix (a binomial count of code),
    each draft token accepted with its class's probability until the first rejection, a round of the longest
    draft at c of a plain step plus a verify free to the ridge, then linear. Every sequence of every round is one
    draw of a request's round: a request's time per token is its rounds' time over its tokens, averaged over
    requests by class share. Returns the mean time per token in reads of the batch."""
    rng = np.random.default_rng(seed)
    from solvers.topics.speculation.adaptive_draft_length import ridge_tokens
    R, B, c = ridge_tokens(p), int(p.batch), p.draft_cost
    plain = max(1.0, B / R)
    code = rng.random((rounds, B)) < p.code_share
    gamma = np.where(code, g_code, g_chat)
    longest = gamma.max(axis=1)
    verify = np.maximum(1.0, (gamma + 1).sum(axis=1) / R)
    round_time = c * longest * plain + verify
    alpha = np.where(code, p.alpha_code, p.alpha_chat)
    accepted = rng.random((rounds, B, int(g_code))) < alpha[..., None]
    within = np.arange(int(g_code))[None, None, :] < gamma[..., None]  # a sequence drafts its own γ
    kept = np.cumprod(accepted & within, axis=2).sum(axis=2)
    tokens = kept + 1
    per_class = []
    for mask in (code, ~code):
        time = (round_time[:, None] * mask).sum()
        per_class.append(time / (tokens * mask).sum())
    return p.code_share * per_class[0] + (1 - p.code_share) * per_class[1]


@pytest.mark.parametrize("code", ["default", "1", "7", "24", "default+batch=256+context=1024", "1+batch=16"])
def test_adaptive_closed_form_matches_random_batches(variant, code):
    """The class lengths' time per token as the sheet takes it (every batch in the mix's shares, E tokens a round)
    against a seeded simulation of random batches and per-token acceptance: within 2.5%, half the speedup's 5%
    tolerance (the straddle of the ridge by random batches is refused within 5% of it)."""
    solution = variant(f"adaptive-draft-length@{code}")
    p, x = _params(solution), solution.expected
    closed = max(1.0, p.batch / x["ridge"]) / x["speedup_rule"]
    simulated = _random_batches(p, int(x["gamma_code"]), int(x["gamma_chat"]))
    assert simulated == pytest.approx(closed, rel=0.025), (code, simulated, closed)


def test_adaptive_pushes_cross_by_the_lever_they_name(variant, catalog):
    """Faster than no drafter: the evening peak (256 sequences of 1,024 tokens) puts the verify past a ridge the
    KV read no longer lifts; slower: the night's batch of 16 lets it ride free. Each crosses in at least 90% of 60
    draws, by its own declared move (where a move is refused, the engine's push stands in)."""
    from solvers.interview import stage_run
    crossed, declared = 0, 0
    for seed in range(60):
        solution = variant(f"adaptive-draft-length@{seed}")
        index = 3 if solution.regime_name == "faster" else 4
        pushed = stage_run(solution, catalog, index)
        assert pushed is not None, seed
        crossed += pushed.solution.regime_name != solution.regime_name
        if pushed.declared:
            declared += 1
            expected = {"batch": 256, "context": 1024} if index == 3 else {"batch": 16}
            assert {name: _params(pushed.solution)[name] for name in expected} == expected, seed
    assert crossed >= 54 and declared >= 54, (crossed, declared)


# 0.06 is refused: the mix ties two draft lengths within 0.5% there
@pytest.mark.parametrize("c", [0.04, 0.05, 0.08, 0.12, 0.15])
def test_per_class_gain_at_batch1_stays_under_13_percent(variant, c):
    """With one acceptance per class the flat optimum keeps a length per class within 13% of one for all."""
    x = variant(f"adaptive-draft-length@default+draft_cost={c}").expected
    assert 0 <= x["gain_class"] < 0.13


# --- spec-decode-exactness --------------------------------------------------------------------


def _rejection_output(p, q):
    """The distribution modified rejection sampling emits, analytically: accept x ~ q with probability
    min(1, p/q), else resample from max(0, p − q) normalised (Leviathan et al., Theorem 3.5)."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    accepted = q * np.minimum(1, np.divide(p, q, out=np.ones_like(p), where=q > 0))
    residual = np.maximum(0, p - q)
    rejected = 1 - accepted.sum()
    return accepted + (rejected * residual / residual.sum() if residual.sum() > 0 else 0)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 50))
def test_modified_rejection_sampling_emits_the_target_exactly(seed, vocab):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(vocab, 0.5)), rng.dirichlet(np.full(vocab, 0.5))
    assert np.max(np.abs(_rejection_output(p, q) - p)) < 1e-12
    # Acceptance is 1 − total variation, whatever the vocabulary.
    assert np.minimum(p, q).sum() == pytest.approx(1 - 0.5 * np.abs(p - q).sum(), abs=1e-12)


def test_exactness_default_by_hand(variant, catalog):
    """The default's five tokens (its keys pinned in the question file): rejection sampling is lossless for the
    bf16 pair and for the FP8 pair with respect to the FP8 target; the prompt says δ moves each logit."""
    solution = variant("spec-decode-exactness@default")
    p = [0.62, 0.2, 0.1, 0.05, 0.03]
    q, p8, q8 = [0.5, 0.31, 0.08, 0.07, 0.04], [0.588, 0.221, 0.107, 0.052, 0.032], [0.465, 0.34, 0.085, 0.07, 0.04]
    assert np.max(np.abs(_rejection_output(p, q) - p)) < 1e-12
    assert np.max(np.abs(_rejection_output(p8, q8) - p8)) < 1e-12  # the FP8 pair is lossless w.r.t. p8
    # Gap 0.007 is under 2δ_b = 0.01 and 2δ_k = 0.04: no single change fixes position 5. That rests on δ moving
    # each logit (a gap moves 2δ), which the prompt says; δ as the gap's own move would let a fix pass at 0.007.
    from solvers.interview import stage_run

    greedy = next(i for i, stage in enumerate(solution.question.stages) if "flip_bound" in stage.ask)
    run = stage_run(solution, catalog, greedy)
    assert run is not None and "a logit moves up to 0.02" in run.say


def test_exactness_names_the_bf16_targets_top_token(variant):
    """"The top token" is the bf16 target's (seeds once drew an FP8 target whose own top was another): the steps
    and the holds option name the bf16 target's; the graded output figure is the FP8 target's distance (TV)."""
    for seed in range(30):
        solution = variant(f"spec-decode-exactness@{seed}")
        rows = np.array([_value(solution, f"token_{i}") for i in range(1, 6)])
        top = int(rows[:, 0].argmax())
        titles = {step.key: step.title for step in solution.sheet.steps if step.key}
        word = _value(solution, "position")[top]["token"]
        assert all(f"'{word}'" in titles[key] for key in ("residual_top", "keep_top"))
        assert "bf16 target's top" in titles["output_top_fp8"]
        assert solution.sheet.results["output_top_fp8"] == pytest.approx(rows[top, 2], abs=1e-12)
        assert all("top token" not in option or "bf16 target's top token" in option
                   for option in solution.sheet.results["holds"])


def test_exactness_fp8_moves_the_drafter_more_than_the_target(variant):
    """The draws perturb the FP8 target's logits less than the drafter's (0.04 against 0.12): the target's
    distribution moves a few percent at most (TV), and on average less than the drafter's."""
    target, drafter = [], []
    for seed in range(60):
        rows = np.array([_value(variant(f"spec-decode-exactness@{seed}"), f"token_{i}") for i in range(1, 6)])
        target.append(0.5 * np.abs(rows[:, 0] - rows[:, 2]).sum())
        drafter.append(0.5 * np.abs(rows[:, 1] - rows[:, 3]).sum())
    assert max(target) < 0.05 and np.mean(target) < 0.5 * np.mean(drafter)


def test_exactness_draws_follow_their_own_tables(variant):
    seen = set()
    for seed in range(60):
        solution = variant(f"spec-decode-exactness@{seed}")
        rows = np.array([_value(solution, f"token_{i}") for i in range(1, 6)])
        p, q = rows[:, 0], rows[:, 1]
        assert rows.sum(axis=0) == pytest.approx([1, 1, 1, 1], abs=1e-9)
        assert solution.expected["shift_fp8_target"] == pytest.approx(0.5 * np.abs(p - rows[:, 2]).sum(), abs=1e-12)
        assert solution.sheet.results["keep_top"] == pytest.approx(min(1, p.max() / q[p.argmax()]), abs=1e-12)
        assert np.max(np.abs(_rejection_output(p, q) - p)) < 1e-12
        bound = 2 * (_value(solution, "delta_kernel") + _value(solution, "delta_batch"))
        gaps = _value(solution, "gaps")
        assert sorted(solution.expected["positions"]) == sorted(
            f"position {i + 1}" for i, g in enumerate(gaps) if g < bound)
        fixes = solution.sheet.results["fixes"]
        d_k, d_b = _value(solution, "delta_kernel"), _value(solution, "delta_batch")
        assert fixes["verify with the decode pass's attention kernel"] == all(g >= 2 * d_b for g in gaps)
        assert fixes["batch-invariant kernels, the verify pass keeping its own attention kernel"] == all(
            g >= 2 * d_k for g in gaps)
        assert solution.expected["regime"] == ("verify-kernel" if d_k > d_b else "batch-size") and d_k != d_b
        assert fixes["only both together: batch-invariant kernels and one attention kernel for any query count"] == (
            min(gaps) < 2 * min(d_b, d_k))
        assert fixes["FP32 logits (the lm_head in FP32), nothing else"] is False
        # The holds select is judged on floats before the sheet: it agrees with the sheet's own figures.
        x, holds = solution.sheet.results, solution.sheet.results["holds"]
        assert holds["the FP8 drafter lowers the acceptance rate here"] == (x["acceptance_fp8_draft"] < x["acceptance"])
        assert holds["over a fifth of the drafts are rejected here"] == (1 - x["acceptance"] > 0.2)
        seen.update(f"{option}={holds}" for option, holds in
                    (solution.sheet.results["holds"] | solution.sheet.results["fixes"]).items())
    # Every option of both selects but the declared fact takes both truths over these draws: none can be memorised.
    for option in solution.sheet.results["holds"] | solution.sheet.results["fixes"]:
        if option.startswith("FP32 logits"):
            continue
        assert {f"{option}=True", f"{option}=False"} <= seen, option


def test_exactness_push_hands_the_bound_to_the_other_term(variant, catalog):
    """The push raises the smaller logit difference to 0.05, past any draw's (0.04 at most): the other term sets
    most of the bound, the regime flips, and the fix that removes only the new smaller term leaves the larger one
    whole. Where the pushed variant is refused (a gap at a line) the engine's push stands in: at most one in ten."""
    from solvers.interview import stage_run

    missing = 0
    for seed in [None, *range(60)]:
        solution = variant(f"spec-decode-exactness@{'default' if seed is None else seed}")
        push = next(i for i, stage in enumerate(solution.question.stages)
                    if stage.push and stage.when == solution.regime_name)
        run = stage_run(solution, catalog, push)
        if run is None:
            missing += 1
            continue
        assert run.regime != solution.regime_name, seed
        d_k, d_b = _value(run.solution, "delta_kernel"), _value(run.solution, "delta_batch")
        assert run.regime == ("verify-kernel" if d_k > d_b else "batch-size")
        fixes = run.solution.sheet.results["fixes"]
        weaker_fix = ("batch-invariant kernels, the verify pass keeping its own attention kernel"
                      if run.regime == "verify-kernel" else "verify with the decode pass's attention kernel")
        assert fixes[weaker_fix] == all(g >= 2 * max(d_k, d_b) for g in _value(run.solution, "gaps"))
    assert missing <= 6


def test_exactness_refuses_tied_logit_differences(variant):
    """Equal differences leave no term that dominates: the override is refused, not keyed one way."""
    from solvers.engine import VariantError

    with pytest.raises(VariantError, match="tie"):
        variant("spec-decode-exactness@default+delta_batch=0.02")


# --- the step-time model's decode costs (steptime.decode_costs) ------------------------------------


@pytest.mark.parametrize("model_id, gpu_id, tp, batch, tokens, context", [
    ("llama-3-70b", "h100-sxm", 8, 1, 1, 1024),
    ("llama-3-70b", "h100-sxm", 8, 1024, 5, 1024),  # a verify pass at the peak batch
    ("llama-3-8b", "h100-sxm", 1, 256, 5, 512),
    ("qwen2.5-72b", "h200-sxm", 4, 64, 3, 8000),
])
def test_decode_costs_are_the_step_time_model(catalog, model_id, gpu_id, tp, batch, tokens, context):
    """kernels(B, k) + overhead is step_time of a step with B·k tokens, B·k·S attended pairs and B·S cached
    tokens, all-reduces included: the same model split into per-batch terms, not a second one."""
    import sympy

    from solvers.derivation import Sheet
    from solvers.formulas.collective import tp_all_reduce
    from solvers.formulas.steptime import decode_costs, engine, step_time, step_work

    model, gpu = catalog.get("models", model_id), catalog.get("gpus", gpu_id)
    s = Sheet()
    e = engine(s, model, gpu, tp, communication=tp > 1)
    S = s.given("S", context, "tokens")
    costs = decode_costs(s, e, model, gpu, tp, S)
    B, k = sympy.Integer(batch), sympy.Integer(tokens)
    work = step_work(s, e, "x", "step", B * k, B * k * S, B * S)
    comm = tp_all_reduce(s, model, gpu, tp, B * k, tag="x", label="step")
    reference = s.value(step_time(s, e, "x", "step", work, communication=comm))
    assert s.evaluate(costs.kernels(B, k) + e.t_oh) == pytest.approx(reference, rel=1e-12)


@pytest.mark.parametrize("qid", ["spec-decode-by-load", "spec-decode-tail"])
def test_the_cards_a_cached_step_model_rests_on_are_listed_on_every_solve(variant, qid):
    """The load model's floats come from a scratch sheet run once per model, GPU and TP (cached): the cards
    it read (attention counted in the math, the roofline rule) are listed on every later solve too. An
    independent re-deriver left attention out where the card was missing, 11% off the key at 11K tokens."""
    first, again = variant(f"{qid}@63041"), variant(f"{qid}@63041")
    assert first.cards() == again.cards()
    assert {"attention-flops", "roofline-time", "step-compute", "step-bandwidth"} <= set(again.cards())
