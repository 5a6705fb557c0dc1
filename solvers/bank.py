"""The question bank: read questions/<group>/<id>.yaml, validate each against the schema.

An invalid file yields one problem line naming the file, the field and the line; the
rest of the bank still loads. Loading imports neither sympy nor any solver module, so
listing the bank stays fast.
"""
from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solvers.answers import KIND_FIELDS, Answer, SpecError, make_answer
from solvers.params import KIND_FIELDS as PARAM_KIND_FIELDS
from solvers.params import ParamSpec, make_param, relative_factor
from solvers.paths import question_files, questions_dir
from solvers.realism import RULE_NAMES, Constraint, ConstraintError, constraints_for, declared
from solvers.units import UnitError, parse_unit
from solvers.yamlload import LineDict, YamlError, decode_text, load_with_lines, read_bytes

if TYPE_CHECKING:
    from solvers.bankcache import QuestionCache

PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\.([a-z_][a-z0-9_]*))?\}")
_BRACED = re.compile(r"\{[^{}\n]*\}")  # what a reader takes for a placeholder, well formed or not


def _stray_brace(text: str) -> str | None:
    """The first `{...}` in `text` that is no placeholder ({a.b.c}, {x.__class__}): shown literally
    in every variant, where its author meant a figure."""
    return next((m.group(0) for m in _BRACED.finditer(text) if not PLACEHOLDER.fullmatch(m.group(0))), None)
QUESTION_ID = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")  # a question id (the file schema takes its pattern)
# A variant code after its '@': 'default' or a seed, then '+name=value' overrides (engine.VariantCode).
VARIANT_TAIL = r"(?P<seed>default|\d+)(?P<sets>(?:\+[a-z0-9_]+=[^+\s]+)*)"
_VARIANT = re.compile(f"^{VARIANT_TAIL}$")
SOLVER_NAME = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")  # <topic folder>.<module> under solvers/topics


def conventional_solver(topic: str, question_id: str) -> str:
    """Where a question's solver lives by convention, under solvers/topics: its topic's folder, its id's file."""
    return f"{_module_name(topic)}.{_module_name(question_id)}"


def _module_name(name: str) -> str:
    return re.sub(r"[-.]", "_", name)


class QuestionError(ValueError):
    """A question file that breaks the schema: file, field and line in the message."""


@dataclass(frozen=True)
class DeclaredFollowUp:
    """An author's follow-up: parameters to set (as --set would), answers to ask, what to say."""

    set: tuple[tuple[str, str], ...]
    ask: tuple[str, ...]
    say: str = ""


STAGE_KINDS = ("opening", "ask", "recall", "push")
PUSH_PREFIX = "followup"  # a push's answers are stored as 'followup.<key>' (the first), 'followup2.<key>', ...


@dataclass(frozen=True)
class Stage:
    """One turn of the interview: what the interviewer says and the answers graded on it. A push
    moves parameters first (`set`, or the engine's crossing search where `generated`) and asks
    on the pushed variant; a recall stage asks for a free list the candidate marks themselves.
    A declared push moves every draw the same way, so it crosses only from one side: pushes with
    `when: <regime>` in a row are one turn, each asked of the variants on its side."""

    kind: str  # one of STAGE_KINDS
    say: str  # a template over the parameters and the keys of earlier stages; '' for a push the engine words
    ask: tuple[str, ...]  # answer keys; a generated push of an old-shape file leaves them to the engine
    hints: tuple[str, ...] = ()
    set: tuple[tuple[str, str], ...] = ()  # a declared push: parameter -> value, as --set takes it
    generated: bool = False  # a push found by the engine's crossing search
    nudge: str = ""  # a push that need not cross the regime boundary, and why
    line: int = 0
    when: str = ""  # a push asked only of variants in this regime: consecutive `when` pushes are one turn
    # A generated push's reason for moving each parameter it may move ({from} and {to}: its values), said before
    # the stage's `say` (its ask) where the engine moves that parameter: (name, said where it rises, where it falls).
    # A declared push's are said where the engine's push stands in for it (its own `say` describes its own move).
    reasons: tuple[tuple[str, str, str], ...] = ()
    # Parameters the interviewer gives only now: left out of the tables before, since they would answer an
    # earlier ask (the memory consumers a recall stage asks for, listed in the opening's table).
    gives: tuple[str, ...] = ()

    def reason(self, name: str, rises: bool) -> str:
        """The reason for moving `name`, in the words for the way it moved (one text where the file gives one)."""
        return next(((up if rises else down) for named, up, down in self.reasons if named == name), "")

    @property
    def push(self) -> bool:
        return self.kind == "push"


@dataclass(frozen=True)
class Golden:
    """A variant the question file pins (golden:): its code after the '@', the answers it expects
    (each as its kind's pin takes it), the hand derivation of those figures, and its line."""

    variant: str
    expect: tuple[tuple[str, Any], ...]
    why: str
    rel: float | None = None  # the entry's own tolerance for its numbers
    line: int = 0
    draws: tuple[tuple[str, Any], ...] = ()  # parameters as the variant draws them: a seed's draw pinned


