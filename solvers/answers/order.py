"""Put listed items in order (`order:`): graded by the pairs out of order."""
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


@dataclass(frozen=True)
class Order(Answer):
    items: tuple[str, ...] = ()

    kind = "order"
    fields = ("order",)

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        return cls(key, label, unit, distinct_texts("order", fields["order"]))

    def check_result(self, result: Any) -> str | None:
        if not isinstance(result, (list, tuple)) or sorted(result) != sorted(self.items):
            return "the order is not a permutation of its items"
        return None

    def present(self, result: Any, seed: str) -> tuple[tuple[str, ...], Any]:
        """Listed in a per-variant shuffle that never gives the answer away."""
        items = list(self.items)
        random.Random(seed).shuffle(items)
        if items == list(result):
            items = items[1:] + items[:1]
        return tuple(items), list(result)

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.label, *self.items)

    def listing(self, shown: Shown) -> str:
        return lettered_list(f"{self.shown_label} (give the letters in order):", [self.text(o) for o in shown])

    def key_text(self, key: Any, shown: Shown) -> str:
        return " › ".join(self.text(o) for o in key)

    def display_value(self, key: Any) -> Any:
        return [self.text(o) for o in key]

    def typed(self, key: Any, shown: Shown) -> str:
        return letters(key, shown)

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        return TestInputs(letters(key, shown), letters(list(reversed(key)), shown), letter(len(shown)) * len(shown))

    def pin(self, value: Any) -> Any:
        """The items in their order, each once."""
        if not isinstance(value, list) or sorted(map(str, value)) != sorted(self.items):
            raise SpecError("golden", "expected every item of the order once, in order")
        return tuple(value)

    def pin_mismatch(self, pinned: Any, result: Any, rel: float | None) -> tuple[str, str] | None:
        return None if tuple(result) == pinned else (" › ".join(result), " › ".join(pinned))

    def read(self, text: str, shown: Shown) -> list[str]:
        example = "".join(letter(i) for i in range(len(shown)))[::-1]
        picked = read_letters(text, shown, example)
        if sorted(picked) != sorted(shown):
            raise ParseError(f"use each of the {len(shown)} letters exactly once")
        return picked

    def describe(self, reading: list[str], shown: Shown) -> str:
        return " › ".join(reading)

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        key_letters = letters(key, shown)
        try:
            given = self.read(text, shown)
        except ParseError as error:
            return Grade(self.key, UNPARSED, text, key_letters, message=str(error))
        rank = {item: i for i, item in enumerate(key)}
        pairs = [(a, b) for i, a in enumerate(given) for b in given[i + 1:]]
        discordant = sum(rank[a] > rank[b] for a, b in pairs)
        verdict = CORRECT if discordant == 0 else CLOSE if discordant == 1 else WRONG
        message = None if discordant == 0 else f"{discordant} pair(s) out of order"
        return Grade(self.key, verdict, letters(given, shown), key_letters, error=discordant / len(pairs),
                     message=message)

    def placeholder(self, shown: Shown) -> str:
        return f"letters in order, e.g. {''.join(letter(i) for i in range(len(shown)))}"
