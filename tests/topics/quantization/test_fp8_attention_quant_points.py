"""fp8-attention-quant-points: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.formulas.fp8 import E4M3, amax_scale, quantize


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
    assert "half a unit" in stages[0].say.replace("\n", " ")  # read7: the words state the typical error's model


def test_fp8_attention_typical_error_grades_what_a_candidate_derives(variant):
    """read7: "half a unit per chop, the sum half-grown" gives the bound over 4 (no E[1/f] = 1/(2 ln 2) factor),
    1.39x the key, inside 10^0.15 (the reader took it for wrong); the words now state that model, and the test
    keeps the bound over 4 and over 6 passing while the bound itself (5.5x) and over 2 stay wrong."""
    solution = variant("fp8-attention-quant-points@default")
    spec = next(a for a in solution.question.answers if a.key == "acc_error_typical")
    key, bound = solution.expected["acc_error_typical"], solution.expected["acc_error"]
    for guess, ok in ((bound / 4, True), (bound / 6, True), (bound, False),
                      (bound / 2, False)):
        assert (spec.error_between(guess, key) <= spec.tolerance) == ok, guess


@pytest.mark.parametrize("seed", [12011, 12012])
def test_fp8_attention_fix_names_the_variants_promotion_interval(variant, seed):
    """read7 @12011/@12012: the accumulator's fix said "every 128 tokens" (DeepSeek-V3's figure, typed) where the
    variant's N_c is 256 or 512: the interval is the variant's."""
    solution = variant(f"fp8-attention-quant-points@{seed}")
    text = str(solution.sheet.regime)
    n_c = int(solution.param("promote").raw)
    assert n_c != 128
    assert "every 128 tokens" not in text and (solution.sheet.results["regime"] != "accumulator"
                                                or f"every {n_c} tokens" in text)


def test_fp8_attention_simulation_stays_small():
    """read7: this question's self-test was the bank's slowest (the simulation ran 16 rows over 4,096 keys and
    262,144 scores per variant, in every pushed and searched variant too): half the key tokens and scores."""
    from solvers.topics.quantization import fp8_attention_quant_points as solver
    assert solver.KEY_ROWS * solver.KEY_TOKENS <= 16 * 2048
    assert solver.P_VALUES <= 131072


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
    # Keys (up to 2,048 tokens, 16 query rows): misplaced mass ≈ δs/√(2π); per-channel no better than per-tensor;
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
    (keys up to 2,048 tokens since read7, 16 query rows), the
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
