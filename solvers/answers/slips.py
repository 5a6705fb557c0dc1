"""Generic slips, each applying only to answers of a dimension where the mistake can happen.

A question's own slips are declared on the answer they diagnose (`Sheet.slip(..., on=key)`),
with the ratio typed / key; these are the mistakes any answer of a kind of unit invites.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solvers.answers.base import Slip
from solvers.units import Dim, Unit


def _bytes(dim: Dim) -> bool:  # bytes and byte rates (GB, GB/s), not FLOP per byte
    return dim[0] == 1 and dim[1] == 0


def _flops(dim: Dim) -> bool:  # FLOP, FLOP/s, FLOP per byte
    return dim[1] == 1


def _prefixed(unit: Unit) -> bool:  # a unit a k/M/G prefix can be put on
    return unit.text not in ("", "%", "x", "×")


@dataclass(frozen=True)
class _Generic:
    slip: Slip
    applies: Callable[[Unit], bool]


_GENERIC = (
    _Generic(Slip("x2: counted a multiply-add as 1 FLOP, not 2", 0.5), lambda u: _flops(u.dim)),
    _Generic(Slip("x2: a factor of 2 FLOPs per multiply-add counted twice", 2.0), lambda u: _flops(u.dim)),
    _Generic(Slip("x2: a factor of 2 left out (K and V, or 2 bytes per bf16 value)", 0.5), lambda u: _bytes(u.dim)),
    _Generic(Slip("x2: a factor of 2 counted twice (K and V, or bytes per value)", 2.0), lambda u: _bytes(u.dim)),
    _Generic(Slip("x8: bits and bytes mixed up", 8.0), lambda u: _bytes(u.dim)),
    _Generic(Slip("/8: bits and bytes mixed up", 1 / 8), lambda u: _bytes(u.dim)),
    *(_Generic(Slip(f"GB and GiB mixed up (1.024^{k})", 1.024**k), lambda u: _bytes(u.dim)) for k in range(1, 5)),
    *(_Generic(Slip(f"GB and GiB mixed up (1.024^-{k})", 1.024**-k), lambda u: _bytes(u.dim)) for k in range(1, 5)),
    _Generic(Slip("x1000: a prefix off by one step (k/M/G/T)", 1e3), _prefixed),
    _Generic(Slip("/1000: a prefix off by one step (k/M/G/T)", 1e-3), _prefixed),
    _Generic(Slip("x10^6: a prefix off by two steps", 1e6), _prefixed),
    _Generic(Slip("/10^6: a prefix off by two steps", 1e-6), _prefixed),
)


def generic_slips(unit: Unit) -> tuple[Slip, ...]:
    """The generic slips an answer asked in `unit` can show."""
    return tuple(g.slip for g in _GENERIC if g.applies(unit))


# A slip's family: the habit behind it, whatever the question or the exponent ("GB and GiB mixed up
# (1.024^3)" and "(1.024^-4)" are one habit, every "x2: ..." another), for counting slips in the stats.
_FAMILIES = (
    ("bits", "x8: bits and bytes mixed up"),  # before x2/x8: a factor 8 of another kind keeps its label
    ("GB and GiB", "GB and GiB mixed up"),
    ("x2:", "x2: a factor of 2 left out or counted twice"),
    ("/2:", "x2: a factor of 2 left out or counted twice"),
    ("x1000:", "a unit prefix off (k/M/G/T)"),
    ("/1000:", "a unit prefix off (k/M/G/T)"),
    ("x10^6:", "a unit prefix off (k/M/G/T)"),
    ("/10^6:", "a unit prefix off (k/M/G/T)"),
)


def slip_family(label: str) -> str:
    """The family a slip's label belongs to; a slip of no family is its own."""
    for marker, family in _FAMILIES:
        if (label.startswith(marker) if marker.endswith(":") else marker in label):
            return family
    return label


def diagnose(ratio: float, slips: Sequence[Slip], tol: float = 0.005) -> str | None:
    """Name the slip whose factor is closest to `ratio`, within `tol` relative."""
    if ratio <= 0 or not math.isfinite(ratio):
        return None
    # log(ratio) - log(factor), not log(ratio / factor): the quotient of a subnormal ratio underflows to 0
    best = min(slips, key=lambda s: abs(math.log(ratio) - math.log(s.factor)), default=None)
    if best is not None and abs(ratio / best.factor - 1) <= tol:
        return best.label
    return None