@dataclass(frozen=True)
class Measured:
    """A real system's published figure for one answer (reality:): the figure in `unit`, the system and
    conditions, the exact source, the variant code's part after the '@' that puts those conditions into
    this question, and why the model is not expected to land within 1.5x of it, where it is not."""

    answer: str
    measured: float
    unit: str
    system: str
    source: str
    variant: str
    why: str = ""
    line: int = 0


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    group: str
    topic: str
    difficulty: int
    prompt: str
    parameters: tuple[ParamSpec, ...]
    answers: tuple[Answer, ...]
    hints: tuple[str, ...]
    references: tuple[str, ...]
    regime_sides: tuple[str, ...]  # sides the random draws must each reach
    catalogue: tuple[str, ...] = ()  # where the question comes from in CATALOGUE.md's seed lists ("001:15")
    chart: tuple[str, str] | None = None  # (parameter to sweep, answer to plot) for the regime chart
    followups: tuple[DeclaredFollowUp, ...] = ()
    requires: tuple[str, ...] = ()  # questions whose results this one takes as givens (drilled first)
    constraints: tuple[Constraint, ...] = ()  # realism: bank rules that apply, then the question's own
    golden: tuple[Golden, ...] = ()  # variants pinned with their expected answers, checked by validate
    solver: str = ""  # another question's solver module ("memory.kv_bytes_per_token"), where not its own
    literals: tuple[str, ...] = ()  # names with a digit that answers' texts may type (validate.typed_figures)
    # Numbers that take a few values on purpose (`lookup:` on the answer), with why: validate's variety
    # sweep fails a graded number with three or fewer values over its draws otherwise.
    lookups: tuple[tuple[str, str], ...] = ()
    path: str = ""
    stages: tuple[Stage, ...] = ()  # the interview in order (an old-shape file: every answer, then a push)
    reality: tuple[Measured, ...] = ()  # published measurements shown beside the model's figure at the reveal
    staged: bool = False  # whether the file declares its stages (old-shape files are given two)

    def given_at(self, name: str) -> int:
        """The index of the stage whose table first shows parameter `name` (0: the opening's)."""
        return next((i for i, stage in enumerate(self.stages) if name in stage.gives), 0)

    def stage_of(self, key: str) -> int:
        """The index of the stage that first asks this answer."""
        return next(i for i, stage in enumerate(self.stages) if key in stage.ask)

    def push_prefix(self, index: int) -> str:
        """How the answers of the push at stage `index` are stored: 'followup.' for the first push."""
        number = len({self.turn_of(i) for i in range(index + 1) if self.stages[i].push})
        return f"{PUSH_PREFIX}{'' if number == 1 else number}."

    def turn_number(self, index: int) -> int:
        """Which turn of the interview stage `index` is, from 1 (each side's push of a turn counts once)."""
        return len({self.turn_of(i) for i in range(index + 1)})

    @property
    def last_unpushed(self) -> int:
        """The last stage asked on the variant as drawn (no push): its regime closes that stage."""
        return max(i for i, stage in enumerate(self.stages) if not stage.push)

    @property
    def push_only(self) -> frozenset[str]:
        """The answers only a push asks: a candidate meets them on pushed variants alone."""
        before = {key for stage in self.stages if not stage.push for key in stage.ask}
        return frozenset(key for stage in self.stages if stage.push for key in stage.ask) - before

    @property
    def turn_count(self) -> int:
        return self.turn_number(len(self.stages) - 1)

    def asks_on(self, index: int, regime: str | None) -> bool:
        """Whether stage `index` is asked of a variant in `regime` (a push for the other side is not)."""
        when = self.stages[index].when
        return not when or when == regime

    def turn_of(self, index: int) -> int:
        """The first stage of the turn stage `index` belongs to: pushes with `when` in a row are one turn."""
        while index and self.stages[index].when and self.stages[index - 1].when:
            index -= 1
        return index

    @property
    def solver_module(self) -> str:
        """The module whose solve(p, s) answers this question: solvers/topics/<topic>/<id>.py (with '_'
        for '-'), or the module `solver:` names (a user's pack reusing a shipped solver)."""
        return f"solvers.topics.{self.solver or conventional_solver(self.topic, self.id)}"

    @property
    def generator_settings(self) -> frozenset[str]:
        """Parameters that only tune a generator (a distribution's spread): not problem data
        unless the prompt prints them."""
        feeding = {name for p in self.parameters for _, name in p.reads}
        printed = {m.group(1) for text in (self.prompt, *(stage.say for stage in self.stages))
                   for m in PLACEHOLDER.finditer(text)}
        return frozenset(feeding - printed)

    def parameter(self, name: str) -> ParamSpec:
        for spec in self.parameters:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def answer(self, key: str) -> Answer:
        for spec in self.answers:
            if spec.key == key:
                return spec
        raise KeyError(key)


