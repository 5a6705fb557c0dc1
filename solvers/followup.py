"""The follow-up round: the interviewer moves one parameter across the regime boundary and
asks again. Declared in the question file (`followups:`), or found by sweeping a numeric
parameter the way the regime chart does and rounding the crossing to a value a person would
say ("now the batch is 256"); where no value in range crosses, the figure that moves the regime's margin
most is doubled or halved (or a choice moved) and the regime that holds is asked, never a figure that
cannot move what is asked. The pushed variant is a variant code of its own."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from solvers.answers import Grade, Number
from solvers.bank import DeclaredFollowUp
from solvers.data import Catalog
from solvers.derivation import Regime, Reject
from solvers.engine import SOLVER_FAULTS, Solution, listings, revise, solve_changed
from solvers.params import ParameterError, ParamSpec

SWEEP_POINTS = 24  # the scan's grid; a crossing found is then rounded and checked
CLEAR_MARGIN = 1.5  # a push lands at least this far past the boundary where it can
LOOK_PAST = 6  # crossing points tried beyond the first in search of a clear one
# A push the solver cannot take (SOLVER_FAULTS: values it was not written for) is skipped for the next
# candidate, as a rejected one is: the follow-up is never a RuntimeError shown to the user.
_UNSOLVED = (Reject, ParameterError, *SOLVER_FAULTS)

ASK_AFTER_A_MOVE = "What changes, and what matters now?"  # the push the bar asks for, in its words


@dataclass(frozen=True)
class FollowUp:
    solution: Solution  # the variant after the push; its code reproduces it
    ask: tuple[str, ...]  # the answers asked again
    say: str  # what the interviewer says

    @property
    def prompt(self) -> str:
        return self.say + listings(self.solution.question, self.solution.shown, self.ask)

    def grade(self, answers: dict[str, str]) -> list[Grade]:
        """The asked answers graded against the pushed variant's key."""
        return [self.solution.grade_one(key, answers.get(key, "")) for key in self.ask]


def follow_up(solution: Solution, catalog: Catalog) -> FollowUp | None:
    """The follow-up for this variant: the first declared one that makes a valid variant and changes
    what it asks (crossing the regime if it asks for it), else a generated one where the question
    has a regime; None where there is none to ask."""
    scanned: dict = {}  # float solves by the changes they make, shared by every try below
    for declared in solution.question.followups:
        pushed = declared_push(solution, catalog, declared, scanned=scanned)
        if pushed is not None:
            return pushed
    return generated_push(solution, catalog, scanned=scanned)


def declared_push(solution: Solution, catalog: Catalog, declared: DeclaredFollowUp, *, cross: bool = True,
                  scanned: dict | None = None) -> FollowUp | None:
    """An author's push on this variant, or None where it does not apply: a value the variant has already,
    a variant realism refuses, no asked answer that moves, or (with `cross`, where it asks the regime) a
    variant on the same side of the boundary."""
    scanned = {} if scanned is None else scanned
    try:
        changes = declared_changes(solution, catalog, declared.set)
        if not changes:
            return None
        crossing = cross and "regime" in declared.ask
        if crossing and _stays(solution, _scan(solution, catalog, changes, scanned, declared.ask)):
            return None  # floats say it stays on this side: no exact solve to learn that
        pushed = revise(solution, catalog, changes, asked=declared.ask)
    except _UNSOLVED:
        return None
    crossed = not crossing or pushed.regime_name != solution.regime_name
    if "regime" in declared.ask and _margin_unmoved(solution, pushed):
        return None  # it would ask whether the regime moved where nothing that sets it did: the engine's push instead
    if crossed and _moves(solution, pushed, declared.ask):
        return FollowUp(pushed, declared.ask, declared.say or _say(solution, pushed, changes))
    return None


