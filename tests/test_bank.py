"""Bank-wide checks: every question x 50 seeds, graded through the same parser as users."""
from __future__ import annotations

import pytest

from solvers.bank import load_bank, requirement_problems
from solvers.engine import VariantCode, make_variant, solver_function
from solvers.groups import group_names
from solvers.prompt_figures import printed_problems
from solvers.validate import check_question, constraint_report

SEEDS = 50
BANK = load_bank()
IDS = sorted(BANK.questions)


def test_bank_loads_cleanly(bank):
    assert bank.problems == []
    assert len(bank.questions) >= 8


def test_every_question_is_in_a_group_groups_yaml_names(bank):
    """The app and the statistics spell a group out from groups.yaml: none may be left unnamed."""
    assert {q.group for q in bank.questions.values()} <= set(group_names())


def test_every_solver_module_is_a_questions_own():
    """solvers/topics/<topic>/<id>.py holds the solver of question <id> of that topic and nothing else
    does: no module there is left over from a question renamed, moved or removed."""
    from pathlib import Path

    import solvers.topics

    root = Path(solvers.topics.__file__).parent
    modules = {str(p.relative_to(root).with_suffix("")).replace("/", ".") for p in root.glob("*/*.py")
               if p.name != "__init__.py"}
    assert {q.solver_module.removeprefix("solvers.topics.") for q in BANK.questions.values()} == modules
    assert not [q.id for q in BANK.questions.values() if q.solver], "the bank keeps its solvers by convention"


@pytest.mark.parametrize("qid", IDS)
def test_solver_resolves_and_default_variant_solves(bank, catalog, qid):
    question = bank.get(qid)
    assert callable(solver_function(question))
    solution = make_variant(bank, catalog, VariantCode(qid, None))
    if question.regime_sides:
        assert solution.sheet.regime is not None, "a question with regimes ends with a regime analysis"
    assert solution.sheet.assumptions, "every solution states its assumptions"
    assert question.hints and question.references
    assert sum(1 for a in question.answers if a.numeric) >= 2, "at least two numeric answers"
    assert "{" not in solution.prompt


@pytest.mark.parametrize("qid", IDS)
def test_fifty_seeds(bank, catalog, qid):
    """The self-test `infradrill validate --strict` runs, here the one run of `make test`: every
    answer kind's correct / wrong (twice the key for a number) / invalid input, the key re-solved
    from the figures as printed, select answers that change, each regime side reached by 10% of
    draws, and the interview-grade bar (no key the same in 90% of draws; for an old-shape file a
    follow-up round and a prompt of at most 8 lines at 78 columns in every draw; for a staged file,
    kv-bytes-per-token the first, its stages' bar over these draws and the variety sweep over 200)."""
    assert check_question(bank.get(qid), bank, catalog, SEEDS, strict=True) == []


def test_the_bank_meets_the_bar_validate_checks_beside_the_self_test(bank, catalog):
    """What else `validate --strict` checks: constraints that leave enough draws, prerequisites
    that exist and form no cycle."""
    assert constraint_report(bank, catalog)[1] == []
    assert requirement_problems(bank) == []


@pytest.mark.parametrize("qid", IDS)
def test_variant_code_reproduces(bank, catalog, qid):
    first = make_variant(bank, catalog, VariantCode.parse(f"{qid}@1234"))
    again = make_variant(bank, catalog, VariantCode.parse(str(first.code)))
    assert [p.raw for p in first.params] == [p.raw for p in again.params]
    assert first.expected == again.expected
    other = make_variant(bank, catalog, VariantCode(qid, 4321))
    assert [p.raw for p in other.params] != [p.raw for p in first.params]


def test_a_key_the_printed_figures_do_not_give_is_caught(bank, catalog, monkeypatch):
    """Printed to 4 figures, Llama-3.1-405B's 405.85B parameters read 405.9B: in this draw the
    weights then leave room for 696 MLA requests, not the key's 697."""
    import solvers.engine
    import solvers.prompt_figures
    from solvers.units import format_number

    code = VariantCode.parse("mla-vs-gqa-under-tp@default+model=llama-3.1-405b+gpu=b200+weight_dtype=fp8"
                             "+kv_lora_rank=256+kv_dtype=fp8+context=4352")  # seed 739's draw before 405B left them
    assert not printed_problems(make_variant(bank, catalog, code))
    for module in (solvers.engine, solvers.prompt_figures):
        monkeypatch.setattr(module, "figure_text", format_number)
    solution = make_variant(bank, catalog, code)
    assert "405.9B" in solution.prompt
    assert printed_problems(solution) == [("requests_mla", "the figures as printed give 696 requests, the key is "
                                                           "697 requests")]