@dataclass
class Bank:
    questions: dict[str, Question] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, question_id: str) -> Question:
        if question_id not in self.questions:
            raise KeyError(f"unknown question '{question_id}' (see `infradrill list`)")
        return self.questions[question_id]


class _Reader:
    """Reads fields out of a LineDict, raising QuestionError with file:line context."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, line: int, message: str) -> QuestionError:
        return QuestionError(f"{self.path}:{line}: {where}: {message}")

    def mapping(self, value: Any, where: str, line: int, fields: Collection[str], shape: str) -> LineDict:
        """`value` as a mapping of only the known `fields`; `shape` says what is expected where it is none."""
        if not isinstance(value, LineDict):
            raise self.fail(where, line, f"expected {shape}")
        for name in value:
            if name not in fields:
                raise self.fail(f"{where}.{name}", value.line_of(name), "unknown field")
        return value

    def field(self, mapping: LineDict, name: str, kind: type | tuple[type, ...], where: str = "",
              required: bool = True, default: Any = None) -> Any:
        label = f"{where}.{name}" if where else name
        if name not in mapping:
            if required:
                raise self.fail(label, mapping.line, "missing")
            return default
        value = mapping[name]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.fail(label, mapping.line_of(name), f"expected {_kind_name(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise self.fail(label, mapping.line_of(name), f"expected {_kind_name(kind)}, got {value!r}")
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "text", int: "an integer", float: "a number", list: "a list", dict: "a mapping", bool: "true/false"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


# The fields each part of a question file may hold (question_schema builds the file's JSON Schema from them).
QUESTION_FIELDS = frozenset({"id", "title", "group", "topic", "difficulty", "solver", "catalogue", "prompt",
                             "parameters", "answers", "hints", "references", "regime_sides", "chart", "followups",
                             "stages", "requires", "constraints", "golden", "literals", "reality"})
PARAMETER_FIELDS = frozenset({"default", "label", "unit", *PARAM_KIND_FIELDS})
ANSWER_FIELDS = frozenset({"key", "label", "unit", "lookup", *KIND_FIELDS})
STAGE_FIELDS = frozenset({"say", "ask", "hints", "set", "push", "recall", "nudge", "when", "reasons", "gives"})
FOLLOWUP_FIELDS = frozenset({"set", "ask", "say"})
GOLDEN_FIELDS = frozenset({"variant", "expect", "why", "rel", "draws"})
REALITY_FIELDS = frozenset({"answer", "measured", "unit", "system", "source", "variant", "why"})


def _unit(reader: _Reader, mapping: LineDict, where: str) -> str:
    unit = reader.field(mapping, "unit", str, where, required=False, default="")
    try:
        parse_unit(unit)
    except UnitError as error:
        raise reader.fail(f"{where}.unit", mapping.line_of("unit"), str(error)) from None
    return unit


def _parse_param(reader: _Reader, name: str, spec: Any, line: int) -> ParamSpec:
    where = f"parameters.{name}"
    spec = reader.mapping(spec, where, line, PARAMETER_FIELDS, "a mapping such as {choice: [...], default: ...}")
    label = reader.field(spec, "label", str, where, required=False, default="")
    try:
        return make_param(name, label, _unit(reader, spec, where), spec, partial(reader.field, spec, where=where))
    except SpecError as error:
        field_name = f"{where}.{error.field}" if error.field else where
        raise reader.fail(field_name, spec.line_of(error.field), str(error)) from None


def _parse_answer(reader: _Reader, index: int, spec: Any, line: int) -> Answer:
    where = f"answers[{index}]"
    spec = reader.mapping(spec, where, line, ANSWER_FIELDS, "a mapping with key, label and a comparison")
    key = reader.field(spec, "key", str, where)
    label = reader.field(spec, "label", str, where)
    unit = _unit(reader, spec, where)
    try:
        return make_answer(key, label, unit, {name: spec[name] for name in spec if name in KIND_FIELDS})
    except SpecError as error:
        raise reader.fail(f"{where}.{error.field}", spec.line_of(error.field), str(error)) from None


def _parse_lookups(reader: _Reader, raw: list, answers: tuple[Answer, ...]) -> tuple[tuple[str, str], ...]:
    """(key, reason) for each number whose file says it is a lookup (`lookup: "why it takes few values"`)."""
    lookups = []
    for index, (item, answer) in enumerate(zip(raw, answers)):
        if "lookup" not in item:
            continue
        reason = item["lookup"]
        if not answer.numeric or not isinstance(reason, str) or not reason.strip():
            raise reader.fail(f"answers[{index}].lookup", item.line_of("lookup"),
                              "a number's reason for taking few values (lookup: \"why\")")
        lookups.append((answer.key, reason))
    return tuple(lookups)


def _texts(reader: _Reader, document: LineDict, name: str) -> list[str]:
    items = reader.field(document, name, list, required=False, default=[])
    if not all(isinstance(item, str) for item in items):
        raise reader.fail(name, document.line_of(name), "expected a list of texts")
    return items


def _parse_chart(reader: _Reader, document: LineDict, parameters: tuple[ParamSpec, ...],
                 answers: tuple[Answer, ...]) -> tuple[str, str] | None:
    chart = reader.field(document, "chart", dict, required=False)
    if chart is None:
        return None
    line = document.line_of("chart")
    x, y = chart.get("x"), chart.get("y")
    if not any(p.name == x and p.ranged for p in parameters):
        raise reader.fail("chart.x", line, f"{x!r} is not a numeric range parameter")
    if not any(a.key == y and a.numeric for a in answers):
        raise reader.fail("chart.y", line, f"{y!r} is not a numeric answer")
    return x, y


def _parse_followups(reader: _Reader, document: LineDict, names: set[str], keys: set[str],
                     ranged: set[str]) -> tuple:
    raw = reader.field(document, "followups", list, required=False, default=[])
    line = document.line_of("followups")
    followups = []
    for index, item in enumerate(raw):
        where = f"followups[{index}]"
        if not isinstance(item, LineDict) or set(item) - FOLLOWUP_FIELDS:
            raise reader.fail(where, line, "expected {set: {parameter: value}, ask: [answer keys], say: text}")
        changes = reader.field(item, "set", dict, where)
        ask = reader.field(item, "ask", list, where)
        if not changes or any(name not in names for name in changes):
            raise reader.fail(f"{where}.set", item.line_of("set"), "name parameters of this question")
        _finite_changes(reader, changes, f"{where}.set", item.line_of("set"), ranged)
        if not ask or any(key not in keys for key in ask):
            raise reader.fail(f"{where}.ask", item.line_of("ask"), "name answers of this question")
        followups.append(DeclaredFollowUp(tuple((str(k), str(v)) for k, v in changes.items()), tuple(ask),
                                          reader.field(item, "say", str, where, required=False, default="")))
    return tuple(followups)


def _finite_changes(reader: _Reader, changes: dict, where: str, line: int, ranged: set[str]) -> None:
    """A push's `set:` values: a non-finite figure (`.inf`, or `1e999`, which YAML reads as text) would
    be refused at every draw, so the push never asked, and nothing said why; so would a factor ("÷4")
    of a parameter with no drawn range, or one that moves nothing."""
    for name, value in changes.items():
        factor = relative_factor(value)
        if factor is not None:
            if name not in ranged:
                raise reader.fail(f"{where}.{name}", line, f"{value!r}: only a drawn range (int, uniform, "
                                                           "loguniform) moves by a factor")
            if not 0 < factor < math.inf or factor == 1:
                raise reader.fail(f"{where}.{name}", line, f"{value!r} is no factor that moves it")
            continue
        try:
            figure = float(value)
        except (TypeError, ValueError, OverflowError):
            continue  # a choice's key, a text
        if not math.isfinite(figure):
            raise reader.fail(f"{where}.{name}", line, f"{value!r} is not a finite figure")


def _parse_stages(reader: _Reader, document: LineDict, names: set[str], answers: tuple[Answer, ...],
                  ranged: set[str]) -> tuple:
    """The interview's stages as the file declares them (see Stage), checked so that the engine can run
    them: every answer asked, none twice outside a push, a field in a `say` naming a parameter or the key
    of an earlier stage (never an answer still to come)."""
    raw = reader.field(document, "stages", list)
    line = document.line_of("stages")
    if not raw:
        raise reader.fail("stages", line, "at least one stage")
    keys = {a.key: a for a in answers}
    regimes = tuple(getattr(keys["regime"], "choices", ())) if "regime" in keys else ()
    stages: list[Stage] = []
    asked: set[str] = set()  # answered in an earlier stage: a later `say` may quote their keys
    withheld = _withheld(reader, raw, names)  # given by a later stage: no `say` before it may name them
    for index, item in enumerate(raw):
        where = f"stages[{index}]"
        item = reader.mapping(item, where, line, STAGE_FIELDS, "a mapping with say and ask")
        push = item.get("push")
        if push is not None and push != "generated":
            raise reader.fail(f"{where}.push", item.line_of("push"), "the only value is 'generated'")
        changes = reader.field(item, "set", dict, where, required=False, default={})
        if any(name not in names for name in changes):
            raise reader.fail(f"{where}.set", item.line_of("set"), "name parameters of this question")
        _finite_changes(reader, changes, f"{where}.set", item.line_of("set"), ranged)
        if "set" in item and not changes or changes and push:
            raise reader.fail(f"{where}.set", item.line_of("set"), "a push sets parameters or is generated, not both")
        recall = "recall" in item
        kind = "push" if changes or push else "recall" if recall else "opening" if index == 0 else "ask"
        if index == 0 and kind != "opening":
            raise reader.fail(where, item.line, "the first stage opens the interview: neither a push nor a recall")
        if recall and "ask" in item:
            raise reader.fail(f"{where}.recall", item.line_of("recall"), "a recall stage asks its list, nothing else")
        ask = tuple(reader.field(item, "recall" if recall else "ask", list, where))
        if not ask or not all(isinstance(k, str) and k in keys for k in ask) or len(set(ask)) != len(ask):
            raise reader.fail(f"{where}.{'recall' if recall else 'ask'}", item.line_of("recall" if recall else "ask"),
                              "name answers of this question, each once")
        if recall and not all(keys[k].self_graded for k in ask):
            raise reader.fail(f"{where}.recall", item.line_of("recall"), "a recall stage asks checklist answers")
        if kind != "push" and (again := sorted(asked & set(ask))):
            raise reader.fail(f"{where}.ask", item.line_of("ask"),
                              f"{', '.join(again)} asked already (only a push re-asks)")
        say = reader.field(item, "say", str, where, required=kind != "push", default="")
        if stray := _stray_brace(say):
            raise reader.fail(f"{where}.say", item.line_of("say"), f"{stray} is no placeholder ({{name}} or "
                              "{name.field})")
        gives = tuple(reader.field(item, "gives", list, where, required=False, default=[]))
        if gives and kind not in ("ask", "recall"):
            raise reader.fail(f"{where}.gives", item.line_of("gives"),
                              "the opening's table shows every figure it gives, and a push's its moves")
        withheld -= set(gives)
        for match in PLACEHOLDER.finditer(say):
            name = match.group(1)
            if name not in names and (name not in asked or match.group(2)):
                raise reader.fail(f"{where}.say", item.line_of("say"),
                                  f"field {match.group(0)} names no parameter nor the key of an earlier stage")
            if name in withheld:
                raise reader.fail(f"{where}.say", item.line_of("say"),
                                  f"{{{name}}} is given by a later stage (its `gives`)")
        nudge = reader.field(item, "nudge", str, where, required=False, default="")
        if nudge and kind != "push":
            raise reader.fail(f"{where}.nudge", item.line_of("nudge"), "only a push can be a nudge")
        when = reader.field(item, "when", str, where, required=False, default="")
        if when and (kind != "push" or when not in regimes):
            raise reader.fail(f"{where}.when", item.line_of("when"),
                              "a push's `when` names a choice of the regime answer: "
                              + (", ".join(regimes) or "this question has none"))
        hints = _texts(reader, item, "hints")
        reasons = _reasons(reader, item, where, names, kind == "push")
        stages.append(Stage(kind, say, ask, tuple(hints), tuple((str(k), str(v)) for k, v in changes.items()),
                            push == "generated", nudge, item.line, when, reasons, gives))
        if kind != "push":
            asked |= set(ask)
    for index, stage in enumerate(stages):  # alternatives of one turn: one for each regime at most
        turn = stages[index + 1:]
        turn = turn[:next((i for i, other in enumerate(turn) if not other.when), len(turn))]
        if stage.when and any(other.when == stage.when for other in turn):
            raise reader.fail(f"stages[{index}].when", stage.line, f"two pushes of one turn for {stage.when}")
    never = [k for k in keys if not any(k in stage.ask for stage in stages)]
    if never:
        raise reader.fail("stages", line, f"{', '.join(never)} asked in no stage")
    return tuple(stages)


def _withheld(reader: _Reader, raw: list, names: set[str]) -> set[str]:
    """The parameters some stage `gives`, each named once: the tables before that stage leave them out."""
    withheld: set[str] = set()
    for index, item in enumerate(raw):
        gives = item.get("gives", []) if isinstance(item, dict) else []
        where, line = f"stages[{index}].gives", item.line_of("gives") if gives else 0
        if not isinstance(gives, list) or not all(isinstance(n, str) and n in names for n in gives):
            raise reader.fail(where, line, "a list of this question's parameters")
        if len(set(gives)) != len(gives) or withheld & set(gives):
            raise reader.fail(where, line, "each parameter given by one stage, once")
        withheld |= set(gives)
    return withheld


def _reasons(reader: _Reader, item: LineDict, where: str, names: set[str],
             push: bool) -> tuple[tuple[str, str, str], ...]:
    """A push's `reasons:`, parameter -> the interviewer's reason for moving it, with {to} (and {from}, or any
    parameter) filled: a generated push's, or what a declared push says where the engine's push stands in for it."""
    reasons = reader.field(item, "reasons", dict, where, required=False, default={})
    if reasons and not push:
        raise reader.fail(f"{where}.reasons", item.line_of("reasons"), "only a push has reasons")
    parsed = []
    for name, given in reasons.items():
        at, line = f"{where}.reasons.{name}", reasons.line_of(name)
        if name not in names:
            raise reader.fail(at, line, "names no parameter of this question")
        # One text for either way, or {up: ..., down: ...}: "a terse mode ships" is no reason for longer replies.
        ways = given if isinstance(given, dict) else {"up": given, "down": given}
        if isinstance(given, dict) and set(given) != {"up", "down"}:
            raise reader.fail(at, line, "one reason, or {up: ..., down: ...}: the words for each way the figure moves")
        for way, text in ways.items():
            here = f"{at}.{way}" if isinstance(given, dict) else at
            if not isinstance(text, str) or "{to}" not in text:
                raise reader.fail(here, line, "the reason for the move, with {to} where the new value goes")
            if stray := _stray_brace(text):
                raise reader.fail(here, line, f"{stray} is no placeholder ({{to}}, {{from}} or a parameter)")
            for match in PLACEHOLDER.finditer(text):
                if match.group(1) not in (*names, "from", "to") or match.group(1) in ("from", "to") and match.group(2):
                    raise reader.fail(here, line, f"field {match.group(0)} names no parameter, nor {{from}} or {{to}}")
        parsed.append((str(name), ways["up"].strip(), ways["down"].strip()))
    return tuple(parsed)


def _parse_golden(reader: _Reader, document: LineDict, names: set[str],
                  answers: tuple[Answer, ...]) -> tuple[Golden, ...]:
    raw = reader.field(document, "golden", list, required=False, default=[])
    by_key = {a.key: a for a in answers}
    entries = []
    for index, item in enumerate(raw):
        where = f"golden[{index}]"
        item = reader.mapping(item, where, document.line_of("golden"), GOLDEN_FIELDS,
                              "{variant: ..., expect: {...}, draws: {...}, why: ...}")
        variant = _variant_field(reader, item, where, names)
        expect = reader.field(item, "expect", dict, where, required="draws" not in item, default={})
        if "expect" in item and not expect:
            raise reader.fail(f"{where}.expect", item.line_of("expect"), "pin at least one answer")
        pins = []
        for key, value in expect.items():
            if key not in by_key:
                raise reader.fail(f"{where}.expect.{key}", expect.line_of(key), "names no answer of this question")
            try:
                pins.append((str(key), by_key[key].pin(value)))
            except SpecError as error:
                raise reader.fail(f"{where}.expect.{key}", expect.line_of(key), str(error)) from None
        why = reader.field(item, "why", str, where)
        if not why.strip():
            raise reader.fail(f"{where}.why", item.line_of("why"), "say where the figures come from")
        rel = reader.field(item, "rel", (int, float), where, required=False)
        if rel is not None and not 0 < rel < 1:
            raise reader.fail(f"{where}.rel", item.line_of("rel"), "a relative tolerance in (0, 1)")
        draws = reader.field(item, "draws", dict, where, required=False, default={})
        for name, value in draws.items():
            if name not in names:
                raise reader.fail(f"{where}.draws.{name}", draws.line_of(name), "names no parameter of this question")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise reader.fail(f"{where}.draws.{name}", draws.line_of(name),
                                  "a parameter as the file writes it: a number or a choice's name")
        entries.append(Golden(variant, tuple(pins), why, None if rel is None else float(rel), item.line,
                              tuple((str(name), value) for name, value in draws.items())))
    return tuple(entries)


def _variant_field(reader: _Reader, item: LineDict, where: str, names: set[str]) -> str:
    """An entry's `variant`: a variant code's part after the '@' whose overrides name this question's parameters."""
    variant = str(reader.field(item, "variant", (str, int), where))  # a bare seed reads as an integer
    match = _VARIANT.match(variant)
    if match is None:
        raise reader.fail(f"{where}.variant", item.line_of("variant"),
                          f"{variant!r} is not a variant code's part after the '@' (default, 7, default+tp=1)")
    for override in match["sets"].split("+")[1:]:
        if override.split("=", 1)[0] not in names:
            raise reader.fail(f"{where}.variant", item.line_of("variant"),
                              f"'{override}' names no parameter of this question")
    return variant


