"""A solved variant as data (JSON), Markdown or plain text: for the CLI and export."""
from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

from solvers.answers import Grade
from solvers.answers.base import letter
from solvers.params.generated import Generated
from solvers.units import parse_unit
from solvers.verdicts import Verdict

if TYPE_CHECKING:  # the engine imports sympy; this module is used on the TUI's start-up path
    from solvers.engine import Solution
    from solvers.interview import StageRun
    from solvers.reality import Comparison
    from solvers.script import Script, ScriptStage


def answer_value(solution: Solution, key: str) -> Any:
    """The expected answer in the answer's own unit (320 for 327,680 B asked in KiB);
    a choice's name; the items of an ordering, a selection or a checklist."""
    return solution.question.answer(key).display_value(solution.expected[key])


def expected_text(solution: Solution, key: str) -> str:
    """The key as the grade table shows it."""
    return solution.question.answer(key).key_text(solution.expected[key], solution.shown.get(key, ()))


def typed_key(solution: Solution, key: str) -> str:
    """The key as a person would type it into the answer box; grading it gives 'correct'."""
    return solution.question.answer(key).typed(solution.expected[key], solution.shown.get(key, ()))


def judgements(solution: Solution, key: str) -> list[tuple[str, str, bool, str]]:
    """A select answer's listed options at the reveal: (letter, option, holds, why)."""
    shown = solution.shown.get(key, ())
    reasons = solution.sheet.reasons.get(key, {})
    right = set(solution.expected[key])
    said = solution.question.answer(key).text
    return [(letter(i), said(option), option in right, reasons.get(option, "")) for i, option in enumerate(shown)]


def judgement_lines(solution: Solution) -> list[str]:
    """Every select answer's options with whether each holds here and why, one line each."""
    lines = []
    for spec in solution.question.answers:
        if spec.key in solution.sheet.reasons:
            lines.append(spec.shown_label)
            lines += [f"  {mark}. {'✓' if holds else '✗'} {option}: {why}"
                      for mark, option, holds, why in judgements(solution, spec.key)]
    return lines


def slips(solution: Solution, key: str) -> list[tuple[str, str]]:
    """The mistakes the answer's own derivation declares (Sheet.slip), each as (what a candidate making it
    answers, the mistake); the generic slips of a unit (bits and bytes...) are the grader's, not listed."""
    spec = solution.question.answer(key)
    return [(spec.key_text(float(solution.expected[key]) * slip.factor, ()) if spec.numeric else "", slip.label)
            for slip in solution.slips(key)]


# 4: "reality", published measurements of real systems beside the question's model (with a script);
# 3: "stages", the interview stage by stage, and each answer's declared "slips";
# 2: every quantity as {value, unit} in display units plus si in base units
JSON_SCHEMA = 5
PUSHED_KEY = "in the push, on its variant"  # an answer only a push asks has no key on the variant as drawn


def quantity(value_si: float, unit: str) -> dict[str, Any]:
    """One quantity in the JSON shape: `value` in `unit` (what the app shows), `si` in base units
    (bytes, FLOP, seconds, watts, dollars; a share as a fraction)."""
    return {"value": parse_unit(unit).from_base(value_si), "unit": unit, "si": value_si}


def _answer_dict(solution: Solution, spec: Any) -> dict[str, Any]:
    key = solution.expected[spec.key]
    out: dict[str, Any] = {"key": spec.key, "label": spec.shown_label, "kind": spec.kind}
    out |= quantity(float(key), spec.unit) if spec.numeric else {"value": spec.display_value(key), "unit": spec.unit}
    if spec.key in solution.shown:
        out["listed"] = [spec.text(item) for item in solution.shown[spec.key]]
    if spec.key in solution.sheet.reasons:
        out["judgements"] = [{"letter": mark, "option": option, "holds": holds, "why": why}
                             for mark, option, holds, why in judgements(solution, spec.key)]
    if said := slips(solution, spec.key):
        out["slips"] = [{"mistake": mistake, "gives": gives} for gives, mistake in said]
    return out


def stage_dict(stage: ScriptStage) -> dict[str, Any]:
    """One stage as JSON: its words, the keys it asks with their answers on the variant it is asked on (a
    push's pushed variant) and each key's line of why. A push that found nothing to push is "skipped"."""
    run, base = stage.run, stage.stage
    if run is None:
        return {"kind": stage.kind, "skipped": True, "say": "", "ask": [], "answers": [], "set": None, "code": None,
                "regime": None, "nudge": base.nudge or None, "cards_added": [], "hints": list(base.hints), "keys": []}
    pushed = run.solution
    return {"kind": stage.kind, "skipped": False, "say": run.say, "ask": list(run.ask),
            "answers": [_answer_dict(pushed, pushed.question.answer(key)) for key in run.ask],
            "set": {name: pushed.param(name).raw for name in run.moved} if base.push else None,
            "code": str(pushed.code), "regime": run.regime if base.push else None, "nudge": base.nudge or None,
            "cards_added": list(run.cards_added), "hints": list(run.hints),
            "keys": [line for _, line in run.key_lines()]}


