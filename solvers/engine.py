"""From a question and a seed (or the defaults) to a solved variant, and grading.

A variant code names a variant exactly: 'kv-bytes-per-token@4821',
'kv-bytes-per-token@default', optionally with overrides '...@4821+context=4096'.
"""
from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from solvers.answers import Grade
from solvers.answers.base import Slip
from solvers.bank import PLACEHOLDER, VARIANT_TAIL, Bank, Question
from solvers.conventions import conventions, named_cards, recording
from solvers.data import Catalog, MissingField
from solvers.derivation import QuickSheet, Reject, Sheet
from solvers.params import ParameterError, in_a_code
from solvers.realism import broken
from solvers.sampling import Param, default_values, draw_values, regenerate, resolve
from solvers.sheetmath import NotAskable
from solvers.units import format_exact, parse_unit
from solvers.verdicts import Verdict

MAX_SEED = 2**31 - 1
# A seed's variant is its first draw the solver accepts: a larger cap changes no variant that already drew, and
# keeps a question whose realism rules refuse most raw draws from failing a seed (training-compute-budget
# accepts about one raw draw in nine: 64 tries left one seed in 1,400 with none, and a random 100-variant export
# failed on one).
MAX_REDRAWS = 256
_CODE = re.compile(f"^(?P<id>[a-z0-9.-]+)@{VARIANT_TAIL}$")


class VariantError(ValueError):
    """A variant that cannot be made: unknown id, bad seed or code, rejected override."""


@dataclass(frozen=True)
class VariantCode:
    question_id: str
    seed: int | None  # None: the default variant
    overrides: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        text = f"{self.question_id}@{'default' if self.seed is None else self.seed}"
        return text + "".join(f"+{k}={v}" for k, v in self.overrides)

    @classmethod
    def parse(cls, text: str) -> VariantCode:
        match = _CODE.match(text.strip())
        if match is None:
            raise VariantError(f"'{text.strip()}' is not a variant code (like kv-bytes-per-token@4821)")
        if match["seed"] != "default" and len(match["seed"].lstrip("0")) > len(str(MAX_SEED)):
            raise VariantError(f"seed must be between 0 and {MAX_SEED}")  # before int(): 5,000 digits raise
        seed = None if match["seed"] == "default" else int(match["seed"].lstrip("0") or "0")  # 5,000 zeros too
        if seed is not None and seed > MAX_SEED:
            raise VariantError(f"seed must be between 0 and {MAX_SEED}")
        sets = tuple((name, value) for name, value in (item.split("=", 1) for item in match["sets"].split("+")[1:]))
        return cls(match["id"], seed, sets)


