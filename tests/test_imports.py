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


def test_the_dead_code_allow_list_names_what_exists():
    """vulture reads tests/vulture_allow.py by name only, so an entry renamed away stays listed silently
    (CalibrationCurve.rtn_error outlived its class, renamed Curve): every name it imports exists, and every
    `Name.field` it keeps alive is an attribute, a dataclass or NamedTuple field, or a TypedDict key."""
    import ast
    tree = ast.parse(Path("tests/vulture_allow.py").read_text())
    imported = {alias.asname or alias.name: _imported(node.module, alias.name)
                for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
                for alias in node.names}
    kept = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)]
    assert kept
    for node in kept:
        owner = imported[node.value.id]
        fields = {name for klass in owner.__mro__ for name in vars(klass).get("__annotations__", {})} \
            if isinstance(owner, type) else set()
        assert hasattr(owner, node.attr) or node.attr in fields, f"{node.value.id}.{node.attr}"


def _imported(module: str, name: str):
    """`from module import name`: an attribute of the module, or its submodule."""
    import importlib

    owner = importlib.import_module(module)
    return getattr(owner, name) if hasattr(owner, name) else importlib.import_module(f"{module}.{name}")


STORE_WRITES = {"transaction", "drop_legacy_settings", "record_attempt", "set_rating", "update_answers", "hold",
                "release", "save_card", "log_review", "start_mock", "finish_mock", "delete_mock"}


def test_the_app_writes_progress_only_through_the_reviewer():
    """codebase-2: store writes from the event loop go behind the session's reviewer (rating, bury, suspend,
    recording, and a mock's start, finish and deletion), so one place says what a write does to the schedule.
    The app may read the store; it calls none of its writing methods."""
    import ast

    writes = []
    for path in sorted(Path("tui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_WRITES
                    and isinstance(node.func.value, (ast.Attribute, ast.Name))
                    and (getattr(node.func.value, "attr", None) or getattr(node.func.value, "id", None)) == "store"):
                writes.append(f"{path}:{node.lineno}: store.{node.func.attr}")
    assert not writes, writes
