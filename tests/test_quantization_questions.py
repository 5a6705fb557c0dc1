"""Checks for the quantisation questions: fp8-kv-cache, kv-quant-keys-vs-values,
fp8-scale-formats; their seeded simulations against closed forms."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.formulas.fp8 import E4M3, amax_scale, quantize, sqnr_db

# --- fp8-kv-cache --------------------------------------------------------------------------


ROUNDING_FACT = "a scale four times larger leaves a normal entry's rounding error where it is"


@pytest.mark.parametrize("seed", range(40))
def test_fp8_kv_cache_levers_judged_by_the_even_point(variant, seed):
    """Each change alone against the even context n·h^ν, in plain floats (the solver decides in fractions):
    the clipping levers move with the variant, rounding's indifference to the scale is the one fact, and
    no draw makes every option hold."""
    solution = variant(f"fp8-kv-cache@{seed}")
    p = {param.name: param.value for param in solution.params}
    N, n, h, nu = p["context"], p["calib_tokens"], p["headroom"], p["tail_index"]
    levers = solution.sheet.results["levers"]
    expect = {
        "twice the headroom (the same calibration) leaves clipping less likely than not": N < n * (2 * h) ** nu,
        "half the headroom (the same calibration) leaves clipping less likely than not": N < n * (h / 2) ** nu,
        "{more_calibration} times the calibration tokens leave clipping less likely than not": N < 16 * n * h**nu,
        "a calibration a quarter as long leaves clipping less likely than not": N < n / 4 * h**nu,
        "a context an eighth as long leaves clipping less likely than not": N / 8 < n * h**nu,
        "a request at the model's longest context would leave clipping less likely than not":
            p["model"].max_context < n * h**nu,
        ROUNDING_FACT: True,
    }
    assert levers == expect
    assert not all(levers[o] for o in solution.shown["levers"])


def test_fp8_kv_cache_draws_only_the_scaled_format(variant):
    """A per-tensor scaled KV cache is E4M3 (vLLM's E5M2 cache runs unscaled, no amax to clip at)."""
    assert {param.value for seed in range(20) for param in variant(f"fp8-kv-cache@{seed}").params
            if param.name == "kv_format"} == {"e4m3"}


def _exact_clip_probability(N: int, n: int, h: float, nu: float) -> float:
    """1 − E[(1 − h^-ν·U)^N] for a Pareto tail, U the tail mass beyond the calibration max (Beta(1, n))."""
    u = np.concatenate([[0.0], np.geomspace(1e-12, 1, 200_001)[:-1]])  # fine where the density n(1 − u)^(n−1) peaks
    density = n * (1 - u) ** (n - 1)
    survive = np.exp(N * np.log1p(-(h**-nu) * u))
    return 1 - float(np.trapezoid(density * survive, u))


@pytest.mark.parametrize("code", ["default", "default+headroom=2.24", "default+context=8192+calib_tokens=8192",
                                  "default+headroom=1.5+tail_index=3", "default+calib_tokens=65536+headroom=2.24"])
def test_fp8_kv_cache_simulation_matches_the_closed_forms(variant, code):
    sheet = variant(f"fp8-kv-cache@{code}").sheet
    given = {g.symbol: g.value for g in sheet.givens}
    N, n, h, nu = given["N"], given["n"], given["h"], given["nu"]
    exact = _exact_clip_probability(int(N), int(n), h, nu)
    sigma = math.sqrt(exact * (1 - exact) / 2000)
    assert abs(given["P_sim"] - exact) <= 4 * sigma + 1e-3
    # The large-sample formula the key uses is that integral's limit.
    assert sheet.results["clip_probability"] == pytest.approx(exact, abs=0.01)
    # Median of (N/n)^(1/ν)·(E1/E2)^(1/ν)/h over exponential ratios, whose median is 1.
    assert given["r_sim"] == pytest.approx(sheet.results["clip_ratio"], rel=0.1)


def test_fp8_kv_cache_rounding_is_scale_invariant_in_the_emulation(variant):
    """RMS relative error of rounding a significand spread as Benford's law (log-uniform) to m bits:
    2^-m/√12 · √(E[1/f²]) with E[1/f²] = 3/(8 ln 2); the emulation's entries come close to it, and the
    same entries at a scale 4x larger give the same error."""
    closed = 2**-3 / math.sqrt(12) * math.sqrt(3 / (8 * math.log(2)))  # 2.65%
    for seed in range(6):
        given = {g.symbol: g.value for g in variant(f"fp8-kv-cache@{seed}").sheet.givens}
        if given["m"] != E4M3.mantissa_bits:
            continue
        assert given["e_sim"] == pytest.approx(closed, rel=0.06)
        assert given["e_sim_4x"] == pytest.approx(given["e_sim"], rel=0.06)


def test_fp8_kv_cache_regime_follows_the_probability(variant):
    for seed in range(40):
        results = variant(f"fp8-kv-cache@{seed}").sheet.results
        clipping = results["regime"] == "clipping-dominated"
        assert clipping == (results["clip_probability"] >= 0.5) == (results["clip_ratio"] >= 1)


# --- kv-quant-keys-vs-values ---------------------------------------------------------------

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


# --- fp8-scale-formats ---------------------------------------------------------------------

SAME_ACTIVATIONS = "the pool quantises activations to the tested build's bytes and scales"


def test_fp8_scale_formats_default(variant):
    """FP32-scaled Hopper checkpoint, a Blackwell pool on the OCP MX rule over 32-element blocks (the keys are
    pinned in the question file): the tested build's normal-range SQNR."""
    normal = 10 * math.log10(12 * 4**3 * 3 / (2 * math.log(2)))  # 32.21 dB
    assert variant("fp8-scale-formats@default").sheet.results["sqnr_normal"] == pytest.approx(normal)


def test_fp8_scale_formats_no_blackwell_build_skips_its_own_eval(variant):
    """The first version called ue8m0 + round-up + 128 bit-identical numerics, exempt from its own eval; the
    block-scaled MMA applies scales and accumulates unlike Hopper's WGMMA with CUDA-core promotion, so the
    eval gate is an assumption of every variant and no option claims the tested numerics."""
    sheet = variant("fp8-scale-formats@default+hopper_scales=ue8m0+mx_rule=up+act_block=128").sheet
    assert any("own eval" in text and "whatever its bytes" in text for text in sheet.assumptions)
    assert not any("numerics" in option for option in sheet.results["gates"])
    # The activation bytes match only where the checkpoint's rule, block and scales all match (pinned in the
    # question file); the reason names what the tested build ran.
    fp32 = variant("fp8-scale-formats@default+mx_rule=up+act_block=128").sheet
    assert "used FP32 scales per 128" in fp32.reasons["gates"][SAME_ACTIVATIONS]


@pytest.mark.parametrize("code", ["default+act_block=128", "default", "default+mx_rule=nearest+act_block=128"])
def test_fp8_scale_formats_saturating_share_of_the_emulation(variant, code):
    """The emulation's share of saturating blocks (4,096 blocks; the first version's 32 gave 6.2% against 19.3%)
    within four binomial sigmas of the closed form, on both distributions."""
    sheet = variant(f"fp8-scale-formats@{code}").sheet
    given = {g.symbol: g.value for g in sheet.givens}
    share = sheet.results["act_saturating_share"]
    sigma = math.sqrt(share * (1 - share) / 4096)
    assert abs(given["s_sat_g"] - share) <= 4 * sigma and abs(given["s_sat_t"] - share) <= 4 * sigma


@pytest.mark.parametrize("rule", ["up", "nearest", "floor", "ocp-mx"])
def test_fp8_scale_rules_against_the_emulation(variant, rule):
    """The closed forms (pinned in the question file) against the shared emulation's scale rules over 20,000 blocks
    whose amax spans 8 binades; the OCP rule's landing range [256, 512) is the MX spec's 2^(floor(log2 amax) − 8)."""
    solution = variant(f"fp8-scale-formats@default+mx_rule={rule}")
    rng = np.random.default_rng(0)
    amax = np.exp2(rng.uniform(0, 8, 20_000))
    landing = amax / amax_scale(amax, E4M3, rule)
    assert np.max(landing) / 448 == pytest.approx(solution.sheet.results["act_overshoot"], rel=1e-3)
    assert np.mean(landing > 448) == pytest.approx(solution.sheet.results["act_saturating_share"], abs=0.01)
    if rule == "ocp-mx":
        assert np.all((landing >= 256) & (landing < 512))
    # The prompt prints the rule the key applies, not its slug ("the ocp-mx rule").
    assert f": {RULE_TEXT[rule]}." in solution.prompt and rule + " rule" not in solution.prompt


RULE_TEXT = {"ocp-mx": "OCP MX's 2^(⌊log2 amax⌋ − 8)", "up": "2^⌈log2(amax/448)⌉, rounded up",
             "nearest": "2^round(log2(amax/448))", "floor": "2^⌊log2(amax/448)⌋, rounded down"}


@pytest.mark.parametrize("code", ["default", "default+discordant=4+delta=2", "default+discordant=10+delta=0.5"])
def test_fp8_scale_formats_gate_size_against_a_paired_eval(variant, code):
    """The gate's closed form against the test it sizes: n prompts, each discordant with probability d, a
    discordant one a loss with probability (1 + Δ/d)/2; one-sided McNemar (normal form) at 5% fires ~80% of the
    time at the drop and ~5% with no drop."""
    solution = variant(f"fp8-scale-formats@{code}")
    params = {param.name: param.value for param in solution.params}
    d, delta, n = params["discordant"], params["delta"], round(solution.sheet.results["eval_prompts"])
    rng = np.random.default_rng(3)

    def fires(drop: float) -> float:
        discordant = rng.binomial(n, d, 20_000)
        losses = rng.binomial(discordant, 0.5 * (1 + drop / d))
        net = (2 * losses - discordant) / n
        return float(np.mean(net > 1.6449 * np.sqrt(discordant) / n))

    assert fires(delta) == pytest.approx(0.80, abs=0.02)
    assert fires(0.0) == pytest.approx(0.05, abs=0.01)


def test_double_rounding_costs_three_decibels():
    """Re-rounding E4M3 values onto a grid shifted by a random non-power-of-two factor doubles the noise."""
    rng = np.random.default_rng(1)
    x = np.exp2(rng.uniform(-4, 4, 20_000)) * rng.choice((-1.0, 1.0), 20_000)
    once = quantize(x, E4M3)
    shift = np.exp2(rng.uniform(0, 1, 20_000))
    twice = quantize(once * shift, E4M3) / shift
    assert sqnr_db(x, once) - sqnr_db(x, twice) == pytest.approx(10 * math.log10(2), abs=0.3)
    # And the closed-form normal-range SQNR is what log-uniform significands give.
    assert sqnr_db(x, once) == pytest.approx(10 * math.log10(12 * 4**3 * 3 / (2 * math.log(2))), abs=0.3)


def test_fp8_scale_formats_simulation(variant):
    """The variant's own emulation: FP32 scales per 128 near the closed form, the conversion 3-4.5 dB
    below it, round-up scales never saturating."""
    for code in ("default", "default+mx_rule=up", "default+mx_rule=up+act_block=128"):
        given = {g.symbol: g.value for g in variant(f"fp8-scale-formats@{code}").sheet.givens}
        assert given["S_ref_g"] == pytest.approx(32.21, abs=1.5)
        assert 3.0 <= given["S_ref_g"] - given["S_conv_g"] <= 4.5
        if "up" in code:
            assert given["s_sat_g"] == given["s_sat_t"] == 0
            assert abs(given["S_ref_g"] - given["S_pool_g"]) < 2  # the same relative grid at any scale


# --- fp8-attention-quant-points ------------------------------------------------------------


def test_fp8_attention_words_pin_the_model_hints_give_the_method(variant):
    """r4 re-derived the flushed mass on the normalised softmax (68%, 'probabilities' everywhere), ε as 2^-4/√3
    and the misplaced share as δs itself: the words now pin the reading the key takes (P as the kernel holds it,
    its row max at one; the expected largest of T; ε as a given; total variation; a truncating accumulator),
    and the hints keep the method (the Gumbel correction, 8 ln 2). The recall comes before the keys and the
    flush are explained; the opening asks only the accumulator (read-RD: stage 1 leaked all three mechanisms), and
    names neither the keys nor P (read3-R2: "quantizes K and P" gave away two of the three points the recall asks).
    The row max is said (read3-R2: the expected largest of T and the bare β√(2 ln T) part by 2-3x in the flushed
    mass): the interviewer gives it in nats, the Gumbel mean of the largest of T to three figures."""
    solution = variant("fp8-attention-quant-points@default")
    stages = solution.question.stages
    said = " ".join(stage.say for stage in stages)
    assert not any(word in said for word in ("Gumbel", "log-uniform", "8 ln 2"))
    labels = " ".join(p.label for p in solution.question.parameters) + " ".join(
        a.label for a in solution.question.answers)
    for pin in ("row max at one", "expected largest of T", "RMS relative rounding error", "total variation",
                "truncating", "round to nearest"):
        assert pin in labels, pin
    assert stages[1].kind == "recall" and set(stages[0].ask) == {"acc_error", "acc_error_typical"}
    opening = stages[0].say.replace("\n", " ")
    assert not any(word in opening for word in ("key", " K ", "K and P", " P", "P·V", "exp", "softmax", "score"))
    assert "{row_max}" in stages[2].say and "{row_max}" in stages[3].say
    assert "ln 4π − 2γ" in " ".join(solution.sheet.assumptions)
    from solvers.generators import gaussian_row_max
    for context, spread in ((4096, 1.2), (16384, 2.0), (65536, 1.2), (131072, 2.4)):
        z0 = math.sqrt(2 * math.log(context))
        gumbel = spread * (z0 - (math.log(math.log(context)) + math.log(4 * math.pi) - 0.5772156649 * 2) / (2 * z0))
        assert gaussian_row_max(None, context, spread) == pytest.approx(gumbel, rel=2e-3)
    assert solution.param("row_max").raw == gaussian_row_max(None, 4096, 1.2) == 4.38  # the file's default
    moved = variant("fp8-attention-quant-points@default+context=65536+score_spread=1.2+outlier=4")
    assert moved.param("row_max").raw == gaussian_row_max(None, 65536, 1.2) == 5.17  # drawn again with T
    assert any("8 ln 2" in hint for hint in stages[0].hints)
    assert "typical size" in said.replace("\n", " ")


@pytest.mark.parametrize("seed", [4, 21, *range(40)])
def test_fp8_attention_regime_ranks_graded_answers(variant, seed):
    """The first version ranked the accumulator by a typical error the candidate was never asked for (@4, @21:
    probabilities 12.4% and 15.7% against a 25% bound, key 'probabilities'): the ranked figures are all answers."""
    results = variant(f"fp8-attention-quant-points@{seed}").sheet.results
    shares = {"keys": results["key_misplaced"], "probabilities": results["p_flushed_mass"],
              "accumulator": results["acc_error_typical"]}
    assert results["regime"] == max(shares, key=shares.get)
    assert results["acc_error_typical"] == pytest.approx(results["acc_error"] / (8 * math.log(2)))


def test_fp8_attention_push_asks_what_moved(variant, catalog):
    """read3-R2: the push graded the typical accumulator error again where only β moved (@9601, @9602: the
    stage-1 key, unchanged). It asks the regime and the leading point's share now, the new leader's where it
    crosses: a share the candidate has not been shown for the pushed variant."""
    from solvers.interview import stage_run
    moved = 0
    for seed in (9601, 9602, 9603, 3, 5):
        solution = variant(f"fp8-attention-quant-points@{seed}")
        run = stage_run(solution, catalog, 3)
        assert run is not None and run.ask == ("regime", "lead_share")
        shares = {"keys": "key_misplaced", "probabilities": "p_flushed_mass", "accumulator": "acc_error_typical"}
        pushed = run.solution.expected
        assert pushed["lead_share"] == pushed[shares[pushed["regime"]]]
        moved += all(pushed["lead_share"] != solution.expected[key] for key in shares.values())
    assert moved >= 4


def test_fp8_attention_flush_rule_is_the_cast():
    """The simulation counts P as flushed at or below 2^-10; the emulated cast sends exactly those to zero."""
    p = np.exp(-np.random.default_rng(0).uniform(0, 12, 20_000))
    p = np.concatenate([p, [2.0**-10, np.nextafter(2.0**-10, 1)]])
    assert np.array_equal(quantize(p, E4M3) == 0, p <= E4M3.min_subnormal / 2)


@pytest.mark.parametrize("code", ["default", "default+score_spread=2.4+outlier=20",
                                  "default+context=16384+outlier=4+score_spread=2", "default+outlier=20",
                                  "default+context=65536+score_spread=1.2+outlier=4",
                                  "default+context=131072+outlier=6"])
def test_fp8_attention_simulation_matches_the_closed_forms(variant, code):
    sheet = variant(f"fp8-attention-quant-points@{code}").sheet
    given, results = {g.symbol: g.value for g in sheet.givens}, sheet.results
    # Keys (up to 4,096 tokens, 16 query rows): misplaced mass ≈ δs/√(2π); per-channel no better than per-tensor;
    # centring leaves β·ε.
    assert given["tv_K_tensor"] == pytest.approx(results["key_misplaced"], rel=0.3)
    assert given["tv_K_centred"] == pytest.approx(results["key_score_error_centred"] / math.sqrt(2 * math.pi),
                                                  rel=0.3)
    assert 0.6 < given["tv_K_channel"] / given["tv_K_tensor"] < 1.6
    # P: the mean flushed mass over 16 rows or more against the tilted-Gaussian estimate at the mean max, within
    # 10^0.35: each row's own max moves its flushed mass a lot, and where the mass is small the rows with a high
    # max lift the mean past the typical row's (0.78% against 0.38% at β = 1.2 over 64K).
    if results["p_flushed_mass"] > 1e-3:
        assert abs(math.log10(given["f_P_sim"] / results["p_flushed_mass"])) < 0.35
    assert given["f_P448_sim"] < given["f_P_sim"] / 10 or given["f_P_sim"] < 1e-4
    # Accumulator, chained over the whole context: its worst channel under the bound, the channels' mean near the
    # typical T/32·2^-13/(8 ln 2); promoted, under the promoted bound.
    bound = given["T"] / 32 * 2**-13
    assert results["acc_error"] == pytest.approx(bound)
    assert given["e_acc_max_sim"] <= bound
    assert given["e_acc_sim"] == pytest.approx(results["acc_error_typical"], rel=0.3)
    assert given["e_acc_p_sim"] <= given["N_c"] / 32 * 2**-13


def test_fp8_attention_simulation_ranks_the_points_as_the_key_does(variant):
    """bank-review-2: the worked solution's simulation (64 tokens of keys, the accumulator cut at 16K) ranked the
    points differently from the key in 53 of 200 variants, the default included. Now it runs at the context
    (keys up to 4,096 tokens, where the softmax weights a dozen tokens or more at the largest spread drawn), the
    key refuses a leader within 1.45x of the runner-up, and the shown simulation puts the same point first in
    every draw, by a clear margin over the runner-up in most."""
    clear = 0
    for seed in range(60):
        sheet = variant(f"fp8-attention-quant-points@{seed}").sheet
        given, results = {g.symbol: g.value for g in sheet.givens}, sheet.results
        simulated = {"keys": given["tv_K_tensor"], "probabilities": given["f_P_sim"], "accumulator": given["e_acc_sim"]}
        closed = {"keys": results["key_misplaced"], "probabilities": results["p_flushed_mass"],
                  "accumulator": results["acc_error_typical"]}
        assert max(simulated, key=simulated.__getitem__) == results["regime"] == max(closed, key=closed.__getitem__)
        top, second = sorted(closed.values(), reverse=True)[:2]
        assert top >= 1.45 * second, seed
        ranked = sorted(simulated.values(), reverse=True)
        clear += ranked[0] >= 1.2 * ranked[1]
    assert clear >= 45


def test_fp8_fast_cast_is_the_shared_cast():
    """The key simulation's fast E4M3 cast (float64 bits rounded with an add and a mask) gives fp8.quantize's
    value for every input: normals, the midpoints between grid values (ties to even), subnormals, saturation."""
    from solvers.topics.quantization.fp8_attention_quant_points import _e4m3
    rng = np.random.default_rng(3)
    grid = np.unique(np.abs(quantize(np.linspace(-448, 448, 200_001), E4M3)))
    x = np.concatenate([rng.standard_normal(200_000) * np.exp(rng.uniform(-14, 7, 200_000)),
                        (grid[1:] + grid[:-1]) / 2, -(grid[1:] + grid[:-1]) / 2, grid, [0.0, -0.0, 1e300, -1e300]])
    for scale in (1.0, 2.0**-5, 3.7, amax_scale(20.0, E4M3)):
        assert np.array_equal(_e4m3(x, scale), quantize(x, E4M3, scale))


def test_fp8_attention_regime_is_the_largest_share(variant):
    for seed in range(40):
        sheet = variant(f"fp8-attention-quant-points@{seed}").sheet
        regime = sheet.regime
        assert regime.position.value >= regime.boundary.value
        # Per-channel scales do not help in FP8 (a relative grid): where the offsets matter (α ≥ 5), the
        # simulation's per-channel keys are no 2× better than per-tensor ones (below, both sit in the noise).
        given = {g.symbol: g.value for g in sheet.givens}
        assert given["alpha"] < 5 or given["tv_K_tensor"] < 2 * given["tv_K_channel"]


def test_fp8_attention_options_on_their_line_are_not_listed(variant):
    """An option judged against a figure near its line is not listed: the mean cut √(1 + 4α²/128) within 15% of
    2.5x (α = 13: 2.506x, α = 14: 2.67x; read-RD: the simulation's cut runs 12-14% under the closed form, 2.17x
    at α = 13), judged again at α = 16 (3x). The DeepSeek-V3 option (a model bound against a measured maximum,
    2.022% against 2% at @9402) and the promoted bound under 0.1% (0.0977% at N_c = 256, always true at 128) are
    gone."""
    mean = "subtracting the keys' channel means would cut the key score error by more than {mean_cut}"
    for alpha in (13, 14):
        on_line = variant(f"fp8-attention-quant-points@default+outlier={alpha}").sheet
        assert on_line.results["fixes"][mean] is None and mean not in _listed_fixes(variant, f"default+outlier={alpha}")
    assert variant("fp8-attention-quant-points@default").sheet.results["fixes"][mean] is True
    options = variant("fp8-attention-quant-points@default").question.answer("fixes").pool
    assert not any("DeepSeek" in o or "keeps its error bound" in o for o in options)


def _listed_fixes(variant, code: str) -> tuple[str, ...]:
    return variant(f"fp8-attention-quant-points@{code}").shown["fixes"]
