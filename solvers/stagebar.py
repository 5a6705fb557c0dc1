"""The bar on a question file that declares its stages (QUESTION-BAR 1 and 4), for `validate --strict`:
two to four turns (a push for each side, `when`, is one turn); short stages (the opening's words at most 4
lines at 78 columns, a later stage's at most 3, at most 4 answers a stage); no conventions card named in
what the interviewer says (the screen lists the cards in play); at least one push, and pushes that work:
each crosses the regime boundary in at least 90% of draws unless it declares itself a nudge, and a
declared push is refused by realism (or the solver) in at most 10% of draws, the refusing constraint
named. Each problem is one line naming the file and the stage (stages[i], as the parser names them).
"""
from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import dataclass, field

from solvers.bank import Question, Stage
from solvers.conventions import named_cards
from solvers.data import Catalog
from solvers.derivation import Reject
from solvers.engine import SOLVER_FAULTS, Solution, solve_changed
from solvers.followup import declared_changes
from solvers.interview import stage_run
from solvers.params import ParameterError

WIDTH = 78
OPENING_LINES, LATER_LINES = 4, 3  # what the interviewer says, before the parameters and listed options
MAX_ASKS = 4
MIN_TURNS, MAX_TURNS = 2, 4  # an opening and a push at least; past four it is a worksheet again
MIN_CROSSING = 0.9  # a push crosses the regime boundary in this share of draws, or is a declared nudge
MAX_REFUSED = 0.1  # a declared push realism refuses in more draws than this is no push


def text_lines(text: str) -> int:
    """Lines a text takes at 78 columns (each paragraph wrapped; an empty line counts)."""
    return sum(len(textwrap.wrap(paragraph, WIDTH)) or 1 for paragraph in text.splitlines())


def static_problems(question: Question) -> list[str]:
    """What the file itself shows: too many answers in a stage, a card named in a say, no push."""
    where, problems = question.path, []
    for index, stage in enumerate(question.stages):
        if len(stage.ask) > MAX_ASKS:
            problems.append(f"{where}: stages[{index}]: asks {len(stage.ask)} answers (at most {MAX_ASKS}): "
                            "what a strong candidate would not be asked goes in the worked solution")
        if named := named_cards(stage.say):
            problems.append(f"{where}: stages[{index}].say: names the conventions card(s) {', '.join(named)}: "
                            "the screen lists the cards in play; say the situation")
    if not any(stage.push for stage in question.stages):
        problems.append(f"{where}: stages: no push (a stage with set: or push: generated)")
    turns = len({question.turn_of(index) for index in range(len(question.stages))})
    if not MIN_TURNS <= turns <= MAX_TURNS:
        problems.append(f"{where}: stages: {turns} turns (from {MIN_TURNS} to {MAX_TURNS}; a push for each side, "
                        "when: ..., is one turn): fold what a strong candidate would not be asked into the "
                        "worked solution")
    return problems


@dataclass
class _PushTally:
    crossed: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by the constraint (or solver answer) refusing


def draw_problems(question: Question, draws: list[Solution], catalog: Catalog,
                  pushed: list[Solution] | None = None) -> list[str]:
    """What the draws show: each stage's words over the limit (the longest draw named), a push that does
    not cross often enough, a declared push refused too often. Every stage of every draw is run as the
    interview runs it (a push searches and solves: the slow part); the pushed variants are added to
    `pushed` where it is given, for the variety of what only a push asks."""
    where = question.path
    longest: dict[int, tuple[int, str]] = {}  # stage -> (lines, variant) of the first longest
    pushes: dict[int, _PushTally] = {}
    for solution in draws:
        for index, stage in enumerate(question.stages):
            if stage.when and stage.when != solution.regime_name:
                continue  # the other side's push of this turn
            run = stage_run(solution, catalog, index)
            if stage.push:
                if pushed is not None and run is not None:
                    pushed.append(run.solution)
                tally = pushes.setdefault(question.turn_of(index), _PushTally())
                crossed = run is not None and run.regime is not None and run.regime != solution.regime_name
                tally.crossed += crossed or bool(stage.nudge)
                if stage.set and (refusal := push_refusal(solution, catalog, stage)):
                    tally.refused[f"stages[{index}]: {refusal}" if stage.when else refusal] += 1
            if run is not None and stage.say and (lines := text_lines(run.say)) > longest.get(index, (0, ""))[0]:
                longest[index] = (lines, str(run.solution.code))
    problems = []
    for index, (lines, code) in sorted(longest.items()):
        limit = OPENING_LINES if index == 0 else LATER_LINES
        if lines > limit:
            problems.append(f"{where}: stages[{index}].say: {lines} lines at {WIDTH} columns ({code}), "
                            f"over {limit}")
    for index, tally in sorted(pushes.items()):  # by turn: a push, or one push for each side (`when`)
        if tally.crossed < MIN_CROSSING * len(draws):
            problems.append(f"{where}: stages[{index}]: the push crosses the regime boundary in {tally.crossed} "
                            f"of {len(draws)} draws (at least {MIN_CROSSING:.0%}): move what crosses it, give "
                            "each side its own push (when: ...), or say why it is a nudge (nudge: ...)")
        refused = sum(tally.refused.values())
        if refused > MAX_REFUSED * len(draws):
            which = ", ".join(f"{name} ({count})" for name, count in tally.refused.most_common())
            problems.append(f"{where}: stages[{index}].set: refused in {refused} of {len(draws)} draws "
                            f"(at most {MAX_REFUSED:.0%}) by {which}")
    return problems


WITHHELD_DRAWS = 12  # draws whose held-back figures are each moved once to see what they feed


def withheld_problems(question: Question, draws: list[Solution], catalog: Catalog) -> list[str]:
    """A figure a stage `gives` that an earlier stage's answer depends on: that answer could not be worked
    from the tables the candidate had. Each held-back figure of a few draws is moved to its nearest other
    value and the earlier keys compared."""
    problems: list[str] = []
    for name in sorted({name for stage in question.stages for name in stage.gives}):
        at = question.given_at(name)
        earlier = [key for stage in question.stages[:at] if not stage.push for key in stage.ask]
        for solution in draws[:WITHHELD_DRAWS]:
            moves = question.parameter(name).nearby(solution.param(name).raw)
            if not moves:
                continue
            try:
                _, sheet = solve_changed(solution, catalog, {name: moves[0]})
            except (Reject, ParameterError, *SOLVER_FAULTS):
                continue
            results, before = sheet.results, solution.sheet.results
            if moved := [key for key in earlier if key in results and results[key] != before.get(key)]:
                problems.append(f"{question.path}: stages[{at}].gives: {name} feeds {', '.join(moved)}, asked before "
                                f"it is given ({solution.code})")
                break
    return problems


def push_refusal(solution: Solution, catalog: Catalog, stage: Stage) -> str | None:
    """What refuses a declared push on this variant: the realism constraint by name (or the answer whose
    key the solver refuses among those the push asks, as the interview's push does, or the solver's fault), or
    None where the pushed values make a variant."""
    try:
        solve_changed(solution, catalog, declared_changes(solution, catalog, stage.set), asked=stage.ask)
    except Reject as reason:
        return str(reason).split(": ", 1)[0]
    except ParameterError as error:
        return f"a value no draw can take ({error})"
    except SOLVER_FAULTS as error:
        return f"the solver cannot take it ({type(error).__name__})"
    return None
