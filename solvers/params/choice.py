"""One of a list (`choice:`): a TP degree, a dtype, or an entry of a data collection (`from: gpus`),
optionally weighted. The what-if explorer and a push step through its options."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solvers.answers.base import SpecError
from solvers.params.base import NUMBER, FieldReader, ParameterError, ParamSpec, distance, in_a_code, number

if TYPE_CHECKING:
    import numpy as np

    from solvers.data import Catalog, Record

DATA_COLLECTIONS = ("gpus", "models", "nics")


@dataclass(frozen=True)
class Choice(ParamSpec):
    choices: tuple[Any, ...] = ()
    weights: tuple[float, ...] = ()
    source: str = ""  # a data collection the choices name (gpus, models, nics)
    shown: tuple[tuple[Any, str], ...] = ()  # how a choice reads in the prompt and table, where not as written

    kind = "choice"
    fields = ("choice", "weights", "from", "shown")

    @classmethod
    def from_fields(cls, name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
        default = cls.required_default(fields)
        choices = read("choice", list)
        if not choices:
            raise SpecError("choice", "empty list")
        weights = tuple(read("weights", list, required=False, default=[]))
        if weights and (len(weights) != len(choices) or any(not isinstance(w, NUMBER) or w <= 0 for w in weights)):
            raise SpecError("weights", "one positive weight per choice")
        source = read("from", str, required=False, default="")
        if source and source not in DATA_COLLECTIONS:
            raise SpecError("from", f"expected one of {', '.join(DATA_COLLECTIONS)}")
        if default not in choices:
            raise SpecError("default", f"{default!r} is not one of the choices")
        # A choice a solver reads as written (a device-name list, a rule's slug) may read otherwise to a person.
        shown = read("shown", dict, required=False, default={})
        if source and shown or any(c not in choices or not isinstance(t, str) or not t for c, t in shown.items()):
            raise SpecError("shown", "expected a mapping from choices to the text they read as (not for data entries)")
        return cls(name, default, label, unit, tuple(choices), weights, source, tuple(shown.items()))

    def draw(self, rng: np.random.Generator, drawn: Mapping[str, Any]) -> Any:
        total = sum(self.weights)
        p = [w / total for w in self.weights] if self.weights else None
        return self.choices[int(rng.choice(len(self.choices), p=p))]

    def shown_as(self, value: Any) -> str:
        return next((text for choice, text in self.shown if choice == value), str(value))

    def entry(self, value: Any, catalog: Catalog) -> Record | None:
        if not self.source:
            return None
        try:
            return catalog.get(self.source, value)
        except KeyError:
            raise ParameterError(f"{self.name}: '{value}' is not in {self.source}") from None

    def parse_override(self, text: str, catalog: Catalog) -> Any:
        if self.source:
            if text in catalog.collections.get(self.source, {}):
                return text
            known = ", ".join(catalog.collections.get(self.source, {}))
            raise ParameterError(f"{self.name}: unknown {self.source[:-1]} '{text}' (known: {known})")
        for choice in self.choices:
            if str(choice) == text:
                return choice
        for choice in self.choices:  # as a variant code writes it
            if self.override_text(choice) == text:
                return choice
        raise ParameterError(f"{self.name}: expected one of {', '.join(map(str, self.choices))}")

    def override_text(self, value: Any) -> str:
        """The choice as itself, or where that holds a space or a '+' ("prefix caching, structured outputs"),
        with each run of spaces, commas and '+' as one '-'."""
        text = str(value)
        return text if in_a_code(text) else re.sub(r"[\s,+]+", "-", text).strip("-")

    @property
    def movable(self) -> bool:
        return len(self.choices) > 1

    def what_if_note(self, label: str) -> str:
        return "" if self.movable else f"{label} has a single option."

    def step(self, value: Any, direction: int) -> Any:
        """The option after (or before) `value` in the list; the same value at either end."""
        index = self.choices.index(value) if value in self.choices else 0
        return self.choices[min(max(index + direction, 0), len(self.choices) - 1)]

    def pushes(self, current: Any, points: int) -> list:
        """The other options, nearest first where they are numbers, else in the file's order."""
        others = [c for c in self.choices if c != current]
        return sorted(others, key=lambda c: distance(float(c), float(current))) \
            if all(number(c) for c in self.choices) else others

    def nearby(self, current: Any) -> list:
        return self.pushes(current, 0)[:2]
