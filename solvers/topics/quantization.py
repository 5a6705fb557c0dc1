"""Quantised KV caches: what FP8's scale does to rounding and to clipping (fp8-kv-cache), and
why keys and values want different scale layouts (kv-quant-keys-vs-values).

The simulations run on the shared FP8 emulation (solvers/topics/fp8.py), seeded from the
variant's own parameters, so a variant shows the same numbers every time it is solved.
"""
from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import sympy

from solvers.derivation import Sheet, Side, max_of
from solvers.topics.common import dtype_bytes
from solvers.topics.fp8 import FORMATS, clipped, quantize
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
    s.step("rounding_bound", "Worst relative rounding error of a normal value", "eps", 2 ** -(m + 1), "%",
           f"half a unit in the last place of a significand in [1, 2): {fmt.name}'s exponent, and so the scale, "
           "drops out")
    top = s.given("x_max", fmt.max, "", f"largest {fmt.name} value")
    bottom = s.given("x_min", fmt.min_normal, "", f"smallest normal {fmt.name} value")
    s.step("normal_binades", "Span of the normal range", "R", sympy.log(top / bottom, 2), "binades",
           "how far the scale can slide a value before it leaves the range where that bound holds")

    # Clipping: the scale fixes the largest value that fits, h times the calibration max.
    s.step("", "Chance the context holds a value past the calibration max itself", "P_1", N / (N + n), "%",
           "of N + n exchangeable draws each is as likely as any other to be the largest: exact for any "
           "i.i.d. distribution")
    P = s.step("clip_probability", "Chance the context holds a value past the clip point", "P_clip",
               N / (N + n * h**nu), "%",
               f"a power-law tail makes a value {format_number(p.headroom)}× past the calibration max "
               f"{format_number(p.headroom)}^{format_number(p.tail_index)} times rarer: it counts as "
               "that many more calibration tokens")
    N_even = s.step("even_context", "Context at which clipping turns more likely than not", "N_half", n * h**nu,
                    "tokens", "P_clip = 1/2 where N = n·h^ν")
    r = s.step("clip_ratio", "Typical largest value of the context over the clip point", "r_clip",
               (N / n) ** (1 / nu) / h, "x",
               "the largest of N draws sits where the tail is 1/N, so maxima grow as N^(1/ν): (N/n)^(1/ν) over "
               "the calibration max, divided by the headroom")
    s.step("", "What the context's largest value loses to saturation", "loss", max_of(0, 1 - 1 / r), "%",
           "it is stored as the clip point: 1 − 1/r of it is gone, against a rounding error of at most ε")

    _fp8_kv_emulation(s, p, fmt)
    _fp8_kv_levers(s, p)

    s.assume("One static scale per layer for keys and one for values (vLLM's k_scale and v_scale): the clip point "
             "is headroom × the calibration amax. vLLM's calculate_kv_scales takes amax/200 for keys and "
             "amax/100 for values from the first batch it sees (headroom 2.24 and 4.48 in E4M3); a calibrated "
             "checkpoint maps the amax to the format's max (headroom 1).")
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


def _fp8_kv_levers(s: Sheet, p) -> None:
    """Which changes leave this context more likely than not to fit under the clip point: N < n·h^ν,
    decided in exact fractions (the parameters are short decimals and ν an integer)."""
    N, n, h, nu = Fraction(p.context), Fraction(p.calib_tokens), Fraction(str(p.headroom)), int(p.tail_index)

    def say(option: str, context: Fraction, calib: Fraction, headroom: Fraction, why: str) -> None:
        even = calib * headroom**nu
        s.judge("levers", option, context < even, f"{why}: clipping turns even at {format_number(float(even), 3)} "
                f"tokens against a context of {format_number(float(context), 3)}")

    say("twice the headroom (the same calibration, the scale doubled)", N, n, 2 * h,
        "the clip point doubles, worth 2^ν times the calibration tokens")
    say("calibrating on 16 times as many tokens", N, 16 * n, h, "16 times the calibration draws")
    say("a context an eighth as long", N / 8, n, h, "an eighth of the draws that could pass the clip point")
    s.judge("levers", "the other FP8 format (E4M3 for E5M2 or back), from the same calibration and headroom", False,
            "the scale maps headroom × amax onto the format's max in either format: the clip point, and so "
            "the chance of passing it, is the same; only the rounding changes")
    s.judge("levers", "a scale computed per token as it is written (dynamic per-token scales)", True,
            "every token's own amax sets its scale, so nothing clips; the price is a scale per token and head, "
            "stored beside the cache and applied in the attention kernel")


def _fp8_kv_regime(s: Sheet, p, N, N_even, r) -> None:
    ratio, even = format_number(s.value(r), 3), format_number(s.value(N_even), 3)
    probability = _pct(s.results["clip_probability"])
    s.regime_by(N, N_even, tie="above", above=Side(
        "clipping-dominated",
        f"A {format_number(p.context)}-token context passes the clip point with probability {probability} "
        f"(even at {even} tokens), and its largest value typically lands {ratio}× past it: saturation cuts the "
        "outliers attention leans on, an error far above the rounding bound. Short prompts stay under it, which "
        "is why FP8 KV looks free until long contexts.",
        "Below the even context the clip point usually holds: the cache's error is rounding, bounded by ε "
        "whatever the scale, and more headroom costs nothing until the bulk slides out of the normal range."),
        below=Side(
        "safe",
        f"Clipping turns even only at {even} tokens: this context passes the clip point with probability "
        f"{probability}, and its largest value typically sits at {ratio}× the clip point. The error is rounding, "
        "bounded by ε and the same at any scale within the normal range.",
        "Past the even context the clip point is usually crossed, and each doubling of the context raises the "
        "typical outlier by 2^(1/ν) over it: longer contexts, not the format, are what break a static scale."))