def declared_changes(solution: Solution, catalog: Catalog, declared: tuple[tuple[str, str], ...]) -> dict:
    """The values a declared push's `set:` gives this variant (a factor moves the variant's own value), less
    those it has already: no move (a push of batch and GPUs drawn at those GPUs). Raises ParameterError."""
    changes = {name: solution.question.parameter(name).pushed_value(text, solution.param(name).raw, catalog)
               for name, text in declared}
    return {name: value for name, value in changes.items() if value != solution.param(name).raw}


def generated_push(solution: Solution, catalog: Catalog, ask: tuple[str, ...] = (), *,
                   scanned: dict | None = None, only: frozenset[str] = frozenset()) -> FollowUp | None:
    """The engine's push: one parameter moved across the regime boundary where the question has one,
    else the figure that shifts its margin most doubled or halved (or a choice moved). It asks `ask`, or
    where that is empty the regime and the first number that moved (and then only if one did; the regime
    only if the move shifted its margin). Where `ask` is given, an answer it does not ask need not be
    listable on the pushed variant. `only`: the parameters it may move, where the stage names them (its
    reasons: an interviewer moves a figure they have a reason for)."""
    scanned = {} if scanned is None else scanned
    asked = ask or None
    candidates = [spec for spec in _candidates(solution) if not only or spec.name in only]
    for spec in candidates if solution.sheet.regime is not None else ():
        crossing = _crossing(solution, catalog, spec, scanned, asked)
        if crossing is not None:
            if crossing_asked := ask or _asked(solution, crossing):
                moved = {spec.name: crossing.param(spec.name).raw}
                return FollowUp(crossing, crossing_asked, _say(solution, crossing, moved))
    # Nothing in range crosses a boundary (or the variant has none): an interviewer still moves one figure
    # and asks what follows, the figure that moves the regime's margin most. A regime holds there, and saying
    # so is part of the answer, but only where the move can shift it: the step time of a decode cannot make a
    # batching gain large, and asking whether it did is no question.
    for spec, value in _fallbacks(solution, catalog, candidates, scanned, asked):
        try:
            pushed = revise(solution, catalog, {spec.name: value}, asked=asked)
        except _UNSOLVED:
            continue
        if fallback_asked := _fallback_ask(solution, pushed, ask):
            return FollowUp(pushed, fallback_asked, _say(solution, pushed, {spec.name: pushed.param(spec.name).raw}))
    return None


def _fallbacks(solution: Solution, catalog: Catalog, candidates: list[ParamSpec], scanned: dict,
               asked: tuple[str, ...] | None) -> list[tuple[ParamSpec, object]]:
    """Each of `candidates`' nearby moves, the parameter whose move shifts the regime's margin most first (and
    within it the move toward the boundary first); moves that leave the margin where it is keep the
    candidates' order after them. Judged on float solves, as the crossing search is."""
    regime = solution.sheet.regime
    moves = [(spec, value) for spec in candidates for value in spec.nearby(solution.param(spec.name).raw)]
    if regime is None:
        return moves
    scans = {(spec.name, value): _scan(solution, catalog, {spec.name: value}, scanned, asked)
             for spec, value in moves}
    shifts = {move: 0.0 if found is None else _shift(regime, found) for move, found in scans.items()}
    strongest: dict[str, float] = {}
    for (name, _), shift in shifts.items():
        strongest[name] = max(strongest.get(name, 0.0), shift)

    def order(move: tuple[ParamSpec, object]) -> tuple[float, bool, float]:
        found = scans[move[0].name, move[1]]
        toward = found is not None and _closer(found, regime)
        return -strongest[move[0].name], not toward, -shifts[move[0].name, move[1]]

    return sorted(moves, key=order)


def _shift(before: Regime, after: Regime) -> float:
    """How far a move shifts the regime's margin, as the log of the ratio of margins; 0 where the margin
    stays (a parameter that cannot move the regime), infinite where it moves to or from zero or infinity."""
    old, new = before.margin, after.margin
    if _finite(old) and _finite(new):
        return abs(math.log(new / old))
    return 0.0 if old == new else math.inf


def _finite(margin: float) -> bool:
    return math.isfinite(margin) and margin > 0


