"""Question-file validation: each broken file names its file, field and line; the rest loads."""
from __future__ import annotations

from pathlib import Path

import pytest

from solvers.bank import QuestionError, load_bank, parse_question

GOOD = """\
id: toy
title: Toy
group: F
topic: memory
solver: memory.kv_bytes_per_token
prompt: "{n} items"
parameters:
  n: {int: [1, 10], default: 3}
answers:
  - {key: a, label: A, unit: GB, rel: 0.02}
"""


def parse(text: str):
    return parse_question(Path("toy.yaml"), text)


def test_good_file_parses():
    question = parse(GOOD)
    assert question.parameter("n").default == 3
    assert question.answer("a").unit == "GB"


@pytest.mark.parametrize("change, field, line", [
    (("title: Toy\n", ""), "title", 1),
    (("n: {int: [1, 10], default: 3}", "n: {int: [1, 10]}"), "parameters.n.default", 8),
    (("n: {int: [1, 10], default: 3}", "n: {int: [10, 1], default: 3}"), "parameters.n.int", 8),
    (("n: {int: [1, 10], default: 3}", "n: {int: [1, 10], default: 30}"), "parameters.n.default", 8),
    (("n: {int: [1, 10], default: 3}", "n: {uniform: [1, 10], default: 3}"), "parameters.n.round", 8),
    (("n: {int: [1, 10], default: 3}", "n: {spline: [1, 2], default: 1}"), "parameters.n.spline", 8),
    (("unit: GB", "unit: furlongs"), "answers[0].unit", 10),
    (("rel: 0.02", "rel: 2"), "answers[0].rel", 10),
    (('"{n} items"', '"{m} items"'), "prompt", 6),
    (("id: toy", "id: other"), "id", 1),
    (("n: {int: [1, 10], default: 3}", "n: {int: [1, 10], default: 3, shown: {3: three}}"), "parameters.n.shown", 8),
    (("n: {int: [1, 10], default: 3}", "n: {choice: [a, b], default: a, shown: {c: C}}"), "parameters.n.shown", 8),
    (("group: F\n", "group: F\ncolour: blue\n"), "colour", 4),
])
def test_broken_files_name_field_and_line(change, field, line):
    old, new = change
    with pytest.raises(QuestionError) as error:
        parse(GOOD.replace(old, new))
    message = str(error.value)
    assert message.startswith(f"toy.yaml:{line}: {field}:"), message


def test_a_choice_reads_as_its_shown_text():
    """A value a solver reads as written (a comma-joined list, a slug) prints as its `shown` text; the variant
    keeps the value itself (overrides and codes name it)."""
    from solvers.data import load_catalog
    from solvers.sampling import resolve

    question = parse(GOOD.replace("n: {int: [1, 10], default: 3}",
                                  'n: {choice: ["a,b", c], default: "a,b", shown: {"a,b": a and b}}'))
    (param,) = resolve(question, {"n": "a,b"}, load_catalog())
    assert (param.raw, param.shown, param.value) == ("a,b", "a and b", "a,b")
    assert resolve(question, {"n": "c"}, load_catalog())[0].shown == "c"


def test_invalid_yaml_names_the_line():
    with pytest.raises(QuestionError, match=r"toy.yaml:\d+: not valid YAML"):
        parse(GOOD + "  - {key: b, label: [unclosed, rel: 0.1}\n")


def test_yaml_is_loaded_safely():
    with pytest.raises(QuestionError):
        parse("!!python/object/apply:os.system ['true']\n")


def test_a_broken_file_does_not_stop_the_bank(tmp_path):
    (tmp_path / "F").mkdir()
    (tmp_path / "F" / "toy.yaml").write_text(GOOD)
    (tmp_path / "F" / "broken.yaml").write_text("id: broken\ntitle: [unclosed\n")
    bank = load_bank(tmp_path)
    assert list(bank.questions) == ["toy"]
    assert len(bank.problems) == 1 and "broken.yaml" in bank.problems[0]


def test_order_and_checklist_answers_parse_and_are_validated():
    text = GOOD.replace("  - {key: a, label: A, unit: GB, rel: 0.02}\n",
                        "  - {key: a, label: A, unit: GB, rel: 0.02}\n"
                        "  - {key: o, label: O, order: [x, y, z]}\n"
                        "  - {key: c, label: C, checklist: [p, q]}\n")
    question = parse(text)
    assert question.answer("o").kind == "order" and question.answer("c").kind == "checklist"
    with pytest.raises(QuestionError, match="answers\\[1\\].order"):
        parse(text.replace("order: [x, y, z]", "order: [x, x, z]"))
    with pytest.raises(QuestionError, match="one comparison"):
        parse(text.replace("order: [x, y, z]", "order: [x, y], rel: 0.1"))


