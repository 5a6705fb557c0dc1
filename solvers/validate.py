"""Authoring checks for question files: everything a question must satisfy before it ships.

Schema and units (bank.parse_question), the solver importable, the default variant solving,
every answer key produced and valid for its kind over many seeds, each answer's own test
inputs (correct, wrong, invalid) grading as they should, the key unchanged when re-solved
from the figures as the prompt prints them, judgement (select answers) that
changes between variants, each regime side reached by at least 10% of draws, unique ids, and
every golden: entry's variant solving to the answers the file pins.
Under `strict` (the interview-grade bar, QUESTION-BAR.md) also: no graded answer the same in
every draw, no select option the same in every draw unless declared a fact (and facts at most
half of what a draw shows), and the default variant pinned; for a file in the old shape (no
`stages:`) a follow-up round for the default variant and a prompt of at most 8 lines in every
variant checked (drawn names and figures lengthen it); for a staged file the stages' bar
(stagebar: short stages, pushes that cross and that realism accepts) and the variety sweep over
200 draws (variety), which for old-shape files is a report only (`validate --variety`).
Each problem is one line naming the file (and the field or seed where it applies).
"""
from __future__ import annotations

import ast
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from solvers import stagebar, variety
from solvers.answers import CLOSE, CORRECT, UNPARSED, WRONG, Answer, Checklist, Select
from solvers.bank import (
    PLACEHOLDER,
    Bank,
    Question,
    QuestionError,
    conventional_solver,
    load_bank,
    read_question,
    requirement_problems,
)
from solvers.conventions import convention_value
from solvers.data import Catalog
from solvers.derivation import Reject
from solvers.engine import Solution, VariantCode, VariantError, make_variant, render_prompt, solver_function
from solvers.followup import follow_up
from solvers.params import ParameterError
from solvers.paths import question_files as bank_files
from solvers.prompt_figures import printed_problems
from solvers.realism import broken, expression
from solvers.reality import TOLERANCE, code_of, comparison
from solvers.sampling import draw_values, resolve
from solvers.units import parse_unit
from solvers.variety import OptionTally, tally_options

MIN_SIDE_SHARE = 0.1
MAX_SAME_KEY = 0.9  # strict: no graded answer may have one key in more than 90% of variants
PROMPT_LINES, PROMPT_WIDTH = 8, stagebar.WIDTH  # an old-shape file's prompt: short, the method in the hints


def prompt_lines(solution: Solution) -> int:
    """Lines the prompt takes at 78 columns before the parameters (listed options excluded)."""
    return stagebar.text_lines(render_prompt(solution.question, solution.params))


RULE_DRAWS = 500
MAX_REJECTED = 0.95  # a question whose rules refuse more draws than this can barely be sampled


def constraint_rates(question: Question, catalog: Catalog, draws: int = RULE_DRAWS) -> dict[str, float]:
    """The share of raw draws each of the question's constraints refuses (before any redraw)."""
    refused: Counter[str] = Counter()
    rng = np.random.default_rng(0)
    for _ in range(draws):
        try:
            values = {p.name: p.value for p in resolve(question, draw_values(question, rng), catalog)}
        except ParameterError:
            continue
        for constraint in question.constraints:
            if broken((constraint,), values) is not None:
                refused[constraint.name] += 1
    return {c.name: refused[c.name] / draws for c in question.constraints}


def constraint_report(bank: Bank, catalog: Catalog) -> tuple[list[str], list[str]]:
    """(report lines, problems): each question's constraints with the share of draws they refuse."""
    lines, problems = [], []
    for question in bank.questions.values():
        try:
            rates = constraint_rates(question, catalog)
        except Exception as error:  # noqa: BLE001 - one file's crash is its line, not the end of the run
            problems.append(crashed(question.path, error))
            continue
        if rates:
            lines.append(f"{question.id}: " + ", ".join(f"{name} refuses {rate:.0%}" for name, rate in rates.items()))
        together = 1 - math.prod(1 - r for r in rates.values())
        if max(rates.values(), default=0) > MAX_REJECTED or together > MAX_REJECTED:
            problems.append(f"{question.path}: constraints: refuse {together:.0%} of draws "
                            f"(at most {MAX_REJECTED:.0%})")
    return lines, problems


