"""The numpy FP8 emulation against the formats' definitions: the OCP 8-bit floating point spec
(E4M3: max 448, min normal 2^-6, min subnormal 2^-9; E5M2: max 57,344, min normal 2^-14, min
subnormal 2^-16) and an enumeration of all 256 codes, decoded from their bits on their own."""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers.formulas.fp8 import (
    E4M3,
    E5M2,
    amax_scale,
    chop_mask,
    clipped,
    decode,
    encode,
    quantize,
    quantize_blocks,
    round_to_bits,
)


def _value(code: int, exponent_bits: int, mantissa_bits: int, bias: int) -> Fraction | None:
    """One code read by hand from the spec, in exact arithmetic (None: NaN or inf)."""
    sign = -1 if code >> 7 else 1
    exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
    fraction = Fraction(code & ((1 << mantissa_bits) - 1), 1 << mantissa_bits)
    top = (1 << exponent_bits) - 1
    if exponent_bits == 4 and exponent == top and fraction == Fraction(7, 8):
        return None  # E4M3: only S.1111.111 is NaN
    if exponent_bits == 5 and exponent == top:
        return None  # E5M2: IEEE inf and NaN
    if exponent == 0:
        return sign * fraction * Fraction(2) ** (1 - bias)
    return sign * (1 + fraction) * Fraction(2) ** (exponent - bias)


SPEC = {E4M3: (4, 3, 7), E5M2: (5, 2, 15)}


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_every_code_decodes_as_the_spec_reads_it(fmt):
    values = decode(np.arange(256), fmt)
    for code in range(256):
        exact = _value(code, *SPEC[fmt])
        if exact is None:
            assert not np.isfinite(values[code])
        else:
            assert values[code] == float(exact), hex(code)


def test_known_encodings():
    assert (E4M3.max, E4M3.min_normal, E4M3.min_subnormal) == (448.0, 2.0**-6, 2.0**-9)
    assert (E5M2.max, E5M2.min_normal, E5M2.min_subnormal) == (57344.0, 2.0**-14, 2.0**-16)
    assert decode([0x7E, 0x08, 0x01, 0x38, 0xB8], E4M3).tolist() == [448.0, 2.0**-6, 2.0**-9, 1.0, -1.0]
    assert decode([0x7B, 0x04, 0x01, 0x3C], E5M2).tolist() == [57344.0, 2.0**-14, 2.0**-16, 1.0]
    assert np.isnan(decode(0x7F, E4M3)) and decode(0x7C, E5M2) == np.inf  # E4M3 has no inf
    assert (E4M3.mantissa_bits, E5M2.mantissa_bits) == (3, 2)


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_grid_points_are_fixed_and_encode_back_to_their_code(fmt):
    codes = np.arange(256)
    values = decode(codes, fmt)
    finite = np.isfinite(values)
    assert np.array_equal(quantize(values[finite], fmt), values[finite])
    assert np.array_equal(encode(values[finite], fmt), codes[finite])


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_midpoints_round_to_the_even_code(fmt):
    """Every tie between two neighbouring finite values goes to the one whose code is even."""
    grid = np.unique(decode(np.arange(128), fmt)[np.isfinite(decode(np.arange(128), fmt))])
    low, high = grid[:-1], grid[1:]
    mid = (low + high) / 2  # exact in float64: neighbours differ by one FP8 quantum
    want = np.where(encode(low, fmt) % 2 == 0, low, high)
    assert np.array_equal(quantize(mid, fmt), want)
    assert np.array_equal(quantize(-mid, fmt), -want)
    # Just off the tie, the nearer neighbour wins whatever its code.
    nudge = (high - low) / 1024
    assert np.array_equal(quantize(mid - nudge, fmt), low)
    assert np.array_equal(quantize(mid + nudge, fmt), high)


def test_specific_round_to_nearest_even_cases():
    # E4M3 between 1 and 2 steps by 1/8: 1.0625 ties to 1.0 (even), 1.1875 ties to 1.25 (even).
    assert quantize([1.0625, 1.1875, 1.3125, 17.0, 19.0], E4M3).tolist() == [1.0, 1.25, 1.25, 16.0, 20.0]
    # Subnormal ties: 2^-10 is half the smallest subnormal and flushes to zero; 3·2^-10 goes to 2^-8.
    assert quantize([2.0**-10, 3 * 2.0**-10, 2.0**-10 * 1.01], E4M3).tolist() == [0.0, 2.0**-8, 2.0**-9]
    # E5M2 steps by 1/4 between 1 and 2: 1.125 ties to 1.0, 1.375 ties to 1.5.
    assert quantize([1.125, 1.375, 2.0**-17, 3 * 2.0**-17], E5M2).tolist() == [1.0, 1.5, 0.0, 2.0**-15]