def test_prerequisites_must_exist_and_not_loop(tmp_path):
    (tmp_path / "F").mkdir()
    for qid, requires in (("a", "[b]"), ("b", "[a]"), ("c", "[nowhere]"), ("d", "[a]")):
        text = GOOD.replace("id: toy", f"id: {qid}") + f"requires: {requires}\n"
        (tmp_path / "F" / f"{qid}.yaml").write_text(text)
    bank = load_bank(tmp_path)
    assert bank.questions["d"].requires == ("a",)
    problems = "\n".join(bank.problems)
    assert "a.yaml: requires: a cycle" in problems and "b.yaml: requires: a cycle" in problems
    assert "c.yaml: requires: 'nowhere' is not a question" in problems and "d.yaml" not in problems
    with pytest.raises(QuestionError, match="requires"):
        parse(GOOD + "requires: [toy]\n")


PINNED = GOOD.replace("  - {key: a, label: A, unit: GB, rel: 0.02}\n",
                      "  - {key: a, label: A, unit: GB, rel: 0.02}\n"
                      "  - {key: r, label: R, choice: [low, high]}\n"
                      "  - {key: o, label: O, order: [x, y, z]}\n"
                      "  - {key: s, label: S, select: [p, q, t]}\n"
                      "  - {key: c, label: C, checklist: [p, q]}\n") + """\
golden:
  - variant: default
    expect:
      a: 140
      r: high
      o: [z, x, y]
      s: [q]
    why: |
      By hand.
  - variant: 7
    expect: {a: 1.5, s: {p: false}}
    rel: 0.01
    why: Seed 7, by hand.
  - variant: default+n=4
    expect: {a: 3}
    why: Four items.
"""


def test_golden_entries_parse_each_in_its_kinds_form():
    """A number in the answer's unit, a choice, an order as its items, a select as the options that hold (the
    others fail) or as {option: truth} for just those named; a bare seed is a variant too."""
    default, seven, four = parse(PINNED).golden
    assert default.variant == "default" and default.rel is None and default.line == 16
    assert dict(default.expect) == {"a": 140, "r": "high", "o": ("z", "x", "y"),
                                    "s": (("p", False), ("q", True), ("t", False))}
    assert default.why == "By hand.\n"
    assert (seven.variant, dict(seven.expect), seven.rel) == ("7", {"a": 1.5, "s": (("p", False),)}, 0.01)
    assert four.variant == "default+n=4"
    drawn = parse(PINNED.replace("expect: {a: 3}", "draws: {n: 4}")).golden[2]
    assert (drawn.expect, drawn.draws) == ((), (("n", 4),))  # a seed's draw pinned, no answer


@pytest.mark.parametrize("change, field, line, message", [
    (("variant: default+n=4", "variant: default+m=4"), "golden[2].variant", 28, "'m=4' names no parameter"),
    (("variant: default+n=4", "variant: seven"), "golden[2].variant", 28, "not a variant code's part after the '@'"),
    (("variant: default+n=4", "variant: toy@default"), "golden[2].variant", 28, "not a variant code's part"),
    (("a: 140", "b: 140"), "golden[0].expect.b", 18, "names no answer"),
    (("a: 140", "a: 2.4e25"), "golden[0].expect.a", 18, "write 2.4e+25"),
    (("a: 140", "a: 140 GB"), "golden[0].expect.a", 18, "expected a number in GB"),
    (("r: high", "r: medium"), "golden[0].expect.r", 19, "'medium' is not one of the choices"),
    (("o: [z, x, y]", "o: [z, x]"), "golden[0].expect.o", 20, "every item of the order once"),
    (("s: [q]", "s: [q, w]"), "golden[0].expect.s", 21, "not an option of the pool: 'w'"),
    (("s: {p: false}", "s: {p: maybe}"), "golden[1].expect.s", 25, "the options that hold"),
    (("s: [q]", "c: all"), "golden[0].expect.c", 21, "a checklist answer has no key to pin"),
    (("    why: Four items.\n", ""), "golden[2].why", 28, "missing"),
    (("rel: 0.01", "rel: 5"), "golden[1].rel", 26, "a relative tolerance"),
    (("rel: 0.01", "seed: 7"), "golden[1].seed", 26, "unknown field"),
    (("expect: {a: 3}", "expect: {}"), "golden[2].expect", 29, "pin at least one answer"),
    (("expect: {a: 3}", "draws: {m: 4}"), "golden[2].draws.m", 29, "names no parameter"),
    (("expect: {a: 3}", "draws: {n: [4]}"), "golden[2].draws.n", 29, "a number or a choice's name"),
    (("    expect: {a: 3}\n", ""), "golden[2].expect", 28, "missing"),
])
def test_broken_golden_entries_name_field_and_line(change, field, line, message):
    old, new = change
    assert old in PINNED
    with pytest.raises(QuestionError) as error:
        parse(PINNED.replace(old, new))
    text = str(error.value)
    assert text.startswith(f"toy.yaml:{line}: {field}:") and message in text, text
