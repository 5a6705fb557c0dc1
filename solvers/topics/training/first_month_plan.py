"""A first month on a training-infrastructure team."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.models.triage import MONTH_ALWAYS, MONTH_NEVER, READ_ALL, READ_SOME
from solvers.sheetmath import floor_of, min_of


def _month_choices(s: Sheet, fits: bool, planned, F, readable) -> None:
    need, have = s.text(planned), s.text(F)
    budget = f"the plan needs {need} of {have} of focus time"
    s.judge("month", READ_ALL, fits, f"{budget}: " + ("every postmortem fits beside the map and the fix" if fits
            else f"only {s.text(readable)} fit beside the map and the fix"))
    s.judge("month", READ_SOME, not fits, f"{budget}: " + ("nothing needs cutting" if fits else
            "cut the reading by recency and severity, not the map or the fix"))
    for option in MONTH_ALWAYS:
        s.judge("month", option, True, "the answer that lands reads, maps one job's path, ships one small fix "
                "through the real review and deploy path, and ends with the questions nobody could answer",
                fact=True)
    for option in MONTH_NEVER:
        s.judge("month", option, False, "the answer that fails proposes changes (a roadmap, a week-one fix of the "
                "first flaky thing) before it knows how this system fails: the roadmap comes after the month, "
                "built on its list of open questions", fact=True)


def _month_regime(s: Sheet, planned, F, readable, n) -> None:
    need, have = s.text(planned), s.text(F)
    s.regime_by(planned, F, tie="below", below=Side(
        "fits-the-month",
        f"The plan needs {need} of the {have} of focus time: read every postmortem, draw the map and ship "
        "the fix, with slack left for the questions list.",
        "With more postmortems, slower reading or a heavier meeting load the plan overruns: read the most "
        "recent and the most severe first rather than cutting the map or the fix.",
        near=f"The plan needs {need} of the {have} of focus time: it fits, just. One slow postmortem or an "
             "incident to shadow and the reading has to be cut by recency and severity."),
        above=Side(
        "overbooked",
        f"The plan needs {need} but the month has {have} of focus time: reading all "
        f"{s.text(n)} postmortems does not fit beside the map and the fix.",
        f"Read about {s.text(readable)} of them, the most recent and the most severe "
        "first, and keep the map and the fix: they are what the month is for. With fewer meetings or "
        "postmortems the whole plan fits."))


def solve(p, s: Sheet) -> None:
    weeks, H, m, o = (s.param(sym, name) for sym, name in
                      (("w", "weeks"), ("H", "hours_per_week"), ("m", "meetings"), ("o", "shadow_hours")))
    n, r, M, X = (s.param(sym, name) for sym, name in
                  (("n", "postmortems"), ("r", "hours_per_postmortem"), ("M", "map_hours"), ("X", "fix_hours")))

    F = s.step("focus_hours", "Focus hours in the month", "F", weeks * (H * (1 - m) - o), "h",
               "what is left of each week after meetings and the on-call shadow")
    reading = s.step("reading_hours", "Hours to read every postmortem", "R", n * r, "h",
                     "the record of how this system actually fails")
    planned = s.step("planned_hours", "Hours the plan needs", "P", reading + M + X, "h",
                     "reading, the map and the fix; the list of open questions is written along the way")
    readable = s.step("readable", "Postmortems you can read after the map and the fix", "n_max",
                      min_of(n, floor_of((F - M - X) / r)), "",
                      "whole postmortems in the hours the other two leave, and no more than the team has written")
    if s.value(readable) < 3:
        raise Reject("the month leaves almost no time to read")

    s.assume("A month is four working weeks; meetings, onboarding sessions and the on-call shadow come off "
             "the top, and the rest is focus time for the plan.")
    s.assume("Reading times include the dashboards, logs and fix pull requests each postmortem links; the map "
             "follows one real training job from submission to checkpoint (scheduler, nodes, network, storage).")
    no_meetings = p.weeks * (p.hours_per_week - p.shadow_hours) / s.value(F)
    s.slip("meetings not taken off the focus hours", no_meetings, on="focus_hours")
    readable_no_meetings = s.evaluate(min_of(n, floor_of((weeks * (H - o) - M - X) / r)))
    s.slip("meetings not taken off the focus hours", readable_no_meetings / s.value(readable), on="readable")
    fits = s.compare(planned, F) <= 0
    _month_choices(s, fits, planned, F, readable)
    _month_regime(s, planned, F, readable, n)