def prompt_report(bank: Bank, catalog: Catalog) -> list[tuple[str, int]]:
    """(question file, prompt lines of its default variant) for every prompt over the limit: the
    quick notice of a lenient `validate`; under `strict` the self-test checks every variant."""
    long = []
    for question in bank.questions.values():
        try:
            solution = make_variant(bank, catalog, VariantCode(question.id, None))
        except Exception:  # no variant, or a solver bug: the self-test reports it with the variant
            continue
        if (lines := prompt_lines(solution)) > PROMPT_LINES:
            long.append((question.path, lines))
    return long


# A name may hold a digit (fp8, bf16, H100, TP8, E4M3, node1, p99): a word that starts with a letter.
_NAME = re.compile(r"\b[A-Za-z][A-Za-z0-9_.]*")


def typed_figures(question: Question) -> list[str]:
    """A line for every answer label or listed text that types a digit: a threshold or ratio typed there
    can disagree with the one the solver compares against, so it must be a {field} of the parameter
    the solver reads. Names are not figures: a word that starts with a letter, or a text the question
    declares under `literals:` (a name that starts with a digit or holds a space: 'TP 2', '1-SM')."""
    problems = []
    for spec in question.answers:
        for text in spec.texts:
            bare = PLACEHOLDER.sub("", text)
            for literal in sorted(question.literals, key=len, reverse=True):
                bare = bare.replace(literal, "")
            if re.search(r"\d", _NAME.sub("", bare)):
                problems.append(f"{question.path}: answers.{spec.key}: {text!r} types a figure: a threshold or "
                                "ratio is a {field} of the parameter the solver reads (a fixed: one for a "
                                "constant); a name with a digit that starts with one or holds a space goes "
                                "under literals:")
    return problems


# The usable-HBM share typed beside an HBM figure in words ("0.9·HBM", "HBM × 0.9"), where a text should name the card.
_TYPED_SHARE = re.compile(r"0\.9\s*[·×*]\s*\(?(?:n\s*·\s*)?HBM|HBM\s*[·×*]\s*0\.9", re.IGNORECASE)


def typed_conventions(question: Question) -> list[str]:
    """A line for every place a file types what the bank knows (strict): the usable-HBM share as 0.9 beside an
    HBM figure in a constraint, a stage's words or a hint (the constraint says usable_hbm, a text the card's
    name), and a constraint that derives KV bytes per token again (kv_bytes(model, dtype) says it once)."""
    share, found = convention_value("usable-hbm"), []
    for constraint in question.constraints:
        tree = expression(constraint)
        if tree is None:
            continue  # a bank rule: said in words
        nodes = list(ast.walk(tree))
        reads_hbm = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "hbm" or
                        isinstance(n, ast.Attribute) and n.attr.startswith("hbm") for n in nodes)
        if reads_hbm and any(isinstance(n, ast.Constant) and n.value == share for n in nodes):
            found.append(f"constraints.{constraint.name}: types the usable-HBM share: write usable_hbm")
        if {"layers", "kv_heads", "head_dim"} <= {n.attr for n in nodes if isinstance(n, ast.Attribute)}:
            found.append(f"constraints.{constraint.name}: derives KV bytes per token again: "
                         "write kv_bytes(model, dtype)")
    texts = [(f"stages[{i}]", stage.say) for i, stage in enumerate(question.stages)]
    texts += [(f"stages[{i}].hints", hint) for i, stage in enumerate(question.stages) for hint in stage.hints]
    found += [f"{where}: types the usable-HBM share beside HBM: name it (usable HBM, the usable-hbm card)"
              for where, text in texts if _TYPED_SHARE.search(text)]
    return [f"{question.path}: {line}" for line in found]


