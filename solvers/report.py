"""A solved variant as data (JSON), Markdown or plain text: for the CLI and export."""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from solvers.grade import Grade, letters
from solvers.units import format_number, format_quantity, parse_unit

if TYPE_CHECKING:  # the engine imports sympy; this module is used on the TUI's start-up path
    from solvers.engine import Solution


def answer_value(solution: Solution, key: str) -> float | str | list[str]:
    """The expected answer in the answer's own unit (320 for 327,680 B asked in KiB);
    a choice's name; the items of an ordering or a checklist, in the right order."""
    spec = solution.question.answer(key)
    expected = solution.expected[key]
    if not spec.numeric:
        return expected
    return parse_unit(spec.unit).from_base(float(expected))


def expected_text(solution: Solution, key: str) -> str:
    """The key as the grade table shows it."""
    spec = solution.question.answer(key)
    expected = solution.expected[key]
    if spec.kind == "choice":
        return str(expected)
    if spec.kind == "order":
        return " › ".join(expected)
    if spec.kind == "checklist":
        return "; ".join(expected)
    return format_quantity(float(expected), spec.unit)


def typed_key(solution: Solution, key: str) -> str:
    """The key as a person would type it into the answer box (letters for an ordering,
    'all' for a checklist); grading it must give 'correct'."""
    spec = solution.question.answer(key)
    expected = solution.expected[key]
    if spec.kind == "order":
        return letters(list(expected), solution.shown_orders[key])
    if spec.kind == "checklist":
        return "all"
    if spec.kind == "choice":
        return str(expected)
    return format_quantity(float(expected), spec.unit, sig=6)


def to_dict(solution: Solution) -> dict[str, Any]:
    regime = solution.sheet.regime
    return {
        "id": solution.question.id,
        "title": solution.question.title,
        "seed": solution.code.seed,
        "code": str(solution.code),
        "prompt": solution.prompt,
        "parameters": {p.name: {"label": p.label, "value": p.raw, "shown": p.shown} for p in solution.params},
        "answers": [{"key": a.key, "label": a.label, "value": answer_value(solution, a.key), "unit": a.unit}
                    for a in solution.question.answers],
        "givens": [{"symbol": g.symbol, "label": g.label, "value": g.value, "unit": g.unit, "shown": g.shown}
                   for g in solution.sheet.givens],
        "steps": [{"key": s.key, "title": s.title, "symbol": s.symbol, "formula": s.formula,
                   "substituted": s.substituted, "value": s.value, "unit": s.unit, "result": s.result, "why": s.why}
                  for s in solution.sheet.steps],
        "regime": None if regime is None else {
            "name": regime.name, "summary": regime.summary,
            "boundary": {"symbol": regime.boundary.symbol, "formula": regime.boundary.formula,
                         "value": regime.boundary.value, "result": regime.boundary.result},
            "position": {"symbol": regime.position.symbol, "value": regime.position.value,
                         "result": regime.position.result},
            "margin": regime.margin, "margin_text": regime.margin_text, "other_side": regime.other_side},
        "assumptions": list(solution.sheet.assumptions),
        "references": list(solution.question.references),
    }


def to_markdown(solution: Solution) -> str:
    q, sheet = solution.question, solution.sheet
    lines = [f"# {q.title}", "", f"Variant `{solution.code}` · group {q.group} · {q.topic}", "", solution.prompt, "",
             "## Parameters", "", "| parameter | value |", "|---|---|"]
    lines += [f"| {p.label} | {p.shown} |" for p in solution.params if "\n" not in p.shown]
    lines += ["", "## Answers", "", "| answer | expected |", "|---|---|"]
    lines += [f"| {a.label} | {expected_text(solution, a.key)} |" for a in q.answers]
    lines += ["", "## Given", "", "| symbol | what | value |", "|---|---|---|"]
    lines += [f"| `{g.symbol}` | {g.label} | {g.shown} |" for g in sheet.givens]
    lines += ["", "## Derivation", ""]
    for number, step in enumerate(sheet.steps, 1):
        lines += [f"{number}. **{step.title}**: `{step.symbol} = {step.formula}`",
                  f"   = `{step.substituted}` = **{step.result}**", f"   *{step.why}*" if step.why else ""]
    regime = sheet.regime
    if regime is not None:
        lines += ["", f"## Regime: {regime.name}", "", regime.summary, "",
                  f"Boundary `{regime.boundary.equation}` = {regime.boundary.result}; "
                  f"this variant: {regime.position.result} ({regime.margin_text}).", "",
                  f"Other side: {regime.other_side}"]
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in sheet.assumptions]
    lines += ["", "## References", ""] + [f"- {r}" for r in q.references]
    return "\n".join(line for line in lines) + "\n"


def to_text(solution: Solution) -> str:
    q, sheet = solution.question, solution.sheet
    prompt = "\n".join(textwrap.fill(par, 88) if par else "" for par in solution.prompt.splitlines())
    out = [f"{q.title}  [{solution.code}]", "", prompt, "", "Parameters:"]
    out += [f"  {p.label}: {p.shown}" for p in solution.params if "\n" not in p.shown]  # tables: in the prompt
    out += ["", "Answers:"] + [f"  {a.label}: {expected_text(solution, a.key)}" for a in q.answers]
    out += ["", "Given:"] + [f"  {g.symbol} = {g.shown}  ({g.label})" for g in sheet.givens]
    out += ["", "Derivation:"]
    for number, step in enumerate(sheet.steps, 1):
        out += [f"  {number}. {step.title}", f"     {step.symbol} = {step.formula}",
                f"        = {step.substituted}", f"        = {step.result}"]
        if step.why:
            out.append(f"     ({step.why})")
    regime = sheet.regime
    if regime is not None:
        out += ["", f"Regime: {regime.name}", f"  {regime.summary}",
                f"  boundary {regime.boundary.equation} = {regime.boundary.result}",
                f"  this variant: {regime.position.result} ({regime.margin_text})",
                f"  other side: {regime.other_side}"]
    out += ["", "Assumptions:"] + [f"  - {a}" for a in sheet.assumptions]
    return "\n".join(out) + "\n"


def grade_rows(solution: Solution, grades: list[Grade]) -> list[tuple[str, str, str, str, str, str]]:
    """(answer, yours, expected, error, verdict, note) per answer."""
    rows = []
    for grade in grades:
        spec = solution.question.answer(grade.key)
        if grade.error is None or spec.kind in ("order", "checklist"):
            error = ""  # their notes say how far off they are
        elif spec.kind == "log":
            error = f"{format_number(grade.error, 2)} dec"
        elif 0 < grade.error < 1e-4:
            error = "<0.01%"
        else:
            error = f"{format_number(grade.error * 100, 2)}%"
        note = grade.slip or grade.message or ""
        rows.append((spec.label, grade.given or "—", grade.expected, error, grade.verdict, note))
    return rows
