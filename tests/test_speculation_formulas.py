"""The speculative-decoding helper (solvers/formulas/speculation.py): the closed forms against a seeded
simulation of acceptance, and the decode costs of the step-time model it reads."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.formulas.speculation import expected_tokens


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
