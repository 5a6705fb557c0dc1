"""Grading: verdicts, tolerances, unit mismatches and slip diagnosis."""
from __future__ import annotations

import pytest

from solvers.grade import CLOSE, CORRECT, MISMATCH, UNPARSED, WRONG, AnswerSpec, Slip, grade_answer

KIB = AnswerSpec("kv", "KV per token", unit="KiB", rel=0.01)


def test_correct_in_any_unit_of_the_right_kind():
    for text in ["320 KiB", "320", "327,680 B", "327.68 kB", "0.3125 MiB", "327680"]:
        assert grade_answer(KIB, text, 327_680).verdict == CORRECT, text


def test_close_and_wrong():
    assert grade_answer(KIB, "325 KiB", 327_680).verdict == CLOSE
    grade = grade_answer(KIB, "400 KiB", 327_680)
    assert grade.verdict == WRONG and grade.error == pytest.approx(0.25)


def test_unit_mismatch_is_not_a_wrong_value():
    grade = grade_answer(KIB, "320 ms", 327_680)
    assert grade.verdict == MISMATCH and "time" in grade.message


def test_unparsable_is_not_graded():
    grade = grade_answer(KIB, "about three hundred", 327_680)
    assert grade.verdict == UNPARSED and grade.error is None


@pytest.mark.parametrize("given, slip", [
    ("640 KiB", "x2"), ("160 KiB", "x2"), ("2560 KiB", "x8"), ("40 KiB", "/8"),
    ("320 KB", "GB and GiB"), ("320000 KiB", "x1000"), ("0.32 KiB", "/1000"),
])
def test_classic_slips(given, slip):
    grade = grade_answer(KIB, given, 327_680)
    assert grade.verdict != CORRECT
    assert grade.slip is not None and grade.slip.startswith(slip), grade.slip


def test_question_specific_slip():
    grade = grade_answer(KIB, "4 KiB", 327_680, [Slip("x layers: one layer only", 1 / 80)])
    assert grade.slip == "x layers: one layer only"


def test_log_tolerance_accepts_estimates_within_a_factor():
    spec = AnswerSpec("n", "interruptions", log=0.15)
    assert grade_answer(spec, "300", 370).verdict == CORRECT
    assert grade_answer(spec, "200", 370).verdict == CLOSE
    assert grade_answer(spec, "37", 370).verdict == WRONG


def test_bare_number_in_base_units_or_percent_as_fraction():
    flops = AnswerSpec("f", "FLOPs", unit="TFLOP", rel=0.02)
    assert grade_answer(flops, "4.515e12", 4.515e12).verdict == CORRECT
    assert grade_answer(flops, "4.5T", 4.515e12).verdict == CORRECT
    share = AnswerSpec("s", "share", unit="%", rel=0.02)
    assert grade_answer(share, "40%", 0.4).verdict == CORRECT
    assert grade_answer(share, "40", 0.4).verdict == CORRECT
    assert grade_answer(share, "0.4", 0.4).verdict == CORRECT
    assert grade_answer(share, "4", 0.4).verdict == WRONG


def test_zero_key_needs_exact_zero():
    spec = AnswerSpec("u", "users", unit="requests", rel=0.02)
    assert grade_answer(spec, "0", 0).verdict == CORRECT
    assert grade_answer(spec, "1", 0).verdict == WRONG


def test_choices_by_prefix():
    spec = AnswerSpec("regime", "regime", choice=("memory-bound", "compute-bound"))
    assert grade_answer(spec, "mem", "memory-bound").verdict == CORRECT
    assert grade_answer(spec, "Compute-Bound", "memory-bound").verdict == WRONG
    assert grade_answer(spec, "bandwidth", "memory-bound").verdict == UNPARSED


ORDER = AnswerSpec("checks", "Order the checks", order=("step counter", "learning rate", "data", "loss scale"))


def test_ordering_by_letters_of_the_listed_order():
    shown = ["data", "step counter", "loss scale", "learning rate"]  # listed as A, B, C, D
    expected = ["step counter", "learning rate", "data", "loss scale"]
    for text in ["BDAC", "b d a c", "B > D > A > C", "2 4 1 3"]:
        grade = grade_answer(ORDER, text, expected, shown=shown)
        assert grade.verdict == CORRECT and grade.expected == "B D A C", text
    assert grade_answer(ORDER, "DBAC", expected, shown=shown).verdict == CLOSE  # one adjacent swap
    wrong = grade_answer(ORDER, "CADB", expected, shown=shown)
    assert wrong.verdict == WRONG and wrong.error > 0.5


@pytest.mark.parametrize("text", ["BDA", "BDAA", "BDAE", "1 2 3 9", "print(1)", ""])
def test_ordering_must_be_a_full_permutation(text):
    grade = grade_answer(ORDER, text, list(ORDER.order), shown=list(ORDER.order))
    assert grade.verdict == UNPARSED and grade.message


def test_checklist_is_self_graded_by_share_ticked():
    spec = AnswerSpec("why", "Conditions", checklist=("a", "b", "c", "d"))
    assert grade_answer(spec, "all", list(spec.checklist)).verdict == CORRECT
    assert grade_answer(spec, "1,2,3,4", list(spec.checklist)).verdict == CORRECT
    half = grade_answer(spec, "1 3", list(spec.checklist))
    assert half.verdict == CLOSE and half.given == "2/4 points"
    assert grade_answer(spec, "none", list(spec.checklist)).verdict == WRONG
    assert grade_answer(spec, "5", list(spec.checklist)).verdict == UNPARSED
    assert grade_answer(spec, "", list(spec.checklist)).verdict == UNPARSED