@dataclass
class Solution:
    question: Question  # its answers' texts filled for this variant (fill_answers)
    code: VariantCode
    params: list[Param]
    prompt: str
    sheet: Sheet
    expected: dict[str, Any] = field(default_factory=dict)
    shown: dict[str, tuple[str, ...]] = field(default_factory=dict)  # items listed A, B, C... (order, select)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def regime_name(self) -> str | None:
        """The side of the boundary this variant is on (None: the question has no regimes)."""
        return self.sheet.regime.name if self.sheet.regime is not None else None

    def cards(self) -> list[str]:
        """The conventions in play: the cards the solver read, then those its derivation names (a counting
        rule applied in a formula is named in the step's why or an assumption), in the card's order."""
        sheet = self.sheet
        texts = " ".join([*sheet.assumptions, *(s.why for s in sheet.steps), *(g.label for g in sheet.givens)])
        named = set(named_cards(texts))
        return [c.id for c in conventions() if c.id in named or c.id in sheet.cards]

    def problem_data(self, upto: int | None = None) -> list[Param]:
        """The parameters a candidate is given in the table by stage `upto` (None: by the end): generated
        tables print in the prompt, and a generator's own settings (a spread) are not data."""
        settings, question = self.question.generator_settings, self.question
        return [p for p in self.params if "\n" not in p.shown and p.name not in settings
                and (upto is None or question.given_at(p.name) <= upto)]

    def newly_given(self, index: int) -> list[Param]:
        """The parameters stage `index` (after the opening) gives the candidate for the first time (none for a
        push: the loader allows `gives` on an ask or recall stage only)."""
        return [p for p in self.problem_data() if index and self.question.given_at(p.name) == index]

    def slips(self, key: str) -> tuple[Slip, ...]:
        """The mistakes the derivation declares on `key` that its answer tells apart from the key (a slip within
        the tolerance grades right: the grader names it for no one, and the reveal does not list it)."""
        answer = self.question.answer(key)
        return tuple(slip for slip in self.sheet.slips.get(key, ()) if answer.tells_apart(slip.factor))

    def grade_one(self, key: str, text: str) -> Grade:
        answer, shown = self.question.answer(key), self.shown.get(key, ())
        try:
            return answer.grade(text, self.expected[key], shown, self.slips(key))
        except Exception as error:  # noqa: BLE001 - a reader's bug must not cost the attempt (the fuzz finds them)
            return Grade(key, Verdict.UNPARSED, text[:80], answer.key_text(self.expected[key], shown),
                         message=f"this answer could not be read ({type(error).__name__})")

    def grade(self, answers: dict[str, str]) -> list[Grade]:
        return [self.grade_one(spec.key, answers.get(spec.key, "")) for spec in self.question.answers]

    def grade_typed(self, typed: dict[str, str]) -> list[Grade]:
        """The answer boxes as submitted: a checklist is ticked on the solution screen after the reveal, so
        what its box held were notes, and it grades as nothing ticked yet."""
        notes = {spec.key for spec in self.question.answers if spec.self_graded}
        return self.grade({key: "" if key in notes else text for key, text in typed.items()})

    def typed_all_correct(self, grades: list[Grade]) -> bool:
        """Every answer graded from its box is correct (a checklist waits for its ticks)."""
        return all(g.correct for g in grades if not self.question.answer(g.key).self_graded)


