"""Every helper of the sheet's vocabulary gives the same value on a Sheet (exact sympy) as on a QuickSheet
(floats, the push scan's solve), over drawn arguments: a scan may only decide what the exact solve decides."""
from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers import sheetmath as m
from solvers.derivation import QuickSheet, Reject, Sheet

POSITIVE = st.floats(0.01, 1e6, allow_nan=False)
WHOLE = st.integers(1, 4096)
SHARE = st.floats(0.001, 0.999)

# helper: (its arguments' strategies, the helper applied to the sheet's symbols)
HELPERS: dict[str, tuple[tuple[st.SearchStrategy, ...], Callable]] = {
    "max_of": ((POSITIVE, POSITIVE, POSITIVE), m.max_of),
    "min_of": ((POSITIVE, POSITIVE), m.min_of),
    "floor_of": ((POSITIVE, POSITIVE), lambda a, b: m.floor_of(a / b)),
    "ceil_of": ((POSITIVE, POSITIVE), lambda a, b: m.ceil_of(a / b)),
    "floor_of a whole quotient": ((WHOLE, WHOLE), lambda a, b: m.floor_of(a * b / b)),
    "log_of": ((POSITIVE,), m.log_of),
    "log_of base 2": ((WHOLE,), lambda a: m.log_of(a, 2)),
    "ceil of a log": ((WHOLE,), lambda a: m.ceil_of(m.log_of(a, 2))),
    "exp_of": ((st.floats(-20, 20),), m.exp_of),
    "sqrt_of": ((POSITIVE,), m.sqrt_of),
    "lcm_of": ((WHOLE, WHOLE), m.lcm_of),
    "normal_cdf": ((st.floats(-6, 6),), m.normal_cdf),
    "miss_power": ((SHARE, WHOLE), lambda q, b: 1 - m.miss_power(q, b)),
    "rank_sum": ((st.integers(1, 30), st.floats(0.2, 2)), lambda n, a: m.rank_sum(lambda i: i ** -a, 1, n)),
    "rank_ceiling": ((st.integers(1, 30), POSITIVE),
                     lambda n, c: m.rank_sum(lambda i: m.rank_ceiling(c / i), 1, n)),
}


def _solved(sheet: Sheet, helper: Callable, values: tuple) -> float:
    with sheet.solving():
        symbols = [sheet.given(f"a{i}", value) for i, value in enumerate(values)]
        return sheet.value(sheet.step("out", "the helper", "out", helper(*symbols)))


@pytest.mark.parametrize("name", HELPERS)
def test_a_helper_gives_the_same_value_exact_and_quick(name):
    strategies, helper = HELPERS[name]

    @settings(max_examples=40, deadline=None)
    @given(st.tuples(*strategies))
    def agree(values):
        if name in ("floor_of", "ceil_of"):  # floats cannot tell a quotient this close to a whole number from it:
            quotient = values[0] / values[1]  # a QuickSheet snaps it (sheetmath._near_integer), the exact solve decides
            assume(abs(quotient - round(quotient)) > 1e-9 * max(1.0, quotient) or quotient == round(quotient))
        try:
            exact = _solved(Sheet(), helper, values)
        except Reject:
            with pytest.raises(Reject):
                _solved(QuickSheet(), helper, values)
            return
        assert math.isclose(_solved(QuickSheet(), helper, values), exact, rel_tol=1e-9, abs_tol=1e-12), values

    agree()


def test_the_vocabulary_is_listed_where_a_solver_author_reads_it():
    """The module's docstring names every public helper, so a newcomer finds the one to use."""
    public = {name for name in vars(m) if name.endswith("_of") or name in ("normal_cdf", "miss_power", "rank_sum",
                                                                             "rank_ceiling")}
    assert all(name in m.__doc__ for name in public) and len(public) == 12
