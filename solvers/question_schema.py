"""The question file's JSON Schema, built from the loader's own field sets and kinds (bank.py, params,
answers), so that an editor completes and checks a file as the loader reads it. The schema says the
file's shape (which fields, of what type, which kind a parameter or answer is); what needs the bank
(a placeholder naming a parameter, a unit parsing, an answer asked once) stays with `validate`.

`scripts/write_question_schema.py` writes it to solvers/question.schema.json, shipped with the
package; a test fails when that file is stale."""
from __future__ import annotations

from typing import Any

from solvers import bank
from solvers.answers import KINDS as ANSWER_KINDS
from solvers.params import KINDS as PARAMETER_KINDS

SCHEMA_FILE = "question.schema.json"

_TEXT: dict[str, Any] = {"type": "string"}
_TEXTS: dict[str, Any] = {"type": "array", "items": _TEXT}
_NUMBER: dict[str, Any] = {"type": "number"}
_RANGE: dict[str, Any] = {"type": "array", "items": _NUMBER, "minItems": 2, "maxItems": 2}
_SETS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}

# Each field's type, by its name in any part of the file (a name means one thing wherever it appears).
FIELD_TYPES: dict[str, dict[str, Any]] = {
    # the question
    "id": {"type": "string", "pattern": bank.QUESTION_ID.pattern},
    "title": _TEXT, "group": _TEXT, "topic": _TEXT,
    "difficulty": {"type": "integer", "minimum": 1},
    "solver": {"type": "string", "pattern": bank.SOLVER_NAME.pattern},
    "catalogue": {"type": "array", "items": {"type": ["string", "integer"]}},
    "prompt": _TEXT, "hints": _TEXTS, "references": _TEXTS, "regime_sides": _TEXTS, "requires": _TEXTS,
    "literals": _TEXTS,
    "chart": {"type": "object", "properties": {"x": _TEXT, "y": _TEXT}, "required": ["x", "y"],
              "additionalProperties": False},
    "constraints": {"type": "object", "additionalProperties": {"oneOf": [_TEXT, {"const": False}]}},
    "parameters": {"type": "object", "additionalProperties": {"$ref": "#/$defs/parameter"}},
    "answers": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/answer"}},
    "stages": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/stage"}},
    "followups": {"type": "array", "items": {"$ref": "#/$defs/followup"}},
    "golden": {"type": "array", "items": {"$ref": "#/$defs/golden"}},
    "reality": {"type": "array", "items": {"$ref": "#/$defs/reality"}},
    # shared by several parts
    "label": _TEXT, "unit": _TEXT, "say": _TEXT, "ask": _TEXTS, "set": _SETS, "why": _TEXT,
    "variant": {"type": ["string", "integer"]},
    "rel": _NUMBER,
    # a parameter
    "default": {}, "choice": {"type": "array", "minItems": 1},
    "weights": {"type": "array", "items": _NUMBER}, "from": _TEXT,
    "shown": {"type": "object", "additionalProperties": _TEXT},
    "int": _RANGE, "uniform": _RANGE, "loguniform": _RANGE,
    "round": {"type": ["object", "number"]}, "fixed": {"type": ["number", "string"]},
    "generate": _TEXT, "args": {"type": "object"},
    # an answer
    "key": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}, "lookup": _TEXT, "log": _NUMBER,
    "order": _TEXTS, "select": _TEXTS, "show": {"type": "integer", "minimum": 1}, "checklist": _TEXTS,
    # a stage
    "push": {"const": "generated"},
    "reasons": {"type": "object", "additionalProperties": {"oneOf": [_TEXT, {
        "type": "object", "properties": {"up": _TEXT, "down": _TEXT}, "required": ["up", "down"],
        "additionalProperties": False}]}}, "recall": _TEXTS, "nudge": _TEXT, "when": _TEXT, "gives": _TEXTS,
    # a golden entry and a measurement
    "expect": {"type": "object", "minProperties": 1},
    "draws": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
    "answer": _TEXT, "measured": {"type": "number", "exclusiveMinimum": 0}, "system": _TEXT, "source": _TEXT,
}


def _part(fields: frozenset[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object of exactly these fields, each of its type."""
    part: dict[str, Any] = {"type": "object", "additionalProperties": False,
                            "properties": {name: FIELD_TYPES[name] for name in sorted(fields)}}
    if required:
        part["required"] = list(required)
    return part


def question_schema() -> dict[str, Any]:
    """The schema of a question file (JSON Schema draft 2020-12)."""
    parameter = _part(bank.PARAMETER_FIELDS)
    # A parameter's kind is named by exactly one field (its first): choice, int, uniform, ...
    parameter["oneOf"] = [{"required": [kind.fields[0]]} for kind in PARAMETER_KINDS]
    answer = _part(bank.ANSWER_FIELDS, ("key", "label"))
    # An answer names its kind by at most one field; a number names none.
    naming = [kind.fields[0] for kind in ANSWER_KINDS]
    answer["not"] = {"anyOf": [{"required": [a, b]} for i, a in enumerate(naming) for b in naming[i + 1:]]}
    question = _part(bank.QUESTION_FIELDS, ("id", "title", "group", "topic", "parameters", "answers"))
    # Staged or not: a staged file says its prompt and hints in its stages.
    question["oneOf"] = [{"required": ["stages"], "not": {"anyOf": [{"required": [name]}
                                                                    for name in ("prompt", "hints", "followups")]}},
                         {"required": ["prompt"], "not": {"required": ["stages"]}}]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://infradrill.local/{SCHEMA_FILE}",
        "title": "infradrill question file",
        "description": "questions/<group>/<id>.yaml (written by scripts/write_question_schema.py)",
        **question,
        "$defs": {
            "parameter": parameter,
            "answer": answer,
            "stage": _part(bank.STAGE_FIELDS),
            "followup": _part(bank.FOLLOWUP_FIELDS, ("set", "ask")),
            "golden": {**_part(bank.GOLDEN_FIELDS, ("variant", "why")),
                       "anyOf": [{"required": ["expect"]}, {"required": ["draws"]}]},
            "reality": _part(bank.REALITY_FIELDS, ("answer", "measured", "unit", "system", "source", "variant")),
        },
    }
