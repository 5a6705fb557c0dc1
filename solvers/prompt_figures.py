"""What the prompt prints is what the solver uses: re-solve a variant from its figures as the
prompt prints them and name every graded answer that moves past its tolerance. A key that
depends on a figure the candidate never saw exactly (1,979 printed for 1,978.9) is wrong."""
from __future__ import annotations

from typing import Any

from solvers.answers import Number
from solvers.bank import PLACEHOLDER
from solvers.data import Record
from solvers.derivation import Reject
from solvers.engine import Solution, figure_text, run_solver
from solvers.parse import ParseError, parse_quantity


def _read_back(text: str) -> float | None:
    try:
        value = parse_quantity(text).value
    except ParseError:
        return None
    return int(value) if value.is_integer() else value


def printed_values(solution: Solution) -> dict[str, Any]:
    """The solver's inputs with every figure the prompt prints replaced by its printed value."""
    values = {p.name: p.value for p in solution.params}
    for name, field in {m.groups() for m in PLACEHOLDER.finditer(solution.question.prompt)}:
        param = solution.param(name)
        if field:
            figure = param.value.get(field)
            if isinstance(figure, (int, float)) and not isinstance(figure, bool):
                shown = _read_back(figure_text(figure))
                if shown is not None:
                    values[name] = Record({**values[name], field: shown})
        elif isinstance(param.value, (int, float)) and not isinstance(param.value, bool):
            shown = _read_back(param.shown)
            if shown is not None:
                values[name] = shown
    return values


def printed_problems(solution: Solution) -> list[tuple[str, str]]:
    """(answer key, problem) for each answer whose key the printed figures do not give."""
    try:
        sheet = run_solver(solution.question, printed_values(solution))
    except Reject:
        return []  # the printed figures alone fall outside the question: nothing to compare
    problems = []
    for spec in solution.question.answers:
        if spec.self_graded:
            continue
        if isinstance(spec, Number):
            key, printed = solution.sheet.number(spec.key), sheet.number(spec.key)
            if key == printed or (key != 0 and printed / key > 0 and spec.error_of(printed / key) <= spec.tolerance):
                continue
            text = spec.key_text
            problems.append((spec.key, f"the figures as printed give {text(printed, ())}, the key is {text(key, ())}"))
        elif (shown := sheet.results[spec.key]) != (kept := solution.sheet.results[spec.key]):
            problems.append((spec.key, f"the figures as printed give {shown!r}, the key is {kept!r}"))
    return problems