def _closer(moved: Regime, regime: Regime) -> bool:
    """Whether a move brings the variant nearer its boundary (in the log of the margin)."""
    if not (_finite(moved.margin) and _finite(regime.margin)):
        return False
    return abs(math.log(moved.margin)) < abs(math.log(regime.margin))


def _fallback_ask(before: Solution, after: Solution, ask: tuple[str, ...]) -> tuple[str, ...]:
    """What a push that crosses nothing asks: `ask` where one of it moves (and, if it holds the regime, the
    margin shifts); else the regime and the first number that moved, or that number alone where the regime's
    margin stayed put."""
    shifted = not _margin_unmoved(before, after)
    if ask:
        return ask if _moves(before, after, ask) and (shifted or "regime" not in ask) else ()
    asked = _asked(before, after)
    return asked if shifted or "regime" not in asked else tuple(k for k in asked if k != "regime")


def _margin_unmoved(before: Solution, after: Solution) -> bool:
    """Whether a push left the regime where it was: the same side, at the same margin (a variant without a
    regime has none to leave)."""
    old, new = before.sheet.regime, after.sheet.regime
    return old is not None and new is not None and old.name == new.name and old.margin == new.margin


def _moves(before: Solution, after: Solution, ask: tuple[str, ...]) -> bool:
    return any(after.expected[k] != before.expected[k] for k in ask)


def _candidates(solution: Solution) -> list[ParamSpec]:
    """Numeric range parameters, the chart's own first; then choices (a TP degree, a GPU, a model).
    A generator's own settings (a spread) are not something an interviewer pushes."""
    settings = solution.question.generator_settings
    movable = [p for p in solution.question.parameters if p.movable and p.name not in settings]
    chart_x = solution.question.chart[0] if solution.question.chart else None
    return sorted(movable, key=lambda p: (not p.ranged, p.name != chart_x))


def _crossing(solution: Solution, catalog: Catalog, spec: ParamSpec, scanned: dict,
              asked: tuple[str, ...] | None) -> Solution | None:
    """The variant with `spec` moved to the nearest value a person would say that lands clearly on
    the other side of the boundary (a round number for a range, another option for a choice);
    failing that, the nearest value across at all. A range whose farthest valid points on either
    side both stay in the regime is skipped (regimes move one way with a parameter), and so is the side
    whose far end stays; the other is scanned on the chart's grid nearest first, and only a point that
    crosses is rounded.

    The scan and the rounded values are judged on floats (QuickSheet); a value is solved exactly
    only where it is the push to make, or where floats sit too near a boundary or the clear margin
    to tell. Exactly solved is what is returned."""
    regime, current = solution.regime_name, solution.param(spec.name).raw
    if regime is None:
        return None

    def side(value) -> str | None:
        found = _scan(solution, catalog, {spec.name: value}, scanned, asked)
        return None if found is None else found.name

    def crosses(value) -> bool:
        return side(value) not in (None, regime)

    def across(value) -> Solution | None:  # solved exactly
        try:
            pushed = revise(solution, catalog, {spec.name: value}, asked=asked)
        except _UNSOLVED:
            return None
        return pushed if pushed.sheet.regime is not None and pushed.sheet.regime.name != regime else None

    pushes = spec.pushes(current, SWEEP_POINTS)
    if spec.ranged:
        runs = (sorted((x for x in pushes if x < current), reverse=True), sorted(x for x in pushes if x > current))
        walked = {x for run in runs for x in _crossing_side(run, side, regime)}
        if not walked:
            return None  # neither end of the range crosses: a regime that moves one way with it never will
        pushes = [x for x in pushes if x in walked]
    across_at_all: list = []  # values (or exact solutions) that cross, nearest first: the fallback
    looked = 0
    for point in pushes:
        if not crosses(point):
            continue
        for value in spec.said(point):
            if value == current:
                continue
            quick = _scan(solution, catalog, {spec.name: value}, scanned, asked)
            if quick is None or _stays(solution, quick):
                continue
            if _float_sure(quick.margin) and not _clear(quick.margin):
                across_at_all.append(value)  # across, not clearly: solved only if nothing clear comes
                continue
            pushed = across(value)
            if pushed is None:
                continue
            if pushed.sheet.regime is not None and _clear(pushed.sheet.regime.margin):
                return pushed
            across_at_all.append(pushed)
        looked += 1
        if across_at_all and looked > LOOK_PAST:
            break
    for candidate in across_at_all:
        pushed = candidate if isinstance(candidate, Solution) else across(candidate)
        if pushed is not None:
            return pushed
    return None


