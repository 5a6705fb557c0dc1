"""An interview as answered: stored as one attempt (a push's keys prefixed), rebuilt from it, scored by stage."""
from __future__ import annotations

import random

import pytest

from solvers.interview import asked_keys, stage_run
from solvers.report import typed_key
from solvers.transcript import answer, by_stage, first_missed, rebuild, stored

CODES = ["kv-bytes-per-token@default", "kv-bytes-per-token@7", "kv-bytes-per-token@31",
         "weight-read-intensity@default", "weight-read-intensity@12"]


def interview(solution, catalog, rng):
    """Every stage answered: each answer its key or a blank, at random."""
    runs = [run for i in range(len(solution.question.stages)) if (run := stage_run(solution, catalog, i))]
    return [answer(run, {k: typed_key(run.solution, k) if rng.random() < 0.6 else "" for k in run.ask})
            for run in runs]


@pytest.mark.parametrize("code", CODES)
def test_stored_then_rebuilt_gives_the_same_stages_and_grades(variant, catalog, code):
    solution = variant(code)
    answered = interview(solution, catalog, random.Random(code))
    grades, typed = stored(answered)
    assert [g.key for g in grades] == list(typed) == asked_keys(done.run for done in answered)
    again = rebuild(solution, catalog, typed)
    assert [d.run.index for d in again] == [d.run.index for d in answered]
    assert [d.grades for d in again] == [d.grades for d in answered]
    assert [d.run.solution.code for d in again] == [d.run.solution.code for d in answered]


@pytest.mark.parametrize("code", CODES)
def test_the_score_by_stage_counts_every_stored_answer_once_in_its_stage(variant, catalog, code):
    solution = variant(code)
    answered = interview(solution, catalog, random.Random(code))
    grades, _ = stored(answered)
    scores = by_stage(solution.question, {g.key: g.correct for g in grades})
    assert scores == [(sum(g.correct for g in d.grades), len(d.grades)) for d in answered]


def test_a_push_not_asked_is_not_rebuilt_and_the_first_stage_missed_is_found(variant, catalog):
    solution = variant("kv-bytes-per-token@default")
    answered = interview(solution, catalog, random.Random(1))
    _, typed = stored(answered[:-1])  # the push skipped
    again = rebuild(solution, catalog, typed)
    assert [d.run.index for d in again] == [d.run.index for d in answered[:-1]]
    missed = first_missed(again)
    assert missed is None or (not again[missed].all_correct and all(d.all_correct for d in again[:missed]))