def _parse_reality(reader: _Reader, document: LineDict, names: set[str],
                   answers: tuple[Answer, ...]) -> tuple[Measured, ...]:
    raw = reader.field(document, "reality", list, required=False, default=[])
    by_key = {a.key: a for a in answers}
    entries = []
    for index, item in enumerate(raw):
        where = f"reality[{index}]"
        item = reader.mapping(item, where, document.line_of("reality"),
                              REALITY_FIELDS,
                              "{answer: ..., measured: ..., unit: ..., system: ..., source: ..., variant: ...}")
        key = reader.field(item, "answer", str, where)
        if key not in by_key or not by_key[key].numeric:
            raise reader.fail(f"{where}.answer", item.line_of("answer"), "names no numeric answer of this question")
        measured = reader.field(item, "measured", (int, float), where)
        if not (math.isfinite(measured) and measured > 0):
            raise reader.fail(f"{where}.measured", item.line_of("measured"), "a positive number")
        unit = reader.field(item, "unit", str, where)
        try:
            dimension = parse_unit(unit).dim
        except UnitError as error:
            raise reader.fail(f"{where}.unit", item.line_of("unit"), str(error)) from None
        if dimension != parse_unit(by_key[key].unit).dim:
            raise reader.fail(f"{where}.unit", item.line_of("unit"),
                              f"'{unit}' does not measure what {key} ({by_key[key].unit}) does")
        texts = {}
        for name in ("system", "source"):
            texts[name] = reader.field(item, name, str, where)
            if not texts[name].strip():
                raise reader.fail(f"{where}.{name}", item.line_of(name), "a comparison names its system and source")
        entries.append(Measured(key, float(measured), unit, texts["system"].strip(), texts["source"].strip(),
                                _variant_field(reader, item, where, names),
                                reader.field(item, "why", str, where, required=False, default="").strip(), item.line))
    return tuple(entries)


