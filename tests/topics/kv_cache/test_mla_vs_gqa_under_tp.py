"""mla-vs-gqa-under-tp: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from solvers.formulas.common import GPU_MEMORY_UTILIZATION
from tests.by_hand import DTYPE_BYTES, param_values


def test_mla_vs_gqa_default(variant):
    """Llama-3-70B bf16 and its MLA retrofit, both TP 8 on an H200 node (the keys are pinned in the question file):
    the crossover TP is a boundary, not an answer, and both share one room."""
    results = variant("mla-vs-gqa-under-tp@default").sheet.results
    assert results["tp_crossover"] == pytest.approx(2 * 8 * 128 / 576)  # 3.56
    # 0.9 x 143,771 MiB (the H200 as the device reports it) less 141.1 GB / 8: 118.0 GB per GPU, the same for both
    assert results["room"] == pytest.approx(0.9 * 143_771 * 2**20 - 141.1e9 / 8)


@pytest.mark.parametrize("seed", range(20))
def test_mla_vs_gqa_matches_plain_arithmetic(variant, seed):
    solution = variant(f"mla-vs-gqa-under-tp@{seed}")
    p = param_values(solution)
    model, tp, context, rank = p["model"], p["tp"], p["context"], p["kv_lora_rank"]
    kv_bytes = DTYPE_BYTES[p["kv_dtype"]]
    weights = model.params_b * 1e9 * DTYPE_BYTES[p["weight_dtype"]] / tp
    room = p["gpu"].hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION - weights
    gqa_per_gpu = 2 * model.layers * (model.kv_heads // tp) * model.head_dim * kv_bytes
    mla_per_gpu = model.layers * (rank + 64) * kv_bytes
    expected = solution.expected
    assert expected["requests_gqa"] == 8 // tp * math.floor(room / (gqa_per_gpu * context))
    assert expected["requests_mla"] == 8 // tp * math.floor(room / (mla_per_gpu * context))
    # The same weights leave the same room: the verdict follows the per-GPU shares alone.
    assert expected["regime"] == ("gqa-holds-more" if gqa_per_gpu <= mla_per_gpu else "mla-holds-more")
    flips = [n for n in (1, 2, 4, 8, 16) if 2 * model.kv_heads * model.head_dim / n < rank + 64]
    assert solution.sheet.results["tp_flip"] == flips[0]  # a step of the worked solution


def test_mla_vs_gqa_compares_like_with_like(variant):
    """The review's bug: the old question set a 70B against DeepSeek-V3's 671B, so its weights decided. Now
    there is one model, one weight budget, and no fractional TP among the graded answers."""
    for seed in range(30):
        solution = variant(f"mla-vs-gqa-under-tp@{seed}")
        assert "mla_model" not in {param.name for param in solution.params}
        assert solution.sheet.results["tp_flip"] in (2, 4, 8, 16)  # 16: a 128 latent, past any one node
        assert "tp_crossover" not in solution.expected
    narrow = variant("mla-vs-gqa-under-tp@default+tp=2").expected  # mla-holds-more, pinned in the question file
    assert narrow["requests_mla"] > narrow["requests_gqa"]


def test_mla_vs_gqa_context_stays_within_the_model(variant):
    """The draw names the model `model`, so the bank's context-within-model rule applies (Qwen2.5-72B: 32K)."""

    with pytest.raises(VariantError, match="context-within-model: Qwen2.5-72B serves at most 32,768 tokens"):
        variant("mla-vs-gqa-under-tp@default+model=qwen2.5-72b+context=65536")
    for seed in range(40):
        p = param_values(variant(f"mla-vs-gqa-under-tp@{seed}"))
        assert p["context"] <= p["model"].max_context


def test_mla_vs_gqa_levers_ask_a_reversal_on_either_side(variant):
    """Reader (read12, @11 and @42): the select asked which lever "would leave MLA holding more than GQA" where MLA
    already held more (98 draws in 200), so every lever that helped MLA was keyed true (@11: A, C, D). It now asks
    which change alone would leave the other layout ahead: where MLA leads, only a lever for GQA can."""
    for code in ("mla-vs-gqa-under-tp@11", "mla-vs-gqa-under-tp@42"):
        solution = variant(code)
        assert solution.expected["regime"] == "mla-holds-more"
        assert [o for o, holds in solution.sheet.judged("mla_levers").items() if holds] == [FP8_GQA]
        assert "widens MLA's lead" in solution.sheet.reasons["mla_levers"][DP]


