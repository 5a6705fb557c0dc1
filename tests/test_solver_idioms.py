"""One idiom each in the solvers: a decision between two sheet values is the sheet's exact comparison, never a
comparison of their floats (which a tie, or two values a rounding apart, decides by accident)."""
from __future__ import annotations

import ast
from pathlib import Path

SOLVERS = Path(__file__).parents[1] / "solvers"


def _sheet_number(node: ast.AST) -> bool:
    """s.value(x) or s.evaluate(x): a sheet value read as a float."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("value", "evaluate") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "s")


def float_decisions(source: str) -> list[int]:
    """The lines that compare two sheet values as floats."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare) and _sheet_number(node.left)
            and any(_sheet_number(right) for right in node.comparators)]


def test_the_check_finds_a_float_decision_and_passes_an_exact_one():
    assert float_decisions("if s.value(a) <= s.value(b):\n    pass\n") == [1]
    assert float_decisions("if s.compare(a, b) <= 0 and s.value(a) > 3:\n    pass\n") == []


def test_no_solver_decides_between_two_sheet_values_by_their_floats():
    found = [f"{path.relative_to(SOLVERS.parent)}:{line}" for path in sorted(SOLVERS.rglob("*.py"))
             for line in float_decisions(path.read_text())]
    assert not found, f"use s.compare(a, b) for these decisions: {found}"