def _parse_constraints(reader: _Reader, document: LineDict, names: set[str]) -> tuple[Constraint, ...]:
    raw = reader.field(document, "constraints", dict, required=False, default={})
    own, off = [], set()
    for name, text in raw.items():
        where, line = f"constraints.{name}", raw.line_of(name)
        if text is False:
            if name not in RULE_NAMES:
                raise reader.fail(where, line, f"only a bank rule can be turned off ({', '.join(sorted(RULE_NAMES))})")
            off.add(name)
            continue
        if not isinstance(text, str) or name in RULE_NAMES:
            raise reader.fail(where, line, "expected an expression over the parameters (or false for a bank rule)")
        try:
            own.append(declared(str(name), text, names))
        except ConstraintError as error:
            raise reader.fail(where, line, str(error)) from None
    return constraints_for(names, tuple(own), frozenset(off))


def _parse_solver(reader: _Reader, document: LineDict) -> str:
    solver = reader.field(document, "solver", str, required=False, default="")
    if solver and not SOLVER_NAME.match(solver):
        raise reader.fail("solver", document.line_of("solver"),
                          "a solver module under solvers/topics as <topic>.<module> (kv_cache.paged_block_size)")
    return solver


def _parse_requires(reader: _Reader, document: LineDict, qid: str) -> tuple[str, ...]:
    requires = reader.field(document, "requires", list, required=False, default=[])
    if not all(isinstance(r, str) and QUESTION_ID.match(r) and r != qid for r in requires):
        raise reader.fail("requires", document.line_of("requires"), "ids of other questions")
    return tuple(requires)


