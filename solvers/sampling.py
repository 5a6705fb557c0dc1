"""Draw parameter values: one seeded numpy Generator, rounded before anything is solved."""
from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers.bank import ParamSpec, Question
from solvers.data import Catalog, Record
from solvers.generators import GENERATORS
from solvers.parse import ParseError, parse_quantity
from solvers.units import format_number, format_quantity, parse_unit

# An override may leave the drawn range (an interviewer's "what if"), by up to this factor either way:
# beyond it a figure is a typo (1e-300 tokens), not a system.
OVERRIDE_REACH = 100


class ParameterError(ValueError):
    """An override or a data reference that cannot be used (one clear line)."""


def round_value(spec: ParamSpec, value: float) -> float | int:
    if spec.sig is not None:
        value = min(max(float(f"{value:.{spec.sig - 1}e}"), spec.low), spec.high)
    if spec.step is not None:
        value = round(value / spec.step) * spec.step
        # Rounding must not leave the range: fall back to the nearest multiple inside it.
        if value < spec.low:
            value += spec.step
        if value > spec.high:
            value -= spec.step
    if spec.kind == "int" or (spec.step is not None and float(spec.step).is_integer()) or float(value).is_integer():
        return int(round(value))
    return round(value, 12)


LOG_STEP = math.sqrt(2)  # one press moves a log-uniform parameter by this factor


def step_value(spec: ParamSpec, value: Any, direction: int) -> Any:
    """The next value of a parameter in `direction` (the what-if explorer's key press): the next option
    of a choice, else a step rounded as draws are, inside the range; the same value at either end."""
    if spec.kind == "choice":
        return next_choice(spec, value, direction)
    stride = spec.step or max((spec.high - spec.low) / 20, 1 if spec.kind == "int" else 0)
    proposed = value
    while True:
        proposed = proposed * LOG_STEP**direction if spec.kind == "loguniform" else proposed + direction * stride
        moved = round_value(spec, min(max(proposed, spec.low), spec.high))
        # Rounding may swallow a step (10 at one significant figure, the range's top 16): go on to the
        # next value a draw could give, or to the end of the range.
        if moved != value or not spec.low < proposed < spec.high:
            return moved


def next_choice(spec: ParamSpec, value: Any, direction: int) -> Any:
    """The option after (or before) `value` in the parameter's list; the same value at either end."""
    index = spec.choices.index(value) if value in spec.choices else 0
    return spec.choices[min(max(index + direction, 0), len(spec.choices) - 1)]


def _draw_one(spec: ParamSpec, rng: np.random.Generator, drawn: dict[str, Any]) -> Any:
    if spec.kind == "fixed":
        return spec.default
    if spec.kind == "choice":
        p = np.asarray(spec.weights, dtype=float) / sum(spec.weights) if spec.weights else None
        return spec.choices[int(rng.choice(len(spec.choices), p=p))]
    if spec.kind == "generate":
        args = {k: drawn[v[1:]] if isinstance(v, str) and v.startswith("$") else v for k, v in spec.args}
        return GENERATORS[spec.generator](rng, **args)
    if spec.kind == "int":
        value = float(rng.integers(int(spec.low), int(spec.high) + 1))
    elif spec.kind == "uniform":
        value = rng.uniform(spec.low, spec.high)
    else:
        value = math.exp(rng.uniform(math.log(spec.low), math.log(spec.high)))
    return round_value(spec, value)


def draw_values(question: Question, rng: np.random.Generator) -> dict[str, Any]:
    drawn: dict[str, Any] = {}
    for spec in question.parameters:
        drawn[spec.name] = _draw_one(spec, rng, drawn)
    return drawn


def regenerate(question: Question, raw: dict[str, Any], changed: set[str], seed: int | None) -> dict[str, Any]:
    """`raw` with every generated parameter that depends on a changed one drawn again (a table
    of counters follows the window it was generated for). Each redraw has a generator of its
    own, seeded by the variant and the parameter, so the same change gives the same values."""
    values, changed = dict(raw), set(changed)
    for spec in question.parameters:
        if spec.kind != "generate" or spec.name in changed:
            continue
        needs = {v[1:] for _, v in spec.args if isinstance(v, str) and v.startswith("$")}
        if needs & changed:
            rng = np.random.default_rng([seed or 0, zlib.crc32(spec.name.encode())])
            values[spec.name] = _draw_one(spec, rng, values)
            changed.add(spec.name)
    return values


def default_values(question: Question) -> dict[str, Any]:
    return {spec.name: spec.default for spec in question.parameters}


_IN_A_CODE = re.compile(r"[^+\s]+")  # what a variant code's '+name=value' holds (bank.VARIANT_TAIL)


