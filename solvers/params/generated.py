"""A value a named generator draws (`generate: lognormal_ints`, `args:`), such as a batch's output
lengths or a table of counters; an argument `$name` takes another parameter's value."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solvers.params.base import FieldReader, ParamSpec

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Generated(ParamSpec):
    generator: str = ""
    args: tuple[tuple[str, Any], ...] = ()

    kind = "generate"
    fields = ("generate", "args")
    what_if_tag = "drawn"

    @classmethod
    def from_fields(cls, name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
        default = cls.required_default(fields)
        generator = read("generate", str)
        args = read("args", dict, required=False, default={})
        return cls(name, default, label, unit, generator, tuple(args.items()))

    @property
    def reads(self) -> tuple[tuple[str, str], ...]:
        return tuple((arg, value[1:]) for arg, value in self.args if isinstance(value, str) and value.startswith("$"))

    def draw(self, rng: np.random.Generator, drawn: Mapping[str, Any]) -> Any:
        from solvers.generators import GENERATORS  # numpy: not loaded with the bank

        args = {k: drawn[v[1:]] if isinstance(v, str) and v.startswith("$") else v for k, v in self.args}
        return GENERATORS[self.generator](rng, **args)

    def what_if_note(self, label: str) -> str:
        return f"{label} is drawn from the variant's seed: move the parameters it is drawn from."
