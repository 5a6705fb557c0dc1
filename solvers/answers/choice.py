"""One name out of a few (`choice:`): a regime, a decision. Typed in full or by a unique prefix."""
from __future__ import annotations

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


def match_choice(text: str, choices: Sequence[str]) -> str | None:
    wanted = text.strip().lower()
    if not wanted:
        return None
    exact = [c for c in choices if c.lower() == wanted]
    if exact:
        return exact[0]
    prefixed = [c for c in choices if c.lower().startswith(wanted)]
    return prefixed[0] if len(prefixed) == 1 else None


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
        picked = match_choice(text, self.choices)
        if picked is None:
            raise ParseError(f"pick one of: {', '.join(self.choices)}")
        return picked

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
