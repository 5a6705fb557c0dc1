"""Parameter kinds: one class per way of drawing a figure, each in its own module (see base.ParamSpec)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from solvers.answers.base import SpecError
from solvers.params.base import OVERRIDE_REACH, FieldReader, ParameterError, ParamSpec, in_a_code, relative_factor
from solvers.params.choice import DATA_COLLECTIONS, Choice
from solvers.params.fixed import Fixed
from solvers.params.generated import Generated
from solvers.params.ranged import LOG_STEP, IntRange, LogUniform, Ranged, Uniform

KINDS: tuple[type[ParamSpec], ...] = (Choice, IntRange, Uniform, LogUniform, Fixed, Generated)
KIND_FIELDS = frozenset(f for kind in KINDS for f in kind.fields)
_BY_NAME = {kind.kind: kind for kind in KINDS}  # the field that names the kind


def make_param(name: str, label: str, unit: str, fields: Mapping[str, Any], read: FieldReader) -> ParamSpec:
    """The parameter a question file describes, its kind named by one field (choice, int, uniform,
    loguniform, fixed, generate); `read` reads a field of the mapping type-checked. Raises SpecError
    (with no field where the kind is not named once)."""
    named = [name for name in _BY_NAME if name in fields]
    if len(named) != 1:
        raise SpecError("", f"needs exactly one of {', '.join(_BY_NAME)}")
    kind = _BY_NAME[named[0]]
    stray = [field for field in fields if field in KIND_FIELDS and field not in kind.fields]
    if stray:
        raise SpecError(stray[0], f"not a field of a {kind.kind} parameter")
    return kind.from_fields(name, label, unit, fields, read)


__all__ = ["DATA_COLLECTIONS", "KINDS", "KIND_FIELDS", "LOG_STEP", "OVERRIDE_REACH", "Choice", "Fixed", "Generated",
           "IntRange", "LogUniform", "ParamSpec", "ParameterError", "Ranged", "Uniform", "in_a_code", "make_param",
           "relative_factor"]
