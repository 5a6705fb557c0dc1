"""Answer kinds: one class per way of asking, each in its own module (see base.Answer)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from solvers.answers.base import (
    CLOSE,
    CORRECT,
    MISMATCH,
    UNPARSED,
    WRONG,
    Answer,
    Grade,
    Slip,
    SpecError,
    TestInputs,
    UnitMismatch,
)
from solvers.answers.checklist import Checklist
from solvers.answers.choice import Choice
from solvers.answers.estimate import Estimate
from solvers.answers.number import Number
from solvers.answers.order import Order
from solvers.answers.select import Select

KINDS: tuple[type[Answer], ...] = (Number, Estimate, Choice, Order, Select, Checklist)
KIND_FIELDS = frozenset(f for kind in KINDS for f in kind.fields)
_BY_FIELD = {kind.fields[0]: kind for kind in KINDS}  # the field that names the kind


def make_answer(key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
    """The answer a question file describes: its kind named by one field (rel, log, choice,
    order, select, checklist; none: a number at the default tolerance). Raises SpecError."""
    named = [name for name in _BY_FIELD if name in fields]
    if len(named) > 1:
        raise SpecError(named[1], f"give one comparison: {', '.join(_BY_FIELD)}")
    kind = _BY_FIELD[named[0]] if named else Number
    stray = [name for name in fields if name in KIND_FIELDS and name not in kind.fields]
    if stray:
        raise SpecError(stray[0], f"not a field of a {kind.kind} answer")
    return kind.from_fields(key, label, unit, fields)


__all__ = ["CLOSE", "CORRECT", "KINDS", "MISMATCH", "UNPARSED", "WRONG", "Answer", "Checklist", "Choice",
           "Estimate", "Grade", "Number", "Order", "Select", "Slip", "SpecError", "TestInputs", "UnitMismatch",
           "make_answer"]
