"""From a question and a seed (or the defaults) to a solved variant, and grading.

A variant code names a variant exactly: 'kv-bytes-per-token@4821',
'kv-bytes-per-token@default', optionally with overrides '...@4821+context=4096'.
"""
from __future__ import annotations

import importlib
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.bank import PLACEHOLDER, Bank, Question
from solvers.data import Catalog
from solvers.derivation import Reject, Sheet
from solvers.grade import Grade, Slip, grade_answer
from solvers.sampling import Param, ParameterError, default_values, draw_values, parse_override, resolve, round_value
from solvers.units import format_number, parse_unit

MAX_SEED = 2**31 - 1
MAX_REDRAWS = 64
_CODE = re.compile(r"^(?P<id>[a-z0-9.-]+)@(?P<seed>default|\d+)(?P<sets>(?:\+[a-z0-9_]+=[^+\s]+)*)$")


class VariantError(ValueError):
    """A variant that cannot be made: unknown id, bad seed or code, rejected override."""


@dataclass(frozen=True)
class VariantCode:
    question_id: str
    seed: int | None  # None: the default variant
    overrides: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        text = f"{self.question_id}@{'default' if self.seed is None else self.seed}"
        return text + "".join(f"+{k}={v}" for k, v in self.overrides)

    @classmethod
    def parse(cls, text: str) -> VariantCode:
        match = _CODE.match(text.strip())
        if match is None:
            raise VariantError(f"'{text.strip()}' is not a variant code (like kv-bytes-per-token@4821)")
        seed = None if match["seed"] == "default" else int(match["seed"])
        if seed is not None and seed > MAX_SEED:
            raise VariantError(f"seed must be between 0 and {MAX_SEED}")
        sets = tuple(tuple(item.split("=", 1)) for item in match["sets"].split("+")[1:])
        return cls(match["id"], seed, sets)  # type: ignore[arg-type]


@dataclass
class Solution:
    question: Question
    code: VariantCode
    params: list[Param]
    prompt: str
    sheet: Sheet
    expected: dict[str, float | str | list[str]] = field(default_factory=dict)
    shown_orders: dict[str, list[str]] = field(default_factory=dict)  # ordering items as listed, A, B, C...

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def grade_one(self, key: str, text: str) -> Grade:
        slips = [Slip(label, factor) for label, factor in self.sheet.slips]
        return grade_answer(self.question.answer(key), text, self.expected[key], slips, self.shown_orders.get(key))

    def grade(self, answers: dict[str, str]) -> list[Grade]:
        return [self.grade_one(spec.key, answers.get(spec.key, "")) for spec in self.question.answers]


