"""spec-decode-batch-ceiling: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.formulas.speculation import expected_tokens
from solvers.formulas.steptime import DEFAULT_CONSTANTS, STEP_OVERHEAD
from tests.by_hand import by_hand_test, value_of

SEEDS = range(80)


def _costs(p, peak_scale: float = 1) -> tuple[float, float, float]:
    """The bank's step model in plain arithmetic (η_bw 80%, η_c by precision, attention at the bf16 peak): the
    weight read, one sequence's KV read at the context, one token's math."""
    from solvers.formulas.common import compute_efficiency, dtype_bytes, hbm_bandwidth, model_params, peak_flops
    m = p.model
    bw = DEFAULT_CONSTANTS.bandwidth * hbm_bandwidth(p.gpu)
    n = model_params(m)
    weights = n * dtype_bytes(p.dtype) / bw
    kv = 4 * m.layers * m.kv_heads * m.head_dim * p.context / bw
    math_ = (2 * n / (compute_efficiency(p.dtype) * peak_flops(p.gpu, p.dtype))
             + 4 * m.layers * m.heads * m.head_dim * p.context
             / (compute_efficiency("bf16") * peak_flops(p.gpu, "bf16")))
    return weights, kv, math_ / peak_scale


def _speedup_by_hand(p, alpha: float, gamma: int, c: float, batch: float, peak_scale: float = 1) -> float:
    """E tokens a round (the verify pass, the overhead once, γ drafts at c of the plain kernels) against one a
    plain step."""
    t_w, t_kv, t_f = _costs(p, peak_scale)
    plain = max(t_w + batch * t_kv, batch * t_f)
    verify = max(t_w + batch * t_kv, batch * (gamma + 1) * t_f)
    return expected_tokens(alpha, gamma) * (plain + STEP_OVERHEAD) / (verify + STEP_OVERHEAD + gamma * c * plain)


def _ceiling_by_hand(solution):
    from solvers.data import Record
    p = Record({q.name: q.value for q in solution.params})
    alpha, gamma, c, batch = p.alpha, p.gamma, p.draft_cost, p.batch
    t_w, t_kv, t_f = _costs(p)
    e = expected_tokens(alpha, gamma)
    ceiling = int(t_w / ((gamma + 1) * t_f - t_kv))

    def round_at(b):
        plain = max(t_w + b * t_kv, b * t_f)
        return max(t_w + b * t_kv, b * (gamma + 1) * t_f) + STEP_OVERHEAD + gamma * c * plain

    keep = e - gamma * c
    return {
        "tokens_per_round": e,
        "speedup_batch1": _speedup_by_hand(p, alpha, gamma, c, 1),
        "ceiling": ceiling,
        "speedup": _speedup_by_hand(p, alpha, gamma, c, batch),
        "per_user_ceiling": e / round_at(ceiling),
        "break_even": (keep * t_w + (e - 1) * STEP_OVERHEAD) / ((gamma + 1) * t_f - keep * t_kv),
        "per_user": e / round_at(batch),
    }


def test_batch_ceiling_default_is_53_on_an_h100_at_512_tokens(variant):
    """read7 #1, #2: the bank's step model (η's, 2 ms a step) with the context's KV read, not a datasheet roofline
    of the weights alone (59, 2.54x before); the prompt names the context instead of assuming it away."""
    base = variant("spec-decode-batch-ceiling@default")
    assert base.expected["ceiling"] == 53
    assert base.expected["speedup_batch1"] == pytest.approx(2.6526, rel=1e-4)
    assert "512 tokens of context a request" in base.prompt
    assert all("small beside the weights" not in stage.say for stage in base.question.stages)


def test_a_longer_context_moves_the_ceiling_and_break_even_out(variant):
    """read7 #1: the verify pass reads each sequence's KV once for its γ+1 tokens, so more context moves both out
    (MagicDec); past about 1K tokens at the default no break-even is left (refused)."""
    short = variant("spec-decode-batch-ceiling@default+context=256+batch=260")
    base = variant("spec-decode-batch-ceiling@default")
    assert short.expected["ceiling"] < base.expected["ceiling"]
    assert short.expected["break_even"] < base.expected["break_even"]
    with pytest.raises(Exception, match="no break-even|no ceiling"):
        variant("spec-decode-batch-ceiling@default+context=1024")


def test_stage3_and_levers_take_both_sides_over_draws(variant):
    """read7 #3, #4: the stage-3 batch lands on both sides of break-even, and the peak and switch-off levers
    (which replaced the drafter that was always false) are right in some draws and wrong in others."""
    regimes, levers = set(), {"a GPU with twice the tensor peak at the same HBM bandwidth": set(),
                              "switching speculation off": set()}
    for seed in SEEDS:
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        regimes.add(solution.expected["regime"])
        for option, seen in levers.items():
            seen.add(solution.sheet.results["levers"][option])
    assert regimes == {"helps", "hurts"}
    assert all(seen == {True, False} for seen in levers.values()), levers


test_batch_ceiling_draws_match_plain_arithmetic = by_hand_test("spec-decode-batch-ceiling", SEEDS, _ceiling_by_hand)


def test_batch_ceiling_verdict_follows_the_break_even(variant):
    for seed in SEEDS:
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        helps = value_of(solution, "batch") < solution.expected["break_even"]
        assert solution.expected["regime"] == ("helps" if helps else "hurts")
        assert (solution.expected["speedup"] > 1) == helps
        # No verdict within the break-even answer's 3%: a candidate's rounding cannot flip it.
        assert abs(value_of(solution, "batch") / solution.expected["break_even"] - 1) >= 0.03, seed


def test_the_ceiling_is_exact(variant):
    """At the ceiling the verify pass's math still fits in its reads, one sequence more and it does not; a batch
    within it is refused (stage 3 would repeat stage 1's figures)."""
    from solvers.data import Record
    base = variant("spec-decode-batch-ceiling@default")
    p = Record({q.name: q.value for q in base.params})
    t_w, t_kv, t_f = _costs(p)
    ceiling = int(base.expected["ceiling"])
    assert ceiling * 5 * t_f <= t_w + ceiling * t_kv
    assert (ceiling + 1) * 5 * t_f > t_w + (ceiling + 1) * t_kv
    with pytest.raises(Exception, match="within the verify pass's ceiling"):
        variant(f"spec-decode-batch-ceiling@default+batch={ceiling}")


def test_break_even_is_where_the_speedup_crosses_one(variant):
    """By hand the speedup is 1 at the keyed break-even (320.3 at the default); the nearest batches outside the
    answer's 3% (which the solver refuses as knife edges) sit on either side, and the sheet agrees."""
    base = variant("spec-decode-batch-ceiling@default")
    even = base.expected["break_even"]
    from solvers.data import Record
    p = Record({q.name: q.value for q in base.params})
    at = _speedup_by_hand(p, p.alpha, p.gamma, p.draft_cost, even)
    assert at == pytest.approx(1, rel=1e-9)
    below = variant(f"spec-decode-batch-ceiling@default+batch={math.floor(0.97 * even)}")
    above = variant(f"spec-decode-batch-ceiling@default+batch={math.ceil(1.03 * even)}")
    assert below.expected["speedup"] > 1 > above.expected["speedup"]
    assert (below.expected["regime"], above.expected["regime"]) == ("helps", "hurts")
    with pytest.raises(Exception, match="within the break-even"):
        variant(f"spec-decode-batch-ceiling@default+batch={round(even)}")


def test_levers_stay_real_and_off_the_20_percent_line(variant):
    """The acceptance lever goes halfway to 1, and no lever's gain sits within 1% of the 1.2x line."""
    from solvers.data import Record
    for seed in range(40):
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        p = Record({q.name: q.value for q in solution.params})
        base = dict(alpha=p.alpha, gamma=p.gamma, c=p.draft_cost, batch=p.batch)
        now = _speedup_by_hand(p, **base)
        levers = solution.sheet.results["levers"]
        for option, change in (("acceptance halfway to 1", {"alpha": (1 + p.alpha) / 2}),
                               ("a GPU with twice the tensor peak at the same HBM bandwidth", {"peak_scale": 2})):
            ratio = _speedup_by_hand(p, **(base | change)) / now
            assert abs(ratio / 1.2 - 1) >= 0.01 and levers[option] == (ratio >= 1.2), (seed, option)
        assert levers["switching speculation off"] == (1 / now >= 1.2)
        assert (1 + p.alpha) / 2 < 1


def test_the_compute_lever_says_the_bandwidth_stays(bank):
    """Read12 finding 4: "a GPU with twice the tensor peak" read two ways: a next-generation part doubles its HBM
    bandwidth too (B200 over H100: 2.3x the FLOP/s, 2.4x the bandwidth), and then the ceiling barely moves. The
    option now says the bandwidth stays, the what-if the solver prices (peak_scale only)."""
    spec = bank.get("spec-decode-batch-ceiling").answer("levers")
    assert "a GPU with twice the tensor peak at the same HBM bandwidth" in spec.pool
    assert "a GPU with twice the tensor peak" not in spec.pool


def test_the_published_figure_names_its_own_batch(bank):
    """Read12 finding 2: every variant's reveal said "the variant's own batch (128)" beside batches of 86, 35 and
    470: the 128 is the comparison variant's batch."""
    system = bank.get("spec-decode-batch-ceiling").reality[0].system
    assert "the comparison variant's batch (128)" in system and "the variant's own batch" not in system


def test_contexts_reach_a_chat_turns_length(variant):
    """Read12 finding 3: contexts were drawn from 128-1,024 tokens (288-704 in the three read), where the KV read
    that moves the ceiling barely shows. Past 1K the verify pass still turns compute-bound (at γ = 4 up to about
    3K tokens in bf16 on an H100), so draws now reach 2K; some of them land on each side of break-even."""
    contexts, regimes = [], set()
    for seed in range(200):
        solution = variant(f"spec-decode-batch-ceiling@{seed}")
        context = solution.param("context").raw
        contexts.append(context)
        if context > 1024:
            regimes.add(solution.regime_name)
    assert max(contexts) > 1024 and regimes == {"helps", "hurts"}
