"""kv-quant-keys-vs-values: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

ROPE = ("after RoPE, an outlier pair that turns fast across a group of tokens spreads its offset over the group's "
        "range, and per-channel scales lose their edge")


def test_kv_quant_options_follow_the_variant(variant):
    """The first version's "per-channel values cut >2×" and "a key waits for 32 tokens" never changed; their
    replacements follow α, b, the window and the context (the verdicts are pinned in the question file). Halving the
    window at 1,024 tokens moves 128·13/16 = 104 of 256 + 768·3/16 = 400 tokens' worth, and the reason says 26%."""
    window = "halving the bf16 window would shrink this sequence's cache by more than {window_saving}"
    short = variant("kv-quant-keys-vs-values@default+residual=256+context=1024").sheet
    assert "26%" in short.reasons["facts"][window]


@pytest.mark.parametrize("seed", range(20))
def test_kv_quant_key_error_is_the_exact_rounding_error(variant, seed):
    """A ±1 key entry's per-token error is its RMS distance to the nearest level of a grid over ±(α + 1), not
    step/√12: at 2 bits every such entry lands on the inner levels (α = 10: 3.18 against the estimate's 2.12,
    which stays only as a slip). Checked by rounding a fine uniform sample of ±1 on that grid."""
    solution = variant(f"kv-quant-keys-vs-values@{seed}")
    bits, alpha = int(solution.param("bits").value), solution.param("outlier").value
    levels, top = 2**bits - 1, alpha + 1
    step = 2 * top / levels
    x = np.linspace(-1, 1, 400_001)
    rounded = np.rint((x + top) / step) * step - top
    assert solution.expected["key_error_token"] == pytest.approx(np.sqrt(np.mean((x - rounded) ** 2)), rel=1e-3)


def test_kv_quant_says_what_the_key_is(variant):
    """The opening says the spread is uniform (σ_v = 1/√3 rests on it) and where a token's keys reach; the labels
    ask for a ±1 entry's error and the first-order ratios; the estimate is a slip where it misses."""
    solution = variant("kv-quant-keys-vs-values@default")
    opening = " ".join(solution.prompt.split())
    assert "uniform over ±1" in opening
    assert "two key channels a head sit at +10, two at −10, edges at ±1 more" in opening
    labels = {a.key: a.label for a in solution.question.answers}
    assert "±1 key entry" in labels["key_error_token"] and "first order" in labels["roads_token"]
    assert "first order" in labels["roads_channel"]
    assert "bf16 size over this cache" in labels["compression"]  # 4.7×, not the cache's 21% share of bf16
    assert solution.expected["key_error_token"] == pytest.approx((91 / 9) ** 0.5)
    assert any(slip.label.startswith("step/√12") for slip in solution.sheet.slips["key_error_token"])


def test_kv_quant_rope_is_the_selects_one_fact(variant):
    """Per-channel keys rest on an outlier keeping its offset across a group of tokens: the select's one declared
    fact says where that fails (fast-turning pairs after RoPE), and an assumption says where the key holds."""
    sheet = variant("kv-quant-keys-vs-values@default").sheet
    assert sheet.facts["facts"] == {ROPE}
    assert sheet.judged("facts")[ROPE] is True and "KVQuant" in sheet.reasons["facts"][ROPE]
    assert any("before RoPE" in text for text in sheet.assumptions)


@pytest.mark.parametrize("code", ["default+bits=4", "default+bits=4+q_scale=2", "default+bits=4+outlier=3",
                                  "default+bits=3+q_scale=0.5"])
def test_kv_quant_simulation_matches_the_first_order_roads(variant, code):
    """Where the errors are small (per-channel keys, any values), the simulated output errors follow the
    closed forms: value road e_V·√Σp², key road β·σ_v·e_K·√Σp²."""
    sheet = variant(f"kv-quant-keys-vs-values@{code}").sheet
    given, results = {g.symbol: g.value for g in sheet.givens}, sheet.results
    averaging = given["sqrt_sum_p2"]
    # Four queries over 256 tokens, and min-max groups of 32 whose ends are exact: within a quarter.
    assert given["o_V_tok"] == pytest.approx(results["value_error"] * averaging, rel=0.25)
    key_road = given["beta"] / math.sqrt(3) * results["key_error_channel"] * averaging
    assert given["o_K_ch"] == pytest.approx(key_road, rel=0.25)
    assert given["o_K_ch"] / given["o_V_tok"] == pytest.approx(results["roads_channel"], rel=0.3)


def test_kv_quant_simulation_orders_the_layouts(variant):
    """Over many variants: KIVI's layout beats per-token scales for both, per-channel keys beat per-token
    keys, and per-channel values gain nothing over per-token values."""
    for seed in range(30):
        given = {g.symbol: g.value for g in variant(f"kv-quant-keys-vs-values@{seed}").sheet.givens}
        assert given["o_KIVI"] < given["o_tok"]
        assert given["o_K_ch"] < given["o_K_tok"] / 2
        assert given["o_V_ch"] == pytest.approx(given["o_V_tok"], rel=0.3)
