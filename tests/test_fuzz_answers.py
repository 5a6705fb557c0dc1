"""Seeded fuzzing of what people type: every generated string through the live note and the
grader of every answer kind ends in a reading or a clean refusal, never an exception, and no
grade carries a non-finite error. `make test` runs 10,000 strings; `make fuzz` runs 100,000."""
from __future__ import annotations

import math
import random
import sys
from collections import Counter

from solvers.answers import make_answer

ANSWERS = (  # (answer, a key it is graded against, the items shown to the candidate)
    (make_answer("flops", "FLOPs", "FLOP", {"rel": 0.02}), 3.2e14, ()),
    (make_answer("time", "Step time", "ms", {"rel": 0.05}), 0.0215, ()),
    (make_answer("bytes", "KV cache", "GB", {"log": 0.3}), 1.4e11, ()),
    (make_answer("share", "Share", "%", {"rel": 0.02}), 0.37, ()),
    (make_answer("count", "GPUs", "", {"rel": 0.001}), 12, ()),
    (make_answer("cost", "Cost", "$", {"rel": 0.05}), 8738.0, ()),
    (make_answer("side", "Regime", "", {"choice": ["memory-bound", "compute-bound"]}), "memory-bound", ()),
    (make_answer("rank", "Order", "", {"order": ["weights", "kv", "activations"]}),
     ("kv", "weights", "activations"), ("weights", "kv", "activations")),
    (make_answer("levers", "Levers", "", {"select": ["batch", "fp8", "faster HBM", "more TP"]}),
     {"batch": True, "fp8": False, "faster HBM": True, "more TP": False}, ("batch", "fp8", "faster HBM", "more TP")),
)
# Pieces people produce by accident: digits, separators, exponents in every spelling, units,
# markup, huge and tiny magnitudes, letters of the lettered answers.
PIECES = (list("0123456789.,eE+-−×x*^⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺ /()[]kKMGTPmuµn%$BsABCD~≈")
          + ["e-300", "e400", "e-400", "nan", "inf", "NaN", "10^", "×10⁻", "**", " GB", " GiB", " ms", " TB/s",
             " FLOP", "[/", "[/x]", "[b]", "9" * 50, "about ", "per GPU", "/GPU", "\x00", "\t", "٣", "１"])


def fuzz(count: int, seed: int = 0) -> tuple[Counter[str], Counter[str], dict[str, str]]:
    """(exceptions by type, non-finite grades by answer, one example of each) over `count` strings."""
    rng = random.Random(seed)
    raised: Counter[str] = Counter()
    nonfinite: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for _ in range(count):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
        for answer, key, shown in ANSWERS:
            try:
                answer.note(text, shown)
                grade = answer.grade(text, key, shown)
            except Exception as error:  # noqa: BLE001 - counting every kind is the point
                raised[type(error).__name__] += 1
                examples.setdefault(type(error).__name__, f"{answer.key}: {text!r}: {error}")
                continue
            if grade.error is not None and not math.isfinite(grade.error):
                nonfinite[answer.key] += 1
                examples.setdefault(f"non-finite {answer.key}", repr(text))
    return raised, nonfinite, examples


def test_ten_thousand_typed_strings_never_raise_nor_grade_non_finite():
    raised, nonfinite, examples = fuzz(10_000)
    assert not raised and not nonfinite, examples


def test_the_cases_that_used_to_raise_are_clean_refusals():
    number, estimate = ANSWERS[0][0], ANSWERS[2][0]
    for text in ("2.4×10⁻⁻⁵", "5×10⁻", "-", "1e400", "nan", "inf", "0 T T T T", "[/"):
        assert number.grade(text, 3.2e14).verdict in ("unparsed", "unit mismatch"), text
    assert number.grade("1e-300", 3.2e14).verdict == "wrong"
    assert estimate.grade("0", 1.4e11).verdict == "unparsed" and estimate.grade("-3 GB", 1.4e11).error is None


if __name__ == "__main__":  # make fuzz
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    raised, nonfinite, examples = fuzz(count)
    print(f"{count:,} strings x {len(ANSWERS)} answer kinds: {sum(raised.values())} exceptions, "
          f"{sum(nonfinite.values())} non-finite grades")
    for kind, example in examples.items():
        print(f"  {kind}: {example}")
    sys.exit(1 if raised or nonfinite else 0)