def test_mla_vs_gqa_no_lever_moves_the_tp(variant):
    """No option moves the TP: the push does, and a lever's verdict at TP/2 (the old "halving its TP") answered the
    push before it was asked. The option that could never be done ("splitting the latent like KV heads", keyed
    false because impossible though it would help) is gone; the one declared fact is the context, which scales both."""
    solution = variant("mla-vs-gqa-under-tp@default")
    options = set(solution.sheet.judged("mla_levers"))
    assert not any("TP" in option or "splitting" in option for option in options)
    assert solution.sheet.facts["mla_levers"] == {LONGER}


def test_mla_vs_gqa_push_crosses_and_the_key_before_it_keeps_the_crossover(variant, catalog):
    """The push moves the TP across 2·H_kv·d_h/(d_c + d_r); the layout's key, shown just before it, names no
    crossover TP (it would answer the push)."""
    from solvers.interview import stage_run

    solution = variant("mla-vs-gqa-under-tp@default")
    assert "3.56" not in solution.sheet.regime.summary and "3.56" in solution.sheet.regime.other_side
    pushed = stage_run(solution, catalog, 3)
    assert pushed is not None and pushed.moved == ("tp",) and pushed.regime == "mla-holds-more"


@pytest.mark.parametrize("seed", range(0, 80, 4))
def test_mla_vs_gqa_dp_attention_is_judged_on_its_weight_copies(variant, seed):
    """An independent check found data-parallel attention keyed true for every variant, though a 405B
    model's 143.7 GB of bf16 attention weights copied onto each GPU leave no room: it holds when the node
    then keeps more requests than GQA does, weights copied, latents once per GPU."""
    solution = variant(f"mla-vs-gqa-under-tp@{seed}")
    p = param_values(solution)
    m, gpu, tp = p["model"], p["gpu"], p["tp"]
    per_weight = DTYPE_BYTES[p["weight_dtype"]]
    weights = m.params_b * 1e9 * per_weight
    attention = m.layers * 2 * m.hidden * (m.heads + m.kv_heads) * m.head_dim * per_weight
    usable = gpu.hbm_mib * 2**20 * 0.9
    latent = m.layers * (p["kv_lora_rank"] + 64) * DTYPE_BYTES[p["kv_dtype"]]
    room = usable - (weights - attention) / tp - attention
    dp = 8 * math.floor(max(room, 0) / (latent * p["context"]))
    gqa, mla = solution.sheet.results["requests_gqa"], solution.sheet.results["requests_mla"]
    assert solution.sheet.results["mla_levers"][DP] is (dp > gqa if gqa > mla else dp < gqa)


DP = ("data-parallel attention for the MLA model, each GPU keeping the whole attention weights and only its own "
      "requests' latents")
FP8 = "an fp8 latent for the MLA model alone (GQA's cache left as it is)"
FP8_GQA = "an fp8 cache for the GQA model alone (the latent left as it is)"
LONGER = "requests twice as long, for both"


def test_mla_vs_gqa_levers_share_one_criterion(variant):
    """Reader (read7): two options carried thresholds against the stem (DP attention at 2x, fp8 against GQA), so
    DP raising MLA from 191 to 736 on a 405B B200 node could grade false. Every option now asks one thing: with
    that change alone, the other layout holds more than the one ahead now. The default's fp8 latent (78 against
    GQA's 87) fails it, and the 2x knob is gone."""
    solution = variant("mla-vs-gqa-under-tp@12011")
    assert (solution.expected["requests_gqa"], solution.expected["requests_mla"]) == (238, 191)
    assert solution.sheet.results["mla_levers"][DP] is True
    default = variant("mla-vs-gqa-under-tp@default")
    assert default.sheet.results["mla_levers"][FP8] is False and "78" in default.sheet.reasons["mla_levers"][FP8]
    assert "dp_gain" not in {param.name for param in default.params}


