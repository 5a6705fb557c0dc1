"""FP8 KV cache - the scale barely matters for rounding and decides clipping."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_config
from solvers.formulas.fp8 import FORMATS, clipped, quantize
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.formulas.quantization import pct_text, variant_rng
from solvers.sheetmath import max_of
from solvers.units import format_number

PAIRS = 2000  # simulated (calibration, context) pairs


BULK = 4096  # cache entries in the rounding emulation


SCALE_STEP = 4  # the emulation's other scale: four times larger

TOO_CLOSE = 0.03  # a context within 3% of the even point (but not on it) is refused


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
            f"rounding error of the normal ones ({pct_text(low)} fell below the normal range)")
    s.given("e_sim_4x", rms_up, "%", f"the same entries at a scale {SCALE_STEP}× larger: the same error within "
            f"sampling noise ({pct_text(low_up)} below the normal range)")


# A longer context, priced at the one the model's config allows (32x the context was past every model's).
LONGEST = "a request at the model's configured longest context would leave the cache safe"


def _fp8_kv_levers(s: Sheet, p, fmt) -> None:
    """Which single changes leave the cache safe: the context's typical largest value losing no more than ε to
    the clip point, N < n·h^ν·(1/(1 − ε))^ν after the change, decided in exact fractions (the parameters are
    short decimals and ν an integer). Changes both ways, so the set that holds moves with the variant on either
    side; rounding's indifference to the scale is the one fact, true in every draw on purpose."""
    N, n, h, nu = Fraction(p.context), Fraction(p.calib_tokens), Fraction(str(p.headroom)), int(p.tail_index)
    reach = 1 / (1 - Fraction(1, 2 ** (fmt.mantissa_bits + 1)))  # the overshoot whose loss is ε

    def say(option: str, context: Fraction, calib: Fraction, headroom: Fraction, why: str) -> None:
        line = calib * (headroom * reach) ** nu
        if 0 < abs(context / line - 1) < TOO_CLOSE:
            s.refuse_if_asked(("levers",), "a lever leaves the context within 3% of the line: a coin toss")
        s.judge("levers", option, context < line, f"{why}: the typical largest value loses ε at "
                f"{format_number(float(line), 3)} tokens, against a context of {format_number(float(context), 3)}")

    say("twice the headroom (the same calibration) leaves the cache safe", N, n, 2 * h,
        "the clip point doubles, worth 2^ν times the calibration tokens")
    say("half the headroom (the same calibration) leaves the cache safe", N, n, h / 2,
        "the clip point halves, worth 2^-ν times the calibration tokens")
    say("{more_calibration} times the calibration tokens leave the cache safe", N,
        p.more_calibration * n, h, f"{format_number(p.more_calibration)} times the calibration draws")
    say("a calibration a quarter as long leaves the cache safe", N, n / 4, h,
        "a quarter of the calibration draws")
    say("a context an eighth as long leaves the cache safe", N / 8, n, h,
        "an eighth of the draws that could pass the clip point")
    say(LONGEST, Fraction(p.model.max_context), n, h,
        f"{p.model.name}'s config.json allows {format_number(p.model.max_context)} tokens (rope scaling such as "
        "YaRN can serve more)")
    s.judge("levers", "a scale four times larger leaves a normal entry's rounding error where it is", True,
            f"the scale slides values along a grid of {fmt.mantissa_bits} fraction bits whose relative spacing is the "
            f"same in every binade: the seeded emulation's {s.text(s.symbol('e_sim'))} RMS error at the calibrated "
            f"scale against {s.text(s.symbol('e_sim_4x'))} at four times it", fact=True)


def _fp8_kv_regime(s: Sheet, p, N, N_safe, r) -> None:
    ratio, line = format_number(s.value(r), 3), format_number(s.value(N_safe), 3)
    loss, eps = pct_text(s.number("saturation_loss")), pct_text(s.number("rounding_bound"))
    request = pct_text(s.number("request_clip_probability"))
    s.regime_by(N, N_safe, tie="above", above=Side(
        "clipping-dominated",
        f"A {format_number(p.context)}-token context's largest value typically lands {ratio}× past the clip point "
        f"and loses {loss} of itself to saturation, more than the {eps} a rounding can cost: on the outliers "
        f"attention leans on, clipping is the larger error. Only prompts under {line} tokens keep it within ε, "
        "which is why FP8 KV looks free on short prompts.",
        f"Under {line} tokens the typical largest value clips by less than ε: a clip may happen, but it costs "
        "no more than rounding does, and rounding is bounded by ε whatever the scale."),
        below=Side(
        "safe",
        f"The context's largest value typically sits at {ratio}× the clip point: where it passes at all it "
        f"loses less than the {eps} a rounding can cost, so the error is rounding, the same at any scale within "
        f"the normal range. Safe per scale is not clip-free per request: over the {2 * p.model.layers} key and "
        f"value scales some value clips with probability {request}, each by about that little.",
        f"Past {line} tokens the typical largest value loses more than ε, and each doubling of the context "
        "raises it by 2^(1/ν): longer contexts, not the format, are what break a static scale."))


