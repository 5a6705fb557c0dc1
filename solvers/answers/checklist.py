"""Points the candidate ticks after the reveal (`checklist:`): self-graded, kept only where
nothing else can grade the answer. What was typed before the reveal are notes."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.answers.base import CLOSE, CORRECT, UNPARSED, WRONG, Answer, Grade, Shown, Slip, TestInputs
from solvers.answers.choice import distinct_texts
from solvers.parse import ParseError


@dataclass(frozen=True)
class Checklist(Answer):
    points: tuple[str, ...] = ()

    kind = "checklist"
    fields = ("checklist",)
    self_graded = True

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        return cls(key, label, unit, distinct_texts("checklist", fields["checklist"]))

    def present(self, result: Any, seed: str) -> tuple[tuple[str, ...], Any]:
        return (), list(self.points)  # the key is the list itself; the solver gives none

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.label, *self.points)

    def key_text(self, key: Any, shown: Shown) -> str:
        return "; ".join(self.text(point) for point in key)

    def display_value(self, key: Any) -> Any:
        return [self.text(point) for point in key]

    def typed(self, key: Any, shown: Shown) -> str:
        return "all"

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        return TestInputs("all", "none", str(len(self.points) + 1))

    def read(self, text: str, shown: Shown) -> set[int]:
        """Points ticked as '1,3,4', 'all' or 'none' (1-based)."""
        cleaned = text.strip().lower()
        if cleaned == "all":
            return set(range(len(self.points)))
        if cleaned == "none":
            return set()
        if not re.fullmatch(r"\d+(?:[\s,;]+\d+)*", cleaned):
            raise ParseError("tick the points you covered: e.g. 1,3,4, all or none")
        # A number too long to be a point is out of range without int() (which refuses 4,301 digits).
        ticked = {int(n) - 1 if len(n) <= 4 else len(self.points) for n in re.findall(r"\d+", cleaned)}
        if not ticked <= set(range(len(self.points))):
            raise ParseError(f"points are numbered 1 to {len(self.points)}")
        return ticked

    def note(self, text: str, shown: Shown = ()) -> tuple[bool, str]:
        return True, ""  # notes for yourself: anything goes until the points are ticked

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        count = len(self.points)
        key_text = f"{count}/{count} points"
        try:
            ticked = self.read(text, shown)
        except ParseError as error:
            return Grade(self.key, UNPARSED, text, key_text, message=str(error))
        share = len(ticked) / count
        verdict = CORRECT if share == 1 else CLOSE if share >= 0.5 else WRONG
        return Grade(self.key, verdict, f"{len(ticked)}/{count} points", key_text, error=1 - share,
                     message="self-graded")

    def placeholder(self, shown: Shown) -> str:
        return "your points (tick them after the reveal)"
