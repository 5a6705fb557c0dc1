"""Variety over many draws: what a candidate could memorise instead of work out (QUESTION-BAR 5, 6).

Over a question's solved draws: select options with the same truth in every draw (a declared fact
allowed once per select), graded numbers with three or fewer values (unless the file declares the
answer a lookup, with why), graded numbers that are zero or a parameter's own value in most draws,
regime decisions within a graded answer's tolerance of their boundary (a knife edge, unless the text
states the tie rule), and a parameter space too small for 200 distinct variants. `validate --strict`
fails these for a staged file; for the bank they are a report (`validate --variety`).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from solvers.answers import Estimate, Number, Select
from solvers.bank import Question
from solvers.data import Catalog
from solvers.derivation import reads
from solvers.engine import MAX_REDRAWS, Solution
from solvers.params import ParameterError
from solvers.realism import broken
from solvers.sampling import draw_values, resolve

DRAWS = 200  # the sweep: draws solved per question
MIN_VARIANTS = 200  # distinct variants a question must be able to draw
VARIANT_TRIES = 20  # raw draws tried per variant wanted before a question is judged short of them
MAX_VALUES = 3  # a graded number with this many values or fewer over the draws is a lookup
MAX_TRIVIAL = 0.3  # a graded number zero or equal to a parameter in more draws than this gives itself away
MAX_FACTS = 1  # declared facts a select may hold
MIN_SHOWINGS = 5  # an option shown fewer times than this is too rarely seen to judge
_TIE = re.compile(r"\btie", re.IGNORECASE)

# Each kind of finding, with how the report counts it.
KINDS = {"constant option": "constant options", "declared facts": "selects declaring more than one fact",
         "few values": "few-valued numbers", "mostly trivial": "answers mostly zero or a parameter",
         "knife edge": "regimes on a knife edge", "few variants": "questions short of 200 variants"}


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    key: str  # the answer ('' for the question as a whole)
    text: str  # what, and in how many draws

    def line(self, question: Question) -> str:
        where = f"answers.{self.key}: " if self.key else ""
        return f"{question.path}: {where}{self.text}"


@dataclass
class OptionTally:
    """One select option over the draws of a question: how often it was judged, shown, held,
    declared a fact, and left undecided (judged None: not listable in that draw)."""
    judged: int = 0
    held: int = 0
    shown: int = 0
    declared: int = 0
    undecided: int = 0

    @property
    def constant(self) -> bool:
        """The same truth in every draw, for an option shown often enough to tell. The solver judges
        every option in every draw and the listing only samples which are shown, so the truth is
        counted over all the draws, a larger sample than the shown ones at no cost: an option true
        in 90% of draws is not failed by the luck of which draws happened to list it."""
        return self.shown >= MIN_SHOWINGS and self.held in (0, self.judged)


def tally_options(tally: dict[tuple[str, str], OptionTally], solution: Solution,
                  keys: Collection[str] | None = None, skip: Collection[str] = ()) -> None:
    """Add one solved variant's select judgements to `tally`, by (answer key, option): those of `keys` (every
    select where None), less those of `skip`."""
    for spec in solution.question.answers:
        if keys is not None and spec.key not in keys or spec.key in skip:
            continue
        judged = solution.sheet.results.get(spec.key)
        if not isinstance(spec, Select) or not isinstance(judged, dict):
            continue
        shown = set(solution.shown.get(spec.key, ()))
        facts = solution.sheet.facts.get(spec.key, set())
        for option, holds in judged.items():
            counts = tally.setdefault((spec.key, option), OptionTally())
            if holds is None:
                counts.undecided += 1
                continue
            counts.judged += 1
            counts.held += bool(holds)
            counts.declared += option in facts
            counts.shown += option in shown


def findings(question: Question, draws: list[Solution], variants: int,
             pushed: Collection[Solution] = ()) -> list[Finding]:
    """Everything the sweep finds in a question's solved `draws`; `variants`: the distinct variants it can
    draw (distinct_variants). Where the `pushed` variants of draws are given, the answers only a push asks
    are judged over them."""
    # What only a push asks is met on pushed variants alone: over the draws a push starts from, an option
    # the push always flips would look free.
    only = question.push_only if pushed else frozenset()
    found = option_findings(draws, skip=only) + option_findings(pushed, keys=only)
    found += number_findings(question, draws, skip=only) + number_findings(question, pushed, keys=only)
    found += knife_edges(question, draws)
    if variants < MIN_VARIANTS:
        found.append(Finding("few variants", "", f"variants: only {variants} distinct in "
                             f"{MIN_VARIANTS * VARIANT_TRIES} draws (at least {MIN_VARIANTS})"))
    return found


def option_findings(draws: Collection[Solution], keys: Collection[str] | None = None,
                    skip: Collection[str] = ()) -> list[Finding]:
    """Options with one truth in every draw, undeclared; selects declaring more than MAX_FACTS facts (of the
    answers `keys`, less `skip`, as tally_options takes them)."""
    tally: dict[tuple[str, str], OptionTally] = {}
    for solution in draws:
        tally_options(tally, solution, keys, skip)
    found = [Finding("constant option", key, f"'{option}' {'holds' if counts.held else 'fails'} in all "
                     f"{counts.judged} draws (shown in {counts.shown})")
             for (key, option), counts in tally.items() if counts.constant and not counts.declared]
    facts = Counter(key for (key, _), counts in tally.items() if counts.declared)
    found += [Finding("declared facts", key, f"{count} declared facts (at most {MAX_FACTS} a select)")
              for key, count in facts.items() if count > MAX_FACTS]
    return found


def number_findings(question: Question, draws: Collection[Solution], keys: Collection[str] | None = None,
                    skip: Collection[str] = ()) -> list[Finding]:
    """Graded numbers with few values (a lookup unless declared one), or zero or a parameter's value in most
    draws (the answer is on the screen already); of the answers `keys` (all where None), less `skip`."""
    found, lookups = [], dict(question.lookups)
    for spec in question.answers:
        if not isinstance(spec, Number) or not draws or keys is not None and spec.key not in keys or spec.key in skip:
            continue
        values = [float(solution.expected[spec.key]) for solution in draws]
        distinct = {float(f"{v:.12g}") for v in values}
        if len(distinct) <= MAX_VALUES and spec.key not in lookups:
            said = ", ".join(f"{v:g}" for v in sorted(distinct))
            found.append(Finding("few values", spec.key, f"{len(distinct)} distinct values in {len(values)} draws "
                                 f"({said}): a lookup, not a question (or declare lookup: with why)"))
        zeros = sum(value == 0 for value in values)
        given = sum(value != 0 and any(math.isclose(value, number, rel_tol=1e-9) for number in _numbers(solution))
                    for value, solution in zip(values, draws))
        if zeros + given > MAX_TRIVIAL * len(values):
            found.append(Finding("mostly trivial", spec.key, f"zero in {zeros} and a parameter's value in {given} "
                                 f"of {len(values)} draws (together at most {MAX_TRIVIAL:.0%})"))
    return found


def _numbers(solution: Solution) -> list[float]:
    return [float(p.value) for p in solution.params
            if isinstance(p.value, (int, float)) and not isinstance(p.value, bool)]


def knife_edges(question: Question, draws: list[Solution]) -> list[Finding]:
    """Draws whose regime sits within the tolerance of the graded numbers it compares (its position and
    boundary, or the steps they read): a candidate inside the tolerance may land on either side. Fine
    where the text that asks the regime states the tie rule."""
    if _tie_stated(question):
        return []
    edges = [(solution, tolerance) for solution in draws
             if solution.sheet.regime is not None and (tolerance := _regime_tolerance(solution))
             and abs(solution.sheet.regime.margin - 1) <= tolerance]
    if not edges:
        return []
    first, tolerance = edges[0]
    return [Finding("knife edge", "regime", f"within {tolerance * 100:g}% of its boundary in {len(edges)} of "
                    f"{len(draws)} draws ({first.code}, margin {first.sheet.regime.margin:.4g}): refuse "  # type: ignore[union-attr]
                    "such draws or state the tie rule")]


def _tie_stated(question: Question) -> bool:
    """Whether the words of the stage asking the regime, or its hints, say how a tie goes."""
    stages = [stage for stage in question.stages if "regime" in stage.ask] or question.stages[:1]
    return any(_TIE.search(text) for stage in stages for text in (stage.say, *stage.hints))


def _regime_tolerance(solution: Solution) -> float:
    """The loosest tolerance of the graded numbers the regime compares: its position and boundary where
    graded, else the graded steps they read; 0 where none is graded."""
    regime = solution.sheet.regime
    assert regime is not None
    # An estimate's tolerance is in decades: as a ratio to the key, 10 ** tolerance - 1 above it.
    numbers = {spec.key: 10 ** spec.tolerance - 1 if isinstance(spec, Estimate) else spec.tolerance
               for spec in solution.question.answers if isinstance(spec, Number)}
    direct = [numbers[step.key] for step in (regime.position, regime.boundary) if step.key in numbers]
    if direct:
        return max(direct)
    fed = reads(solution.sheet.steps, (regime.position, regime.boundary))
    return max((numbers[step.key] for step in fed if step.key in numbers), default=0.0)


def distinct_variants(question: Question, catalog: Catalog, wanted: int = MIN_VARIANTS) -> int:
    """How many distinct parameter sets the question draws (each seed's first draw that realism accepts, as
    a variant is drawn, without solving: cheap), counted up to `wanted` over at most VARIANT_TRIES times as
    many seeds, so that a large space is not judged small by the luck of repeats."""
    seen: set[tuple[str, ...]] = set()
    for seed in range(wanted * VARIANT_TRIES):
        rng = np.random.default_rng(seed)
        for _ in range(MAX_REDRAWS):
            raw = draw_values(question, rng)
            try:
                values = {p.name: p.value for p in resolve(question, raw, catalog)}
            except ParameterError:
                continue
            if broken(question.constraints, values) is None:
                seen.add(tuple(repr(raw[spec.name]) for spec in question.parameters))
                break
        if len(seen) >= wanted:
            break
    return len(seen)
