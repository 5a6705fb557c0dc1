"""Draw parameter values: one seeded numpy Generator, rounded before anything is solved."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers.bank import Question
from solvers.data import Catalog, Record
from solvers.units import format_number, format_quantity, parse_unit


def draw_values(question: Question, rng: np.random.Generator) -> dict[str, Any]:
    drawn: dict[str, Any] = {}
    for spec in question.parameters:
        drawn[spec.name] = spec.draw(rng, drawn)
    return drawn


def regenerate(question: Question, raw: dict[str, Any], changed: set[str], seed: int | None) -> dict[str, Any]:
    """`raw` with every generated parameter that depends on a changed one drawn again (a table
    of counters follows the window it was generated for). Each redraw has a generator of its
    own, seeded by the variant and the parameter, so the same change gives the same values."""
    values, changed = dict(raw), set(changed)
    for spec in question.parameters:
        if spec.name not in changed and {name for _, name in spec.reads} & changed:
            rng = np.random.default_rng([seed or 0, zlib.crc32(spec.name.encode())])
            values[spec.name] = spec.draw(rng, values)
            changed.add(spec.name)
    return values


def default_values(question: Question) -> dict[str, Any]:
    return {spec.name: spec.default for spec in question.parameters}


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
        record = spec.entry(value, catalog)
        if record is not None:
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