def question_files(paths: list[Path]) -> list[Path]:
    """The question files named, or under the folders named, each folder as a bank load reads it."""
    files = []
    for path in paths:
        files.extend(bank_files(path) if path.is_dir() else [path])
    return files


def self_test(solution: Solution) -> list[tuple[str, str]]:
    """(answer key, problem) for every answer whose own test inputs grade otherwise than they
    should: the correct one correct, the wrong one not correct, the invalid one unparsed."""
    problems = []
    for spec in solution.question.answers:
        inputs = spec.test_inputs(solution.expected[spec.key], solution.shown.get(spec.key, ()))
        for text, wanted in ((inputs.correct, {CORRECT}), (inputs.wrong, {CLOSE, WRONG}), (inputs.invalid, {UNPARSED})):
            verdict = solution.grade_one(spec.key, text).verdict
            if verdict not in wanted:
                problems.append((spec.key, f"typing {text!r} grades {verdict}, not {' or '.join(sorted(wanted))}"))
    return problems


def _key_form(value: object, spec: Answer) -> object:
    """A hashable form of an answer key, to count the distinct keys over draws: the options that
    hold for a select (in any order), the sequence for an ordering, the value itself otherwise."""
    if isinstance(value, dict):
        return frozenset(k for k, holds in value.items() if holds)
    if isinstance(spec, Select):
        return frozenset(value) if isinstance(value, (list, tuple, set, frozenset)) else value
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def _solved(bank: Bank, catalog: Catalog, code: VariantCode | str, where: str, problems: list[str]) -> Solution | None:
    """The variant of `code` solved, or None with a line in `problems`: refused, or a solver bug (reported
    with the variant that shows it)."""
    try:
        return make_variant(bank, catalog, VariantCode.parse(code) if isinstance(code, str) else code)
    except (VariantError, Reject) as error:
        problems.append(f"{where}: no variant ({error})")
    except Exception as error:
        problems.append(f"{where}: solver failed: {type(error).__name__}: {error}")
    return None


