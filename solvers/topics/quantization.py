"""Quantisation numerics: what FP8's scale does to rounding and to clipping (fp8-kv-cache), why
keys and values want different scale layouts (kv-quant-keys-vs-values), what FP32 against
power-of-two block scales means for a model served on both GPU generations (fp8-scale-formats),
and the three places FP8 attention loses accuracy (fp8-attention-quant-points).

The simulations run on the shared FP8 emulation (solvers/topics/fp8.py), seeded from the
variant's own parameters, so a variant shows the same numbers every time it is solved.
"""
from __future__ import annotations

import math
import zlib
from fractions import Fraction
from typing import TypedDict

import numpy as np
import sympy

from solvers.derivation import Sheet, Side, max_of
from solvers.topics.common import dtype_bytes
from solvers.topics.fp8 import E4M3, FORMATS, amax_scale, chop_mask, clipped, quantize, quantize_blocks, sqnr_db
from solvers.topics.kvcache import kv_bytes_per_token_given
from solvers.units import format_number


def variant_rng(p, *names: str) -> np.random.Generator:
    """A generator seeded from these parameters' values: the same variant draws the same sample,
    a follow-up that moves one parameter draws a new one."""
    key = "|".join(f"{name}={getattr(getattr(p, name), 'name', getattr(p, name))}" for name in names)
    return np.random.default_rng(zlib.crc32(key.encode()))


def _pct(value: float) -> str:
    return format_number(100 * value, 3) + "%"


# --- fp8-kv-cache ---------------------------------------------------------------------------

PAIRS = 2000  # simulated (calibration, context) pairs
BULK = 4096  # cache entries in the rounding emulation
SCALE_STEP = 4  # the emulation's other scale: four times larger


def _max_of_draws(rng: np.random.Generator, draws: int, size: int, tail: float) -> np.ndarray:
    """The largest of `draws` magnitudes with a Pareto tail P(|x| > t) = t^-tail (t >= 1), sampled
    directly from its distribution (1 - V^(1/draws))^(-1/tail): a 128K context costs one draw."""
    return (-np.expm1(np.log(rng.random(size)) / draws)) ** (-1 / tail)


def _rounding_rms(x: np.ndarray, fmt, scale: float) -> tuple[float, float]:
    """RMS relative rounding error of the entries that stay normal and unclipped at this scale, and
    the share that falls below the normal range (subnormal or flushed to zero)."""
    q = quantize(x, fmt, scale)
    magnitude = np.abs(x) / scale
    normal = (magnitude >= fmt.min_normal) & ~clipped(x, fmt, scale)
    rms = float(np.sqrt(np.mean(((q[normal] - x[normal]) / x[normal]) ** 2)))
    return rms, float(np.mean(magnitude < fmt.min_normal))


def fp8_kv_cache(p, s: Sheet) -> None:
    """A per-layer static FP8 scale set from a calibration amax: rounding is scale-invariant in the
    normal range, clipping is not, and a long context almost surely holds a value past the clip point."""
    fmt = FORMATS[p.kv_format]
    kv_bf16 = kv_bytes_per_token_given(s, p.model, dtype_bytes("bf16"), "bf16")
    N = s.param("N", "context")
    n = s.param("n", "calib_tokens")
    h = s.param("h", "headroom")
    nu = s.param("nu", "tail_index")
    b16 = s.given("b_bf16", dtype_bytes("bf16"), "B", "bytes per bf16 value")
    b8 = s.given("b_fp8", 1, "B", f"bytes per {fmt.name} value")
    s.step("kv_context_fp8", f"KV cache of the context in {fmt.name}", "M_fp8", N * kv_bf16 * b8 / b16, "GiB",
           f"{format_number(p.context)} tokens at half the bf16 bytes: one byte per value, the per-layer scales "
           "are a few floats; every decode step reads half the bytes too")

    # Rounding: the scale slides values along a grid whose relative spacing does not depend on where.
    m = s.given("m", fmt.mantissa_bits, "", f"fraction bits of {fmt.name}")
    s.step("rounding_bound", "Unit roundoff: the bound on a normal value's relative rounding error", "eps",
           2 ** -(m + 1), "%",
           f"half a unit in the last place of a significand in [1, 2): {fmt.name}'s exponent, and so the scale, "
           "drops out (the supremum of |fl(x) − x|/|x| is u/(1 + u), a hair under u, at x just past 1 + u)")
    top = s.given("x_max", fmt.max, "", f"largest {fmt.name} value")
    bottom = s.given("x_min", fmt.min_normal, "", f"smallest normal {fmt.name} value")
    s.step("normal_binades", "Span of the normal range", "R", sympy.log(top / bottom, 2), "binades",
           "how far the scale can slide a value before it leaves the range where that bound holds")

    # Clipping: the scale fixes the largest value that fits, h times the calibration max.
    s.step("", "Chance the context holds a value past the calibration max itself", "P_1", N / (N + n), "%",
           "of N + n exchangeable draws each is as likely as any other to be the largest: exact for any "
           "i.i.d. distribution")
    headroom_why = ("with no headroom the clip point is the calibration max itself: the same exact chance"
                    if p.headroom == 1 else
                    f"a power-law tail makes a value {format_number(p.headroom)}× past the calibration max "
                    f"{format_number(p.headroom)}^{format_number(p.tail_index)} times rarer: the headroom counts as "
                    "that many times the calibration tokens")
    P = s.step("clip_probability", "Chance one layer's keys in the context pass their clip point", "P_clip",
               N / (N + n * h**nu), "%", headroom_why)
    N_even = s.step("even_context", "Context at which clipping turns more likely than not", "N_half", n * h**nu,
                    "tokens", "P_clip = 1/2 where N = n·h^ν")
    r = s.step("clip_ratio", "Typical largest value of the context over the clip point", "r_clip",
               (N / n) ** (1 / nu) / h, "x",
               "the largest of N draws sits where the tail is 1/N, so maxima grow as N^(1/ν): (N/n)^(1/ν) over "
               "the calibration max, divided by the headroom")
    s.step("", "What the context's largest value loses to saturation", "loss", max_of(0, 1 - 1 / r), "%",
           "it is stored as the clip point: 1 − 1/r of it is gone, against a rounding error of at most ε")

    _fp8_kv_emulation(s, p, fmt)
    _fp8_kv_levers(s, p, fmt)

    s.assume("One static scale per layer for keys and one for values (vLLM's k_scale and v_scale): the clip point "
             "is headroom × the calibration amax. vLLM's calculate_kv_scales takes amax/200 for keys and "
             "amax/100 for values from the first batch it sees (headroom 2.24 and 4.48 in E4M3); a calibrated "
             "checkpoint maps the amax to the format's max (headroom 1). The chance is one scale's: with a key and a "
             "value scale in each of L layers the chance that some scale clips is higher still. Dynamic per-token "
             "scales remove clipping altogether, at a scale per token and head stored beside the cache.")
    s.assume("Cache entries i.i.d. across tokens, with a power-law tail P(|x| > t) ∝ t^-ν; the channels cancel "
             "(n·d calibration values against N·d). At headroom 1 the clip probability is exact for any "
             "continuous distribution; with headroom it is the power-law tail's large-sample limit. Real caches "
             "drift with position and topic, which makes a short calibration less representative, not more.")
    s.assume("Saturating conversion, as vLLM's quantisation kernels clamp to ±max before converting: a value past "
             "the clip point is stored as ±max·scale, not as NaN.")
    s.slip("x2: the bf16 bytes kept", 2.0, on="kv_context_fp8")
    s.slip("a whole unit in the last place instead of half", 2.0, on="rounding_bound")
    s.slip("the headroom forgotten: N/(N + n)", s.evaluate(N / (N + n)) / s.value(P), on="clip_probability")
    s.slip("the ν-th root forgotten: maxima taken to grow as N", s.evaluate((N / n) / h) / s.value(r), on="clip_ratio")
    _fp8_kv_regime(s, p, N, N_even, r)