class _Values(dict):
    """Parameter values for a solver: p.model.layers, p.context, p['dtype']."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def solver_function(question: Question) -> Callable[[_Values, Sheet], None]:
    return importlib.import_module(question.solver_module).solve


def fill(text: str, params: list[Param], keys: dict[str, str] | None = None) -> str:
    """`text` with each {name} (or {name.field} of a data record) as the variant shows it; a name that
    is no parameter is one of `keys` (a stage quoting the key of an earlier one)."""
    by_name = {p.name: p for p in params}

    def substitute(match: re.Match) -> str:
        if match.group(1) not in by_name and keys is not None:
            return keys[match.group(1)]
        param = by_name[match.group(1)]
        if match.group(2):  # a field of a data record; a GPU without fp8 shows "n/a"
            value = param.value.get(match.group(2))
            if value is None:
                return "n/a"
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            return figure_text(value) if numeric else str(value)
        return param.shown

    return PLACEHOLDER.sub(substitute, text)


def render_prompt(question: Question, params: list[Param]) -> str:
    return _reflow(fill(question.prompt, params).strip())


def fill_answers(question: Question, params: list[Param]) -> Question:
    """The question with its answers' labels and listed texts as this variant reads them: a figure in
    them is a field filled from the parameter the solver reads, so the two cannot disagree."""
    answers = tuple(replace(spec, said=said) if (said := tuple((t, fill(t, params)) for t in spec.texts
                                                               if PLACEHOLDER.search(t))) else spec
                    for spec in question.answers)
    return question if answers == question.answers else replace(question, answers=answers)


def figure_text(value: float) -> str:
    """How a prompt prints a data figure: in full, so the candidate has the number the key uses
    (solvers.prompt_figures re-solves from this text to hold it to that)."""
    return format_exact(value)


def _reflow(text: str) -> str:
    """Join the hard-wrapped lines of each paragraph so the terminal can wrap them;
    list items and indented lines keep their own line."""
    out: list[str] = []
    for line in text.splitlines():
        joinable = out and out[-1] and line.strip() and not line.startswith((" ", "-", "*", "|"))
        if joinable:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def solve_values(question: Question, raw: dict[str, Any], catalog: Catalog, *,
                 quick: bool = False, asked: Collection[str] | None = None) -> tuple[list[Param], Sheet]:
    """Solve for exactly these parameter values (raises Reject for an impossible set); `quick`
    solves on floats for a scan (QuickSheet: answers and regime, no derivation); `asked` as run_solver."""
    params = resolve(question, raw, catalog)
    values = {p.name: p.value for p in params}
    reason = broken(question.constraints, values)
    if reason is not None:
        raise Reject(reason)
    return params, run_solver(question, values, QuickSheet if quick else Sheet, asked=asked)


def run_solver(question: Question, values: dict[str, Any], sheet_type: type[Sheet] = Sheet, *,
               asked: Collection[str] | None = None) -> Sheet:
    """The question's solver on these values (as the solver sees them: records, base units),
    with its results checked against the answers' kinds. Raises Reject for an impossible set, or for
    an answer that makes no question here (a select with nothing to pick) among those `asked` (all
    where None: a push asks a few answers again, and one it does not ask need not be listable)."""
    sheet = sheet_type(parameters={spec.name: (values[spec.name], spec.unit, spec.label or spec.name)
                                   for spec in question.parameters if isinstance(values.get(spec.name), (int, float))})
    solve = solver_function(question)  # imported first: a card its modules read at import is no read of this variant
    try:
        with sheet.solving(), recording(sheet.cards):
            solve(_Values(values), sheet)
    except MissingField as missing:  # an entry this question cannot use: not a solver bug
        raise Reject(f"{question.id} cannot use this entry: {missing}") from None
    for needs, reason in sheet.refusals_if_asked:
        if asked is None or set(needs) & set(asked):
            raise NotAskable(reason)
    keys = {a.key for a in question.answers}
    for spec in question.answers:
        if spec.self_graded:
            continue
        if spec.key not in sheet.results:
            raise RuntimeError(f"{question.id}: solver produced no value for {spec.key}")
        problem = spec.check_result(sheet.results[spec.key])
        if problem:
            raise RuntimeError(f"{question.id}: answers.{spec.key}: {problem}")
        if (asked is None or spec.key in asked) and (refused := spec.refusal(sheet.results[spec.key])):
            raise NotAskable(f"answers.{spec.key}: {refused}")
    undeclared = sorted(sheet.prerequisites - set(question.requires))
    if undeclared:
        raise RuntimeError(f"{question.id}: takes results of {', '.join(undeclared)} without declaring requires:")
    sheet.slip_bit_rate_times(keys)
    stray = sorted((set(sheet.slips) | set(sheet.reasons) | set(sheet.choice_whys)) - keys)
    if stray:
        raise RuntimeError(f"{question.id}: slips or judgements declared on {', '.join(stray)}, not an answer")
    return sheet


def _present(question: Question, code: VariantCode, sheet: Sheet) -> tuple[dict[str, Any], dict[str, tuple]]:
    """The key of every answer and the items listed for it, shuffled by this variant."""
    expected, shown = {}, {}
    for spec in question.answers:
        items, expected[spec.key] = spec.present(sheet.results.get(spec.key), f"{question.id}@{code.seed}:{spec.key}")
        if items:
            shown[spec.key] = items
    return expected, shown


def make_variant(bank: Bank, catalog: Catalog, code: VariantCode) -> Solution:
    """Draw (or take the defaults), round, solve. Raises VariantError on bad input."""
    try:
        question = bank.get(code.question_id)
    except KeyError as error:
        raise VariantError(error.args[0]) from None
    return question_variant(question, catalog, code)


def question_variant(question: Question, catalog: Catalog, code: VariantCode) -> Solution:
    """The variant `code` names of this question (make_variant, past finding the question)."""
    if code.seed is not None and not 0 <= code.seed <= MAX_SEED:
        raise VariantError(f"seed must be between 0 and {MAX_SEED}")
    overrides = {}
    for name, text in code.overrides:
        if name in overrides:  # in a code or given twice with --set: which value was meant?
            raise VariantError(f"{name} set twice: give each parameter one value")
        try:
            spec = question.parameter(name)
        except KeyError:
            names = ", ".join(p.name for p in question.parameters)
            raise VariantError(f"{question.id} has no parameter '{name}' (it has: {names})") from None
        try:
            overrides[name] = spec.parse_override(text, catalog)
        except ParameterError as error:
            raise VariantError(str(error)) from None
    raw, params, sheet = _base_draw(question, catalog, code)
    # The code the solution shows holds each value in a form it can be read back from (--set takes spaces).
    code = replace(code, overrides=tuple(
        (name, text if in_a_code(text) else question.parameter(name).override_text(overrides[name]))
        for name, text in code.overrides))
    if overrides:
        try:
            raw = regenerate(question, raw | overrides, set(overrides), code.seed)
            params, sheet = _override_solve(question, raw, catalog)
        except Reject as reason:
            raise VariantError(f"{code}: no valid variant with {_changed(code)} ({reason})") from None
        except ParameterError as error:
            raise VariantError(str(error)) from None
        except SOLVER_FAULTS as error:  # values the range checks pass that the solver cannot take
            raise VariantError(f"{code}: the solver cannot take {_changed(code)} "
                               f"({type(error).__name__}: {error})") from None
    return _solution(question, code, params, sheet)


def _override_solve(question: Question, raw: dict[str, Any], catalog: Catalog) -> tuple[list[Param], Sheet]:
    """A variant the user named by its figures: refused where they make no sense. One whose figures stand but
    that could not ask an answer is still the variant named: a push's own code (the script prints it) names
    one that asks only a few answers again, and opens as the push made it."""
    try:
        return solve_values(question, raw, catalog)
    except NotAskable:
        return solve_values(question, raw, catalog, asked=())


# What a solver raises on values it was not written for (a catalogue entry it has no figure of, a
# division its draws never reach): a refusal of the user's override, not a crash. A select left with
# nothing to pick is a Reject already (Answer.refusal).
SOLVER_FAULTS = (ArithmeticError, LookupError, TypeError, ValueError, RuntimeError, MemoryError)


def _changed(code: VariantCode) -> str:
    return ", ".join(f"{k}={v}" for k, v in code.overrides)


def _base_draw(question: Question, catalog: Catalog, code: VariantCode) -> tuple[dict[str, Any], list[Param], Sheet]:
    """The variant `code` names before its overrides, solved: the defaults, or the seed's first
    draw the solver accepts (so '+name=value' changes that variant and nothing else). A draw is
    tried on floats first: most refused draws are refused there at a fraction of the exact solve's
    cost (b200-h100-roles refuses nine in ten). A draw counts as accepted where both solves accept
    it, so a float tie on a refusal's line can only pass a draw over, never show an unchecked one."""
    rng = np.random.default_rng(code.seed) if code.seed is not None else None
    last_reason = ""
    for _ in range(MAX_REDRAWS if rng is not None else 1):
        raw = draw_values(question, rng) if rng is not None else default_values(question)
        try:
            if rng is not None:
                _float_trial(question, raw, catalog)
            params, sheet = solve_values(question, raw, catalog)
        except Reject as reason:
            last_reason = str(reason)
            continue
        except ParameterError as error:
            raise VariantError(str(error)) from None
        return raw, params, sheet
    raise VariantError(f"{code.question_id}@{code.seed if code.seed is not None else 'default'}: "
                       f"no valid variant ({last_reason})")