def check_question(question: Question, bank: Bank, catalog: Catalog, seeds: int, strict: bool = False) -> list[str]:
    """The bank self-test of one question over its default variant and `seeds` draws (what
    `infradrill validate` and the test suite both run); `strict` adds the interview-grade bar."""
    where = question.path
    problems: list[str] = []
    regimes: Counter[str] = Counter()
    # Self-graded checklists are the same list in every variant by nature; the bar limits their use instead.
    keys: dict[str, Counter[object]] = {a.key: Counter() for a in question.answers if not isinstance(a, Checklist)}
    bar: list[str] = []  # the interview-grade bar (strict): kept apart so the seeds still run
    options: dict[tuple[str, str], OptionTally] = {}
    prompts: list[tuple[int, str]] = []  # (lines, variant): drawn names and figures lengthen some prompts
    default: Solution | None = None
    drawn: list[Solution] = []  # the seeds' variants, for the staged bar and its sweep
    stopped = False
    for seed in [None, *range(seeds)]:
        label = "default variant" if seed is None else f"seed {seed}"
        solution = _solved(bank, catalog, VariantCode(question.id, seed), f"{where}: {label}", problems)
        if solution is None:
            continue
        if seed is None:
            default = solution
        else:
            drawn.append(solution)
        problems += [f"{where}: answers.{key}: {label}: {problem}" for key, problem in self_test(solution)]
        problems += [f"{where}: answers.{key}: {label}: {problem}" for key, problem in printed_problems(solution)]
        for key, seen in keys.items():
            seen[_key_form(solution.expected[key], question.answer(key))] += 1
        tally_options(options, solution)
        problems += [f"{where}: answers.{key}: {label}: lists no option that holds, or none that fails"
                     for key, listed in solution.shown.items() if isinstance(question.answer(key), Select)
                     and len({solution.sheet.judged(key)[o] for o in listed}) < 2]
        if strict and not question.staged:  # a staged file's stages have a bar of their own (stagebar)
            prompts.append((prompt_lines(solution), label))
        if strict and seed is None and not question.staged and follow_up(solution, catalog) is None:
            bar.append(f"{where}: followups: the default variant has no follow-up round (declare one, "
                       "or give the question a regime the engine can push across)")
        if question.regime_sides and solution.sheet.regime is None:
            problems.append(f"{where}: {label}: no regime analysis")
        elif seed is not None and solution.sheet.regime is not None:
            regimes[solution.sheet.regime.name] += 1
        if stopped := seed is None and bool(problems):
            break  # the default variant is broken: the seeds (and the staged bar's draws) would only repeat it
    problems += golden_problems(question, bank, catalog, default) + typed_figures(question)
    problems += [] if stopped else reality_problems(question, bank, catalog)
    if strict and not any(entry.variant == "default" for entry in question.golden):
        bar.append(f"{where}: golden: the default variant is not pinned (add an entry with variant: default, "
                   "its keys derived by hand)")
    for key, seen in keys.items():
        if seeds and isinstance(question.answer(key), Select) and len(seen) < 2:
            problems.append(f"{where}: answers.{key}: the same options hold in every variant: judgement that "
                            "does not follow from the numbers")
    held_over: dict[str, list[str]] = {}  # what only a push asks: held until the pushed variants are seen
    for key, seen in keys.items():
        same = _same_key(where, key, seen, strict and bool(seeds))
        if same and question.staged and key in question.push_only:
            held_over[key] = same
        else:
            bar += same
    if strict:
        bar += [f"{where}: {line}" for line in repeated_facts([default, *drawn] if default else drawn)]
        bar += typed_conventions(question)
    if strict and question.staged and not stopped:
        sweep = _sweep(question, bank, catalog, drawn, bar)
        bar += stagebar.static_problems(question) + stagebar.withheld_problems(question, drawn, catalog)
        pushed: list[Solution] = []
        bar += stagebar.draw_problems(question, [default, *drawn] if default else drawn, catalog, pushed)
        sweep_options: dict[tuple[str, str], OptionTally] = {}  # the options' bar, over the sweep's draws
        only = question.push_only  # ... and what only a push asks over the pushed variants
        for solution in sweep:
            tally_options(sweep_options, solution, skip=only)
        for solution in pushed:
            tally_options(sweep_options, solution, keys=only)
        for key, held in held_over.items():  # a candidate meets it on the pushed variants: varied there, it passes
            if _same_key(where, key, Counter(_key_form(solution.expected[key], question.answer(key))
                                             for solution in pushed), True):
                bar += held
        held_over = {}
        bar += option_problems(question, sweep_options)
        found = variety.findings(question, sweep, variety.distinct_variants(question, catalog), pushed)
        bar += [f.line(question) for f in found if f.kind != "constant option"]  # option_problems names them
    elif strict and seeds:
        bar += option_problems(question, options)
    bar += [line for held in held_over.values() for line in held]
    if over := [(lines, label) for lines, label in prompts if lines > PROMPT_LINES]:
        lines, label = max(over, key=lambda entry: entry[0])  # the first of the longest: default, then seed order
        bar.append(f"{where}: prompt: {lines} lines at {PROMPT_WIDTH} columns ({label}), over {PROMPT_LINES} in "
                   f"{len(over)} of {len(prompts)} variants")
    for side in question.regime_sides:
        if seeds and regimes[side] < MIN_SIDE_SHARE * seeds:
            problems.append(f"{where}: regime_sides: '{side}' reached by {regimes[side]} of {seeds} draws "
                            f"(needs {MIN_SIDE_SHARE:.0%})")
    return problems + bar


