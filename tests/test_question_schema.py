"""The shipped JSON Schema of a question file: current with the loader, true of every file the bank
ships, and refusing what the loader refuses in a file's shape."""
from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from scripts.write_question_schema import TARGET, rendered
from solvers import bank
from solvers.paths import question_files, questions_dir
from solvers.question_schema import FIELD_TYPES, question_schema

VALIDATOR = jsonschema.Draft202012Validator(question_schema())


def test_the_shipped_schema_is_current():
    """Stale when the loader gained or lost a field or a kind: run scripts/write_question_schema.py."""
    assert TARGET.read_text(encoding="utf-8") == rendered()


def test_every_field_the_loader_reads_has_a_type():
    fields = (bank.QUESTION_FIELDS | bank.PARAMETER_FIELDS | bank.ANSWER_FIELDS | bank.STAGE_FIELDS
              | bank.FOLLOWUP_FIELDS | bank.GOLDEN_FIELDS | bank.REALITY_FIELDS)
    assert fields == set(FIELD_TYPES)


@pytest.mark.parametrize("path", question_files(questions_dir()), ids=lambda p: p.stem)
def test_every_shipped_question_meets_the_schema(path):
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(document)]
    assert errors == []


def _toy() -> dict:
    return yaml.safe_load("""
id: toy
title: Toy
group: F
topic: memory
stages:
  - {say: "{n} items: how many bytes?", ask: [a]}
  - {push: generated, ask: [a]}
parameters:
  n: {int: [1, 10], default: 3}
answers:
  - {key: a, label: A, unit: GB}
""")


@pytest.mark.parametrize("spoil", [
    lambda d: d.pop("title"),
    lambda d: d.update(prompt="both shapes at once"),
    lambda d: d["parameters"]["n"].update(uniform=[1, 2]),  # two kinds named
    lambda d: d["parameters"]["n"].pop("int"),  # no kind named
    lambda d: d["answers"][0].update(choice=["x", "y"], select=["x", "y"]),
    lambda d: d["answers"][0].update(tolerance=0.1),  # not a field
    lambda d: d["stages"][1].update(push="declared"),
    lambda d: d.update(golden=[{"variant": "default", "expect": {}, "why": "none"}]),
    lambda d: d.update(reality=[{"answer": "a", "measured": -1, "unit": "GB", "system": "s", "source": "s",
                                 "variant": "default"}]),
    lambda d: d.update(id="Toy Question"),
])
def test_the_schema_refuses_a_broken_shape(spoil):
    document = _toy()
    assert VALIDATOR.is_valid(document)
    spoil(document)
    assert not VALIDATOR.is_valid(document)


def test_the_schema_is_json_an_editor_reads():
    assert json.loads(TARGET.read_text(encoding="utf-8"))["$defs"]["parameter"]["oneOf"]


def test_the_scaffolds_template_meets_the_schema():
    from string import Template

    from solvers.scaffold import TEMPLATES

    text = Template((TEMPLATES / "question.yaml.template").read_text(encoding="utf-8")).substitute(
        id="made-new", title="Made new", group="F", topic="memory")
    assert VALIDATOR.is_valid(yaml.safe_load(text))