def _float_trial(question: Question, raw: dict[str, Any], catalog: Catalog) -> None:
    """Raise Reject where the float solve refuses this draw. A fault of float arithmetic the exact solve
    does not meet (a division by an exact zero sympy would call infinite and refuse) leaves it to that solve."""
    try:
        solve_values(question, raw, catalog, quick=True)
    except SOLVER_FAULTS:
        pass


def listings(question: Question, shown: dict[str, tuple[str, ...]], keys: Iterable[str]) -> str:
    """The lettered items of these answers (orderings, selections), to follow a prompt."""
    return "".join(f"\n\n{question.answer(key).listing(shown[key])}" for key in keys if key in shown)


def _solution(question: Question, code: VariantCode, params: list[Param], sheet: Sheet) -> Solution:
    question = fill_answers(question, params)
    expected, shown = _present(question, code, sheet)
    prompt = render_prompt(question, params) + listings(question, shown, question.stages[0].ask)
    return Solution(question, code, params, prompt, sheet, expected, shown)


def solve_changed(solution: Solution, catalog: Catalog, changes: dict[str, Any], *,
                  quick: bool = False, asked: Collection[str] | None = None) -> tuple[list[Param], Sheet]:
    """This variant's values with `changes` (raw values), every generated parameter that depends
    on them drawn again, solved: sweeps, the what-if explorer, the follow-up (`asked`: the answers
    it asks, as run_solver). Raises Reject."""
    raw = {p.name: p.raw for p in solution.params} | changes
    return solve_values(solution.question, regenerate(solution.question, raw, set(changes), solution.code.seed),
                        catalog, quick=quick, asked=asked)