def _same_key(where: str, key: str, seen: Counter[object], check: bool) -> list[str]:
    """The bar's line where one key holds in more than MAX_SAME_KEY of the variants `seen` counts."""
    if check and max(seen.values(), default=0) > MAX_SAME_KEY * sum(seen.values()):
        return [f"{where}: answers.{key}: one key in {max(seen.values())} of {sum(seen.values())} variants: "
                "a graded answer that barely depends on the variant"]
    return []


def _sweep(question: Question, bank: Bank, catalog: Catalog, drawn: list[Solution],
           problems: list[str]) -> list[Solution]:
    """The variety sweep's variants: seeds 0 to variety.DRAWS - 1, those already solved (`drawn`) reused; a
    seed with no variant is a line in `problems`."""
    solved = {solution.code.seed: solution for solution in drawn if solution.code.seed is not None}
    for seed in range(variety.DRAWS):
        if seed not in solved:
            found = _solved(bank, catalog, VariantCode(question.id, seed), f"{question.path}: seed {seed}", problems)
            if found is not None:
                solved[seed] = found
    return [solved[seed] for seed in sorted(solved) if seed < variety.DRAWS]


def variety_report(bank: Bank, catalog: Catalog, draws: int = variety.DRAWS) -> tuple[list[str], Counter[str]]:
    """The variety sweep of every question read: one line a finding (the question's file and answer, its kind
    in brackets) and the findings counted by kind. A report for old-shape files, which later issues
    restructure; `--strict` fails a staged file's."""
    lines, counts = [], Counter[str]()
    for question in bank.questions.values():
        try:
            sweep = [s for seed in range(draws)
                     if (s := _solved(bank, catalog, VariantCode(question.id, seed), "", [])) is not None]
            found = variety.findings(question, sweep, variety.distinct_variants(question, catalog))
        except Exception as error:  # noqa: BLE001 - one file's crash is its line, not the end of the report
            lines.append(crashed(question.path, error))
            continue
        lines += [f"{f.line(question)} [{f.kind}]" for f in found]
        counts.update(f.kind for f in found)
    return lines, counts


def old_shape(bank: Bank) -> list[str]:
    """The files read that declare no stages: each runs as one stage of every answer, then the engine's push."""
    return [question.path for question in bank.questions.values() if not question.staged]


def golden_problems(question: Question, bank: Bank, catalog: Catalog, default: Solution | None = None) -> list[str]:
    """A line for every answer a golden: entry pins that its variant's solver does not give (within
    the pin's tolerance), and for an entry whose variant cannot be made. `default`: the default
    variant, already solved."""
    problems: list[str] = []
    for index, entry in enumerate(question.golden):
        where, code = f"{question.path}:{entry.line}: golden[{index}]", f"{question.id}@{entry.variant}"
        solution = default if entry.variant == "default" and default else _solved(
            bank, catalog, code, f"{where}: {code}", problems)
        if solution is None:
            continue
        drawn = {param.name: param.raw for param in solution.params}
        for name, pinned in entry.draws:
            if not _same_draw(drawn[name], pinned):
                problems.append(f"{where}.draws.{name}: {code} draws {drawn[name]!r}, the file pins {pinned!r} "
                                "(a range, a choice list or the sampler changed what this seed draws)")
        for key, pinned in entry.expect:
            mismatch = question.answer(key).pin_mismatch(pinned, solution.sheet.results[key], entry.rel)
            if mismatch is not None:
                problems.append(f"{where}.{key}: {code}: the solver gives {mismatch[0]}, the file pins {mismatch[1]}")
    return problems


def _same_draw(drawn: Any, pinned: Any) -> bool:
    """A drawn parameter against its pin: names exactly, numbers to float rounding (a file's 4.6 is a float)."""
    if isinstance(drawn, str) or isinstance(pinned, str):
        return drawn == pinned
    return math.isclose(float(drawn), float(pinned), rel_tol=1e-12, abs_tol=0.0)


MIN_REPEATS = 3  # draws in which two givens both appear before their agreement counts