def reality_dict(comparison: Comparison) -> dict[str, Any]:
    m = comparison.measured
    why = {"why": m.why} if m.why else {}
    return {"measured": m.measured, "unit": m.unit, "system": m.system, "source": m.source, "code": comparison.code,
            "answer": m.answer, "bank": comparison.bank, "ratio": comparison.ratio} | why


def to_dict(solution: Solution, script: Script | None = None) -> dict[str, Any]:
    """The variant as JSON data, with its interview stage by stage where its `script` is given; a value
    with no finite figure (a margin with no boundary in reach) is null, as JSON has no Infinity or NaN."""
    regime = solution.sheet.regime
    stages = {} if script is None else {"stages": [stage_dict(stage) for stage in script.stages],
                                        "reality": [reality_dict(c) for c in script.reality]}
    return _finite({
        "schema": JSON_SCHEMA,
        "id": solution.question.id,
        "title": solution.question.title,
        "seed": solution.code.seed,
        "code": str(solution.code),
        "prompt": solution.prompt,
        "parameters": {p.name: {"label": p.label, "value": p.raw, "shown": p.shown} for p in solution.params},
        "answers": [_answer_dict(solution, a) for a in solution.question.answers],
        "givens": [{"symbol": g.symbol, "label": g.label, **quantity(g.value, g.unit), "shown": g.shown}
                   for g in solution.sheet.givens],
        "steps": [{"key": s.key, "title": s.title, "symbol": s.symbol, "formula": s.formula,
                   "substituted": s.substituted, **quantity(s.value, s.unit), "result": s.result, "why": s.why}
                  for s in solution.sheet.steps],
        "regime": None if regime is None else {
            "name": regime.name, "summary": regime.summary,
            "boundary": {"symbol": regime.boundary.symbol, "formula": regime.boundary.formula,
                         **quantity(regime.boundary.value, regime.boundary.unit), "result": regime.boundary.result},
            "position": {"symbol": regime.position.symbol, **quantity(regime.position.value, regime.position.unit),
                         "result": regime.position.result},
            "margin": regime.margin, "margin_text": regime.margin_text, "other_side": regime.other_side},
        "assumptions": list(solution.sheet.assumptions),
        "references": list(solution.question.references),
    } | stages)


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


def to_markdown(solution: Solution, script: Script | None = None) -> str:
    """The variant as Markdown; with its `script`, the interview stage by stage follows the key table (and
    carries the options' reasons)."""
    q, sheet = solution.question, solution.sheet
    opening = [solution.prompt, ""] if script is None else []  # a script's first stage reads it
    lines = [f"# {q.title}", "", f"Variant `{solution.code}` · group {q.group} · {q.topic}", "", *opening,
             "## Parameters", "", "| parameter | value |", "|---|---|"]
    lines += [f"| {p.label}{_given_later(solution, p.name)} | {p.shown} |" for p in solution.problem_data()]
    lines += ["", "## Answers", "", "| answer | expected |", "|---|---|"]
    lines += answer_rows(solution, script)
    if script is not None:
        lines += ["", "## Interview", "", *script_markdown(script, 3)]
    elif judged := judgement_lines(solution):
        lines += ["", "## Judgements", ""] + [f"- {line.strip()}" if line.startswith(" ") else f"**{line}**"
                                                for line in judged]
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
    if script is not None and script.reality:
        lines += ["", "## In practice", ""] + [f"- {c.sentence()}" for c in script.reality]
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in sheet.assumptions]
    lines += ["", "## References", ""] + [f"- {r}" for r in q.references]
    return "\n".join(line for line in lines) + "\n"


def given_line(solution: Solution, index: int) -> str:
    """The figures stage `index` gives the candidate for the first time, as the interviewer says them ('' if none)."""
    given = solution.newly_given(index)
    return "Give now: " + "; ".join(f"{p.label} {p.shown}" for p in given) + "." if given else ""


def _given_later(solution: Solution, name: str) -> str:
    """Where a figure is held back from the opening's table: the stage that gives it."""
    index = solution.question.given_at(name)
    return f" (given at stage {solution.question.turn_number(index)})" if index else ""


