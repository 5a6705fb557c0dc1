"""first-month-plan: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

from collections import Counter

import pytest

from solvers.interview import stage_run
from tests.by_hand import HOUR


def _record(solution):
    """Last year's record in plain hours, read off the parameter table."""
    raw = {param.name: param.raw for param in solution.params}
    crash = raw["restart"] / 60 + raw["interval"] / 2
    failures = raw["hangs"] + raw["bad_nodes"] * raw["repeats"]
    watchdog = raw["hangs"] * (raw["detect"] - raw["watchdog"] / 60) * raw["gpus"]
    drain = raw["bad_nodes"] * (raw["repeats"] - 1) * crash * raw["gpus"]
    return raw, crash, failures, watchdog, drain


@pytest.mark.parametrize("seed", range(40))
def test_first_month_costs_and_fix_follow_the_record(variant, seed):
    """Each failure costs the job its time down on every GPU; the fix that ships is the one that saves more."""
    solution = variant(f"first-month-plan@{seed}")
    raw, crash, failures, watchdog, drain = _record(solution)
    hang_cost = raw["hangs"] * (raw["detect"] + crash) * raw["gpus"]
    node_cost = raw["bad_nodes"] * raw["repeats"] * crash * raw["gpus"]
    assert solution.expected["hang_cost"] / HOUR == pytest.approx(hang_cost, rel=1e-12)
    assert solution.expected["node_cost"] / HOUR == pytest.approx(node_cost, rel=1e-12)
    assert solution.expected["saved"] / HOUR == pytest.approx(max(watchdog, drain), rel=1e-12)
    assert solution.expected["regime"] == ("step-counter watchdog" if watchdog > drain else "drain after first crash")
    findings = solution.sheet.results["findings"]
    plain = {"in total, the hangs waited longer to be noticed than all the failures spent restarting":
             (raw["hangs"] * raw["detect"], failures * raw["restart"] / 60),
             "the faulty nodes cost the job more than the hangs did": (node_cost, hang_cost),
             "redoing the work since the last save cost more than waiting to notice the hangs":
             (failures * raw["interval"] / 2, raw["hangs"] * raw["detect"]),
             "the two fixes together would win back more than half of what the failures cost":
             (watchdog + drain, (hang_cost + node_cost) / 2)}
    for option, (a, b) in plain.items():
        assert findings[option] == (None if abs(a / b - 1) < 0.02 else a > b), (seed, option)


def test_first_month_push_turns_the_fix_over(variant, catalog):
    """The declared pushes (hangs noticed within half an hour, or left eight hours) change the fix that
    ships in at least 90% of 100 draws, each asked of the draws on its side."""
    crossed = 0
    for seed in range(100):
        solution = variant(f"first-month-plan@{seed}")
        stages = solution.question.stages
        runs = [stage_run(solution, catalog, index) for index, stage in enumerate(stages) if stage.push]
        pushed = [run for run in runs if run is not None]
        assert len(pushed) == 1, seed
        crossed += pushed[0].solution.expected["regime"] != solution.expected["regime"]
    assert crossed >= 90


def test_first_month_both_fixes_ship_somewhere(variant):
    """Neither fix is the answer by rote: over 200 draws each ships in at least a fifth of them."""
    fixes = Counter(variant(f"first-month-plan@{seed}").expected["regime"] for seed in range(200))
    assert min(fixes.values()) >= 40, fixes