def repeated_facts(solutions: list[Solution]) -> list[str]:
    """Pairs of givens that are one fact under two symbols: equal in every draw that states both, over draws
    where the value varies (so that it is no coincidence), like TP stated as both 'n' and 'TP'."""
    seen: dict[tuple[str, str], list[tuple[float, bool]]] = {}
    labels: dict[str, str] = {}
    for solution in solutions:
        givens = solution.sheet.givens
        labels |= {given.symbol: given.label for given in givens}
        for index, first in enumerate(givens):
            for second in givens[index + 1:]:
                seen.setdefault((first.symbol, second.symbol), []).append((first.value, first.value == second.value))
    return [f"givens: '{a}' ({labels[a]}) and '{b}' ({labels[b]}) are one fact in all {len(found)} draws that "
            "state both: declare it once and pass that symbol" for (a, b), found in seen.items()
            if len(found) >= MIN_REPEATS and all(same for _, same in found) and len({v for v, _ in found}) > 1]


def reality_problems(question: Question, bank: Bank, catalog: Catalog) -> list[str]:
    """A line for every reality: entry whose variant cannot be made, whose model lands outside the tolerance
    of the measurement without saying why, or says why it is off and lands within it."""
    problems: list[str] = []
    for index, entry in enumerate(question.reality):
        where, code = f"{question.path}:{entry.line}: reality[{index}]", code_of(question, entry)
        solution = _solved(bank, catalog, code, f"{where}: {code}", problems)
        if solution is None:
            continue
        found = comparison(entry, solution)
        if not found.within and not entry.why:
            problems.append(f"{where}: {code}: the model gives {found.bank:.4g} {entry.unit} against "
                            f"{entry.measured:.4g} measured ({found.ratio:.2f}×, outside {TOLERANCE}×): fix the "
                            "model, or say why it is not expected to match")
        elif found.within and entry.why:
            problems.append(f"{where}.why: {code}: lands within {TOLERANCE}× ({found.ratio:.2f}×): "
                            "the why says it should not")
    return problems


def unmeasured(bank: Bank) -> list[str]:
    """The questions that predict a time or a rate and show no published measurement beside it."""
    return [question.path for question in bank.questions.values()
            if not question.reality and any(_time_or_rate(answer) for answer in question.answers)]


def _time_or_rate(answer: Answer) -> bool:
    if not answer.numeric:
        return False
    dim = parse_unit(answer.unit).dim  # a time is seconds alone; a rate is anything per second
    return dim == (0, 0, 1, 0, 0) or dim[2] == -1


MAX_UNDECIDED = 0.5  # strict: an option the variant cannot decide (judged None) in more draws than this


def option_problems(question: Question, tally: dict[tuple[str, str], OptionTally]) -> list[str]:
    """The bar on single select options: each follows the variant's numbers or is a declared fact
    (Sheet.judge(..., fact=True)) that never varies, and facts are at most half of what a draw
    shows, so that every draw's right set still depends on the variant."""
    where, problems = question.path, []
    for (key, option), counts in tally.items():
        if counts.undecided > MAX_UNDECIDED * (counts.judged + counts.undecided):
            problems.append(f"{where}: answers.{key}: '{option}' cannot be decided in {counts.undecided} of "
                            f"{counts.judged + counts.undecided} draws (at most {MAX_UNDECIDED:.0%}): an option "
                            "the pool rarely lists")
        if counts.declared and counts.declared < counts.judged:
            problems.append(f"{where}: answers.{key}: '{option}' is declared a fact in {counts.declared} of "
                            f"{counts.judged} draws only")
        elif counts.declared and 0 < counts.held < counts.judged:
            problems.append(f"{where}: answers.{key}: '{option}' is declared a fact but holds in {counts.held} "
                            f"of {counts.judged} draws")
        elif not counts.declared and counts.constant:
            problems.append(f"{where}: answers.{key}: '{option}' {'holds' if counts.held else 'fails'} in "
                            f"all {counts.judged} draws (shown in {counts.shown}): make it follow the numbers, or "
                            "declare it a fact with its reason")
    for spec in question.answers:
        if isinstance(spec, Select):
            facts = sum(1 for (k, _), counts in tally.items() if k == spec.key and counts.declared)
            if 2 * facts > (spec.show or len(spec.pool)):
                problems.append(f"{where}: answers.{spec.key}: {facts} declared facts, more than half of "
                                f"the {spec.show or len(spec.pool)} options a draw shows")
    return problems


