"""A figure the question states (`fixed:`): the same in every variant."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from solvers.params.base import FieldReader, ParamSpec

if TYPE_CHECKING:
    import numpy as np


class Fixed(ParamSpec):
    kind = "fixed"
    fields = ("fixed",)
    what_if_tag = "fixed"

    @classmethod
    def from_fields(cls, name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
        return cls(name, fields.get("default", fields["fixed"]), label, unit)

    def draw(self, rng: np.random.Generator, drawn: Mapping[str, Any]) -> Any:
        return self.default

    def what_if_note(self, label: str) -> str:
        return f"{label} is fixed by the question: the prompt states it."
