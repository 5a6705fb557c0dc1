"""Pick every listed option that holds for this variant (`select:`): judgement, graded.

The question file declares a pool of options; the solver judges each one from the
variant's numbers (`Sheet.judge`: holds or not, and one line of why). The candidate sees
the options that hold and distractors drawn from the rest, shuffled by the variant, so
the right set changes between variants and cannot be memorised. All right: correct; one
missed or one extra: close; else wrong.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.answers.base import (
    CLOSE,
    CORRECT,
    UNPARSED,
    WRONG,
    Answer,
    Grade,
    Shown,
    Slip,
    SpecError,
    TestInputs,
    letter,
    lettered_list,
    letters,
)
from solvers.answers.choice import distinct_texts
from solvers.answers.lettered import read_letters
from solvers.parse import ParseError

NONE = "none"


@dataclass(frozen=True)
class Select(Answer):
    pool: tuple[str, ...] = ()
    show: int = 0  # options listed per variant (0: the whole pool)

    kind = "select"
    fields = ("select", "show")

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        pool = distinct_texts("select", fields["select"], at_least=3)
        show = fields.get("show", len(pool))
        if isinstance(show, bool) or not isinstance(show, int) or not 2 <= show <= len(pool):
            raise SpecError("show", f"options listed per variant: an integer from 2 to {len(pool)}")
        return cls(key, label, unit, pool, show)

    def check_result(self, result: Any) -> str | None:
        """The solver judged every option of the pool (Sheet.judge): true, false, or None where
        the variant cannot decide it."""
        if not isinstance(result, dict) or set(result) != set(self.pool):
            judged = set(result) if isinstance(result, dict) else set()
            return f"judge every option of the pool (unjudged: {sorted(set(self.pool) - judged)}, " \
                   f"not in the pool: {sorted(judged - set(self.pool))})"
        return None

    def refusal(self, result: Any) -> str | None:
        """At least one listable option holds and one does not, or there is nothing to pick: the
        draw is refused (the sampler draws again) rather than asked."""
        if True not in result.values():
            return "no listable option holds"
        if False not in result.values():
            return "every listable option holds"
        return None

    def present(self, result: Any, seed: str) -> tuple[tuple[str, ...], Any]:
        """Options that hold and distractors, at least one of each, in a shuffle of this variant;
        never one the variant cannot decide (judged None)."""
        rng = random.Random(seed)
        holds = [o for o in self.pool if result[o] is True]
        fails = [o for o in self.pool if result[o] is False]
        size = self.show or len(self.pool)
        true_count = min(len(holds), size - 1)
        false_count = min(len(fails), size - true_count)
        true_count = min(len(holds), size - false_count)
        shown = rng.sample(holds, true_count) + rng.sample(fails, false_count)
        rng.shuffle(shown)
        return tuple(shown), [o for o in shown if result[o]]

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.label, *self.pool)

    def listing(self, shown: Shown) -> str:
        return lettered_list(f"{self.shown_label} (give every letter that applies):", [self.text(o) for o in shown])

    def key_text(self, key: Any, shown: Shown) -> str:
        return "; ".join(f"{letter(list(shown).index(o))}. {self.text(o)}" for o in key) if key else NONE

    def display_value(self, key: Any) -> Any:
        return [self.text(o) for o in key]

    def typed(self, key: Any, shown: Shown) -> str:
        return letters(key, shown) if key else NONE

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        others = [o for o in shown if o not in key]
        return TestInputs(self.typed(key, shown), letters(others, shown) or NONE, letter(len(shown)))

    def pin(self, value: Any) -> Any:
        """Which options hold: a list names every option of the pool that holds (the others fail),
        a mapping {option: true or false} pins just the options it names."""
        if isinstance(value, list) and all(isinstance(o, str) for o in value) and len(set(value)) == len(value):
            truth = {option: option in value for option in self.pool}
            named = set(value)
        elif isinstance(value, dict) and all(isinstance(holds, bool) for holds in value.values()):
            truth, named = dict(value), set(value)
        else:
            raise SpecError("golden", "expected the options that hold (a list), or {option: true or false}")
        if stray := sorted(named - set(self.pool)):
            raise SpecError("golden", f"not an option of the pool: {stray[0]!r}")
        return tuple(truth.items())

    def pin_mismatch(self, pinned: Any, result: Any, rel: float | None) -> tuple[str, str] | None:
        off = [(option, holds) for option, holds in pinned if result[option] is not holds]
        if not off:
            return None
        solver = "; ".join(f"'{option}' " + ("is not listed" if result[option] is None else
                                             "holds" if result[option] else "fails") for option, _ in off)
        return solver, "; ".join(f"'{option}' {'holds' if holds else 'fails'}" for option, holds in off)

    def read(self, text: str, shown: Shown) -> list[str]:
        if text.strip().lower() == NONE:
            return []
        picked = read_letters(text, shown, "AC")
        if len(set(picked)) < len(picked):
            raise ParseError("each letter once")
        return [o for o in shown if o in picked]  # in listed order

    def describe(self, reading: list[str], shown: Shown) -> str:
        return letters(reading, shown) if reading else "none of them"

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        key_letters = letters(key, shown) if key else NONE
        try:
            picked = self.read(text, shown)
        except ParseError as error:
            return Grade(self.key, UNPARSED, text, key_letters, message=str(error))
        missed = [o for o in key if o not in picked]
        extra = [o for o in picked if o not in key]
        wrong = len(missed) + len(extra)
        verdict = CORRECT if wrong == 0 else CLOSE if wrong == 1 else WRONG
        parts = []
        if missed:
            parts.append(f"missed {letters(missed, shown)}")
        if extra:
            parts.append(f"{letters(extra, shown)} do{'es' if len(extra) == 1 else ''} not hold here")
        return Grade(self.key, verdict, letters(picked, shown) if picked else NONE, key_letters,
                     error=wrong / len(shown), message="; ".join(parts) or None)

    def placeholder(self, shown: Shown) -> str:
        return "every letter that applies, e.g. AC (or none)"