def test_saturation_and_specials():
    assert quantize([448, 449, 464, 1e6, np.inf, -np.inf], E4M3).tolist() == [448, 448, 448, 448, 448, -448]
    assert quantize([57344, 61440, 1e9], E5M2).tolist() == [57344, 57344, 57344]
    assert np.isnan(quantize(np.nan, E4M3)) and encode(np.nan, E4M3) == 0x7F
    assert clipped([447, 449, -500], E4M3).tolist() == [False, True, True]
    assert clipped([447, 449], E4M3, scale=2.0).tolist() == [False, False]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1e5, max_value=1e5, allow_nan=False), st.sampled_from([E4M3, E5M2]))
def test_quantize_gives_the_nearest_grid_value(x, fmt):
    """Against a brute-force search over the whole grid: no finite value is nearer."""
    grid = decode(np.arange(256), fmt)
    grid = grid[np.isfinite(grid)]
    q = float(quantize(x, fmt))
    assert q in grid
    assert abs(q - max(min(x, fmt.max), -fmt.max)) <= np.min(np.abs(grid - max(min(x, fmt.max), -fmt.max)))


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=2.0**-6, max_value=448.0), st.integers(min_value=-6, max_value=8))
def test_rounding_error_is_scale_invariant_in_the_normal_range(x, k):
    """Multiplying a normal value by a power of two that keeps it normal multiplies its rounded value
    alike: the relative error depends on where the significand falls, not on the magnitude."""
    shifted = x * 2.0**k
    assume(E4M3.min_normal <= shifted <= E4M3.max)
    assert quantize(shifted, E4M3) == quantize(x, E4M3) * 2.0**k
    assert abs(float(quantize(x, E4M3)) - x) <= 2.0 ** -(E4M3.mantissa_bits + 1) * x  # half a unit in the last place


def chop(x, mantissa_bits: int) -> np.ndarray:
    """x cut to `mantissa_bits` fraction bits by the mask the accumulator simulation applies in place."""
    y = np.array(x, dtype=np.float64)
    y.view(np.uint64)[...] &= chop_mask(mantissa_bits)
    return y


def test_round_to_bits_and_chop():
    assert round_to_bits([1 + 2.0**-12, 1 + 3 * 2.0**-14], 13).tolist() == [1 + 2.0**-12, 1 + 2.0**-12]
    assert round_to_bits(1 + 2.0**-14, 13).item() == 1.0  # a tie goes to the even significand
    # With no lower limit the grid keeps its relative spacing at any size.
    assert round_to_bits(3e-30, 2).item() == pytest.approx(3e-30, rel=2**-3)
    # Chopping drops the bits past the 13th toward zero, on either sign, at any magnitude.
    below = 1 + 2.0**-13 - 2.0**-20
    assert chop([below, -below, 3 * below * 2.0**40], 13).tolist() == [1.0, -1.0, (3 + 2.0**-12) * 2.0**40]
    x = np.random.default_rng(0).standard_normal(1000) * 1e3
    cut = chop(x, 13)
    assert np.all(np.abs(cut) <= np.abs(x)) and np.all(np.abs(x - cut) < np.abs(x) * 2.0**-13)
    assert np.array_equal(chop(cut, 13), cut)


def test_scales():
    amax = np.array([448.0, 1.0, 3.0, 0.0])
    assert amax_scale(amax, E4M3).tolist() == pytest.approx([1.0, 1 / 448, 3 / 448, 1.0])
    # log2(3/448) = -7.22: up -7, floor -8, nearest -7.
    assert amax_scale(3.0, E4M3, "up") == 2.0**-7
    assert amax_scale(3.0, E4M3, "floor") == 2.0**-8
    assert amax_scale(3.0, E4M3, "nearest") == 2.0**-7
    # OCP MX: 2^(floor(log2 amax) - 8) for E4M3 elements, 2^(floor(log2 amax) - 15) for E5M2.
    assert amax_scale(3.0, E4M3, "ocp-mx") == 2.0**-7
    assert amax_scale(500.0, E4M3, "ocp-mx") == 2.0**0
    assert amax_scale(3.0, E5M2, "ocp-mx") == 2.0**-14
    with pytest.raises(ValueError):
        amax_scale(3.0, E4M3, "stochastic")
    # Rounding the scale up never clips the block's amax; the floor and MX rules can.
    for amax_value, rounding in itertools.product(np.geomspace(1e-3, 1e3, 97), ("fp32", "up")):
        assert not clipped(amax_value, E4M3, amax_scale(amax_value, E4M3, rounding))


def test_quantize_blocks_gives_each_block_its_own_scale():
    x = np.concatenate([np.full(4, 1000.0), np.full(4, 0.001)])
    q = quantize_blocks(x, E4M3, 4)
    assert q == pytest.approx(x, rel=2**-4)  # one shared scale would flush the small block to zero
    assert np.all(quantize(x, E4M3, amax_scale(1000.0, E4M3))[4:] == 0)
    with pytest.raises(ValueError):
        quantize_blocks(np.ones(6), E4M3, 4)
