"""fp8-kv-cache: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.formulas.fp8 import E4M3

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
