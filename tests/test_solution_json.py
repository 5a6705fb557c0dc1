"""`solve --json`: every quantity is {value, unit} in display units with si in base units; the interview
stage by stage."""
from __future__ import annotations

import json
import re

import pytest

from solvers.bank import load_bank
from solvers.engine import VariantCode, make_variant
from solvers.parse import parse_quantity
from solvers.report import JSON_SCHEMA, to_dict
from solvers.report import expected_text as answer_text
from solvers.script import script
from solvers.units import parse_unit
from tests.old_shape import OLD


def _quantities(data):
    for section in ("answers", "givens", "steps"):
        for item in data[section]:
            if "si" in item:
                yield item
    if data["regime"]:
        yield data["regime"]["boundary"]
        yield data["regime"]["position"]


@pytest.mark.parametrize("qid", ["kv-bytes-per-token", "weight-read-intensity", "training-compute-budget",
                                 "slo-goodput", "nic-bandwidth-per-gpu", "paged-block-size"])
def test_a_consumer_reading_value_and_unit_gets_the_quantity(bank, catalog, qid):
    data = to_dict(make_variant(bank, catalog, VariantCode(qid, 11)))
    assert data["schema"] == JSON_SCHEMA
    seen = 0
    for item in _quantities(data):
        seen += 1
        assert parse_unit(item["unit"]).to_base(item["value"]) == pytest.approx(item["si"], rel=1e-12)
        shown = item.get("result") or item.get("shown")
        if shown and "×10^" not in shown or shown and item["unit"] not in ("", "%"):
            # What the app prints parses back to the same quantity, to its 4 figures.
            typed = parse_quantity(shown)
            base = typed.value if typed.unit is not None else parse_unit(item["unit"]).to_base(typed.value)
            assert base == pytest.approx(item["si"], rel=1e-3, abs=1e-12), (item, shown)
    assert seen > 5
    numeric = [a for a in data["answers"] if a["kind"] in ("number", "estimate")]
    assert numeric and all({"value", "unit", "si"} <= set(a) for a in numeric)


STAGED = "kv-bytes-per-token"  # a file with stages:, and one without (old_bank's)


@pytest.mark.parametrize("qid", [STAGED, OLD])
@pytest.mark.parametrize("seed", [None, 4, 29, 301])
def test_the_stages_carry_the_whole_interview(old_bank, catalog, qid, seed):
    """Every answer is asked in exactly one stage before the pushes; a push asks on the pushed variant,
    which has a code of its own that makes it again, with the answers, parameters and regime that variant
    has; every stage gives one key line per answer it asks, starting with the key."""
    solution = make_variant(old_bank, catalog, VariantCode(qid, seed))
    data = to_dict(solution, script(solution, catalog))
    stages = data["stages"]
    question = solution.question  # a turn of one push a side is one stage of the interview
    assert [s["kind"] for s in stages] == [s.kind for i, s in enumerate(question.stages) if question.turn_of(i) == i]
    asked = [key for s in stages if s["kind"] != "push" for key in s["ask"]]
    assert sorted(asked) == sorted(a["key"] for a in data["answers"])
    assert stages[0]["say"] in data["prompt"] and solution.question.staged == (qid == STAGED)
    pushes = 0
    for stage in stages:
        if stage["skipped"]:
            assert stage["kind"] == "push" and stage["answers"] == [] and stage["code"] is None
            continue
        assert [a["key"] for a in stage["answers"]] == stage["ask"] and len(stage["keys"]) == len(stage["ask"])
        asked_on = make_variant(old_bank, catalog, VariantCode.parse(stage["code"]))
        truth = to_dict(asked_on)
        assert stage["answers"] == [next(a for a in truth["answers"] if a["key"] == key) for key in stage["ask"]]
        assert all(line.startswith(answer_text(asked_on, key)) for key, line in zip(stage["ask"], stage["keys"]))
        if stage["kind"] != "push":
            assert stage["code"] == data["code"] and stage["set"] is None and stage["regime"] is None
            continue
        pushes += 1
        assert stage["code"] != data["code"] and stage["ask"] and stage["set"]
        assert stage["set"] == {name: value["value"] for name, value in truth["parameters"].items()
                                if value["value"] != data["parameters"][name]["value"]}
        assert stage["regime"] == truth["regime"]["name"]
    assert pushes or stages[-1]["skipped"]


def test_without_its_script_a_variant_is_the_data_it_was(variant):
    """The engine's own checks read a variant without its pushes: no stages, everything else as before."""
    solution = variant(f"{STAGED}@default")
    assert "stages" not in to_dict(solution) and to_dict(solution)["answers"]


# an f-string field left unfilled: "{format_quantity(" or "{x}"
_CODE_IN_TEXT = re.compile(r"\{[A-Za-z_][\w.]*(?:\(|\})")


@pytest.mark.parametrize("qid", sorted(load_bank().questions))
def test_no_text_of_a_solution_shows_code(variant, qid):
    """Every word a solution shows is filled: a missing f on a string prints '{format_quantity(...)}' as text."""
    solution = variant(f"{qid}@default")
    words = json.dumps(to_dict(solution), ensure_ascii=False)
    assert not _CODE_IN_TEXT.findall(words)
