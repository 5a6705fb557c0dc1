"""`infradrill new`: the three files of a new question, a working staged example that passes the
strict bar and its own by-hand test as written, and refusals that write nothing."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

import solvers.topics
from solvers import scaffold
from solvers.bank import load_bank
from solvers.engine import VariantCode, make_variant
from solvers.scaffold import ScaffoldError, parse_request, write
from solvers.validate import check_question
from tui.cli import main


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """An empty checkout whose solvers the bank can import (its topics folder joins the package's)."""
    for folder in ("questions", "solvers/topics", "tests"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setattr(solvers.topics, "__path__", [*solvers.topics.__path__, str(tmp_path / "solvers/topics")])
    importlib.invalidate_caches()
    yield tmp_path
    for name in [name for name, module in sys.modules.items()  # imported from this checkout: gone with it
                 if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path))]:
        del sys.modules[name]


def test_a_new_question_passes_the_strict_bar_and_its_own_test(checkout, catalog):
    written = write(parse_request("F/scaffold-example", "scaffold-check", "Weights on one GPU"), checkout)
    assert [path.relative_to(checkout).as_posix() for path in written] == [
        "solvers/topics/scaffold_check/__init__.py", "questions/F/scaffold-example.yaml",
        "solvers/topics/scaffold_check/scaffold_example.py", "tests/topics/scaffold_check/test_scaffold_example.py"]
    bank = load_bank(checkout / "questions")
    assert bank.problems == []
    question = bank.get("scaffold-example")
    assert question.staged and question.title == "Weights on one GPU"
    assert check_question(question, bank, catalog, 50, strict=True) == []
    # Its by-hand test, run as pytest would: every seed's keys against the solver's.
    spec = importlib.util.spec_from_file_location("test_scaffold_example", written[-1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seeds = [mark.args[1] for mark in module.test_keys_by_hand.pytestmark if mark.name == "parametrize"][0]
    for seed in seeds:
        module.test_keys_by_hand(lambda code: make_variant(bank, catalog, VariantCode.parse(code)), seed)
    # A question of median size, made this way and filled in, stays within 200 lines.
    assert sum(len(path.read_text().splitlines()) for path in written) < 120


def test_its_by_hand_test_can_fail(checkout, catalog):
    """The template's by-hand model is a real check: a solver that forgets the engine's budget fails it."""
    written = write(parse_request("F/scaffold-broken", "scaffold-check", None), checkout)
    solver = written[-2]
    solver.write_text(solver.read_text().replace("W / (u * M)", "W / M"))
    bank = load_bank(checkout / "questions")
    spec = importlib.util.spec_from_file_location("test_scaffold_broken", written[-1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(AssertionError):
        module.test_keys_by_hand(lambda code: make_variant(bank, catalog, VariantCode.parse(code)), 0)


@pytest.mark.parametrize("spec, topic, message", [
    ("prefill-time", "serving", "expected GROUP/ID"),
    ("f/prefill-time", "serving", "expected GROUP/ID"),
    ("F/Prefill_Time", "serving", "expected GROUP/ID"),
    ("F/prefill-time", "Serving Stuff", "lower-case words"),
])
def test_a_malformed_request_is_refused(spec, topic, message):
    with pytest.raises(ScaffoldError, match=message):
        parse_request(spec, topic, None)


def test_nothing_is_overwritten_and_nothing_half_written(checkout):
    request = parse_request("S/twice", "serving", None)
    write(request, checkout)
    before = sorted(p for p in checkout.rglob("*") if p.is_file())
    with pytest.raises(ScaffoldError, match="exists already"):
        write(parse_request("F/twice", "memory", None), checkout)  # the id is taken, in any group
    (checkout / "questions/S/twice.yaml").unlink()
    with pytest.raises(ScaffoldError, match="would overwrite"):
        write(request, checkout)  # its solver and test are still there
    assert sorted(p for p in checkout.rglob("*") if p.is_file()) == [p for p in before if p.name != "twice.yaml"]


def test_only_a_checkout_is_written_to(tmp_path):
    with pytest.raises(ScaffoldError, match="not a source checkout"):
        write(parse_request("F/anything", "memory", None), tmp_path)


def test_the_command_writes_and_says_what_next(checkout, monkeypatch, capsys):
    monkeypatch.setattr(scaffold, "CHECKOUT", checkout)
    assert main(["new", "K2/cli-made", "--topic", "kv-cache", "--title", "Made from the CLI"]) == 0
    out = capsys.readouterr().out
    assert "questions/K2/cli-made.yaml" in out and "validate --strict" in out
    assert "title: Made from the CLI" in (checkout / "questions/K2/cli-made.yaml").read_text()
    with pytest.raises(SystemExit):
        main(["new", "K2/cli-made", "--topic", "kv-cache"])
    assert "exists already" in capsys.readouterr().err


def test_every_shipped_question_has_its_own_test_beside_its_topic(bank):
    """One trail a question: its solver at solvers/topics/<topic>/<id>.py and its test at
    tests/topics/<topic>/test_<id>.py, where `infradrill new` writes them."""
    topics = Path(__file__).parent / "topics"
    missing = []
    for question in bank.questions.values():
        folder, module = question.solver_module.split(".")[-2:]
        if not (topics / folder / f"test_{module}.py").is_file():
            missing.append(question.id)
    assert not missing
    assert not list(Path(__file__).parent.glob("test_*_questions.py"))  # no batch of questions in one file
