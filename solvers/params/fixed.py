"""A figure the question states (`fixed:`): the same in every variant."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from solvers.params.base import NUMBER, FieldReader, ParameterError, ParamSpec
from solvers.units import format_number

if TYPE_CHECKING:
    import numpy as np

    from solvers.data import Catalog


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

    def parse_override(self, text: str, catalog: Catalog) -> Any:
        """A stated figure takes overrides within the same reach about its value as a drawn one about its range:
        acc_bits=1e300 or rope_dim=1e-300 ran solvers for ever."""
        if not isinstance(self.default, NUMBER):
            raise ParameterError(f"{self.name}: this parameter cannot be set")
        return self.read_number(text, self.default, self.default, drawn=f"fixes it at {format_number(self.default)}")
