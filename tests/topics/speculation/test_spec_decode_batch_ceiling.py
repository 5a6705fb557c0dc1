"""spec-decode-batch-ceiling: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.formulas.speculation import expected_tokens
from tests.by_hand import by_hand_test, value_of

SEEDS = range(80)


def _ceiling_by_hand(solution):
    model, gpu = value_of(solution, "model"), value_of(solution, "gpu")
    dtype = value_of(solution, "dtype")
    alpha, gamma, c, batch = (value_of(solution, n) for n in ("alpha", "gamma", "draft_cost", "batch"))
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


test_batch_ceiling_draws_match_plain_arithmetic = by_hand_test("spec-decode-batch-ceiling", SEEDS, _ceiling_by_hand)


def test_batch_ceiling_verdict_follows_the_break_even(variant):
    for seed in SEEDS:
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        helps = value_of(solution, "batch") < solution.expected["break_even"]
        assert solution.expected["regime"] == ("helps" if helps else "hurts")
        assert (solution.expected["speedup"] > 1) == helps
        # No verdict within the break-even answer's 3%: a candidate's rounding cannot flip it.
        assert abs(value_of(solution, "batch") / solution.expected["break_even"] - 1) >= 0.03, seed


def test_the_ceiling_is_exact_and_within_it_the_speedup_is_the_batch1_one(variant):
    """At the ceiling the verify pass is still at or under the ridge, one sequence more and it is
    over; at the ceiling a round is one weight read plus the drafts (the batch-1 speedup's round), and a
    batch within it is refused (stage 3 would repeat stage 1's figures)."""
    base = variant("spec-decode-batch-ceiling@default")
    ceiling = int(base.expected["ceiling"])
    steps = {step.key: step.value for step in base.sheet.steps}
    assert 2 * ceiling * 5 / 2 <= steps["ridge"] < 2 * (ceiling + 1) * 5 / 2
    gamma, c = value_of(base, "gamma"), value_of(base, "draft_cost")
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
