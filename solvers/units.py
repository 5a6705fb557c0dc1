"""Units: parse a unit string into (scale to base units, dimension) and format values.

Base units are bytes, FLOP, seconds, watts and dollars. Counts (tokens, GPUs,
requests...) are dimensionless, so "6,200 GPUs" and "6200" mean the same thing.
Nothing here evaluates text: units are looked up in fixed tables.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

# Exponents over (byte, flop, second, watt, dollar).
Dim = tuple[int, int, int, int, int]
DIMENSIONLESS: Dim = (0, 0, 0, 0, 0)
_BYTE: Dim = (1, 0, 0, 0, 0)
_FLOP: Dim = (0, 1, 0, 0, 0)
_SECOND: Dim = (0, 0, 1, 0, 0)
_WATT: Dim = (0, 0, 0, 1, 0)
_DOLLAR: Dim = (0, 0, 0, 0, 1)
TIME: Dim = _SECOND
BYTE_RATE: Dim = (1, 0, -1, 0, 0)

_ATOMS: dict[str, tuple[float, Dim]] = {}


def _atom(names: str, scale: float, dim: Dim) -> None:
    for name in names.split():
        _ATOMS[name] = (scale, dim)


_atom("B byte bytes", 1.0, _BYTE)
_atom("b bit bits", 1 / 8, _BYTE)
_atom("FLOP FLOPs flop flops", 1.0, _FLOP)
_atom("s sec secs second seconds", 1.0, _SECOND)
_atom("min mins minute minutes", 60.0, _SECOND)
_atom("h hr hrs hour hours", 3600.0, _SECOND)
_atom("day days", 86400.0, _SECOND)
_atom("W watt watts", 1.0, _WATT)
_atom("$ USD usd", 1.0, _DOLLAR)
_atom("% percent", 0.01, DIMENSIONLESS)
_atom("x ×", 1.0, DIMENSIONLESS)
# Count nouns: dimensionless, accepted so that people can type what they count.
_COUNT_NOUNS = (
    "token tokens tok request requests req user users seq seqs sequence sequences "
    "GPU GPUs gpu gpus node nodes param params parameter parameters block blocks "
    "step steps expert experts switch switches pod pods interruption interruptions "
    "slot slots layer layers restart restarts stream streams epoch epochs sender senders port ports "
    "frame frames overflow overflows postmortem postmortems link links rank ranks drive drives shard shards"
)
_atom(_COUNT_NOUNS, 1.0, DIMENSIONLESS)
# Numerics: factors of two of dynamic range, signal-to-noise ratios and score gaps (log scales, read as typed).
_atom("binade binades nat nats", 1.0, DIMENSIONLESS)
_atom("dB", 1.0, DIMENSIONLESS)
_SINGULAR = {noun: noun[:-1] for noun in (*_COUNT_NOUNS.split(), "days", "hours")
             if noun.endswith("s") and noun[:-1] in _ATOMS}  # "1 day", "1 hour": a push's one-day repair
# Rates people write as one word: "TFLOPS", "Gbps", "GBps".
_atom("FLOPS", 1.0, (0, 1, -1, 0, 0))
_atom("bps", 1 / 8, (1, 0, -1, 0, 0))
_atom("Bps", 1.0, (1, 0, -1, 0, 0))
_atom("rps qps", 1.0, (0, 0, -1, 0, 0))  # requests (queries) per second
# Binary sizes typed in lower case mean bytes ("gib"), whatever the case says about bits.
for _power, _name in enumerate(("kib", "mib", "gib", "tib"), start=1):
    _atom(_name, 2.0 ** (10 * _power), _BYTE)

_SI = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21,
       "m": 1e-3, "u": 1e-6, "µ": 1e-6, "μ": 1e-6, "n": 1e-9}
_IEC = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
# Prefixes may stand alone on a number: "6.2k", "1.5M tokens", "3 bn".
_BARE = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "bn": 1e9,
         "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
# Prefixes that only make sense before these atoms (avoid reading "min" as milli-"in").
_PREFIXABLE = {"B", "b", "FLOP", "FLOPs", "flop", "flops", "FLOPS", "bps", "Bps", "s", "W",
               "bit", "bits", "byte", "bytes"}


def is_multiplier(text: str) -> bool:
    """'k', 'M', 'bn'...: a magnitude on a number, not a unit ("4.5T" FLOP, "6.2k" GPUs)."""
    return text.strip() in _BARE


class UnitError(ValueError):
    """A unit string that is not in the tables."""


@dataclass(frozen=True)
class Unit:
    text: str
    scale: float  # multiply a value in this unit by scale to get base units
    dim: Dim

    def to_base(self, value: float) -> float:
        return value * self.scale

    def from_base(self, value: float) -> float:
        return value / self.scale


def _parse_atom(token: str) -> tuple[float, Dim]:
    if token in _ATOMS:
        return _ATOMS[token]
    if token in _BARE:
        return _BARE[token], DIMENSIONLESS
    for prefixes in (_IEC, _SI):
        for prefix, factor in prefixes.items():
            rest = token[len(prefix):]
            if token.startswith(prefix) and rest in _PREFIXABLE:
                scale, dim = _ATOMS[rest]
                return factor * scale, dim
    raise UnitError(f"unknown unit '{token}'")


def _combine(dim_a: Dim, dim_b: Dim, sign: int) -> Dim:
    return tuple(a + sign * b for a, b in zip(dim_a, dim_b))  # type: ignore[return-value]


_SEPARATORS = re.compile(r"\s*(?:/|\bper\b)\s*")
_PRODUCT = re.compile(r"\s*[·*\-]\s*|\s+")


@lru_cache(maxsize=1024)  # a sheet formats hundreds of values in a few dozen units
def parse_unit(text: str) -> Unit:
    """Parse 'GiB', 'TFLOP/s', 'FLOP/B', 'tokens/s', 'GPU-days', 'Gb/s', '%' ..."""
    raw = text.strip()
    if raw == "":
        return Unit("", 1.0, DIMENSIONLESS)
    parts = _SEPARATORS.split(raw)
    scale, dim = 1.0, DIMENSIONLESS
    for index, part in enumerate(parts):
        tokens = [t for t in _PRODUCT.split(part) if t]
        if not tokens and index == 0 and len(parts) > 1:
            continue  # "/s": per second, of whatever the box counts
        if not tokens:
            raise UnitError(f"malformed unit '{raw}'")
        for token in tokens:
            s, d = _parse_atom(token)
            if index == 0:
                scale, dim = scale * s, _combine(dim, d, +1)
            else:
                scale, dim = scale / s, _combine(dim, d, -1)
    return Unit(raw, scale, dim)


def dim_name(dim: Dim) -> str:
    names = ("bytes", "FLOP", "time", "power", "money")
    num = [n if e == 1 else f"{n}^{e}" for n, e in zip(names, dim) if e > 0]
    den = [n if e == -1 else f"{n}^{-e}" for n, e in zip(names, dim) if e < 0]
    if not num and not den:
        return "a plain number"
    text = "·".join(num) or "1"
    return text + ("/" + "·".join(den) if den else "")


@lru_cache(maxsize=8192, typed=True)  # a variant prints each given two or three times, and most recur across variants
def format_number(value: float, sig: int = 4) -> str:
    """A number as a person reads it: '327,680', '42.12', '0.0421', '2.4×10^25'.

    The text always parses back (parse.parse_quantity) to the value within `sig` figures.
    """
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        exponent = math.floor(math.log10(magnitude))
        decimals = max(sig - 1 - exponent, 0)
        rounded = round(value, decimals)
        if abs(rounded) >= 10 ** (exponent + 1) and decimals > 0:
            decimals -= 1
        text = f"{rounded:,.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    mantissa, power = f"{value:.{sig - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}×10^{int(power)}"


def count_text(n: float, noun: str) -> str:
    """A count with its noun, singular for one: '1 node', '3 nodes', '2 halvings'."""
    return f"{format_number(n)} {noun}{'' if n == 1 else 's'}"


def figures_against(value: float, line: float, sig: int = 3) -> int:
    """The significant figures that print `value` on its own side of `line`, the threshold it is judged
    against: 1.245 against 1.25 prints as 1.245, not as 1.25 (which would read as meeting it)."""
    def side(x: float) -> int:
        return (x > line) - (x < line)

    while sig < 15 and side(float(f"{value:.{sig - 1}e}")) != side(value):
        sig += 1
    return sig


def significant_digits(value: float) -> int:
    """How many figures a data figure is written with ('405.85': 5, '126': 3, '0.5': 1)."""
    return max(len(f"{abs(value):.10g}".split("e")[0].replace(".", "").strip("0")), 1) if value else 1


def format_exact(value: float) -> str:
    """A data figure as printed in full ('405.85', '1,978.9', '126'): what the solver uses."""
    return format_number(value, significant_digits(value))


def format_quantity(value_base: float, unit: str, sig: int = 4) -> str:
    """Format a value held in base units in the display unit `unit`."""
    if unit == "%":
        return f"{format_number(value_base * 100, sig)}%"
    if unit in ("x", "×"):
        return f"{format_number(value_base, sig)}×"
    if unit in ("$", "USD"):
        number = format_number(value_base, sig)
        return f"-${number[1:]}" if number.startswith("-") else f"${number}"
    if unit.startswith("$/"):  # a price per something reads "$3/h", not "3 $/h"
        number = format_number(parse_unit(unit).from_base(value_base), sig)
        return f"-${number[1:]}{unit[1:]}" if number.startswith("-") else f"${number}{unit[1:]}"
    number = format_number(parse_unit(unit).from_base(value_base), sig)
    head, slash, rate = unit.partition("/")
    if number == "1" and head in _SINGULAR:  # "1 drive", and per time "1 request/s"
        unit = _SINGULAR[head] + slash + rate
    return f"{number} {unit}".rstrip()


def is_bit_rate(text: str) -> bool:
    """A rate in bits per second (Gb/s, Gbps, Tbit/s): a line rate, the figure read as bytes in a classic slip."""
    if "b" not in text:
        return False
    try:
        unit = parse_unit(text)
    except UnitError:
        return False
    return unit.dim == BYTE_RATE and text.strip().split("/")[0].strip().endswith(("b", "bit", "bits", "bps"))