def test_mla_vs_gqa_stage_one_is_no_lookup(variant):
    """Reader (read7): every variant read was Llama-3.1-70B, so the shares were a handful of values. The base
    model is drawn from four (32, 80 and 126 layers): over 80 draws both per-GPU shares take many values, and the
    MLA key shows its formula."""
    models, gqa, mla = set(), set(), set()
    for seed in range(80):
        solution = variant(f"mla-vs-gqa-under-tp@{seed}")
        models.add(solution.param("model").raw)
        gqa.add(round(solution.expected["kv_per_token_gpu"]))
        mla.add(round(solution.expected["kv_gpu_mla"]))
    assert len(models) >= 3 and len(gqa) >= 6 and len(mla) >= 10
    step = next(s for s in variant("mla-vs-gqa-under-tp@default").sheet.steps if s.key == "kv_gpu_mla")
    assert "80" in step.substituted and "512 + 64" in step.substituted


def test_mla_vs_gqa_says_the_retrofit_is_hypothetical(variant, catalog):
    """Reader (read7): the opening did not say no Llama-with-MLA checkpoint exists."""
    from solvers.interview import opening

    assert "hypothetical" in opening(variant("mla-vs-gqa-under-tp@default")).say


def test_mla_vs_gqa_regime_margin_is_the_per_gpu_shares(variant):
    """Reader (read7): the margin read "1.23x below the boundary" against n* = 2.46, a TP no one deploys; then (read12,
    @42's push) "only 1x above the boundary" against the first power of two past n*. One room serves both, so the
    per-GPU shares decide: the margin is the latent against GQA's slice (90 KiB against 80: 1.125x). The key line
    before the push prints no step times it never asks (they stay in the worked solution)."""
    solution = variant("mla-vs-gqa-under-tp@default")
    assert solution.sheet.regime.boundary.value == 40 * 1024  # bytes: GQA's 40 KiB a GPU, against the latent's 90
    assert " ms" not in solution.sheet.regime.summary
    assert "reassuring" not in variant("mla-vs-gqa-under-tp@default+tp=2").sheet.regime.other_side
    near = variant("mla-vs-gqa-under-tp@42+kv_lora_rank=512").sheet.regime.summary
    assert "only 1× " not in near and "1.12× above" in near


def test_mla_vs_gqa_push_gives_a_reason_not_a_restatement(variant, catalog):
    """Reader (read12): the push restated every figure ("Say the replicas are TP 8 on H200 SXMs, the latent 512,
    requests 24,064 tokens"). It now says why the figure moved and asks."""
    from solvers.interview import stage_run

    pushed = stage_run(variant("mla-vs-gqa-under-tp@11"), catalog, 3)
    assert pushed is not None and pushed.moved == ("kv_lora_rank",)
    assert pushed.say.startswith("The retrofit loses too much quality") and "Say the replicas" not in pushed.say


def test_mla_vs_gqa_capacity_comes_with_its_step_time(bank, variant):
    """Reader (read12): both decode step times were in the worked solution but never asked, so the capacity came
    without its latency. A stage asks them: at a full pool both steps read a whole HBM, so MLA's bigger batch costs
    it no longer a step (default: 39.49 ms GQA against 39.26 MLA, pinned in the question file)."""
    question = bank.get("mla-vs-gqa-under-tp")
    assert tuple(question.stages[2].ask) == ("tpot_gqa", "tpot_mla")
    expected = variant("mla-vs-gqa-under-tp@default").expected
    assert expected["tpot_mla"] == pytest.approx(expected["tpot_gqa"], rel=0.05)


def test_mla_vs_gqa_small_latent_is_said_to_be_a_what_if(variant):
    """Reader (read12, @11): a 128 latent for Qwen2.5-72B is no shipped config (the conversions keep 512); a rank
    under 512 says so in the assumptions, DeepSeek's own rank does not."""
    assert any("what-if" in line for line in variant("mla-vs-gqa-under-tp@11").sheet.assumptions)
    assert not any("what-if" in line for line in variant("mla-vs-gqa-under-tp@default").sheet.assumptions)
