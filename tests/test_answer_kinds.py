"""Ordering and checklist answers end to end: shuffled listing, grading, ticking in the app."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sympy
from textual.widgets import SelectionList

import solvers.engine
from solvers.bank import Bank, parse_question
from solvers.engine import VariantCode, make_variant
from solvers.report import typed_key
from tests.pilot_helpers import question_ready, reveal, running_app, wait_for

TOY = parse_question(Path("toy.yaml"), """\
id: toy
title: Toy triage
group: T
topic: training
solver: none.toy
prompt: "Loss is flat after {steps} steps."
parameters:
  steps: {int: [100, 1000], default: 500}
answers:
  - {key: lr, label: LR at the plateau, unit: "", rel: 0.02}
  - {key: epochs, label: Epochs seen, unit: "", rel: 0.02}
  - {key: checks, label: Order the checks, order: [step counter, learning rate, data repetition, loss scale]}
  - {key: why, label: Conditions, checklist: [a receiver stops draining, PFC is on, no watchdog]}
""")


def toy_solver(p, s):
    steps = s.given("S", p.steps, "steps")
    s.step("lr", "LR", "eta", 3e-4 * 100 / steps)
    s.step("epochs", "Epochs", "E", steps / sympy.Integer(100))
    s.choose("checks", ["step counter", "learning rate", "data repetition", "loss scale"])


@pytest.fixture
def toy_bank(monkeypatch):
    monkeypatch.setattr(solvers.engine, "solver_function", lambda question: toy_solver)
    return Bank({"toy": TOY})


def test_ordering_items_are_listed_shuffled_and_stable(toy_bank, catalog):
    first = make_variant(toy_bank, catalog, VariantCode("toy", 3))
    again = make_variant(toy_bank, catalog, VariantCode("toy", 3))
    shown = first.shown["checks"]
    assert shown == again.shown["checks"]
    assert shown != first.expected["checks"] and sorted(shown) == sorted(TOY.answer("checks").items)
    for letter, item in zip("ABCD", shown):
        assert f"  {letter}. {item}" in first.prompt
    assert first.expected["why"] == list(TOY.answer("why").points)
    grades = first.grade({key.key: typed_key(first, key.key) for key in TOY.answers})
    assert [g.verdict for g in grades] == ["correct"] * 4


def test_a_checklist_box_holds_notes_until_the_points_are_ticked(toy_bank, catalog):
    """Submitted from the boxes, a checklist grades as unanswered, whatever its box says, and
    the others decide whether the round was all correct."""
    solution = make_variant(toy_bank, catalog, VariantCode("toy", 3))
    typed = {spec.key: typed_key(solution, spec.key) for spec in TOY.answers} | {"why": "1,2,3"}
    by_key = {g.key: g for g in solution.grade_typed(typed)}
    assert by_key["why"].verdict == "unparsed" and solution.grade_one("why", "1,2,3").verdict == "correct"
    assert solution.typed_all_correct(list(by_key.values()))
    wrong = solution.grade_typed(typed | {"lr": "1"})
    assert not solution.typed_all_correct(wrong)


async def _tick_the_checklist(bank):
    async with running_app(bank_loader=lambda: bank) as (app, pilot):
        app.open_question("toy")
        await wait_for(pilot, lambda: question_ready(app))
        solution = app.screen.solution
        for spec in TOY.answers[:3]:  # "×10^" cannot be pressed through Pilot: insert the text
            app.screen.query_one(f"#answer-{spec.key}").insert_text_at_cursor(typed_key(solution, spec.key))
        app.screen.query_one("#answer-why").focus()
        await pilot.press(*"watchdog")
        await reveal(app, pilot)  # the follow-up round, if the toy gets one, skipped
        before = {g.key: g.verdict for g in app.screen.grades}
        ticks = app.screen.query_one("#tick-why", SelectionList)
        screen = app.screen

        def why():
            return next(g for g in screen.grades if g.key == "why")

        ticks.select(0)
        ticks.select(2)
        await wait_for(pilot, lambda: why().given == "2/3 points")
        partly = {g.key: (g.verdict, g.given) for g in screen.grades}
        ticks.select(1)
        await wait_for(pilot, lambda: why().given == "3/3 points")
        return before, partly, {g.key: g.verdict for g in screen.grades}


def test_checklist_is_ticked_after_the_reveal(toy_bank, data_dir):
    before, partly, after = asyncio.run(_tick_the_checklist(toy_bank))
    assert before == {"lr": "correct", "epochs": "correct", "checks": "correct", "why": "unparsed"}
    assert partly["why"] == ("close", "2/3 points")
    assert after["why"] == "correct"