def answer_rows(solution: Solution, script: Script | None) -> list[str]:
    """The table rows of each answer and its key; with the interview beside it (`script`), an answer only a
    push asks is keyed on the pushed variant, in that stage (this variant's figure is not what is graded), and
    one only the other side's push asks is not listed: this variant is never asked it."""
    if script is None:
        return [f"| {a.shown_label} | {expected_text(solution, a.key)} |" for a in solution.question.answers]
    only_pushed = solution.question.push_only
    pushed = {key for stage in script.stages if stage.stage.push and stage.run is not None for key in stage.run.ask}
    return [f"| {a.shown_label} | {PUSHED_KEY if a.key in only_pushed else expected_text(solution, a.key)} |"
            for a in solution.question.answers if a.key not in only_pushed or a.key in pushed]


def script_markdown(script: Script, depth: int) -> list[str]:
    """The interview as Markdown, a section a stage (headings of `depth`): the words to read out with the
    options listed, what a push moved and its code, the hints, then each key with its why, the reasons of
    the listed options that do not hold (the key's line gives those that do) and the slips it invites."""
    lines: list[str] = []
    for stage in script.stages:
        run, heading = stage.run, f"{'#' * depth} Stage {stage.turn} of {stage.turns}: {stage.kind}"
        if run is None:
            lines += [f"{heading}, none for this variant", "", "The engine found nothing to push here.", ""]
            continue
        if stage.stage.push:
            changes = moved(run, script.solution)
            lines += [f"{heading} to `{run.solution.code}`", "", f"Moved: {changes}."]
            lines += [f"Regime now: {run.regime}." if run.regime else "", ""]
        else:
            lines += [heading, ""]
        if run.nudge_note:
            lines += [run.nudge_note, ""]
        if run.cards_line:
            lines += [f"{run.cards_line}.", ""]
        lines += [*prompt_markdown(run.prompt), ""]
        if given := given_line(script.solution, run.index):
            lines += [given, ""]
        if run.hints:
            lines += ["Hints:", ""] + [f"{n}. {hint}" for n, hint in enumerate(run.hints, 1)] + [""]
        lines += ["Keys:", ""]
        for key, line in run.key_lines():
            lines.append(f"- **{run.solution.question.answer(key).shown_label}** — {line}")
            lines += [f"  - {note}" for note in key_notes(run.solution, key)]
        lines.append("")
    return lines


def key_notes(solution: Solution, key: str) -> list[str]:
    """What an interviewer holds beside a key besides its line of why (which gives the reasons of the options
    that hold): the reasons of the listed options that do not, and the slips the answer invites."""
    notes = [f"✗ {mark}. {option}: {why}" for mark, option, holds, why in judgements(solution, key)
             if not holds] if key in solution.sheet.reasons else []
    return notes + [f"slip: {f'{gives}, ' if gives else ''}{mistake}" for gives, mistake in slips(solution, key)]


def prompt_markdown(prompt: str) -> list[str]:
    """A stage's prompt as Markdown lines: its listed options (indented items) as a list."""
    return [f"- {line.strip()}" if line.startswith(" ") else line for line in prompt.splitlines()]


MOVED_WIDTH = 60  # a moved figure longer than this (a redrawn table or list) is named, not printed twice


def moved(run: StageRun, base: Solution) -> str:
    """What a push changed, as the interviewer's notes say it: 'label was → now; ...'. A table or long list
    the move redrew (a generated parameter) is said to be redrawn: the parameters show it whole."""
    def change(name: str) -> str:
        was, now = base.param(name), run.solution.param(name)
        if any("\n" in text or len(text) > MOVED_WIDTH for text in (was.shown, now.shown)):
            return f"{was.label} redrawn"
        return f"{was.label} {was.shown} → {now.shown}"

    def read_from_table(name: str) -> bool:  # a figure drawn from a moved table: the table's line says it
        spec = base.question.parameter(name)
        return isinstance(spec, Generated) and any(
            source in run.moved and isinstance(base.question.parameter(source), Generated) for _, source in spec.reads)

    return "; ".join(change(name) for name in run.moved if not read_from_table(name))


def to_text(solution: Solution) -> str:
    q, sheet = solution.question, solution.sheet
    prompt = "\n".join(textwrap.fill(par, 88) if par else "" for par in solution.prompt.splitlines())
    out = [f"{q.title}  [{solution.code}]", "", prompt, "", "Parameters:"]
    out += [f"  {p.label}: {p.shown}" for p in solution.problem_data()]
    out += ["", "Answers:"] + [f"  {a.shown_label}: {expected_text(solution, a.key)}" for a in q.answers]
    if judged := judgement_lines(solution):
        out += ["", "Judgements:"] + [f"  {line}" for line in judged]
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


def grade_rows(solution: Solution, grades: list[Grade]) -> list[tuple[str, str, str, str, Verdict, str]]:
    """(answer, yours, expected, error, verdict, note) per answer."""
    rows = []
    for grade in grades:
        spec = solution.question.answer(grade.key)
        note = grade.slip or grade.message or ""
        rows.append((spec.shown_label, grade.given or "—", grade.expected, spec.error_text(grade), grade.verdict, note))
    return rows
