"""An interview as answered: each stage asked, what was typed in it and its grades. The store keeps one
attempt per interview, a push's answers under its prefix; this module flattens the stages into that
shape and rebuilds them from it (a saved attempt reviewed)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from solvers.answers import Grade
from solvers.bank import Question
from solvers.data import Catalog
from solvers.engine import Solution
from solvers.interview import StageRun, stage_run


@dataclass(frozen=True)
class Answered:
    """One stage asked and graded: the run, the boxes as submitted, their grades (in the run's order)."""

    run: StageRun
    typed: Mapping[str, str]
    grades: tuple[Grade, ...]

    @property
    def all_correct(self) -> bool:
        """Every answer graded from its box is right (a checklist waits for its ticks)."""
        return self.run.solution.typed_all_correct(list(self.grades))

    def regraded(self, key: str, text: str) -> Answered:
        """This stage with one answer graded again from `text` (a checklist ticked at the reveal)."""
        grade = self.run.solution.grade_one(key, text)
        return replace(self, typed={**self.typed, key: text},
                       grades=tuple(grade if g.key == key else g for g in self.grades))


def answer(run: StageRun, typed: Mapping[str, str]) -> Answered:
    """The stage graded on its own variant's key: the boxes it asked, as typed."""
    asked = {key: typed.get(key, "") for key in run.ask}
    return Answered(run, asked, tuple(run.grade(asked)))


def stored(answered: Iterable[Answered]) -> tuple[list[Grade], dict[str, str]]:
    """One attempt's grades and typed text for every stage: a push's keys under its prefix."""
    grades: list[Grade] = []
    typed: dict[str, str] = {}
    for stage in answered:
        prefix = stage.run.prefix
        grades += [replace(g, key=prefix + g.key) for g in stage.grades]
        typed |= {prefix + key: text for key, text in stage.typed.items()}
    return grades, typed


def rebuild(solution: Solution, catalog: Catalog, typed: Mapping[str, str]) -> list[Answered]:
    """The stages of a saved attempt, regraded: every stage but a push, and a push whose keys were
    saved (one skipped or not found was not asked). Solves the pushes: run it off the UI thread."""
    answered = []
    for index, stage in enumerate(solution.question.stages):
        prefix = solution.question.push_prefix(index) if stage.push else ""
        mine = {k.removeprefix(prefix): v for k, v in typed.items() if k.startswith(prefix)} if prefix else typed
        if stage.push and not mine:
            continue
        run = stage_run(solution, catalog, index)
        if run is not None:  # graded as saved: a checklist's text is its ticks by now
            asked = {key: mine.get(key, "") for key in run.ask}
            answered.append(Answered(run, asked, tuple(run.solution.grade_one(k, asked[k]) for k in run.ask)))
    return answered


def by_stage(question: Question, verdicts: Mapping[str, bool]) -> list[tuple[int, int]]:
    """A saved attempt's score stage by stage, from its stored keys and whether each was right: (right,
    asked) for each stage it holds answers of, in the interview's order (a push's keys under its prefix)."""
    first = {key: i for i, stage in reversed(list(enumerate(question.stages))) if not stage.push for key in stage.ask}
    scores = []
    for index, stage in enumerate(question.stages):
        if question.turn_of(index) != index:
            continue  # another side's push of a turn already counted (one prefix for the turn)
        prefix = question.push_prefix(index) if stage.push else ""
        asked = [right for key, right in verdicts.items()
                 if (key.startswith(prefix) if prefix else first.get(key) == index)]
        if asked:
            scores.append((sum(asked), len(asked)))
    return scores


def first_missed(answered: Iterable[Answered]) -> int | None:
    """Where the interview went wrong first: the position of the first stage not all correct."""
    return next((i for i, stage in enumerate(answered) if not stage.all_correct), None)