def _crossing_side(run: list, side: Callable[[object], str | None], regime: str) -> list:
    """`run` (the grid on one side of the variant, nearest first) if its farthest valid point crosses, else
    nothing: as for the whole range, a side whose far end stays in the regime is taken to stay throughout.
    The side that crosses is walked nearest first, not bisected: a regime that tips back and forth within
    it (fleet-gpu-count's round-up against its margin, as the need grows) would bisect to a farther crossing."""
    farthest = next((found for found in map(side, reversed(run)) if found is not None), regime)
    return run if farthest != regime else []


def _scan(solution: Solution, catalog: Catalog, changes: dict, scanned: dict,
          asked: tuple[str, ...] | None) -> Regime | None:
    """The regime of the variant with `changes`, solved on floats only (no prompt, no listing); None where
    that is no valid variant or has no regime. `scanned` keeps what this search has solved; `asked`: the
    answers the push asks (run_solver)."""
    key = (tuple(sorted(changes.items())), asked)
    if key not in scanned:
        try:
            _, sheet = solve_changed(solution, catalog, changes, quick=True, asked=asked)
        except _UNSOLVED:
            scanned[key] = None
        else:
            scanned[key] = sheet.regime
    return scanned[key]


def _stays(solution: Solution, scanned: Regime | None) -> bool:
    """Whether a float solve's regime is, beyond float noise, the one the variant is in already."""
    regime = solution.sheet.regime
    return regime is not None and scanned is not None and scanned.name == regime.name and _float_sure(scanned.margin)


def _clear(margin: float) -> bool:
    """Whether a variant at this margin sits clearly on its side of the boundary."""
    return math.isfinite(margin) and margin > 0 and abs(math.log(margin)) >= math.log(CLEAR_MARGIN)


def _float_sure(margin: float) -> bool:
    """Whether a float solve's margin is far enough from the boundary and from the clear margin that the
    exact solve decides its side and its clearness the same way."""
    return not any(math.isclose(margin, edge, rel_tol=1e-9) for edge in (1, CLEAR_MARGIN, 1 / CLEAR_MARGIN))


def _asked(before: Solution, after: Solution) -> tuple[str, ...]:
    """The regime, if it is an answer, and the first number that moved past its tolerance."""
    keys = [a.key for a in before.question.answers]
    ask = ["regime"] if "regime" in keys else []
    chart_y = before.question.chart[1] if before.question.chart else None
    numbers = sorted((a for a in before.question.answers if isinstance(a, Number)), key=lambda a: a.key != chart_y)
    for spec in numbers:
        old, new = float(before.expected[spec.key]), float(after.expected[spec.key])
        if old != new and (old == 0 or abs(new / old - 1) > 3 * spec.tolerance):
            ask.append(spec.key)
            break
    return tuple(ask) if len(ask) == 2 or (ask and ask[0] != "regime") else ()


def _say(before: Solution, after: Solution, changes: dict) -> str:
    """The interviewer's words for a generated push: what moves, from what to what, and the question a push asks
    (what changed, what matters now). Said without a verb on the label, which may be singular or plural."""
    moved = ", and ".join(f"{after.param(name).label} from {before.param(name).shown} to {after.param(name).shown}"
                          for name in changes)
    count = "one thing" if len(changes) == 1 else "two things" if len(changes) == 2 else f"{len(changes)} things"
    return f"Let's change {count}: {moved}. {ASK_AFTER_A_MOVE}"