def override_text(spec: ParamSpec, value: Any) -> str:
    """`value` as a variant code writes it, read back by parse_override: a choice as itself, or where
    that holds a space or a '+' ("prefix caching, structured outputs"), with each run of spaces, commas
    and '+' as one '-'; a number plainly, its exponent unsigned (1e20, not 1e+20)."""
    if spec.kind == "choice":
        text = str(value)
        return text if _IN_A_CODE.fullmatch(text) else re.sub(r"[\s,+]+", "-", text).strip("-")
    return (repr(value) if isinstance(value, float) else str(value)).replace("e+", "e")


def in_a_code(text: str) -> bool:
    """Whether a variant code can hold this override text as it is."""
    return _IN_A_CODE.fullmatch(text) is not None


def parse_override(spec: ParamSpec, text: str, catalog: Catalog) -> Any:
    """The value of `--set name=text` for this parameter, or ParameterError."""
    if spec.kind == "choice":
        if spec.source:
            if text in catalog.collections.get(spec.source, {}):
                return text
            known = ", ".join(catalog.collections.get(spec.source, {}))
            raise ParameterError(f"{spec.name}: unknown {spec.source[:-1]} '{text}' (known: {known})")
        for choice in spec.choices:
            if str(choice) == text:
                return choice
        for choice in spec.choices:  # as a variant code writes it
            if override_text(spec, choice) == text:
                return choice
        raise ParameterError(f"{spec.name}: expected one of {', '.join(map(str, spec.choices))}")
    if spec.kind in ("fixed", "generate") and not isinstance(spec.default, (int, float)):
        raise ParameterError(f"{spec.name}: this parameter cannot be set")
    try:
        quantity = parse_quantity(text)
    except ParseError as error:
        raise ParameterError(f"{spec.name}: {error}") from None
    unit = parse_unit(spec.unit)
    if quantity.unit is None:
        value = quantity.value
    elif quantity.unit.dim != unit.dim:
        raise ParameterError(f"{spec.name}: '{quantity.unit.text}' does not fit this parameter's unit '{spec.unit}'")
    else:
        value = unit.from_base(quantity.value)
    # Counts may be zero (no requests queued); sizes, rates and lengths must be positive.
    if not math.isfinite(value) or value < 0 or (value == 0 and spec.kind != "int"):
        raise ParameterError(f"{spec.name}: must be a positive number" + (" or zero" if spec.kind == "int" else ""))
    if spec.kind == "int" and not float(value).is_integer():
        raise ParameterError(f"{spec.name}: must be a whole number")
    # A fixed figure has the same reach about its value: acc_bits=1e300 or rope_dim=1e-300 ran solvers for ever.
    low, high = (spec.default, spec.default) if spec.kind == "fixed" else (spec.low, spec.high)
    lowest, highest = low / OVERRIDE_REACH, high * OVERRIDE_REACH
    if high > 0 and not lowest <= value <= highest:
        drawn = "fixes it at " + format_number(low) if spec.kind == "fixed" else \
            f"draws {format_number(low)} to {format_number(high)}"
        raise ParameterError(f"{spec.name}: {format_number(value)} is out of range: this question {drawn} and "
                             f"takes overrides from {format_number(lowest)} to {format_number(highest)}")
    return int(value) if spec.kind == "int" or float(value).is_integer() else value


def format_table(rows: list[dict[str, Any]]) -> str:
    """A generated table (e.g. per-port counters) as aligned text the prompt can show."""
    columns = list(rows[0])

    def cell(value: Any) -> str:
        return format_number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

    cells = [[cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns]

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(columns), rule, *(line(r) for r in cells)])


@dataclass(frozen=True)
class Param:
    """One parameter of a variant, as shown and as the solver sees it."""

    name: str
    label: str
    raw: Any  # the drawn value (a data key, a number in its display unit, a list)
    shown: str  # what the prompt and parameter table show
    value: Any  # what the solver gets: a Record, a number in base units, a list


def resolve(question: Question, raw: dict[str, Any], catalog: Catalog) -> list[Param]:
    params = []
    for spec in question.parameters:
        value = raw[spec.name]
        if spec.source:
            try:
                record = catalog.get(spec.source, value)
            except KeyError:
                raise ParameterError(f"{spec.name}: '{value}' is not in {spec.source}") from None
            params.append(Param(spec.name, spec.label or spec.name, value, record.name, Record(record, id=value)))
            continue
        if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
            params.append(Param(spec.name, spec.label or spec.name, value, format_table(value), list(value)))
            continue
        if isinstance(value, list):
            shown = ", ".join(format_number(v) for v in value)
            params.append(Param(spec.name, spec.label or spec.name, value, shown, list(value)))
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            base = parse_unit(spec.unit).to_base(value) if spec.unit else value  # counts stay integers
            shown = format_quantity(base, spec.unit)  # "40%", "1 request", "8,192 tokens"
            params.append(Param(spec.name, spec.label or spec.name, value, shown, base))
            continue
        params.append(Param(spec.name, spec.label or spec.name, value, spec.shown_as(value), value))
    return params