def requirement_problems(bank: Bank) -> list[str]:
    """Prerequisites that name no question of the bank, and cycles among them."""
    problems = [f"{q.path}: requires: '{r}' is not a question of the bank"
                for q in bank.questions.values() for r in q.requires if r not in bank.questions]

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for r in bank.questions[start].requires if start in bank.questions else ():
            if r == target:
                return True
            if r not in seen:
                seen.add(r)
                if reaches(r, target, seen):
                    return True
        return False

    problems += [f"{q.path}: requires: a cycle leads back to {q.id}" for q in bank.questions.values()
                 if reaches(q.id, q.id, set())]
    return problems


def read_question(path: Path) -> Question:
    """The question in a file; QuestionError (one line) for anything wrong, reading included."""
    return question_from_bytes(path, _file_bytes(path))


def _file_bytes(path: Path) -> bytes:
    try:
        return read_bytes(path)
    except YamlError as error:
        raise QuestionError(f"{path}:{error.line}: {error.what}") from None
    except OSError as error:
        raise QuestionError(f"{path}: cannot read: {error.strerror or error}") from None


def question_from_bytes(path: Path, data: bytes) -> Question:
    """The question in a file's bytes (already read, and bounded); QuestionError for anything wrong."""
    try:
        text = decode_text(data)
    except YamlError as error:
        raise QuestionError(f"{path}:{error.line}: {error.what}") from None
    return parse_question(path, text)


