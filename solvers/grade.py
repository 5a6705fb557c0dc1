"""Grade one answer against its key: correct / close / wrong, relative error, slip.

A slip is a classic mistake recognised from the ratio of the given value to the
expected one (x2 for FLOPs per MAC or K and V, x8 for bits vs bytes, 1.024^k for GB vs
GiB, 10^3 for a prefix, plus factors the solver names, such as the layer count).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from solvers.parse import ParseError, parse_quantity
from solvers.units import dim_name, format_quantity, is_multiplier, parse_unit

CORRECT, CLOSE, WRONG, UNPARSED, MISMATCH = "correct", "close", "wrong", "unparsed", "unit mismatch"


@dataclass(frozen=True)
class AnswerSpec:
    """How one answer is asked and compared (from the question file)."""

    key: str
    label: str
    unit: str = ""
    rel: float | None = None  # relative tolerance
    log: float | None = None  # tolerance in decades (0.3 ~ a factor of 2)
    choice: tuple[str, ...] = ()
    order: tuple[str, ...] = ()  # items to put in order; the solver says which order is right
    checklist: tuple[str, ...] = ()  # points the candidate ticks after the reveal (self-graded)

    @property
    def kind(self) -> str:
        if self.choice:
            return "choice"
        if self.order:
            return "order"
        if self.checklist:
            return "checklist"
        return "log" if self.log is not None else "rel"

    @property
    def numeric(self) -> bool:
        return self.kind in ("rel", "log")

    @property
    def tolerance(self) -> float:
        if self.kind == "log":
            return self.log  # type: ignore[return-value]
        return self.rel if self.rel is not None else 0.02


@dataclass(frozen=True)
class Grade:
    key: str
    verdict: str
    given: str
    expected: str
    error: float | None = None  # relative error (or decades, for log answers)
    slip: str | None = None
    message: str | None = None

    @property
    def correct(self) -> bool:
        return self.verdict == CORRECT


@dataclass(frozen=True)
class Slip:
    label: str
    factor: float


GENERIC_SLIPS: tuple[Slip, ...] = (
    Slip("x2: counted a multiply-add as 1 FLOP, or K and V once", 0.5),
    Slip("x2: one factor of 2 too many (FLOPs per MAC, K and V)", 2.0),
    Slip("x8: bits and bytes mixed up", 8.0),
    Slip("/8: bits and bytes mixed up", 1 / 8),
    *(Slip(f"GB and GiB mixed up (1.024^{k})", 1.024**k) for k in range(1, 5)),
    *(Slip(f"GB and GiB mixed up (1.024^-{k})", 1.024**-k) for k in range(1, 5)),
    Slip("x1000: a prefix off by one step (k/M/G/T)", 1e3),
    Slip("/1000: a prefix off by one step (k/M/G/T)", 1e-3),
    Slip("x10^6: a prefix off by two steps", 1e6),
    Slip("/10^6: a prefix off by two steps", 1e-6),
)


def diagnose(ratio: float, slips: tuple[Slip, ...] | list[Slip], tol: float = 0.005) -> str | None:
    """Name the slip whose factor is closest to `ratio`, within `tol` relative."""
    if ratio <= 0 or not math.isfinite(ratio):
        return None
    best = min(slips, key=lambda s: abs(math.log(ratio / s.factor)), default=None)
    if best is not None and abs(ratio / best.factor - 1) <= tol:
        return best.label
    return None


def match_choice(text: str, choices: tuple[str, ...]) -> str | None:
    wanted = text.strip().lower()
    if not wanted:
        return None
    exact = [c for c in choices if c.lower() == wanted]
    if exact:
        return exact[0]
    prefixed = [c for c in choices if c.lower().startswith(wanted)]
    return prefixed[0] if len(prefixed) == 1 else None


def _log_distance(value: float, expected: float) -> float:
    if value > 0 and expected > 0:
        return abs(math.log(value / expected))
    return 0.0 if value == expected else math.inf


def grade_answer(spec: AnswerSpec, text: str, expected: float | str | list[str], slips: list[Slip] | None = None,
                 shown: list[str] | None = None) -> Grade:
    """Grade `text` against the key. `shown` is the order in which ordering items were
    listed (lettered A, B, C...) to the candidate."""
    if spec.kind == "choice":
        return _grade_choice(spec, text, str(expected))
    if spec.kind == "order":
        return _grade_order(spec, text, list(expected), shown or list(spec.order))
    if spec.kind == "checklist":
        return _grade_checklist(spec, text)
    return _grade_number(spec, text, float(expected), slips or [])


def letters(items: list[str], shown: list[str]) -> str:
    """Items as the letters they were listed under: ['c', 'a'] with shown [a, b, c] -> 'C A'."""
    return " ".join(chr(ord("A") + shown.index(item)) for item in items)


def read_order(text: str, shown: list[str]) -> list[str]:
    """'BADC', 'b a d c', 'B > A > D > C' or '2 1 4 3' as a full ordering of `shown`."""
    tokens = re.findall(r"[A-Za-z]|\d+", text) if re.fullmatch(r"[\sA-Za-z0-9,;>\-]*", text) else None
    if tokens is None or not tokens:
        raise ParseError("type the letters in order, e.g. " + "".join(chr(65 + i) for i in range(len(shown)))[::-1])
    positions = [ord(t.upper()) - ord("A") if t.isalpha() else int(t) - 1 for t in tokens]
    if sorted(positions) != list(range(len(shown))):
        raise ParseError(f"use each of the {len(shown)} letters exactly once")
    return [shown[p] for p in positions]


def _grade_order(spec: AnswerSpec, text: str, expected: list[str], shown: list[str]) -> Grade:
    key_text = letters(expected, shown)
    try:
        given = read_order(text, shown)
    except ParseError as error:
        return Grade(spec.key, UNPARSED, text, key_text, message=str(error))
    rank = {item: i for i, item in enumerate(expected)}
    pairs = [(a, b) for i, a in enumerate(given) for b in given[i + 1:]]
    discordant = sum(rank[a] > rank[b] for a, b in pairs)
    verdict = CORRECT if discordant == 0 else CLOSE if discordant == 1 else WRONG
    message = None if discordant == 0 else f"{discordant} pair(s) out of order"
    return Grade(spec.key, verdict, letters(given, shown), key_text, error=discordant / len(pairs), message=message)


def read_checklist(text: str, count: int) -> set[int]:
    """Points ticked as '1,3,4', 'all' or 'none' (1-based)."""
    cleaned = text.strip().lower()
    if cleaned == "all":
        return set(range(count))
    if cleaned == "none":
        return set()
    if not re.fullmatch(r"\d+(?:[\s,;]+\d+)*", cleaned):
        raise ParseError("tick the points you covered: e.g. 1,3,4, all or none")
    ticked = {int(n) - 1 for n in re.findall(r"\d+", cleaned)}
    if not ticked <= set(range(count)):
        raise ParseError(f"points are numbered 1 to {count}")
    return ticked


def _grade_checklist(spec: AnswerSpec, text: str) -> Grade:
    count = len(spec.checklist)
    key_text = f"{count}/{count} points"
    try:
        ticked = read_checklist(text, count)
    except ParseError as error:
        return Grade(spec.key, UNPARSED, text, key_text, message=str(error))
    share = len(ticked) / count
    verdict = CORRECT if share == 1 else CLOSE if share >= 0.5 else WRONG
    return Grade(spec.key, verdict, f"{len(ticked)}/{count} points", key_text, error=1 - share,
                 message="self-graded")


def _grade_choice(spec: AnswerSpec, text: str, expected: str) -> Grade:
    picked = match_choice(text, spec.choice)
    if picked is None:
        options = ", ".join(spec.choice)
        return Grade(spec.key, UNPARSED, text, expected, message=f"pick one of: {options}")
    verdict = CORRECT if picked == expected else WRONG
    return Grade(spec.key, verdict, picked, expected)


class UnitMismatch(ValueError):
    """A value whose unit measures something else (seconds typed for bytes)."""


def read_number(spec: AnswerSpec, text: str, expected: float | None = None) -> float:
    """What the user typed for a numeric answer, in base units.

    A bare number is read in the answer's unit, unless it only makes sense in base units
    (4.5e12 typed for "TFLOP", 0.4 for "%"): given the key, the nearer reading wins.
    A bare multiplier ("4.5T") scales the answer's base unit.
    Raises ParseError or UnitMismatch.
    """
    quantity = parse_quantity(text)
    unit = parse_unit(spec.unit)
    if quantity.unit is None:
        readings = [unit.to_base(quantity.value), quantity.value]
        if expected is None:
            return readings[0]
        return min(readings, key=lambda v: _log_distance(v, expected))
    if is_multiplier(quantity.unit.text):
        return quantity.value
    if quantity.unit.dim != unit.dim:
        given, wanted = dim_name(quantity.unit.dim), dim_name(unit.dim)
        raise UnitMismatch(f"'{quantity.unit.text}' is {given}; this answer is {wanted}")
    return quantity.value


def _grade_number(spec: AnswerSpec, text: str, expected: float, slips: list[Slip]) -> Grade:
    shown_expected = format_quantity(expected, spec.unit)
    try:
        given = read_number(spec, text, expected)
    except ParseError as error:
        return Grade(spec.key, UNPARSED, text, shown_expected, message=str(error))
    except UnitMismatch as error:
        return Grade(spec.key, MISMATCH, text.strip(), shown_expected, message=str(error))
    given_text = format_quantity(given, spec.unit)
    if expected == 0:
        verdict = CORRECT if given == 0 else WRONG
        return Grade(spec.key, verdict, given_text, shown_expected)
    ratio = given / expected
    if spec.kind == "log":
        error = abs(math.log10(ratio)) if ratio > 0 else math.inf
        verdict = CORRECT if error <= spec.tolerance else CLOSE if error <= 2 * spec.tolerance else WRONG
    else:
        error = abs(ratio - 1)
        verdict = CORRECT if error <= spec.tolerance else CLOSE if error <= 3 * spec.tolerance else WRONG
    near = max(0.01, min(spec.tolerance, 0.05))
    # The question's own slips first: on a tie (1/8 is also bits vs bytes) they say more.
    slip = None if verdict == CORRECT else diagnose(ratio, [*slips, *GENERIC_SLIPS], near)
    return Grade(spec.key, verdict, given_text, shown_expected, error=error, slip=slip)