def constant_options(question: Question, bank: Bank, catalog: Catalog, seeds: int) -> list[str]:
    """Options of the question's select answers that hold (or fail) in every draw,
    over the default and `seeds` draws, declared facts marked: a report for authors (validate
    --strict fails the ones not declared)."""
    tally: dict[tuple[str, str], OptionTally] = {}
    for seed in [None, *range(seeds)] if any(isinstance(a, Select) for a in question.answers) else []:
        try:
            tally_options(tally, make_variant(bank, catalog, VariantCode(question.id, seed)))
        except (VariantError, Reject):
            continue
    return [f"{question.path}: answers.{key}: '{option}' {'holds' if counts.held else 'fails'} in all "
            f"{counts.judged} draws (shown in {counts.shown}){' (a declared fact)' if counts.declared else ''}"
            for (key, option), counts in tally.items() if counts.constant]


def validate(paths: list[Path], catalog: Catalog, seeds: int = 50, strict: bool = False) -> list[str]:
    """Every problem found in the question files under `paths`, one line each."""
    bank, problems = read_questions(paths)
    return problems + validate_bank(bank, catalog, seeds, strict)


def read_questions(paths: list[Path]) -> tuple[Bank, list[str]]:
    """The questions under `paths` that parse and name a solver, and a line for each that does not."""
    problems: list[str] = []
    bank = Bank()
    for path in question_files(paths):
        try:
            question = read_question(path)
        except QuestionError as error:
            problems.append(str(error))
            continue
        except Exception as error:  # noqa: BLE001 - a reader's bug on one file of a pack hides no other's
            problems.append(crashed(path, error))
            continue
        if question.id in bank.questions:
            problems.append(f"{path}: id: '{question.id}' already used by {bank.questions[question.id].path}")
            continue
        problem = solver_problem(question)
        if problem:
            problems.append(problem)
            continue
        bank.questions[question.id] = question
    return bank, problems


def solver_problem(question: Question) -> str:
    """Why the question's solver cannot be found where the convention puts it (solvers/topics/<topic>/<id>.py,
    with solve(p, s)), or where its `solver:` points (a user's pack may reuse another question's)."""
    if question.solver == conventional_solver(question.topic, question.id):
        return f"{question.path}: solver: '{question.solver}' is where the convention puts it: leave the field out"
    try:
        solver_function(question)
    except (ImportError, AttributeError, ValueError):
        return f"{question.path}: solver: no solve(p, s) in {question.solver_module.replace('.', '/')}.py"
    return ""


def validate_bank(bank: Bank, catalog: Catalog, seeds: int = 50, strict: bool = False) -> list[str]:
    """Prerequisites and the self-test of every question read."""
    problems: list[str] = []
    # Prerequisites may name questions outside the files checked: look for them in the shipped bank too.
    paths_checked = {q.path for q in bank.questions.values()}
    everything = Bank(load_bank().questions | bank.questions)
    problems += [p for p in requirement_problems(everything) if p.split(":", 1)[0] in paths_checked]
    for question in bank.questions.values():
        try:
            problems.extend(check_question(question, bank, catalog, seeds, strict))
        except Exception as error:  # noqa: BLE001 - each file is checked on its own
            problems.append(crashed(question.path, error))
    return problems


def crashed(path: Path | str, error: Exception) -> str:
    """The line for a file whose check raised: the checker's bug or a case it missed, named with the file."""
    first = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{path}: cannot be checked: {type(error).__name__}: {first}"