def parse_question(path: Path, text: str) -> Question:
    reader = _Reader(path)
    try:
        document = load_with_lines(text)
    except YamlError as error:
        raise QuestionError(f"{path}:{error.line}: {error.what}") from None
    if not isinstance(document, LineDict):
        raise QuestionError(f"{path}:1: expected a mapping at the top level")
    for key in document:
        if key not in QUESTION_FIELDS:
            raise reader.fail(str(key), document.line_of(key), "unknown field")
    qid = reader.field(document, "id", str)
    if not QUESTION_ID.match(qid):
        raise reader.fail("id", document.line_of("id"), "lower-case words joined by '-'")
    if path.stem != qid:
        raise reader.fail("id", document.line_of("id"), f"must match the file name ({path.stem})")
    raw_params = reader.field(document, "parameters", dict)
    parameters = tuple(_parse_param(reader, str(n), s, raw_params.line_of(n)) for n, s in raw_params.items())
    names = {p.name for p in parameters}
    ranged = {p.name for p in parameters if p.ranged}
    raw_answers = reader.field(document, "answers", list)
    if not raw_answers:
        raise reader.fail("answers", document.line_of("answers"), "at least one answer")
    answers = tuple(_parse_answer(reader, i, a, document.line_of("answers")) for i, a in enumerate(raw_answers))
    keys = [a.key for a in answers]
    if len(set(keys)) != len(keys):
        raise reader.fail("answers", document.line_of("answers"), "duplicate answer keys")
    staged = "stages" in document
    if staged:
        for name in ("prompt", "hints", "followups"):
            if name in document:
                raise reader.fail(name, document.line_of(name), "a staged file says this in its stages")
        stages = _parse_stages(reader, document, names, answers, ranged)
        prompt = stages[0].say
    else:
        prompt = reader.field(document, "prompt", str)
        stages = (Stage("opening", prompt, tuple(keys), tuple(_texts(reader, document, "hints"))),
                  Stage("push", "", (), generated=True))
    if stray := _stray_brace(prompt):
        raise reader.fail("prompt", document.line_of("prompt"),
                          f"{stray} is no placeholder ({{name}} or {{name.field}})")
    for match in PLACEHOLDER.finditer(prompt):
        if match.group(1) not in names:
            raise reader.fail("prompt", document.line_of("prompt"),
                              f"placeholder {{{match.group(0)[1:-1]}}} names no parameter")
    for index, answer in enumerate(answers):
        for text in answer.texts:
            if stray := _stray_brace(text):
                raise reader.fail(f"answers[{index}]", document.line_of("answers"),
                                  f"{stray} is no placeholder ({{name}} or {{name.field}})")
            for match in PLACEHOLDER.finditer(text):
                if match.group(1) not in names:
                    raise reader.fail(f"answers[{index}]", document.line_of("answers"),
                                      f"field {{{match.group(0)[1:-1]}}} names no parameter")
    for spec in parameters:
        for arg_name, needed in spec.reads:
            if needed not in names:
                raise reader.fail(f"parameters.{spec.name}.args.{arg_name}", raw_params.line_of(spec.name),
                                  f"${needed} names no parameter")
    regime_choices = next((getattr(a, "choices", ()) for a in answers if a.key == "regime"), ())
    sides = tuple(reader.field(document, "regime_sides", list, required=False, default=list(regime_choices)))
    if any(side not in regime_choices for side in sides):
        raise reader.fail("regime_sides", document.line_of("regime_sides"),
                          "every side must be a choice of the regime answer")
    difficulty = reader.field(document, "difficulty", int, required=False, default=1)
    chart = _parse_chart(reader, document, parameters, answers)
    return Question(
        id=qid,
        title=reader.field(document, "title", str),
        group=reader.field(document, "group", str),
        topic=reader.field(document, "topic", str),
        difficulty=difficulty,
        solver=_parse_solver(reader, document),
        prompt=prompt,
        parameters=parameters,
        answers=answers,
        hints=stages[0].hints,
        references=tuple(reader.field(document, "references", list, required=False, default=[])),
        regime_sides=sides,
        catalogue=tuple(str(s) for s in reader.field(document, "catalogue", list, required=False, default=[])),
        chart=chart,
        followups=_parse_followups(reader, document, names, set(keys), ranged),
        requires=_parse_requires(reader, document, qid),
        constraints=_parse_constraints(reader, document, names),
        golden=_parse_golden(reader, document, names, answers),
        reality=_parse_reality(reader, document, names, answers),
        literals=tuple(_texts(reader, document, "literals")),
        lookups=_parse_lookups(reader, raw_answers, answers),
        path=str(path),
        stages=stages,
        staged=staged,
    )


