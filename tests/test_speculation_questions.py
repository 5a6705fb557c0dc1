"""Golden checks for the speculative-decoding questions (group D) and their shared helper
solvers/topics/speculation.py: the closed forms against a seeded simulation of acceptance, the
default variants against the catalogue's figures (recomputed here in plain Python), and the
decisions near their boundaries."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.topics.speculation import batch1_speedup, expected_tokens

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


def test_leviathan_speedup_formula():
    """Leviathan et al. 2023, Corollary 3.9: (1 − α^(γ+1)) / ((1 − α)(γc + 1))."""
    assert batch1_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2), rel=1e-12)
    assert batch1_speedup(0.8, 4, 0) == expected_tokens(0.8, 4)


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
    }


def test_batch_ceiling_default_is_59_on_an_h100_in_bf16(variant):
    """The catalogue's figure: γ = 4 keeps the verify pass memory-bound while B·5 ≤ 295 (989.4/3.35)."""
    solution = variant("spec-decode-batch-ceiling@default")
    assert solution.expected["ridge"] == pytest.approx(989.4 / 3.35, rel=1e-12)
    assert solution.expected["ceiling"] == 59
    assert solution.expected["tokens_per_round"] == pytest.approx(3.3616, rel=1e-12)
    assert solution.expected["speedup_batch1"] == pytest.approx(3.3616 / 1.2, rel=1e-12)
    assert solution.expected["break_even"] == pytest.approx(295.34 * 3.1616 / 5, rel=1e-4)  # ≈ 187
    assert solution.expected["regime"] == "helps"
    for key, value in _ceiling_by_hand(solution).items():
        assert solution.expected[key] == pytest.approx(value, rel=1e-9), key


def test_batch_ceiling_draws_match_plain_arithmetic(variant):
    for seed in SEEDS:
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        for key, value in _ceiling_by_hand(solution).items():
            assert solution.expected[key] == pytest.approx(value, rel=1e-9), (seed, key)
        helps = _value(solution, "batch") < solution.expected["break_even"]
        assert solution.expected["regime"] == ("helps" if helps else "hurts")
        assert (solution.expected["speedup"] > 1) == helps


def test_the_ceiling_is_exact_and_within_it_the_speedup_is_the_batch1_one(variant):
    """At the ceiling the verify pass is still at or under the ridge, one sequence more and it is
    over; every batch up to the ceiling gets the batch-1 speedup exactly."""
    base = variant("spec-decode-batch-ceiling@default")
    ceiling = int(base.expected["ceiling"])
    ridge = base.expected["ridge"]
    assert 2 * ceiling * 5 / 2 <= ridge < 2 * (ceiling + 1) * 5 / 2
    at = variant(f"spec-decode-batch-ceiling@default+batch={ceiling}")
    assert at.expected["speedup"] == pytest.approx(at.expected["speedup_batch1"], rel=1e-12)
    past = variant(f"spec-decode-batch-ceiling@default+batch={ceiling + 1}")
    assert past.expected["speedup"] < past.expected["speedup_batch1"]


def test_fp8_leaves_the_ceiling_where_bf16_has_it(variant):
    """Twice the peak and half the bytes per weight: the same ceiling (H100: 1,978.9/3.35 → 59 at γ = 4)."""
    fp8 = variant("spec-decode-batch-ceiling@default+dtype=fp8")
    assert fp8.expected["ceiling"] == 59


def test_break_even_is_where_the_speedup_crosses_one(variant):
    base = variant("spec-decode-batch-ceiling@default")
    even = base.expected["break_even"]
    below = variant(f"spec-decode-batch-ceiling@default+batch={int(even)}")
    above = variant(f"spec-decode-batch-ceiling@default+batch={int(even) + 1}")
    assert below.expected["speedup"] > 1 > above.expected["speedup"]
    assert (below.expected["regime"], above.expected["regime"]) == ("helps", "hurts")
