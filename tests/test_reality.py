"""Published measurements beside the model (reality:): every entry solves and lands within tolerance or says
why; the figure shown is the variant's own solve; the file's entries are checked field by field."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.bank import Measured, QuestionError, load_bank, parse_question
from solvers.engine import VariantCode, make_variant
from solvers.reality import TOLERANCE, compare
from solvers.units import parse_unit
from solvers.validate import reality_problems, unmeasured
from tests.test_schema import GOOD

ENTRIES = [(q.id, index) for q in load_bank().questions.values() for index in range(len(q.reality))]


@pytest.mark.parametrize("qid, index", ENTRIES)
def test_every_measurement_lands_within_tolerance_or_says_why(bank, catalog, qid, index):
    question = bank.get(qid)
    entry = question.reality[index]
    (found,) = compare(replace(question, reality=(entry,)), catalog)
    assert found.within or entry.why, (f"{qid}@{entry.variant}: {found.bank:.4g} {entry.unit} against "
                                       f"{entry.measured:.4g} ({found.ratio:.2f}×, beyond {TOLERANCE}×)")
    assert not (found.within and entry.why), f"{qid}: within {TOLERANCE}× ({found.ratio:.2f}×) but says why not"


def test_the_bank_shows_enough_measurements():
    """The issue's bar: at least 30 questions carry a published measurement."""
    assert len({qid for qid, _ in ENTRIES}) >= 30


def _entry(question, **fields) -> Measured:
    base = {"answer": "prefill_time", "measured": 109, "unit": "ms", "system": "4×H100", "source": "a table",
            "variant": "default+model=llama-3-70b+tp=4+prompt=2048"}
    return Measured(**(base | fields))


def test_the_figure_shown_is_the_variants_own_solve(bank, catalog, variant):
    question = bank.get("pd-transfer-bandwidth")
    (found,) = compare(replace(question, reality=(_entry(question),)), catalog)
    solved = variant(found.code)
    assert found.code.startswith("pd-transfer-bandwidth@default+model=llama-3-70b")
    assert found.bank == pytest.approx(solved.expected["prefill_time"] * 1000, rel=1e-12)
    assert found.ratio == pytest.approx(found.bank / 109, rel=1e-12)
    sentence = found.sentence()
    assert "In practice: 109 ms on 4×H100 (a table)" in sentence and f"{found.bank:.3g} ms" in sentence


def _pd():
    from solvers.data import load_catalog

    return load_bank().get("pd-transfer-bandwidth"), load_catalog()


_PD = _pd()


@settings(max_examples=25)
@given(st.sampled_from(["s", "ms", "us", "min"]), st.floats(1e-3, 1e4))
def test_a_measurement_means_the_same_in_any_unit_of_its_kind(unit, millis):
    """Restating the measured figure in another unit of time moves neither the model's figure nor the ratio."""
    question, catalog = _PD
    in_ms, = compare(replace(question, reality=(_entry(question, measured=millis),)), catalog)
    restated = parse_unit(unit).from_base(parse_unit("ms").to_base(millis))
    other, = compare(replace(question, reality=(_entry(question, measured=restated, unit=unit),)), catalog)
    assert other.ratio == pytest.approx(in_ms.ratio, rel=1e-9)
    assert parse_unit(unit).to_base(other.bank) == pytest.approx(parse_unit("ms").to_base(in_ms.bank), rel=1e-9)


def test_validate_flags_a_model_far_off_without_why_and_a_why_that_is_not_needed(bank, catalog):
    question, _ = _PD
    (near,) = compare(replace(question, reality=(_entry(question),)), catalog)
    far = replace(_entry(question), measured=near.bank * 3)
    assert reality_problems(replace(question, reality=(far,)), bank, catalog)[0].endswith(
        "fix the model, or say why it is not expected to match")
    assert reality_problems(replace(question, reality=(replace(far, why="TRT-LLM 0.5 ran unfused FP8"),)),
                            bank, catalog) == []
    assert "the why says it should not" in reality_problems(
        replace(question, reality=(_entry(question, measured=near.bank * 1.2, why="it is off"),)), bank, catalog)[0]
    (unmade,) = reality_problems(replace(question, reality=(_entry(question, variant="default+model=nonesuch"),)),
                                 bank, catalog)
    assert "reality[0]: pd-transfer-bandwidth@default+model=nonesuch:" in unmade


def test_validate_names_questions_that_predict_a_time_with_no_measurement(bank):
    missing = unmeasured(bank)
    assert not any(path.endswith("pd-transfer-bandwidth.yaml") for path in missing)
    assert any(path.endswith("kv-bytes-per-token.yaml") for path in missing) == (
        not bank.get("kv-bytes-per-token").reality)  # its TPOT is a time
    assert not any(path.endswith("fp8-scale-formats.yaml") for path in missing)  # no time, no rate


def test_solve_json_carries_each_measurement(catalog):
    out = subprocess.run([sys.executable, "-m", "tui.cli", "solve", "pd-transfer-bandwidth@3", "--json"],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]).stdout
    (item, *_) = json.loads(out)["reality"]
    assert set(item) >= {"measured", "unit", "system", "source", "code", "answer", "bank", "ratio"}
    solved = make_variant(load_bank(), catalog, VariantCode.parse(item["code"]))
    assert item["bank"] == pytest.approx(parse_unit(item["unit"]).from_base(solved.expected[item["answer"]]))
    assert item["ratio"] == pytest.approx(item["bank"] / item["measured"])


SHAPE = GOOD.replace("unit: GB, rel: 0.02}", "unit: ms, rel: 0.02}\n  - {key: r, label: R, choice: [low, high]}") + """\
reality:
  - answer: a
    measured: 12.5
    unit: us
    system: 8×H100 on NVSwitch
    source: nccl-tests issue 212
    variant: default+n=4
"""


def test_an_entry_reads_into_its_fields():
    (entry,) = parse_question(Path("toy.yaml"), SHAPE).reality
    assert entry == Measured("a", 12.5, "us", "8×H100 on NVSwitch", "nccl-tests issue 212", "default+n=4", "", 13)


@pytest.mark.parametrize("change, field, message", [
    (("answer: a", "answer: b"), "reality[0].answer", "names no numeric answer"),
    (("answer: a", "answer: r"), "reality[0].answer", "names no numeric answer"),
    (("unit: us", "unit: GB"), "reality[0].unit", "does not measure what a (ms) does"),
    (("unit: us", "unit: furlongs"), "reality[0].unit", "furlongs"),
    (("measured: 12.5", "measured: -1"), "reality[0].measured", "a positive number"),
    (("measured: 12.5", "measured: fast"), "reality[0].measured", "expected an integer or a number"),
    (("source: nccl-tests issue 212", "source: ' '"), "reality[0].source", "names its system and source"),
    (("    system: 8×H100 on NVSwitch\n", ""), "reality[0].system", "missing"),
    (("variant: default+n=4", "variant: default+m=4"), "reality[0].variant", "'m=4' names no parameter"),
    (("variant: default+n=4", "seed: 4"), "reality[0].seed", "unknown field"),
])
def test_a_broken_entry_names_its_field_and_line(change, field, message):
    old, new = change
    assert old in SHAPE
    with pytest.raises(QuestionError) as error:
        parse_question(Path("toy.yaml"), SHAPE.replace(old, new))
    assert f": {field}:" in str(error.value) and message in str(error.value), str(error.value)
