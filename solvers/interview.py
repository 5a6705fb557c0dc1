"""The interview in stages: a variant asked as a conversation. Each stage says something, asks a few
answers and is graded on submit; its keys then show with a line of why, and the next stage starts from
them (a later stage may quote an earlier key, never the candidate's slip). A push moves parameters
first and asks on the pushed variant, which has a code of its own.

A file without `stages:` runs as two: every answer, then the engine's push (followup.follow_up)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from solvers.answers import Grade
from solvers.answers.base import letter
from solvers.answers.select import Select
from solvers.bank import DeclaredFollowUp, Stage
from solvers.data import Catalog
from solvers.derivation import Step, reads
from solvers.engine import Solution, _reflow, fill, listings
from solvers.followup import ASK_AFTER_A_MOVE, FollowUp, declared_push, follow_up, generated_push


@dataclass(frozen=True)
class StageRun:
    """One stage of one variant's interview, ready to ask: its words filled, its answers' keys known."""

    index: int
    stage: Stage
    solution: Solution  # the variant this stage is asked on: a push's is the pushed variant
    ask: tuple[str, ...]
    say: str
    moved: tuple[str, ...] = ()  # the parameters a push changed
    before: str | None = None  # a push's: the regime of the variant it moved from
    declared: bool = False  # a push's: the stage's own move, not the engine's search standing in for it
    cards_added: tuple[str, ...] = ()  # a push's: conventions its variant brings that the opening's did not use

    @property
    def kind(self) -> str:
        return self.stage.kind

    @property
    def prompt(self) -> str:
        """What the candidate reads: the words, then the lettered items of the answers asked here."""
        return self.say + listings(self.solution.question, self.solution.shown, self.ask)

    @property
    def prefix(self) -> str:
        """How this stage's answers are stored: a push's under 'followup.' (a second push 'followup2.')."""
        return self.solution.question.push_prefix(self.index) if self.stage.push else ""

    @property
    def hints(self) -> tuple[str, ...]:
        """The stage's hints; none where the engine's push stands in for a declared one the variant refused:
        those hints are written for a move that was not made ("more sequences of shorter context" over a
        push that moved the draft's cost)."""
        return () if self.stage.set and not self.declared else self.stage.hints

    @property
    def regime(self) -> str | None:
        return self.solution.regime_name

    @property
    def nudge_note(self) -> str:
        """What the script says of a push declared a nudge: why it need not cross, and that it does where this
        variant's move crosses after all ('' for any other stage, or where the engine's push stood in for a
        declared move: the nudge's reason is about that move)."""
        if not self.stage.nudge or self.stage.set and not self.declared:
            return ""
        if self.before is not None and self.regime is not None and self.regime != self.before:
            crossed = f"{self.before} → {self.regime}"
            return f"A nudge that crosses on this variant ({crossed}); it need not: {self.stage.nudge}"
        return f"A nudge, not a crossing: {self.stage.nudge}"

    @property
    def cards_line(self) -> str:
        """What a push says of the conventions its variant adds ('' where it adds none)."""
        return f"Conventions now also in play: {', '.join(self.cards_added)}" if self.cards_added else ""

    def grade(self, answers: dict[str, str]) -> list[Grade]:
        """The answers of this stage against its own variant's key (a checklist waits for its ticks)."""
        question = self.solution.question
        return [self.solution.grade_one(key, "" if question.answer(key).self_graded else answers.get(key, ""))
                for key in self.ask]

    def key_lines(self) -> list[tuple[str, str]]:
        """Each asked answer's key with its one line of why, as the interviewer corrects: (key, line)."""
        return [(key, key_line(self.solution, key)) for key in self.ask]


def opening(solution: Solution) -> StageRun:
    """The first stage: the prompt the variant already holds (no work)."""
    stage = solution.question.stages[0]
    return StageRun(0, stage, solution, stage.ask, _reflow(fill(stage.say, solution.params).strip()))


def stage_run(solution: Solution, catalog: Catalog, index: int) -> StageRun | None:
    """Stage `index` of this variant's interview; None for a push that finds nothing to push here, or
    that is written for the other regime (`when`): the interview goes on without it. A push searches
    and solves: run it off the UI thread."""
    question = solution.question
    stage = question.stages[index]
    if index == 0:
        return opening(solution)
    if not stage.push:
        return StageRun(index, stage, solution, stage.ask, _words(stage.say, solution, solution))
    if not question.asks_on(index, solution.regime_name):
        return None  # the push for the other side of the boundary
    pushed, declared = _push(solution, catalog, stage)
    if pushed is None:
        return None
    moved = tuple(p.name for p in pushed.solution.params if p.raw != solution.param(p.name).raw)
    say = _push_words(stage, pushed, solution, moved, declared)
    # A push to fp8 applies a convention the opening never used: the candidate is told it is now in play.
    opening_cards = set(solution.cards())
    added = tuple(card for card in pushed.solution.cards() if card not in opening_cards)
    return StageRun(index, stage, pushed.solution, pushed.ask, say, moved, solution.regime_name, declared, added)


def _push(solution: Solution, catalog: Catalog, stage: Stage) -> tuple[FollowUp | None, bool]:
    """The pushed variant, and whether it is the stage's declared move (not the engine's search)."""
    if not solution.question.staged:
        return follow_up(solution, catalog), False  # an old-shape file's: its `followups:`, else the engine's
    scanned: dict = {}
    if stage.set:
        pushed = declared_push(solution, catalog, DeclaredFollowUp(stage.set, stage.ask), cross=not stage.nudge,
                               scanned=scanned)
        if pushed is not None:
            return pushed, True
    return generated_push(solution, catalog, stage.ask, scanned=scanned,
                          only=frozenset(name for name, _, _ in stage.reasons)), False


def _push_words(stage: Stage, pushed: FollowUp, base: Solution, moved: tuple[str, ...], declared: bool) -> str:
    """What the interviewer says at a push. A declared push's words describe its own move; where the engine's
    push stands in, the stage's reason for the figure it moved and the engine's ask (else the engine's words). A
    generated push gives the stage's reason for the figure it moved, then the stage's ask; without a reason for
    it, the stage's words alone, else the engine's."""
    reason = ""
    if not declared and len(moved) == 1:
        before, after = base.param(moved[0]), pushed.solution.param(moved[0])
        reason = stage.reason(moved[0], _rises(before.raw, after.raw))
    if reason:
        ask = _words(stage.say, pushed.solution, base) if stage.say and stage.generated else ASK_AFTER_A_MOVE
        return _reflow(fill(reason, pushed.solution.params, {"from": before.shown, "to": after.shown}) + " " + ask)
    if stage.say and (declared or stage.generated):
        return _words(stage.say, pushed.solution, base)
    return pushed.say


def _rises(before: object, after: object) -> bool:
    """Whether a push raised a figure (a choice, which has no direction, reads as risen: its reasons are one text)."""
    numbers = (int, float)
    return not (isinstance(before, numbers) and isinstance(after, numbers) and after < before)


def _words(template: str, solution: Solution, base: Solution) -> str:
    """A stage's `say` filled: parameters as `solution` has them, keys of earlier stages from `base`."""
    keys = {spec.key: spec.key_text(base.expected[spec.key], base.shown.get(spec.key, ()))
            for spec in base.question.answers if not spec.self_graded}
    return _reflow(fill(template, solution.params, keys).strip())


def key_line(solution: Solution, key: str) -> str:
    """An answer's key and why, from the derivation: the step that gives it substituted with its
    reason; a regime's summary; a selection's true options with theirs."""
    spec = solution.question.answer(key)
    shown = solution.shown.get(key, ())
    text = spec.key_text(solution.expected[key], shown)
    step = next((s for s in solution.sheet.steps if s.key == key), None)
    regime = solution.sheet.regime
    if step is not None:
        why = step.substituted if step.substituted != step.result else ""
        because = f" ({step.why})" if step.why else ""
        return f"{text}: {why}{because}" if why else f"{text}{because}"
    if regime is not None and solution.sheet.results.get(key) == regime.name and key == "regime":
        return f"{text}: {regime.summary}"
    if isinstance(spec, Select):
        # The key names each option that holds; its reason follows by letter ("B. label; C. label. B: why"): the
        # reasons naming every label again read each label twice.
        reasons = solution.sheet.reasons.get(key, {})
        held = [f"{letter(list(shown).index(o))}: {reasons[o]}" for o in solution.expected[key] if reasons.get(o)]
        return f"{text}. " + "; ".join(held) if held else text
    decided = solution.sheet.choice_whys.get(key)
    return f"{text}: {decided}" if decided else text


def steps_by_stage(solution: Solution) -> list[list[Step]]:
    """The derivation's steps grouped by the stage that first needs them (a step feeds an answer through
    the formulas of the steps after it); a step no stage's number needs closes the last stage before
    the pushes. Push stages get none: their variant's own sheet is another."""
    question = solution.question
    steps = solution.sheet.steps
    position = {id(step): i for i, step in enumerate(steps)}

    def feeding(step: Step) -> set[int]:  # the step and every step it reads
        return {steps.index(step)} | {position[id(read)] for read in reads(steps, (step,))}

    needs: dict[str, set[int]] = {}
    for step in steps:
        if step.key:
            needs.setdefault(step.key, set()).update(feeding(step))
    regime = solution.sheet.regime
    if regime is not None:
        for point in (regime.boundary, regime.position):
            if point in steps:
                needs.setdefault("regime", set()).update(feeding(point))
    groups: list[list[Step]] = [[] for _ in question.stages]
    claimed: set[int] = set()
    for index, stage in enumerate(question.stages):
        if stage.push:
            continue
        wanted = set().union(*(needs.get(key, set()) for key in stage.ask)) - claimed
        groups[index] = [steps[i] for i in sorted(wanted)]
        claimed |= wanted
    last = question.last_unpushed
    groups[last] += [s for i, s in enumerate(steps) if i not in claimed]
    groups[last].sort(key=steps.index)
    return groups


def asked_keys(runs: Iterable[StageRun]) -> list[str]:
    """Every stored key of these stages, in order: a push's under its prefix."""
    return [run.prefix + key for run in runs for key in run.ask]


def stored_stages(runs: Iterable[StageRun]) -> dict[str, tuple[int, str]]:
    """Each stored key of these stages with the stage that asked it: (index, kind), as progress keeps them."""
    return {run.prefix + key: (run.index, run.kind) for run in runs for key in run.ask}