def solve(p, s: Sheet) -> None:
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
                    "that many times the calibration tokens, and averaged over calibrations the largest of "
                    "N + n·h^ν exchangeable draws is the context's with chance N/(N + n·h^ν)")
    P = s.step("clip_probability", "Chance one layer's keys in the context pass their clip point", "P_clip",
               N / (N + n * h**nu), "%", headroom_why)
    layers = given_config(s, p.model, "layers")
    s.step("request_clip_probability", "Chance some key or value scale of the request clips", "P_req",
           1 - (1 - P) ** (2 * layers), "%",
           "a key and a value scale in each of L layers, each calibrated on its own entries: independent chances")
    count = s.step("clipped_count", "Expected values past one scale's clip point", "n_clip", N / (n * h**nu), "",
                   "each of the context's values passes with the chance one value of n·h^ν beats the rest: "
                   "N/(n·h^ν) of them (the channels cancel)")
    s.step("request_clipped_count", "Expected values past their clip point over the request's key and value scales",
           "n_req", 2 * layers * count, "",
           "a key and a value scale in each of L layers, each with its own N/(n·h^ν): a request safe per scale "
           "still clips a few values somewhere")
    r = s.step("clip_ratio", "Typical largest value of the context over the clip point", "r_clip",
               (N / n) ** (1 / nu) / h, "x",
               "the largest of N draws sits where the tail is 1/N, so maxima grow as N^(1/ν): (N/n)^(1/ν) over "
               "the calibration max, divided by the headroom")
    s.step("saturation_loss", "What the context's largest value loses to saturation", "loss", max_of(0, 1 - 1 / r),
           "%", "it is stored as the clip point: 1 − 1/r of it is gone, against a rounding error of at most ε")
    eps = s.symbol("eps")
    N_safe = s.step("", "Context at which the typical largest value loses ε", "N_eps", n * (h / (1 - eps)) ** nu,
                    "tokens", "1 − 1/r = ε where r = 1/(1 − ε): N = n·(h/(1 − ε))^ν")
    if 0 < abs(s.evaluate(N / N_safe) - 1) < TOO_CLOSE:  # an exact tie is the stated rule's: clipping-dominated
        raise Reject("the context is within 3% of the line: which side it falls would turn on the tail")

    _fp8_kv_emulation(s, p, fmt)
    _fp8_kv_levers(s, p, fmt)

    s.assume("One static scale per layer for keys and one for values (vLLM's k_scale and v_scale): the clip point "
             "is headroom × the calibration amax. vLLM's calculate_kv_scales takes amax/200 for keys and "
             "amax/100 for values from the first batch it sees (headroom 2.24 and 4.48 in E4M3); a calibrated "
             "checkpoint, calibrated on many sequences, maps the amax to the format's max (headroom 1 to 1.5): the "
             "draws pair each headroom with its calibration length. The clip chance is one scale's; a request's "
             "2L scales clip somewhere far more often, taken as independent. Dynamic per-token "
             "scales remove clipping altogether, at a scale per token and head stored beside the cache.")
    s.assume("Cache entries i.i.d. across tokens, with a power-law tail P(|x| > t) ∝ t^-ν; the channels cancel "
             "(n·d calibration values against N·d). At headroom 1 the clip probability is exact for any "
             "continuous distribution; with headroom it is the power-law tail's large-sample limit. Real caches "
             "differ both ways: key outliers sit in a few fixed channels and the first token (the attention sink) "
             "often carries the amax, so a short calibration that includes it is far more representative than "
             "the i.i.d. count says; entries also drift with position and topic, which makes one less so.")
    s.assume("Saturating conversion, as vLLM's quantisation kernels clamp to ±max before converting: a value past "
             "the clip point is stored as ±max·scale, not as NaN.")
    s.slip("x2: the bf16 bytes kept", 2.0, on="kv_context_fp8")
    s.slip("the headroom forgotten: N/(N + n)", s.evaluate(N / (N + n)) / s.value(P), on="clip_probability")
    s.slip("the calibration max held at its typical value, not averaged over calibrations: 1 − e^(−N/(n·h^ν))",
           s.evaluate(1 - sympy.exp(-N / (n * h**nu))) / s.value(P), on="clip_probability")
    s.slip("the ν-th root forgotten: maxima taken to grow as N", s.evaluate((N / n) / h) / s.value(r), on="clip_ratio")
    _fp8_kv_regime(s, p, N, N_safe, r)

