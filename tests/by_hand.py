"""One shape for a question's by-hand test: its keys worked out again in plain floats from the
variant's parameters and the data files, independent of the solver, and held to the solver's over
many seeds. A question's test module defines `by_hand(solution) -> {key: value}` and `SEEDS`, and
`test_keys_by_hand = by_hand_test(ID, SEEDS, by_hand)`."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

REL = 1e-9  # the same arithmetic in another order: agreement to rounding


def by_hand_test(question_id: str, seeds: Iterable[int | str], by_hand: Callable[[Any], dict[str, Any]]):
    """A test parametrized over `seeds`: each variant's keys that `by_hand` gives equal the solver's.
    A number is held within REL; a set is the options that hold in a select's judgements; a dict is
    judgements option by option (None: too close to call), for the options it names; anything else
    exactly. A key is the graded answer where there is one, else the sheet's result of that name."""

    @pytest.mark.parametrize("seed", list(seeds))
    def test(variant, seed):
        solution = variant(f"{question_id}@{seed}")
        for key, value in by_hand(solution).items():
            solved = _solved(solution, key, value)
            if isinstance(value, float):
                assert solved == pytest.approx(value, rel=REL), (solution.code, key)
            else:
                assert solved == value, (solution.code, key)

    test.__doc__ = f"{question_id}: every key by_hand gives matches the solver's, over {len(list(seeds))} seeds."
    return test


def _solved(solution, key: str, value: Any) -> Any:
    results = solution.sheet.results
    if isinstance(value, dict):
        return {option: results[key][option] for option in value}
    if isinstance(value, (set, frozenset)):
        return {option for option, holds in results[key].items() if holds}
    return solution.expected[key] if key in solution.expected else results[key]


KiB, MiB, GiB = 2**10, 2**20, 2**30
MIN, HOUR, DAY = 60, 3600, 86_400
DTYPE_BYTES = {"bf16": 2, "fp8": 1, "fp32": 4}


def param_values(solution, *, whole: bool = False) -> dict:
    """A variant's parameters by name; `whole`: a float draw as the int it was rounded to (the toy engines
    count tokens and blocks)."""
    return {param.name: int(param.value) if whole and isinstance(param.value, float) else param.value
            for param in solution.params}


def value_of(solution, name: str):
    """One parameter's value."""
    return solution.param(name).value
