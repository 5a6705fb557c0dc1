"""Parse what a person types as an answer: a number, optionally with a unit.

Accepted: '320 GiB', '343.6GB', '3.4e11', '40%', '1.2 ms', '6,200', '2.4×10^25',
'2.4 x 10^25', '2.4*10**25', '2.4×10²⁵', '~6200 GPUs', '1.5k'. The text is matched
by a regular expression and looked up in unit tables; it is never evaluated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from solvers.units import Unit, UnitError, parse_unit


class ParseError(ValueError):
    """Text that is not a number with an optional unit; the message says why."""


@dataclass(frozen=True)
class Quantity:
    value: float  # in the unit's base units (or as typed, when unit is None)
    unit: Unit | None  # None: a bare number, read in the answer's own unit


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_NUMBER = re.compile(
    r"""^\s*(?:~|≈|about\s+)?\s*
    (?P<sign>[-+−]?)\s*
    (?P<dollar>\$?)\s*
    (?P<mantissa>(?:\d{1,3}(?:[,_ ]\d{3})+|\d+)(?:\.\d*)?|\.\d+)
    (?:
        [eE](?P<exp>[-+−]?\d+)
      | \s*[x×*·]\s*10\s*(?:\^|\*\*)\s*(?P<pow>[-+−]?\d+)
      | \s*[x×*·]\s*10(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)
    )?
    \s*(?P<unit>.*?)\s*$""",
    re.VERBOSE,
)
_MAX_LENGTH = 80


def parse_quantity(text: str) -> Quantity:
    if len(text) > _MAX_LENGTH:
        raise ParseError("answer is too long")
    if not text.strip():
        raise ParseError("empty answer")
    match = _NUMBER.match(text)
    if match is None:
        raise ParseError(f"'{text.strip()}' is not a number (try e.g. 320 GiB, 3.4e11, 40%)")
    mantissa = match["mantissa"]
    if re.search(r"[,_ ]", mantissa) and not re.fullmatch(r"\d{1,3}(?:([,_ ])\d{3})(?:\1\d{3})*(?:\.\d*)?", mantissa):
        raise ParseError(f"'{mantissa}': mixed digit group separators")
    digits = re.sub(r"[,_ ]", "", mantissa)
    exponent = match["exp"] or match["pow"] or (match["sup"] or "").translate(_SUPERSCRIPTS) or "0"
    exponent = exponent.replace("−", "-")
    if abs(int(exponent)) > 300:
        raise ParseError("exponent out of range")
    value = float(f"{digits}e{exponent}")  # as written: 2.32 * 10.0**-7 is not the float 2.32e-07
    if match["sign"] in ("-", "−"):
        value = -value
    unit_text = match["unit"]
    if match["dollar"]:  # "$8,738", "$1.2M", "$8,738/GPU": dollars, maybe a magnitude or a per-unit
        magnitudes = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "bn": 1e9, "B": 1e9}
        if unit_text in magnitudes:
            return Quantity(value * magnitudes[unit_text], parse_unit("$"))
        if not unit_text.startswith(("/", "per ")):
            raise ParseError("after a $ amount only k, M, bn or a per-unit (/GPU) may follow")
        try:
            unit = parse_unit("$" + unit_text)
        except UnitError as error:
            raise ParseError(str(error)) from None
        return Quantity(unit.to_base(value), unit)
    if unit_text.startswith(","):
        raise ParseError("use a point for decimals; commas only between groups of three digits")
    if not unit_text:
        return Quantity(value, None)
    try:
        unit = parse_unit(unit_text)
    except UnitError as error:
        raise ParseError(str(error)) from None
    return Quantity(unit.to_base(value), unit)
