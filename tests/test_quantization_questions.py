"""Golden checks for the quantisation questions: fp8-kv-cache, kv-quant-keys-vs-values; their
seeded simulations against closed forms."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.topics.fp8 import E4M3, E5M2

GiB = 2**30


def _selected(results, key: str) -> set[str]:
    return {option for option, holds in results[key].items() if holds}


# --- fp8-kv-cache --------------------------------------------------------------------------


def test_fp8_kv_cache_default(variant):
    """Llama-3-70B (320 KiB/token in bf16), E4M3, 128K context, scale from 512 tokens, headroom 1."""
    results = variant("fp8-kv-cache@default").sheet.results
    assert results["kv_context_fp8"] == 131072 * 327_680 / 2 == 20 * GiB
    assert results["rounding_bound"] == 2**-4
    assert results["normal_binades"] == pytest.approx(math.log2(448 * 64))  # 14.81
    assert results["clip_probability"] == pytest.approx(131072 / (131072 + 512))  # the catalogue's 99.6%
    assert round(100 * results["clip_probability"], 1) == 99.6
    assert results["even_context"] == 512
    assert results["clip_ratio"] == pytest.approx(4.0)  # (131072/512)^(1/4) = 256^(1/4)
    assert results["regime"] == "clipping-dominated"
    assert _selected(results, "levers") == {"a scale computed per token as it is written (dynamic per-token scales)"}


def test_fp8_kv_cache_e5m2_figures(variant):
    results = variant("fp8-kv-cache@default+kv_format=e5m2").sheet.results
    assert results["rounding_bound"] == 2**-3
    assert results["normal_binades"] == pytest.approx(math.log2(E5M2.max / E5M2.min_normal))  # 29.81
    assert results["clip_probability"] == pytest.approx(131072 / 131584)  # the clip point does not care


def test_fp8_kv_cache_vllm_dynamic_scales(variant):
    """vLLM's calculate_kv_scales: k_scale = amax / 200 (K_SCALE_CONSTANT), v_scale = amax / 100, so the
    amax lands at 200 or 100 of E4M3's 448: headroom 2.24 and 4.48."""
    assert 448 / 200 == 2.24 and 448 / 100 == 4.48
    keys = variant("fp8-kv-cache@default+headroom=2.24").sheet.results
    assert keys["even_context"] == pytest.approx(512 * 2.24**4)  # 12,886 tokens: a 128K context still clips
    assert keys["regime"] == "clipping-dominated"
    values = variant("fp8-kv-cache@default+headroom=4.48").sheet.results
    assert values["clip_probability"] == pytest.approx(131072 / (131072 + 512 * 4.48**4))  # 38.9%
    assert values["regime"] == "safe"


def test_fp8_kv_cache_ties_are_exact(variant):
    """N = n·h^ν exactly: a probability of one half, called clipping-dominated; the lever that lands the
    context exactly on the even point does not make clipping less likely than not."""
    even = variant("fp8-kv-cache@default+context=2048+calib_tokens=2048").sheet.results
    assert even["clip_probability"] == 0.5 and even["clip_ratio"] == 1.0
    assert even["regime"] == "clipping-dominated"
    eighth = variant("fp8-kv-cache@default+context=16384+calib_tokens=2048").sheet.results
    assert eighth["levers"]["a context an eighth as long"] is False


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
        assert results["levers"]["a scale computed per token as it is written (dynamic per-token scales)"]