def _fp8_kv_emulation(s: Sheet, p, fmt) -> None:
    """The seeded emulation: sampled calibration and context maxima for the clip share, and a sample
    of entries rounded at the calibrated scale and at one SCALE_STEP times larger."""
    rng = variant_rng(p, "kv_format", "context", "calib_tokens", "headroom", "tail_index")
    calib = _max_of_draws(rng, p.calib_tokens, PAIRS, p.tail_index)
    context = _max_of_draws(rng, p.context, PAIRS, p.tail_index)
    s.given("P_sim", float(np.mean(context > p.headroom * calib)), "%",
            f"seeded simulation, {PAIRS:,} calibration and context maxima sampled from the tail (seed from the "
            "variant): share where the context's max passes the clip point")
    s.given("r_sim", float(np.median(context / (p.headroom * calib))), "x",
            "the same simulation: median of the context's max over the clip point")
    # Entries with the same tail and a bulk near zero (Pareto II), at the scale a typical calibration sets.
    entries = rng.choice((-1.0, 1.0), BULK) * (rng.random(BULK) ** (-1 / p.tail_index) - 1)
    scale = p.headroom * float(np.median(calib)) / fmt.max
    rms, low = _rounding_rms(entries, fmt, scale)
    rms_up, low_up = _rounding_rms(entries, fmt, SCALE_STEP * scale)
    s.given("e_sim", rms, "%", f"seeded {fmt.name} emulation, {BULK:,} entries at the calibrated scale: RMS relative "
            f"rounding error of the normal ones ({_pct(low)} fell below the normal range)")
    s.given("e_sim_4x", rms_up, "%", f"the same entries at a scale {SCALE_STEP}× larger: the same error within "
            f"sampling noise ({_pct(low_up)} below the normal range)")


def _fp8_kv_levers(s: Sheet, p, fmt) -> None:
    """Which single changes leave this context more likely than not to fit under the clip point:
    N < n·h^ν after the change, decided in exact fractions (the parameters are short decimals and ν an
    integer). Changes both ways, so the set that holds moves with the variant on either side; the other
    format's rounding and range, one of which always holds, keep a true and a false option in every draw."""
    N, n, h, nu = Fraction(p.context), Fraction(p.calib_tokens), Fraction(str(p.headroom)), int(p.tail_index)

    def say(option: str, context: Fraction, calib: Fraction, headroom: Fraction, why: str) -> None:
        even = calib * headroom**nu
        s.judge("levers", option, context < even, f"{why}: clipping turns even at {format_number(float(even), 3)} "
                f"tokens against a context of {format_number(float(context), 3)}")

    say("twice the headroom (the same calibration) leaves clipping less likely than not", N, n, 2 * h,
        "the clip point doubles, worth 2^ν times the calibration tokens")
    say("half the headroom (the same calibration) leaves clipping less likely than not", N, n, h / 2,
        "the clip point halves, worth 2^-ν times the calibration tokens")
    say("16 times the calibration tokens leave clipping less likely than not", N, 16 * n, h,
        "16 times the calibration draws")
    say("a context an eighth as long leaves clipping less likely than not", N / 8, n, h,
        "an eighth of the draws that could pass the clip point")
    say("a context 8 times as long leaves clipping less likely than not", 8 * N, n, h,
        "8 times the draws that could pass the clip point")
    say("the other FP8 format, same calibration and headroom, leaves clipping less likely than not", N, n, h,
        "the scale maps headroom × amax onto the format's max in either format, so the clip point and the chance "
        "of passing it stay where they are; only the rounding changes")
    other = FORMATS["e5m2" if fmt is E4M3 else "e4m3"]
    s.judge("levers", "the other FP8 format halves the unit roundoff", other.mantissa_bits == fmt.mantissa_bits + 1,
            f"{other.name} keeps {other.mantissa_bits} fraction bits against {fmt.name}'s {fmt.mantissa_bits}: "
            f"u = 2^-{other.mantissa_bits + 1} against 2^-{fmt.mantissa_bits + 1}")
    widen = math.log2(other.max / other.min_normal) - math.log2(fmt.max / fmt.min_normal)
    s.judge("levers", "the other FP8 format widens the normal range by more than 10 binades", widen > 10,
            f"{other.name}'s normal range spans {format_number(math.log2(other.max / other.min_normal), 3)} binades "
            f"against {format_number(math.log2(fmt.max / fmt.min_normal), 3)}: "
            f"{format_number(abs(widen), 3)} {'more' if widen > 0 else 'fewer'}")


def _fp8_kv_regime(s: Sheet, p, N, N_even, r) -> None:
    ratio, even = format_number(s.value(r), 3), format_number(s.value(N_even), 3)
    probability = _pct(s.number("clip_probability"))
    s.regime_by(N, N_even, tie="above", above=Side(
        "clipping-dominated",
        f"A {format_number(p.context)}-token context passes the clip point with probability {probability} "
        f"(even at {even} tokens), and its largest value typically lands {ratio}× past it: saturation cuts the "
        f"outliers attention leans on, an error far above the rounding bound. Only prompts shorter than {even} "
        "tokens usually stay under it, which is why FP8 KV looks free on short prompts.",
        "Below the even context the clip point usually holds: the cache's error is rounding, bounded by ε "
        "whatever the scale, and more headroom costs nothing until the bulk slides out of the normal range."),
        below=Side(
        "safe",
        f"Clipping turns even only at {even} tokens: this context passes the clip point with probability "
        f"{probability}, and its largest value typically sits at {ratio}× the clip point. The error is rounding, "
        "bounded by ε and the same at any scale within the normal range.",
        "Past the even context the clip point is usually crossed, and each doubling of the context raises the "
        "typical outlier by 2^(1/ν) over it: longer contexts, not the format, are what break a static scale."))


# --- kv-quant-keys-vs-values ----------------------------------------------------------------

KIVI_GROUP = 32  # KIVI's group: 32 tokens per key channel, 32 channels per value token
OUTLIER_CHANNELS = 4  # key channels that sit at ±α (half each way), as KIVI's plots show
SIM_TOKENS = 256
SIM_QUERIES = 4