def load_question(question_id: str, root: Path | None = None) -> Bank:
    """A bank of one question and those it requires, for a command about one question: a file is
    named after its question's id, so only those files are read (a bank of any size costs the same)."""
    root = questions_dir() if root is None else root
    files = {path.stem: path for path in question_files(root)}
    bank = Bank()
    wanted = [question_id]
    while wanted:
        qid = wanted.pop()
        if qid in bank.questions or qid not in files:
            continue
        try:
            question = read_question(files[qid])
        except QuestionError as error:
            bank.problems.append(str(error))
            continue
        bank.questions[question.id] = question
        wanted.extend(question.requires)
    return bank


def load_bank(root: Path | None = None, cache: QuestionCache | None = None) -> Bank:
    """Every question under `root`; files unchanged since the last load come from the cache."""
    from solvers.bankcache import QuestionCache  # pickle and tempfile: not for one question's load

    bank = Bank()
    root = questions_dir() if root is None else root
    cache = QuestionCache(root) if cache is None else cache
    for path in question_files(root):
        try:
            data = _file_bytes(path)
            question = cache.question(path, data, partial(question_from_bytes, path, data))
        except QuestionError as error:
            bank.problems.append(str(error))
            continue
        if question.id in bank.questions:
            bank.problems.append(f"{path}: id: '{question.id}' already defined in {bank.questions[question.id].path}")
            continue
        bank.questions[question.id] = question
    cache.save()
    bank.problems += requirement_problems(bank)
    return bank
