"""The cost questions' shared rule: one decode context, named where the step model charges it."""
from __future__ import annotations

import pytest

from tests.by_hand import value_of


@pytest.mark.parametrize("qid", ["multi-model-fleet-tiering", "cold-prefill-pools", "slo-capacity-unit"])
def test_decode_context_is_the_cards_rule_and_the_prompt_names_it(variant, qid):
    """Every decode batch in the group is sized at P + O/2, the card's mean-decode-context (it was a rule no
    prompt stated: at P + O a third of the ledger's batches move by more than 3%). The card says it once and
    the prompts name it, or, in a staged interview (whose words name no card), the screen lists it in play."""
    from solvers.conventions import convention

    assert convention("mean-decode-context").value == 0.5
    for seed in ["default", *range(5)]:
        solution = variant(f"{qid}@{seed}")
        assert solution.sheet.results["mean_context"] == value_of(solution, "prompt") + value_of(solution, "reply") / 2
        named = solution.cards() if solution.question.staged else solution.prompt
        assert "mean-decode-context" in named


@pytest.mark.parametrize("qid, cards", [
    ("slo-capacity-unit", ("tp-all-reduce", "attention-flops", "usable-hbm")),
    ("multi-model-fleet-tiering", ("tp-all-reduce", "attention-flops", "usable-hbm")),
    ("voice-latency-budget", ("tp-all-reduce", "attention-flops", "usable-hbm", "minimal-kv-pool")),
    ("cold-prefill-pools", ("tp-all-reduce", "attention-flops"))])
def test_prompts_name_what_their_step_model_charges(variant, qid, cards):
    """'The card's step model' alone left out what the keys charge: the TP all-reduces (26% of the ledger's
    125.8 ms prefill), attention FLOPs, and the KV pool in usable HBM (with the minimal pool in voice). A staged
    interview's words name no card: its screen lists the cards in play."""
    solution = variant(f"{qid}@default")
    named = solution.cards() if solution.question.staged else solution.prompt
    assert all(card in named for card in cards), qid