def _int_quantize(x: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Asymmetric min-max integer quantisation along `axis` (KIVI's quantiser): 2^b levels spanning
    each group's own range, a zero point at its minimum."""
    low, high = np.min(x, axis=axis, keepdims=True), np.max(x, axis=axis, keepdims=True)
    step = (high - low) / (2**bits - 1)
    return np.rint((x - low) / step) * step + low


def _grouped(x: np.ndarray, bits: int, group: int) -> np.ndarray:
    """x (tokens × channels) quantised per channel over groups of `group` tokens."""
    tokens, channels = x.shape
    blocks = x.reshape(tokens // group, group, channels)
    return _int_quantize(blocks, bits, axis=1).reshape(tokens, channels)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = q @ k.T / np.sqrt(k.shape[1])
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ v, p


def _kv_roads_simulation(p) -> dict[str, float]:
    """Seeded attention over SIM_TOKENS tokens: keys with outlier channels at ±α, values without;
    the RMS output error per element from each tensor's quantisation alone, per layout."""
    rng = variant_rng(p, "model", "bits", "outlier", "q_scale")
    d, bits = p.model.head_dim, int(p.bits)
    offsets = np.zeros(d)
    offsets[:OUTLIER_CHANNELS] = p.outlier * np.resize([1.0, -1.0], OUTLIER_CHANNELS)
    k = rng.uniform(-1, 1, (SIM_TOKENS, d)) + offsets
    v = rng.uniform(-1, 1, (SIM_TOKENS, d))
    q = p.q_scale * rng.standard_normal((SIM_QUERIES, d))
    exact, probs = _attention(q, k, v)

    def rms(k_used, v_used) -> float:
        return float(np.sqrt(np.mean((_attention(q, k_used, v_used)[0] - exact) ** 2)))

    k_token, k_channel = _int_quantize(k, bits, axis=1), _grouped(k, bits, KIVI_GROUP)
    v_groups = v.reshape(SIM_TOKENS, d // KIVI_GROUP, KIVI_GROUP)  # per token, 32 channels a scale (KIVI)
    v_token = _int_quantize(v_groups, bits, axis=2).reshape(v.shape)
    v_channel = _grouped(v, bits, KIVI_GROUP)
    return {"keys_token": rms(k_token, v), "keys_channel": rms(k_channel, v),
            "values_token": rms(k, v_token), "values_channel": rms(k, v_channel),
            "both_token": rms(k_token, v_token), "kivi": rms(k_channel, v_token),
            "averaging": float(np.mean(np.sqrt(np.sum(probs**2, axis=1))))}


def kv_quant_keys_vs_values(p, s: Sheet) -> None:
    """Why keys want per-channel scales and values per-token ones, and what per-channel keys cost to
    serve: a group of tokens to scale over, so the newest tokens wait in full precision."""
    b = s.param("b", "bits")
    alpha = s.param("alpha", "outlier")
    beta = s.param("beta", "q_scale")
    levels = s.step("", "Quantisation levels minus one", "L", 2**b - 1, "", "min-max integer quantisation: 2^b levels")
    e_tok = s.step("key_error_token", "Key error per element, per-token scales", "e_K_tok",
                   2 * (alpha + 1) / (levels * sympy.sqrt(12)), "",
                   "a token's range runs from −α−1 to α+1 because its outlier channels sit at ±α: every channel "
                   "of it gets that coarse step; a uniform error of step/√12")
    e_ch = s.step("key_error_channel", "Key error per element, per-channel scales", "e_K_ch",
                  2 / (levels * sympy.sqrt(12)), "",
                  "each channel spans only its own ±1 around its mean, outlier channels included: the zero point "
                  "absorbs the offset")
    e_v = s.step("value_error", "Value error per element (per token or per channel)", "e_V",
                 2 / (levels * sympy.sqrt(12)), "", "values have no outlier channels: ±1 either way")
    sigma_v = s.step("", "RMS of a value entry", "sigma_v", 1 / sympy.sqrt(3), "", "uniform over ±1")
    # Roads: δo = Σ p_j δv_j (linear), and δo = Σ p_j δs_j (v_j − o) with δs_j = q·δk_j/√d (through softmax).
    R_tok = s.step("roads_token", "Key road over value road, per-token keys", "R_tok", beta * sigma_v * e_tok / e_v,
                   "x", "both roads average over the attended tokens (√Σp²); the key road carries |q| per √d and "
                   "the spread of the values the softmax moves between")
    R_ch = s.step("roads_channel", "Key road over value road, per-channel keys", "R_ch", beta * sigma_v * e_ch / e_v,
                  "x", "the same with the per-channel key error: what is left is |q| against the values' spread")
    sim = _kv_roads_simulation(p)
    _kv_roads_givens(s, sim)
    share, compression = _kv_bookkeeping(s, p, b)
    _kv_quant_select(s, p, sim, alpha=alpha, share=share, compression=compression, roads=R_ch, roads_token=R_tok)

    s.assume(f"Keys: {OUTLIER_CHANNELS} of the {p.model.head_dim} channels sit at ±α (half each way), every entry "
             "spread uniformly over ±1 about its channel's mean; values the same with no outlier channels; query "
             "entries Gaussian with RMS β. Real key outliers (KIVI, KVQuant) are channel-fixed the same way. A "
             "per-token key scale spans the head's channels, outliers included, as any group holding one would.")
    s.assume("The errors are the step/√12 estimate with each group's range the spread's full width (±1, or "
             "±(α + 1) for a token's keys), as the prompt asks; a group of 32 uniform entries spans about ±0.94, "
             "some 6% less. The estimate assumes the entries spread across the step, and the key road is first order "
             "in δs. Both fail for per-token keys at few bits: the ±1 channels all land on the inner levels (at 2 "
             "bits and α = 10 the exact RMS is about 2.9 against 2.1), the score noise outgrows the scores, and the "
             "simulated output error exceeds the estimate; the ordering only sharpens.")
    s.assume(f"KIVI's layout: keys per channel over groups of {KIVI_GROUP} tokens, values per token over groups of "
             f"{KIVI_GROUP} channels, an fp16 scale and zero point per group; the newest R tokens stay in bf16 "
             "until a full group can be quantised.")
    s.slip("√12 left out (the step taken as the error)", float(np.sqrt(12)),
           on=("key_error_token", "key_error_channel", "value_error"))
    s.slip("the scale and zero point forgotten", s.evaluate(b / (b + 2 * 16 / KIVI_GROUP)), on="bits_effective")
    _kv_roads_regime(s, R_ch)



def _kv_roads_givens(s: Sheet, sim: dict[str, float]) -> None:
    source = f"seeded simulation, {SIM_QUERIES} queries over {SIM_TOKENS} tokens (seed from the variant)"
    s.given("sqrt_sum_p2", sim["averaging"], "", f"{source}: √Σp², the averaging both roads share")
    for symbol, name, label in (("o_K_tok", "keys_token", "keys per token, values exact"),
                                ("o_K_ch", "keys_channel", "keys per channel, values exact"),
                                ("o_V_tok", "values_token", "values per token, keys exact"),
                                ("o_V_ch", "values_channel", "values per channel, keys exact"),
                                ("o_tok", "both_token", "both per token"),
                                ("o_KIVI", "kivi", "keys per channel, values per token (KIVI)")):
        s.given(symbol, sim[name], "", f"{source}: RMS output error per element, {label}")


def _kv_bookkeeping(s: Sheet, p, b: sympy.Symbol) -> tuple[sympy.Symbol, sympy.Symbol]:
    """What per-channel keys cost to serve: a group of G tokens per scale, so the newest R tokens wait
    in bf16; the scales themselves; the cache of one sequence."""
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes("bf16"), "bf16")
    G = s.given("G", KIVI_GROUP, "", "elements per scale group (KIVI)")
    R = s.param("R", "residual")
    T = s.param("T", "context")
    bits = s.step("bits_effective", "Bits per cached element, scales included", "b_eff", b + 2 * 16 / G, "",
                  "an fp16 scale and an fp16 zero point per group of G elements, on top of the b-bit codes")
    M = s.step("cache_per_sequence", "KV cache of one sequence", "M_seq", R * kv_tok + (T - R) * kv_tok * bits / 16,
               "MiB", "the residual window in bf16 (16 bits), the rest at b_eff bits: a key channel cannot be "
               "scaled until G tokens of it exist, so recent tokens wait unquantised")
    share = s.step("residual_share", "Share of that cache in the bf16 residual window", "s_R", R * kv_tok / M, "%",
                   "a fixed cost per sequence: large on short contexts, fading on long ones")
    return share, s.step("compression", "Compression: bf16 size over this cache", "C", T * kv_tok / M, "x",
                         "bf16 for every token, over the mix")


def _kv_quant_select(s: Sheet, p, sim: dict[str, float], *, alpha, share, compression, roads, roads_token) -> None:
    """Which statements hold for this variant, each decided on the sheet's exact values; the
    simulation's figures stand in the reasons as a check."""
    def result(key: str) -> float:
        return s.number(key)

    ratio = result("key_error_token") / result("key_error_channel")
    s.judge("facts", "per-channel keys cut the key error by more than 8×", s.compare(alpha + 1, 8) > 0,
            f"(α + 1) = {format_number(ratio, 3)}× smaller error per element")
    s.judge("facts", "the bf16 residual window holds more than a third of this sequence's cache",
            s.compare(share, sympy.Rational(1, 3)) > 0,
            f"{_pct(result('residual_share'))} of it")
    s.judge("facts", "the cache is under a quarter of its bf16 size", s.compare(compression, 4) > 0,
            f"{format_number(result('compression'), 3)}× smaller than bf16")
    s.judge("facts", "twice the query scale would make the key road outweigh the value road, even with per-channel "
            "keys", s.compare(2 * roads, 1) > 0,
            f"the ratio doubles to {format_number(2 * result('roads_channel'), 3)}")
    # Per-token keys at b + 3 bits against per-channel ones at b: the step shrinks with 2^b − 1, the range by α + 1.
    bits, alpha_value = int(p.bits), int(p.outlier)
    needed = (alpha_value + 1) * (2**bits - 1)
    s.judge("facts", "per-token key scales would match per-channel keys with 3 more bits",
            2 ** (bits + 3) - 1 >= needed,
            f"per-token keys need 2^b' − 1 ≥ (α + 1)(2^b − 1) = {needed} levels; {bits + 3} bits give "
            f"{2 ** (bits + 3) - 1}")
    # Exact in fractions, in bf16 tokens' worth: the window at 16 bits, the rest at b_eff = b + 2·16/G.
    T, R, b_eff = Fraction(p.context), Fraction(p.residual), bits + Fraction(2 * 16, KIVI_GROUP)
    whole = R + (T - R) * b_eff / 16
    saved = (R / 2) * (16 - b_eff) / 16 / whole
    s.judge("facts", "halving the bf16 window would shrink this sequence's cache by more than 10%",
            saved > Fraction(1, 10),
            f"{format_number(float(R / 2))} tokens move from 16 to {format_number(float(b_eff), 3)} bits: "
            f"{_pct(float(saved))} of the cache")
    # Independent roads add in quadrature: output error ∝ √(R² + 1) for either key layout.
    estimate = float(np.sqrt((result("roads_token") ** 2 + 1) / (result("roads_channel") ** 2 + 1)))
    s.judge("facts", "KIVI's layout leaves under a third of the output error of per-token scales for both",
            s.compare(roads_token**2 + 1, 9 * (roads**2 + 1)) > 0,
            f"the roads add in quadrature: √(R_tok² + 1)/√(R_ch² + 1) = {format_number(estimate, 3)}× (the "
            f"simulation: {format_number(sim['both_token'] / sim['kivi'], 3)}×)")


def _kv_roads_regime(s: Sheet, R_ch) -> None:
    one = s.given("parity", 1, "x", "the two roads equal")
    ratio = format_number(s.value(R_ch), 3)
    s.regime_by(R_ch, one, tie="above", above=Side(
        "keys-dominate",
        f"Even with per-channel keys the key road is {ratio}× the value road: the queries are sharp enough that "
        "a small score error moves the softmax more than a value error moves the sum. Spend extra bits on keys "
        "(K4V2 rather than 2/2).",
        "With softer attention the value road takes over once per-channel scales remove the outliers' step: the "
        "same bits on both are then the better split.",
        near=f"With per-channel keys the two roads are about even (the key road {ratio}× the value road): equal "
             "bits are close to balanced, and any sharper query makes keys the one to give more bits."),
        below=Side(
        "values-dominate",
        f"With per-channel keys the key road falls to {ratio}× the value road: the outlier channels' coarse step "
        "was the whole key problem. Equal bits on keys and values are balanced; more bits now help values.",
        "Sharper attention (a larger |q|) scales the key road and not the value road: past |q|·σ_v = 1 keys "
        "dominate again even per channel, and deserve the extra bits.",
        near=f"With per-channel keys the two roads are about even (the key road {ratio}× the value road): equal "
             "bits are close to balanced, though a slightly sharper query would make keys the one to favour."))


# --- fp8-scale-formats ----------------------------------------------------------------------

FORMAT_BLOCKS = 32  # blocks of 128 in the simulation: 4,096 values per distribution
SAT_BLOCKS = 4096  # blocks in the saturating-share sample: its binomial noise under 0.7 points
SAT_SHAPES = 256  # distinct blocks drawn for it, each placed at 16 magnitudes
HOPPER_BLOCK = 128  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks, FP32 scales
MX_BLOCK = 32  # OCP MX: 32 elements per E8M0 scale
SCALE_RULES = {  # each E8M0 rule, and where it lands a block's amax
    "ocp-mx": "2^(floor(log2 amax) − 8): amax lands in [256, 512)",
    "up": "2^ceil(log2(amax/448)): amax lands in (224, 448]",
    "nearest": "2^round(log2(amax/448)): amax lands in [448/√2, 448·√2)",
    "floor": "2^floor(log2(amax/448)): amax lands in [448, 896)",
}


def _scale_rule_steps(s: Sheet, rule: str, x_max) -> tuple[sympy.Symbol, sympy.Symbol]:
    """The worst factor by which a block's amax passes max, and the share of blocks it does, for the
    pool's E8M0 rule (the amax's position in its binade taken log-uniform)."""
    e = s.given("e_max", E4M3.max_exponent, "", "exponent of E4M3's largest binade (448 = 1.75·2^8)")
    if rule == "ocp-mx":
        over, share = 2 ** (e + 1) / x_max, 1 - sympy.log(x_max / 2**e, 2)
        why = "amax/2^floor(log2 amax) spans [1, 2) evenly in log: past 1.75 it lands beyond 448"
    elif rule == "up":
        over, share = sympy.Integer(1), sympy.Integer(0)
        why = "rounding the scale up never maps amax past 448"
    elif rule == "nearest":
        over, share = sympy.sqrt(2), sympy.Rational(1, 2)
        why = "half the time log2(amax/448) rounds down, and amax lands past 448"
    else:
        over, share = sympy.Integer(2), sympy.Integer(1)
        why = "rounding the scale down maps every amax at or past 448"
    overshoot = s.step("act_overshoot", "Worst landing of a block's amax, over max", "k_over", over, "x",
                       SCALE_RULES[rule])
    return overshoot, s.step("act_saturating_share", "Share of activation blocks whose amax saturates", "s_sat",
                             share, "%", why)


def _format_blocks(rng: np.random.Generator, tail: str, rows: int = FORMAT_BLOCKS,
                   width: int = HOPPER_BLOCK) -> np.ndarray:
    """`rows` rows of `width` (a token's channels), each row at its own magnitude over 8 binades."""
    shape = (rows, width)
    x = rng.standard_normal(shape) if tail == "gaussian" else rng.standard_t(3, shape)
    return x * np.exp2(rng.uniform(0, 8, (rows, 1)))


def _format_simulation(s: Sheet, p) -> dict[str, tuple[float, float]]:
    """Seeded E4M3 emulation on Gaussian and Student-t (3 dof) blocks: the Hopper reference (FP32
    scales per 128), this pool's activation path, and FP32-scaled weights re-rounded onto power-of-two
    scales; SQNR in dB and the share of blocks whose amax saturates. Returns (reference, pool) SQNR
    per distribution."""
    rng = variant_rng(p, "hopper_scales", "mx_rule", "act_block")
    found = {}
    for tail, tag, name in (("gaussian", "g", "Gaussian"), ("t3", "t", "Student-t (3 dof)")):
        x = _format_blocks(rng, tail)
        ref = quantize_blocks(x, E4M3, HOPPER_BLOCK, "fp32")
        pool = quantize_blocks(x, E4M3, p.act_block, p.mx_rule)
        # The saturating share on its own larger sample (a few dozen blocks would leave it several points off
        # the closed form): SAT_SHAPES blocks' amaxes, each at SAT_BLOCKS/SAT_SHAPES magnitudes over 8 binades.
        shapes = np.max(np.abs(_format_blocks(rng, tail, SAT_SHAPES, p.act_block)), axis=1)
        amax = np.repeat(shapes, SAT_BLOCKS // SAT_SHAPES) * np.exp2(rng.uniform(0, 8, SAT_BLOCKS))
        found[tag] = sqnr_db(x, ref), sqnr_db(x, pool), float(np.mean(clipped(amax, E4M3, amax_scale(
            amax, E4M3, p.mx_rule))))
        source = (f"seeded E4M3 emulation, {x.size:,} {name} values in rows of 128 over 8 binades (seed from the "
                  "variant)")
        s.given(f"S_ref_{tag}", found[tag][0], "dB", f"{source}: SQNR, FP32 scales per 128")
        s.given(f"S_pool_{tag}", found[tag][1], "dB",
                f"the same values through this pool: {p.mx_rule} E8M0 scales per {p.act_block}")
        s.given(f"s_sat_{tag}", found[tag][2], "%", f"the same emulation, {SAT_BLOCKS:,} {name} blocks of "
                f"{p.act_block} ({SAT_SHAPES} drawn, each at 16 magnitudes over 8 binades): share whose amax "
                f"saturates under the {p.mx_rule} rule")
        if tag == "g":
            scale = amax_scale(np.max(np.abs(x), axis=1, keepdims=True), E4M3, "fp32")
            once = quantize(x, E4M3, scale)
            twice = quantize(once, E4M3, amax_scale(np.max(np.abs(once), axis=1, keepdims=True), E4M3, "up"))
            s.given("S_conv_g", sqnr_db(x, twice), "dB",
                    "the Gaussian values FP32-scaled, then re-rounded onto round-up power-of-two scales")
    return {"gaussian": found["g"][:2], "t3": found["t"][:2]}


def fp8_scale_formats(p, s: Sheet) -> None:
    """One FP8 checkpoint, two pools: Hopper's FP32 block scales against Blackwell's MXFP8 E8M0 scales,
    what converting costs, what the pool's scale rule clips, and which pool serves the tested model."""
    m = s.given("m", E4M3.mantissa_bits, "", "fraction bits of E4M3")
    x_max = s.given("x_max", E4M3.max, "", "largest E4M3 value")
    S0 = s.step("sqnr_normal", "SQNR of E4M3 rounding in the normal range", "S_0",
                10 * sympy.log(12 * 4**m * 3 / (2 * sympy.log(2)), 10), "dB",
                "an error of quantum²/12 against a signal of f²·2^2e, for significands f spread log-uniformly over "
                "[1, 2) (E[f²] = 3/(2 ln 2)): 12·4^m·E[f²], whatever the block's scale")
    s.step("", "Scale bits per element, Hopper activations (FP32 per 1×128)", "q_act", 32 / sympy.Integer(128),
           "", "one 32-bit scale per 128 values")
    s.step("", "Scale bits per element, Hopper weights (FP32 per 128×128)", "q_w", 32 / sympy.Integer(128 * 128),
           "", "one scale per 16,384 weights: negligible")
    s.step("", "Scale bits per element, MXFP8 (E8M0 per 32)", "q_mx", 8 / sympy.Integer(MX_BLOCK), "",
           "as many bits as Hopper's activations: the gain is hardware that applies them inside the MMA")
    if p.hopper_scales == "fp32":
        loss = s.step("", "SQNR lost re-rounding FP32-scaled weights onto power-of-two scales", "dS",
                      10 * sympy.log(2, 10), "dB",
                      "a second rounding onto a grid shifted by a non-power-of-two factor: an independent error "
                      "as large as the first, so the noise power doubles")
        s.step("sqnr_weights_blackwell", "SQNR of the weights as the Blackwell pool holds them", "S_w", S0 - loss,
               "dB", "the tested weights, converted: a model nobody evaluated")
    else:
        loss = s.given("dS", 0, "dB", "SQNR lost loading power-of-two scales into E8M0: none")
        s.step("sqnr_weights_blackwell", "SQNR of the weights as the Blackwell pool holds them", "S_w", S0, "dB",
               "the scales are powers of two already: E8M0 holds them exactly, each 128-block as four MX blocks, "
               "and the tested bytes load unchanged")
    overshoot, share = _scale_rule_steps(s, p.mx_rule, x_max)
    losses = _format_simulation(s, p)
    _format_select(s, p, share, loss)

    s.assume("Hopper's block-scaled FP8 as in DeepSeek-V3: E4M3 everywhere, activations in 1×128 tiles quantised "
             "online, weights in 128×128 blocks, FP32 scales applied on CUDA cores between 128-deep WGMMA "
             "chunks. A 'ue8m0' checkpoint (DeepSeek-V3.1) keeps the same blocks with power-of-two scales, "
             "rounded up for weights and activations alike (DeepGEMM).")
    s.assume("Blackwell's pool runs MXFP8 in the tensor cores' block-scaled MMA: E4M3 elements with one E8M0 scale "
             "per 32 along K; a 1×128 activation scale is fed as four equal MX scales.")
    s.assume("A block's amax sits anywhere in its binade, log-uniformly (activations span many binades): this sets "
             "the share of saturating blocks. The SQNR figure is the normal range's; clipping and subnormals are "
             "what the simulation adds. FP32-scaled weights convert onto E8M0 scales rounded up (no weight clips).")
    s.assume("Users reach the Blackwell pool only after its build passes its own eval, whatever its bytes: the "
             "block-scaled MMA applies scales and accumulates inside the tensor core, where Hopper's WGMMA "
             "promotes partial sums to CUDA cores every 128, so no Blackwell build computes the tested numerics.")
    if p.mx_rule == "ocp-mx":
        s.slip("the OCP rule taken as floor(log2(amax/448)): every block saturating", 1 / s.value(share),
               on="act_saturating_share")
    if p.hopper_scales == "fp32":
        s.slip("the conversion taken as free", s.value(S0) / s.number("sqnr_weights_blackwell"),
               on="sqnr_weights_blackwell")
    _format_regime(s, p, overshoot, losses)


def _format_select(s: Sheet, p, share, loss) -> None:
    """Gates and fallbacks: each statement holds or not from the checkpoint's scales, the pool's rule and
    its activation blocks. Whether the pool needs its own eval is no option: it always does (an assumption)."""
    same_bytes = p.hopper_scales == "ue8m0"
    same_activations = same_bytes and p.mx_rule == "up" and p.act_block == HOPPER_BLOCK
    tested = "round-up power-of-two scales per 128" if same_bytes else "FP32 scales per 128"
    s.judge("gates", "the Blackwell pool can load the tested weights, bytes and scales, unchanged", same_bytes,
            "power-of-two scales are exact in E8M0 and a 128-block is four MX blocks" if same_bytes else
            "FP32 scales are not powers of two: every block must be re-rounded onto a new grid")
    s.judge("gates", "the pool quantises activations to the tested build's bytes and scales", same_activations,
            f"the pool's activations use {p.mx_rule} E8M0 scales per {p.act_block}; the tested build's used "
            f"{tested}" + (": the same scale on every block, so the same codes" if same_activations else
                           ": other scales, so other codes"))
    s.judge("gates", "more than 10% of this pool's activation blocks saturate", s.compare(share, sympy.Rational(1, 10))
            > 0, f"{_pct(s.number('act_saturating_share'))} of blocks under the {p.mx_rule} rule")
    s.judge("gates", "more than a quarter of this pool's activation blocks saturate",
            s.compare(share, sympy.Rational(1, 4)) > 0,
            f"{_pct(s.number('act_saturating_share'))} of blocks under the {p.mx_rule} rule")
    s.judge("gates", "the weights reach this pool more than 2 dB below the SQNR that was tested",
            s.compare(loss, 2) > 0, f"{format_number(s.value(loss), 3)} dB lost on the way: " + (
                "the tested bytes load as they are" if same_bytes else "rounded again onto power-of-two scales"))
    s.judge("gates", "the pool's activation scales keep the tested 1×128 granularity", p.act_block == HOPPER_BLOCK,
            f"one scale per {p.act_block} activations" + ("" if p.act_block == HOPPER_BLOCK else
                                                          ": each 32-block takes its own amax, a finer grid"))


def _format_regime(s: Sheet, p, overshoot, losses: dict[str, tuple[float, float]]) -> None:
    one = s.given("k_fit", 1, "x", "amax landing exactly on max")
    land = format_number(s.value(overshoot), 3)
    share = _pct(s.number("act_saturating_share"))
    emulated = ("the emulation gives " + " and ".join(
        f"{format_number(pool, 3)} dB against {format_number(ref, 3)} dB with FP32 scales per 128 on {name} blocks"
        for name, (ref, pool) in (("Gaussian", losses["gaussian"]), ("heavy-tailed", losses["t3"]))))
    saturating = (f"The {p.mx_rule} rule can land a block's amax {land}× past 448, and does in {share} of blocks: "
                  f"the largest values, the ones that carry the signal, saturate; {emulated}. Round the scale up "
                  "instead (NVIDIA's MXFP8 recipe, DeepGEMM's UE8M0).")
    clip_free = (f"Rounding the scale up maps every block's amax into (224, 448]: nothing saturates, and the values "
                 f"keep the same relative grid at any scale: {emulated}.")
    s.regime_by(overshoot, one, tie="below", above=Side(
        "saturating", saturating,
        "Rounding the scale up never saturates: it leaves up to one binade unused at the top, and the values keep "
        "the same relative grid, so it costs next to nothing against FP32 scales.", near=saturating),
        below=Side(
        "clip-free", clip_free,
        "The OCP MX rule (floor of log2 amax, minus 8) lands amax in [256, 512): one block in five saturates its "
        "largest values, and naive floor or nearest rules do worse.", near=clip_free))


# --- fp8-attention-quant-points -------------------------------------------------------------

HEAD_DIM = 128
ATTN_OUTLIERS = 4  # key channels at ±α, as in kv-quant-keys-vs-values
ATTN_TOKENS = 64  # tokens in the key simulation
ACC_BITS = 13  # fraction bits the FP8 tensor-core accumulator keeps (DeepSeek-V3: about 14 bits)
MMA_K = 32  # tokens per FP8 WGMMA k-slab: one chopped add into the accumulator each
ACC_CHANNELS = 4  # value channels in the accumulator simulation
ACC_TOKENS = 16384  # the accumulator simulation's longest run: 512 chained adds
P_SCALE = 448  # SageAttention2's scale on P before the E4M3 cast: its max lands on 448
P_ROWS, P_VALUES = 8, 65536  # query rows in the probability simulation, and the scores it aims for


class NormalCDF(sympy.Function):
    """Φ(x), evaluated at once on a number: sympy's own erf costs milliseconds per step on a sheet."""

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sympy.Float(0.5 * math.erfc(-float(x) / math.sqrt(2)), 17)
        return None

    def _sympystr(self, printer) -> str:
        return f"Φ({printer.doprint(self.args[0])})"


def _softmax_tv(p: np.ndarray, q: np.ndarray) -> float:
    """Mean total-variation distance between rows of two attention distributions: the mass misplaced."""
    return float(np.mean(np.sum(np.abs(p - q), axis=1)) / 2)


def _key_point(rng: np.random.Generator, alpha: float, beta: float) -> dict[str, float]:
    """Keys with outlier channels through E4M3: per-tensor, per-channel and mean-subtracted scales."""
    offsets = np.zeros(HEAD_DIM)
    offsets[:ATTN_OUTLIERS] = alpha * np.resize([1.0, -1.0], ATTN_OUTLIERS)
    k = rng.standard_normal((ATTN_TOKENS, HEAD_DIM)) + offsets
    q = beta * rng.standard_normal((4, HEAD_DIM))

    def probs(keys):
        s = q @ keys.T / np.sqrt(HEAD_DIM)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    exact = probs(k)
    tensor = quantize(k, E4M3, amax_scale(np.max(np.abs(k)), E4M3))
    channel = quantize(k, E4M3, amax_scale(np.max(np.abs(k), axis=0), E4M3))
    mean = k.mean(axis=0)
    centred = quantize(k - mean, E4M3, amax_scale(np.max(np.abs(k - mean)), E4M3)) + mean  # q·mean kept exact
    return {"tensor": _softmax_tv(exact, probs(tensor)), "channel": _softmax_tv(exact, probs(channel)),
            "centred": _softmax_tv(exact, probs(centred))}


class _ProbabilityPoint(TypedDict):
    flushed: float  # share of the mass flushed, P unscaled
    flushed_scaled: float  # the same, P scaled by 448
    p: np.ndarray  # the first row's exp(s − m), the accumulator's input
    rows: int  # query rows simulated


def _probability_point(rng: np.random.Generator, beta: float, tokens: int) -> _ProbabilityPoint:
    """exp(s − m) cast to E4M3 as it is, and scaled by 448, over a few query rows (each row has its own
    max, which the flushed mass is sensitive to): what flushes to zero is what the cast sends to 0, at or
    below half the smallest subnormal (the tie goes to the even code, zero)."""
    rows = min(P_ROWS, max(2, P_VALUES // tokens))
    s = beta * rng.standard_normal((rows, tokens))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    flush = E4M3.min_subnormal / 2
    mass = p.sum(axis=1)
    return {"flushed": float(np.mean(np.sum(np.where(p <= flush, p, 0), axis=1) / mass)),
            "flushed_scaled": float(np.mean(np.sum(np.where(p * P_SCALE <= flush, p, 0), axis=1) / mass)),
            "p": p[0], "rows": rows}


def _accumulator_point(rng: np.random.Generator, p: np.ndarray, promote: int) -> dict[str, float]:
    """P·V over the context in WGMMA k-slabs of MMA_K tokens, each slab added into an accumulator that keeps
    ACC_BITS fraction bits; and the same with the accumulator moved to FP32 every `promote` tokens.
    Values of one sign (the worst case: nothing cancels the chopped bits)."""
    v = rng.uniform(0, 1, (p.size, ACC_CHANNELS))
    slabs = (p[:, None] * v).reshape(-1, MMA_K, ACC_CHANNELS).sum(axis=1)  # the products as the MMA forms them
    exact = slabs.sum(axis=0)
    mask = chop_mask(ACC_BITS)
    acc = np.zeros(ACC_CHANNELS)
    for slab in slabs:  # one chopped add per slab, in order: the accumulator's error only grows
        acc += slab
        acc.view(np.uint64)[...] &= mask
    per_block = slabs.reshape(-1, promote // MMA_K, ACC_CHANNELS)
    partial = np.zeros(per_block.shape[::2])
    for step in range(per_block.shape[1]):  # every block's own short chain, all blocks at once
        partial += per_block[:, step]
        partial.view(np.uint64)[...] &= mask
    promoted = partial.sum(axis=0)  # the FP32 adds on CUDA cores: exact beside the chopped ones
    return {"chained": float(np.max(np.abs(acc - exact) / exact)),
            "promoted": float(np.max(np.abs(promoted - exact) / exact))}


def fp8_attention_quant_points(p, s: Sheet) -> None:
    """Three FP8 quantisation points of one attention head, each with its own failure and its own fix;
    which one dominates this variant's error."""
    alpha = s.param("alpha", "outlier")
    beta = s.param("beta", "score_spread")
    T = s.param("T", "context")
    N_c = s.param("N_c", "promote")
    m = s.given("m", E4M3.mantissa_bits, "", "fraction bits of E4M3")
    d = s.given("d", HEAD_DIM, "", "head dim")
    n_o = s.given("n_o", ATTN_OUTLIERS, "", "outlier key channels")
    moment = s.given("E_f", 3 / (8 * math.log(2)), "", "E[1/f²] for significands f log-uniform in [1, 2)")
    eps = s.step("", "RMS relative rounding error of E4M3", "eps", 2**-m * sympy.sqrt(moment / 12), "%",
                 "half-quantum uniform errors over significands spread log-uniformly, the same at any scale")
    # 1. Keys: a relative error on k multiplies the outlier channels' offsets into every score.
    k_rms = s.step("", "RMS of a key entry", "k_rms", sympy.sqrt(1 + n_o * alpha**2 / d), "",
                   "unit spread in every channel, plus the outlier channels' offsets ±α")
    ds = s.step("key_score_error", "Score error from FP8 keys, per-tensor or per-channel scales", "ds_K",
                beta * eps * k_rms, "",
                "δs = q·δk/√d with δk = ε·k: the offsets' error does not cancel, and FP8's relative grid makes "
                "per-channel scales no better than one per tensor")
    ds_c = s.step("key_score_error_centred", "Score error with the channel means subtracted", "ds_Kc", beta * eps,
                  "", "quantise k − mean(k), keep q·mean(k) exact (it is the same for every token): only the "
                  "unit spread is rounded")
    jitter = s.given("c_TV", math.sqrt(2 * math.pi), "", "√(2π): E|δ| = δ_rms·√(2/π) for Gaussian jitter")
    r_K = s.step("key_misplaced", "Key point: share of the output misplaced", "r_K", ds / jitter, "%",
                 "scores jittered by δ move half of E|δ| of the mass: δ_rms/√(2π)")
    # 2. Probabilities: exp(s − m) ≤ 1 lives near zero, where E4M3 runs out of range.
    e_sub = s.given("e_sub", E4M3.mantissa_bits - E4M3.min_exponent, "", "E4M3's smallest subnormal is 2^-9")
    tau = s.step("", "Score gap below the max at which an unscaled P flushes", "tau", (e_sub + 1) * sympy.log(2),
                 "nats", "below half the smallest subnormal, 2^-10, exp(s − m) rounds to zero")
    ln_T = s.step("", "ln T", "lnT", sympy.log(T), "", "the Gaussian maximum grows with √(2 ln T)")
    root = s.step("", "√(2 ln T)", "z_0", sympy.sqrt(2 * ln_T), "", "the leading term of a Gaussian maximum")
    gumbel = s.given("c_G", float(np.log(4 * np.pi) - 2 * np.euler_gamma), "", "ln 4π − 2γ (the Gumbel mean)")
    top = s.step("", "Typical largest score over the spread", "z_max", root - (sympy.log(ln_T) + gumbel) / (2 * root),
                 "", "the mean of the largest of T Gaussians: √(2 ln T) less the Gumbel correction")
    gap = s.step("", "Flush point below the mass's centre, in spreads", "x_P", (beta * top - tau - beta**2) / beta, "",
                 "exp-weighting Gaussian scores tilts them to N(β², β²); the flush point sits τ below β·z_max")
    f_P = s.step("p_flushed_mass", "Attention mass flushed to zero, unscaled P", "f_P", NormalCDF(gap), "%",
                 "the tilted scores' share below the flush point")
    scale = s.given("c_P", P_SCALE, "", "scale on P before the cast (its max onto 448)")
    shift = s.step("", "How much further the scale moves the flush point", "l_P", sympy.log(scale), "nats",
                   "multiplying P by 448 before the cast lowers its flush point by ln 448")
    f_P448 = s.step("", "Attention mass flushed, P scaled by 448", "f_P448", NormalCDF(gap - shift / beta), "%",
                    "the same tilted scores against the lower flush point")
    # 3. The accumulator: each FP8 WGMMA adds a k-slab into a register that keeps about 14 bits.
    f_acc = s.given("f_acc", ACC_BITS, "", "fraction bits the FP8 tensor-core accumulator keeps")
    k_mma = s.given("k_mma", MMA_K, "tokens", "tokens per FP8 WGMMA (k = 32)")
    e_acc = s.step("acc_error", "Bound on P·V's relative error, accumulated in the tensor core", "e_acc",
                   T / k_mma * 2**-f_acc, "%", "T/32 chopped adds, each losing under one unit of the 13th bit")
    e_typ = s.step("acc_error_typical", "Its typical size", "e_typ", e_acc / (8 * sympy.log(2)), "%",
                   "each chop loses half a unit on average, a unit being 2^-13/f of the sum (E[1/f] = 1/(2 ln 2)), "
                   "and the sum has grown to half its final size on average")
    s.step("acc_error_promoted", "The bound, promoted to FP32 every N_c tokens", "e_acc_p",
           N_c / k_mma * 2**-f_acc, "%",
           "only N_c/32 chopped adds before the partial sum moves to an FP32 register on the CUDA cores")

    rng = variant_rng(p, "outlier", "score_spread", "context", "promote")
    keys = _key_point(rng, p.outlier, p.score_spread)
    probs = _probability_point(rng, p.score_spread, int(p.context))
    acc = _accumulator_point(rng, probs["p"][:ACC_TOKENS], int(p.promote))
    _attention_points_givens(s, keys, probs, acc)
    _attention_fixes(s, p, ds=ds, ds_c=ds_c, flushed=(f_P, f_P448), promoted=N_c / k_mma * 2**-f_acc,
                     e_acc=e_acc, r_K=r_K)  # the fixes judge the bound, as DeepSeek-V3 reports its maximum

    s.assume(f"One head of dim {HEAD_DIM}; keys with unit spread and {ATTN_OUTLIERS} channels offset by ±α; scores "
             "Gaussian with spread β across tokens (queries and centred keys alike); the row max is the mean of the "
             "largest of T, β√(2 ln T) less the Gumbel correction. E4M3 throughout, FP32 scales from the amax.")
    s.assume("P is cast as exp(s − m) with m the row's final max (online softmax flushes a little more early "
             "on); flushing is the loss that counts, subnormals keep the rest at reduced precision.")
    s.assume("The FP8 tensor-core accumulator is modelled as keeping 13 fraction bits and chopping the rest at each "
             "k = 32 WGMMA (DeepSeek-V3 measures about 14 bits on H800). The bound is relative to Σ p·|v|, the "
             "output itself for values of one sign (the simulation's); mixed-sign values cancel in o and not in "
             "the chopped bits, so the error relative to |o| can pass it, as DeepSeek-V3's ~2% at K = 4096 passes "
             "this 1.56%.")
    s.assume("The three errors are compared as the share of the output they misplace, each at its typical size: "
             "the keys' δs_rms/√(2π), the flushed mass, the accumulator's typical error (its bound over 8 ln 2). "
             "Significands of the rounded keys are taken log-uniform (E[1/f²] = 3/(8 ln 2)); the outlier entries "
             "near ±α sit in one binade and move this by a few percent.")
    s.slip("promotion forgotten", s.evaluate(T / N_c), on="acc_error_promoted")
    s.slip("the √(1 + n_o·α²/d) of the outlier offsets left out", s.evaluate(1 / k_rms), on="key_score_error")
    _attention_regime(s, {"keys": r_K, "probabilities": f_P, "accumulator": e_typ})


def _attention_points_givens(s: Sheet, keys: dict, probs: _ProbabilityPoint, acc: dict) -> None:
    source = "seeded simulation (seed from the variant)"
    s.given("tv_K_tensor", keys["tensor"], "%", f"{source}, {ATTN_TOKENS} tokens × {HEAD_DIM}: mass misplaced, "
            "keys per tensor")
    s.given("tv_K_channel", keys["channel"], "%", "the same, keys per channel")
    s.given("tv_K_centred", keys["centred"], "%", "the same, keys with their channel means subtracted")
    s.given("f_P_sim", probs["flushed"], "%", f"{source}, {probs['rows']} rows of T scores: mass flushed, P unscaled")
    s.given("f_P448_sim", probs["flushed_scaled"], "%", "the same, P scaled by 448")
    s.given("e_acc_sim", acc["chained"], "%", f"{source}, P·V over the first {ACC_TOKENS:,} tokens at most × "
            f"{ACC_CHANNELS} channels: worst relative error, chained in the accumulator")
    s.given("e_acc_p_sim", acc["promoted"], "%", "the same, promoted to FP32 every N_c tokens")


def _attention_fixes(s: Sheet, p, *, ds, ds_c, flushed, promoted, e_acc, r_K) -> None:
    """Which fix addresses which point, judged on this variant's numbers."""
    unscaled, scaled = flushed
    # The flushed masses are floats (Φ evaluated numerically), so their comparisons are on values: no exact
    # tie exists to decide, and sympy's comparison of them costs milliseconds.
    s.judge("fixes", "the FP8 keys misplace more of the output than an unscaled P flushes",
            s.value(r_K) > s.value(unscaled),
            f"{_pct(s.value(r_K))} misplaced by the keys against {_pct(s.value(unscaled))} flushed")
    s.judge("fixes", "subtracting the keys' channel means would cut the key score error by more than 2.5×",
            s.compare(ds, sympy.Rational(5, 2) * ds_c) > 0,
            f"√(1 + n_o·α²/d) = {format_number(s.value(ds) / s.value(ds_c), 3)}× (per-channel scales would not help: "
            "E4M3's grid is relative, a channel's own scale slides its values without refining them)")
    s.judge("fixes", "promoting every N_c tokens cuts the accumulator's bound by more than 200×",
            s.compare(e_acc, 200 * promoted) > 0,
            f"T/N_c = {format_number(p.context / p.promote, 3)}: the bound scales with the chopped adds in a chain")
    s.judge("fixes", "an unscaled P flushes more than 10% of the attention mass",
            s.value(unscaled) > 0.1, f"{_pct(s.value(unscaled))} of it below 2^-10")
    s.judge("fixes", "scaling P by 448 before the cast would leave under 0.1% of the attention mass flushed",
            s.value(scaled) < 0.001,
            f"{_pct(s.value(unscaled))} flushed unscaled, {_pct(s.value(scaled))} scaled")
    s.judge("fixes", "promoting the accumulator to FP32 every N_c tokens keeps its error under 0.1%",
            s.compare(promoted, sympy.Rational(1, 1000)) < 0,
            f"{format_number(p.promote / MMA_K)} chopped adds: {_pct(s.number('acc_error_promoted'))}")
    s.judge("fixes", "over this context the unpromoted bound passes the ~2% DeepSeek-V3 measured at K = 4096",
            s.compare(e_acc, sympy.Rational(2, 100)) > 0, f"{_pct(s.value(e_acc))} over {format_number(p.context)} "
            "tokens (1.56% at 4,096)")


def _attention_regime(s: Sheet, errors: dict[str, sympy.Symbol]) -> None:
    """Three sides: the point whose misplaced share is largest; the boundary is the runner-up's."""
    ranked = sorted(errors, key=lambda name: s.value(errors[name]), reverse=True)
    first, second = ranked[0], ranked[1]
    shown = {name: _pct(s.value(sym)) for name, sym in errors.items()}
    fix = {"keys": "subtract the keys' channel means (per-channel scales do not help in FP8)",
           "probabilities": "scale P by 448 before the cast (or keep P in bf16)",
           "accumulator": "promote the accumulator to FP32 every 128 tokens"}  # DeepSeek-V3's N_C
    summary = (f"The {first} point dominates: {shown[first]} of the output misplaced against {shown[second]} for the "
               f"{second} and {shown[ranked[2]]} for the {ranked[2]} (the accumulator's figure is its typical error, "
               f"its bound over 8 ln 2). Fix it first: {fix[first]}.")
    s.set_regime(first, summary, errors[second], errors[first],
                 f"Were the {second} point's error past {shown[first]}, it would lead, and the first fix would be "
                 f"to {fix[second]}.")