class _Values(dict):
    """Parameter values for a solver: p.model.layers, p.context, p['dtype']."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def solver_function(question: Question) -> Callable[[_Values, Sheet], None]:
    module_name, _, function_name = question.solver.rpartition(".")
    module = importlib.import_module(f"solvers.topics.{module_name}")
    return getattr(module, function_name)


def render_prompt(question: Question, params: list[Param]) -> str:
    by_name = {p.name: p for p in params}

    def substitute(match: re.Match) -> str:
        param = by_name[match.group(1)]
        if match.group(2):  # a field of a data record; a GPU without fp8 shows "n/a"
            value = param.value.get(match.group(2))
            if value is None:
                return "n/a"
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            return format_number(value) if numeric else str(value)
        return param.shown

    return _reflow(PLACEHOLDER.sub(substitute, question.prompt).strip())


def _reflow(text: str) -> str:
    """Join the hard-wrapped lines of each paragraph so the terminal can wrap them;
    list items and indented lines keep their own line."""
    out: list[str] = []
    for line in text.splitlines():
        joinable = out and out[-1] and line.strip() and not line.startswith((" ", "-", "*", "|"))
        if joinable:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def solve_values(question: Question, raw: dict[str, Any], catalog: Catalog) -> tuple[list[Param], Sheet]:
    """Solve for exactly these parameter values (raises Reject for an impossible set)."""
    params = resolve(question, raw, catalog)
    sheet = Sheet()
    solver_function(question)(_Values({p.name: p.value for p in params}), sheet)
    # A checklist's key is the list itself; every other answer comes from the solver.
    missing = [a.key for a in question.answers if a.key not in sheet.results and a.kind != "checklist"]
    if missing:
        raise RuntimeError(f"{question.id}: solver produced no value for {', '.join(missing)}")
    for spec in question.answers:
        if spec.kind == "order" and sorted(sheet.results[spec.key]) != sorted(spec.order):
            raise RuntimeError(f"{question.id}: the order for {spec.key} is not a permutation of its items")
    return params, sheet


def expected_answers(question: Question, sheet: Sheet) -> dict[str, float | str | list[str]]:
    return {a.key: list(a.checklist) if a.kind == "checklist" else sheet.results[a.key] for a in question.answers}


def _shown_orders(question: Question, code: VariantCode, expected: dict) -> dict[str, list[str]]:
    """Ordering items in a per-variant shuffle that never gives the answer away."""
    shown = {}
    for spec in question.answers:
        if spec.kind != "order":
            continue
        items = list(spec.order)
        random.Random(f"{question.id}@{code.seed}:{spec.key}").shuffle(items)
        if items == list(expected[spec.key]):
            items = items[1:] + items[:1]
        shown[spec.key] = items
    return shown


def _ordering_lists(question: Question, shown: dict[str, list[str]]) -> str:
    parts = []
    for spec in question.answers:
        if spec.key in shown:
            lines = [f"  {chr(ord('A') + i)}. {item}" for i, item in enumerate(shown[spec.key])]
            parts.append(f"{spec.label} (give the letters in order):\n" + "\n".join(lines))
    return "".join(f"\n\n{part}" for part in parts)


def make_variant(bank: Bank, catalog: Catalog, code: VariantCode) -> Solution:
    """Draw (or take the defaults), round, solve. Raises VariantError on bad input."""
    try:
        question = bank.get(code.question_id)
    except KeyError as error:
        raise VariantError(error.args[0]) from None
    if code.seed is not None and not 0 <= code.seed <= MAX_SEED:
        raise VariantError(f"seed must be between 0 and {MAX_SEED}")
    overrides = {}
    for name, text in code.overrides:
        try:
            spec = question.parameter(name)
        except KeyError:
            names = ", ".join(p.name for p in question.parameters)
            raise VariantError(f"{question.id} has no parameter '{name}' (it has: {names})") from None
        try:
            overrides[name] = parse_override(spec, text, catalog)
        except ParameterError as error:
            raise VariantError(str(error)) from None
    rng = np.random.default_rng(code.seed) if code.seed is not None else None
    last_reason = ""
    for _ in range(MAX_REDRAWS if rng is not None else 1):
        raw = draw_values(question, rng) if rng is not None else default_values(question)
        raw.update(overrides)
        try:
            params, sheet = solve_values(question, raw, catalog)
        except Reject as reason:
            last_reason = str(reason)
            continue
        except ParameterError as error:
            raise VariantError(str(error)) from None
        expected = expected_answers(question, sheet)
        shown = _shown_orders(question, code, expected)
        prompt = render_prompt(question, params) + _ordering_lists(question, shown)
        return Solution(question, code, params, prompt, sheet, expected, shown)
    raise VariantError(f"{code}: no valid variant ({last_reason})")


@dataclass(frozen=True)
class SweepPoint:
    x: float  # the swept parameter, in its display unit
    y: float  # the answer, in its own unit
    regime: str


def sweep(solution: Solution, catalog: Catalog, parameter: str, answer: str, points: int = 40) -> list[SweepPoint]:
    """Re-solve the variant with one parameter stepped across its range (all else fixed)."""
    spec = solution.question.parameter(parameter)
    if spec.kind not in ("int", "uniform", "loguniform"):
        raise ValueError(f"{parameter} is not a numeric range")
    spaced = np.geomspace if spec.kind == "loguniform" else np.linspace
    xs = {round_value(spec, float(x)) for x in spaced(spec.low, spec.high, points)}
    xs.add(solution.param(parameter).raw)
    raw = {p.name: p.raw for p in solution.params}
    unit = parse_unit(solution.question.answer(answer).unit)
    curve = []
    for x in sorted(xs):
        raw[parameter] = x
        try:
            _, sheet = solve_values(solution.question, raw, catalog)
        except Reject:
            continue
        y = unit.from_base(float(sheet.results[answer]))
        if math.isfinite(y):
            curve.append(SweepPoint(float(x), y, sheet.regime.name if sheet.regime else ""))
    return curve
