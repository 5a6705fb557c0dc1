"""FP8 in numpy: the OCP E4M3 and E5M2 formats, round to nearest even with subnormals and
saturation, and the scales kernels put in front of them (FP32 amax scales, power-of-two scales).

Shared by the numerics questions. Everything is vectorised and exact: a value is rounded by
scaling its significand to an integer with ldexp (a power of two, so no rounding there) and
calling np.rint, which rounds half to even. Values come back as float64 on the FP8 grid
(times the scale), so a simulation can measure its error against the unquantised input."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Format:
    """One 8-bit float: sign, `exponent_bits`, `mantissa_bits`, exponent `bias`, and its largest
    finite value (E4M3 spends only S.1111.111 on NaN and has no infinity; E5M2 is IEEE-like)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    ieee_specials: bool  # the all-ones exponent holds inf and NaN (E5M2), or only S.1111.111 is NaN (E4M3)

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal: below it the quantum stops shrinking (subnormals)."""
        return 1 - self.bias

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.min_exponent

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.min_exponent - self.mantissa_bits)

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest finite value (8 for E4M3's 448, 15 for E5M2's 57,344)."""
        return int(np.floor(np.log2(self.max)))


E4M3 = Format("E4M3", 4, 3, 7, 448.0, ieee_specials=False)


E5M2 = Format("E5M2", 5, 2, 15, 57344.0, ieee_specials=True)


FORMATS = {"e4m3": E4M3, "e5m2": E5M2}


def round_to_bits(x, mantissa_bits: int, min_exponent: int | None = None) -> np.ndarray:
    """x rounded to a float with `mantissa_bits` explicit fraction bits, nearest with ties to even.
    Below 2^min_exponent the quantum stays fixed (subnormals); None means no lower limit. No
    overflow handling: see `quantize`."""
    y = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(y)  # |y| = f·2^exponent with f in [0.5, 1): floor(log2|y|) = exponent - 1
    exponent = exponent - 1
    if min_exponent is not None:
        exponent = np.maximum(exponent, min_exponent)
    shift = mantissa_bits - exponent  # y·2^shift is the significand as an integer-valued float
    return np.ldexp(np.rint(np.ldexp(y, shift)), -shift)


def chop_mask(mantissa_bits: int) -> np.uint64:
    """The float64 bit mask that keeps the sign, the exponent and `mantissa_bits` fraction bits."""
    return np.uint64((0xFFFFFFFFFFFFFFFF << (52 - mantissa_bits)) & 0xFFFFFFFFFFFFFFFF)


def quantize(x, fmt: Format, scale=1.0) -> np.ndarray:
    """x / scale rounded to the FP8 grid of `fmt` (nearest even, subnormals, saturating at ±max as
    NVIDIA's satfinite conversions do), times scale again. NaN stays NaN; ±inf saturates."""
    y = np.asarray(x, dtype=np.float64) / scale
    # Saturate first: max is on the grid, so nothing at or below it rounds past it.
    return round_to_bits(np.clip(y, -fmt.max, fmt.max), fmt.mantissa_bits, fmt.min_exponent) * scale


def clipped(x, fmt: Format, scale=1.0) -> np.ndarray:
    """Which values lie beyond what the scale can represent: |x| / scale > max saturates."""
    return np.abs(np.asarray(x, dtype=np.float64)) > fmt.max * np.asarray(scale, dtype=np.float64)


SCALE_ROUNDINGS = ("fp32", "up", "floor", "nearest", "ocp-mx")