def revise(solution: Solution, catalog: Catalog, changes: dict[str, Any], *,
           asked: Collection[str] | None = None) -> Solution:
    """The same variant with some parameters changed (raw values), as a solution whose code
    names it ('id@seed+batch=256'); a push passes the answers it `asked` (run_solver). Raises Reject."""
    params, sheet = solve_changed(solution, catalog, changes, asked=asked)
    overrides = dict(solution.code.overrides) | {name: solution.question.parameter(name).override_text(value)
                                                 for name, value in changes.items()}
    code = VariantCode(solution.code.question_id, solution.code.seed, tuple(overrides.items()))
    return _solution(solution.question, code, params, sheet)


@dataclass(frozen=True)
class SweepPoint:
    x: float  # the swept parameter, in its display unit
    y: float  # the answer, in its own unit
    regime: str


def sweep(solution: Solution, catalog: Catalog, parameter: str, answer: str, points: int = 40,
          solved: dict[str, SweepPoint | None] | None = None) -> list[SweepPoint]:
    """Re-solve the variant with one parameter stepped across its range (all else fixed).

    `solved` is a memo the caller keeps between sweeps (the what-if screen, whose every step sweeps
    the same grid again): a point whose parameters are all as before is taken from it, not solved."""
    spec = solution.question.parameter(parameter)
    if not spec.ranged:
        raise ValueError(f"{parameter} is not a numeric range")
    xs = spec.grid(points) | {solution.param(parameter).raw}
    unit = parse_unit(solution.question.answer(answer).unit)
    own = {p.name: p.raw for p in solution.params}
    own_key = repr((answer, tuple(own.items())))  # every value as it is solved: numbers, names, tables
    memo = {} if solved is None else solved
    curve = []
    for x in sorted(xs):
        raw = regenerate(solution.question, own | {parameter: x}, {parameter}, solution.code.seed)
        key = repr((answer, tuple(raw.items())))
        if key not in memo:
            memo[key] = _sweep_point(solution, catalog, None if key == own_key else raw, answer, unit, float(x))
        if (point := memo[key]) is not None:
            curve.append(point)
    return curve


def _sweep_point(solution: Solution, catalog: Catalog, raw: dict[str, Any] | None, answer: str, unit: Any,
                 x: float) -> SweepPoint | None:
    """One point of a sweep solved on floats (raw None: the variant's own point, from its exact sheet).
    None: no valid variant there, or no finite answer."""
    if raw is None:
        sheet = solution.sheet
    else:
        try:
            _, sheet = solve_values(solution.question, raw, catalog, quick=True)
        except Reject:
            return None
    y = unit.from_base(sheet.number(answer))
    return SweepPoint(x, y, sheet.regime.name if sheet.regime else "") if math.isfinite(y) else None
