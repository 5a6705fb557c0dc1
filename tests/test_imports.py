"""Import hygiene: the engine never imports Textual; the app starts without sympy."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SOLVER_MODULES = sorted(
    "solvers." + ".".join(p.with_suffix("").relative_to(Path("solvers")).parts)
    for p in Path("solvers").rglob("*.py") if p.name != "__init__.py"
)


def modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", SOLVER_MODULES)
def test_solvers_never_import_textual(module):
    loaded = modules_after(f"import {module}")
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)


def test_app_import_does_not_import_sympy():
    loaded = modules_after("import tui.app")
    assert "textual.app" in loaded
    assert "sympy" not in loaded


def test_listing_the_bank_does_not_import_sympy():
    loaded = modules_after("from solvers.bank import load_bank; load_bank()")
    assert "sympy" not in loaded


def test_the_practice_system_never_imports_textual_or_sympy():
    loaded = modules_after("import practice.store, practice.review, practice.stats, practice.transfer")
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)
    assert "sympy" not in loaded