def amax_scale(amax, fmt: Format, rounding: str = "fp32") -> np.ndarray:
    """The scale that maps a block's absolute maximum onto the format:
    - fp32: amax / max exactly (Hopper block-scaled FP8 as in DeepSeek-V3; per-tensor FP8 KV scales);
    - up, floor, nearest: a power of two, log2(amax / max) rounded up (never clips), down (clips
      up to 2x) or to nearest;
    - ocp-mx: the OCP MX v1.0 rule for E8M0 shared scales, 2^(floor(log2 amax) - emax of the
      element format), which maps amax into [2^emax, 2^(emax+1)) and so clips what lies above max.
    A block of zeros gets scale 1 (nothing to represent)."""
    if rounding not in SCALE_ROUNDINGS:
        raise ValueError(f"unknown scale rounding {rounding!r} (one of {', '.join(SCALE_ROUNDINGS)})")
    a = np.asarray(amax, dtype=np.float64)
    safe = np.where(a > 0, a, 1.0)
    if rounding == "fp32":
        single = (safe / fmt.max).astype(np.float32)
        # A float32 rounded down would put the amax a hair past max: take the next float32 up instead.
        single = np.where(single.astype(np.float64) * fmt.max < safe, np.nextafter(single, np.float32(np.inf)), single)
        scale = single.astype(np.float64)
    elif rounding == "ocp-mx":
        scale = np.ldexp(1.0, np.frexp(safe)[1] - 1 - fmt.max_exponent)
    else:
        log_ratio = np.log2(safe / fmt.max)
        rounded = {"up": np.ceil, "floor": np.floor, "nearest": np.rint}[rounding](log_ratio)
        scale = np.ldexp(1.0, rounded.astype(np.int64))
    return np.where(a > 0, scale, 1.0)


def quantize_blocks(x, fmt: Format, block: int, rounding: str = "fp32") -> np.ndarray:
    """x quantised in contiguous blocks of `block` elements along its last axis, each block with
    its own scale from its own amax (DeepSeek-V3's 1x128 tiles; MX's 32-element blocks)."""
    y = np.asarray(x, dtype=np.float64)
    if y.shape[-1] % block:
        raise ValueError(f"last axis of {y.shape[-1]} is not a multiple of the block of {block}")
    blocks = y.reshape(*y.shape[:-1], y.shape[-1] // block, block)
    scale = amax_scale(np.max(np.abs(blocks), axis=-1, keepdims=True), fmt, rounding)
    return quantize(blocks, fmt, scale).reshape(y.shape)


def decode(codes, fmt: Format) -> np.ndarray:
    """The value of each 8-bit code, read from its bits: sign, biased exponent, fraction."""
    c = np.asarray(codes, dtype=np.int64)
    m = fmt.mantissa_bits
    sign = np.where(c >> 7, -1.0, 1.0)
    exponent = (c >> m) & ((1 << fmt.exponent_bits) - 1)
    fraction = c & ((1 << m) - 1)
    normal = np.ldexp(1.0 + fraction / 2.0**m, exponent - fmt.bias)
    subnormal = np.ldexp(fraction / 2.0**m, fmt.min_exponent)
    value = sign * np.where(exponent == 0, subnormal, normal)
    top = (1 << fmt.exponent_bits) - 1
    if fmt.ieee_specials:
        value = np.where(exponent == top, np.where(fraction == 0, sign * np.inf, np.nan), value)
    else:
        value = np.where((exponent == top) & (fraction == (1 << m) - 1), np.nan, value)
    return value


def encode(x, fmt: Format) -> np.ndarray:
    """The 8-bit code of each value after quantize(x, fmt)."""
    q = quantize(x, fmt)
    table = decode(np.arange(128), fmt)  # the non-negative codes, increasing with the code
    finite = np.isfinite(table)
    magnitude = np.searchsorted(table[finite], np.abs(np.nan_to_num(q)))
    codes = magnitude | np.where(np.signbit(q), 0x80, 0)
    return np.where(np.isnan(q), 0x7F, codes).astype(np.uint8)  # 0x7F is a NaN in both formats


def sqnr_db(x, q) -> float:
    """Signal-to-quantisation-noise ratio in dB: 10·log10(Σx² / Σ(x − q)²)."""
    x, q = np.asarray(x, dtype=np.float64), np.asarray(q, dtype=np.float64)
    noise = float(np.sum((x - q) ** 2))
    return float("inf") if noise == 0 else 10 * float(np.log10(np.sum(x**2) / noise))

