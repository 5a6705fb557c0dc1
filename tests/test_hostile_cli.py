"""Bad command lines: each is answered in one line naming what is wrong, with exit 2, and
writes nothing."""
from __future__ import annotations

import signal
import time

import pytest

from tests.test_cli import run_cli
from tui import cli

Q = "weight-read-intensity"
HOSTILE = {  # argv -> what the one line says
    ("solve", f"{Q}@{'9' * 5000}"): "seed must be between 0 and",
    ("solve", f"{Q}@3+batch=4+batch=5"): "batch set twice",
    ("solve", Q, "--set", "batch=64", "--set", "batch=128"): "batch set twice",
    ("solve", Q, "--set", "batch=1e-300"): "out of range: this question draws",
    ("solve", Q, "--set", "batch=1e400"): "exponent out of range",
    ("solve", Q, "--set", "batch=-"): "is not a number",
    ("solve", Q, "--set", "batch=2.4×10⁻"): "batch:",
    ("solve", Q, "--set", "batch=3+4j"): "batch:",
    ("solve", Q, "--set", "batch=0"): "must be a positive number",
    ("export", "--count", "1000000"): "--count must be between 1 and 200",
    ("export", "--out", ""): "names no file",
    ("export", "--out", "/"): "names no file",
    ("export", "--out", "."): "names no file",
}


@pytest.mark.parametrize("argv", list(HOSTILE), ids=lambda argv: " ".join(argv)[:50])
def test_a_bad_command_line_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and HOSTILE[argv] in err, err
    assert time.perf_counter() - started < 5 and not list(tmp_path.iterdir())


def test_export_refuses_to_follow_a_dangling_link_and_leaves_no_partial_file(capsys, tmp_path):
    (tmp_path / "sheet-candidate.md").symlink_to(tmp_path / "elsewhere" / "x.md")
    code, _, err = run_cli(capsys, "export", Q, "--out", str(tmp_path / "sheet"))
    assert code == 2 and "is a symbolic link" in err and not (tmp_path / "elsewhere").exists()
    code, _, _ = run_cli(capsys, "export", Q, "--out", str(tmp_path / "fine"))
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == [
        "fine-candidate.md", "fine-key.md", "sheet-candidate.md"]


def test_a_solve_that_runs_too_long_is_stopped_with_one_line(capsys, monkeypatch):
    import solvers.engine

    monkeypatch.setattr(cli, "SOLVE_SECONDS", 1)
    monkeypatch.setattr(solvers.engine, "make_variant", lambda *args: time.sleep(5))
    started = time.perf_counter()
    code, _, err = run_cli(capsys, "solve", Q, "--default")
    assert code == 2 and "took over 1 s and was stopped" in err and time.perf_counter() - started < 3
    assert signal.alarm(0) == 0  # nothing left pending for whatever runs next in this process


def test_a_slow_bank_load_is_not_a_slow_solve(capsys, monkeypatch):
    loaded = cli._load
    monkeypatch.setattr(cli, "SOLVE_SECONDS", 1)  # a cold bank on a busy machine: the load alone outlasts it
    monkeypatch.setattr(cli, "_load", lambda question_id=None: time.sleep(1.5) or loaded(question_id))
    code, out, err = run_cli(capsys, "solve", Q, "--default")
    assert code == 0 and err == "" and f"[{Q}@default]" in out


def test_a_command_that_finishes_leaves_no_alarm_behind(capsys):
    code, _, _ = run_cli(capsys, "solve", Q, "--default")
    assert code == 0 and signal.alarm(0) == 0
