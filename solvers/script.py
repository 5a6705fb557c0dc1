"""A variant's whole interview as the interviewer holds it: every stage run, a push searched and solved.
`solve --json/--markdown`, every export and the interviewer view read it (solvers.report words it)."""
from __future__ import annotations

from dataclasses import dataclass

from solvers.bank import PLACEHOLDER, Question, Stage
from solvers.data import Catalog
from solvers.engine import Solution
from solvers.interview import StageRun, stage_run
from solvers.reality import Comparison, compare


@dataclass(frozen=True)
class ScriptStage:
    """One stage of the script. `run` is None for a push that found nothing to push in this variant: it
    stays in the script, marked skipped, so the stages keep the file's numbering. A push written for the
    other side of the boundary (`when`) is not in it."""

    index: int
    stage: Stage
    run: StageRun | None
    question: Question

    @property
    def kind(self) -> str:
        return self.stage.kind

    @property
    def turn(self) -> int:
        """Its place in the conversation, from 1: each side's push of one turn is the same turn."""
        return self.question.turn_number(self.index)

    @property
    def turns(self) -> int:
        return self.question.turn_count

    def quotes_key(self) -> bool:
        """Whether the stage's words quote the key of an earlier stage (on paper they would give it away)."""
        keys = {spec.key for spec in self.run.solution.question.answers} if self.run else set()
        return any(match.group(1) in keys for match in PLACEHOLDER.finditer(self.stage.say))


@dataclass(frozen=True)
class Script:
    solution: Solution  # the variant asked; a push's own variant is its stage's run.solution
    stages: tuple[ScriptStage, ...]
    reality: tuple[Comparison, ...] = ()  # the question's model beside published measurements


def script(solution: Solution, catalog: Catalog, reality: tuple[Comparison, ...] | None = None) -> Script:
    """Every stage of this variant's interview, in order, and the question's measurements of real systems
    (`reality`: those already solved, as they are the same for every variant of a question). Each push searches
    and solves: slow work."""
    question, side = solution.question, solution.regime_name
    return Script(solution, tuple(ScriptStage(index, stage, stage_run(solution, catalog, index), question)
                                  for index, stage in enumerate(question.stages) if question.asks_on(index, side)),
                  compare(question, catalog) if reality is None else reality)

