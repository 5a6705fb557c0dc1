"""One name out of a few (`choice:`): a regime, a decision. Typed in full, or by as much of it as tells it
apart: the start of the name, the start of one of its words, or any part of it (`rep` for kv-replicated)."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.answers.base import CORRECT, UNPARSED, WRONG, Answer, Grade, Shown, Slip, SpecError, TestInputs
from solvers.parse import ParseError


def distinct_texts(field: str, items: Any, at_least: int = 2) -> tuple[str, ...]:
    if (not isinstance(items, list) or len(items) < at_least or not all(isinstance(c, str) for c in items)
            or len(set(items)) < len(items)):
        raise SpecError(field, f"at least {at_least} distinct text items")
    return tuple(items)


def _words(choice: str) -> list[str]:
    return [w for w in re.split(r"[-_/ ]+", choice.lower()) if w]


def choice_candidates(text: str, choices: Sequence[str]) -> tuple[str, ...]:
    """The options `text` could mean, as a person would type one: the option in full, else those it starts,
    else those with a word it starts (`rep`: kv-replicated), else those it is part of; each test decides
    only where it matches some option, so `kv-` names both kv-split and kv-replicated, not none."""
    wanted = " ".join(text.strip().lower().split())
    if not wanted:
        return ()
    tests = (lambda c: c.lower() == wanted, lambda c: c.lower().startswith(wanted),
             lambda c: any(w.startswith(wanted) for w in _words(c)), lambda c: wanted in c.lower())
    for test in tests:
        found = tuple(c for c in choices if test(c))
        if found:
            return found
    return ()


def match_choice(text: str, choices: Sequence[str]) -> str | None:
    """The one option `text` names, else None (none, or more than one)."""
    found = choice_candidates(text, choices)
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Choice(Answer):
    choices: tuple[str, ...] = ()

    kind = "choice"
    fields = ("choice",)

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        choices = distinct_texts("choice", fields["choice"])
        if any("{" in choice for choice in choices):  # the candidate types a choice's name: a figure goes in the label
            raise SpecError("choice", "a choice is a name, typed as written: no {field} in it")
        return cls(key, label, unit, choices)

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.label, *self.choices)

    def check_result(self, result: Any) -> str | None:
        return None if result in self.choices else f"{result!r} is not one of the choices"

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        other = next(c for c in self.choices if c != key)
        return TestInputs(str(key), other, "none of these")

    def pin(self, value: Any) -> Any:
        if value not in self.choices:
            raise SpecError("golden", f"{value!r} is not one of the choices ({', '.join(self.choices)})")
        return value

    def pin_mismatch(self, pinned: Any, result: Any, rel: float | None) -> tuple[str, str] | None:
        return None if result == pinned else (str(result), str(pinned))

    def read(self, text: str, shown: Shown) -> str:
        found = choice_candidates(text, self.choices)
        if len(found) > 1:
            raise ParseError(f"{text.strip()!r} could be {' or '.join(found)}: type more of it")
        if not found:
            raise ParseError(f"pick one of: {', '.join(self.choices)}")
        return found[0]

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        try:
            picked = self.read(text, shown)
        except ParseError as error:
            return Grade(self.key, UNPARSED, text, str(key), message=str(error))
        return Grade(self.key, CORRECT if picked == key else WRONG, picked, str(key))

    def placeholder(self, shown: Shown) -> str:
        return " / ".join(self.choices)

    @property
    def suggestions(self) -> tuple[str, ...]:
        return self.choices
