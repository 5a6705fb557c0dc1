"""A first month on a training-infrastructure team: what last year's postmortems say to fix first."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import max_of

WATCHDOG, DRAIN = "step-counter watchdog", "drain after first crash"
NOTICING = "in total, the hangs waited longer to be noticed than all the failures spent restarting"
RESTARTS_LEAD = "restarts cost the job more than redoing the work since the last save"
REDOING = "redoing the work since the last save cost more than waiting to notice the hangs"
BOTH = "the two fixes together would win back more than half of what the failures cost"
NEAR_BELOW, NEAR_ABOVE = sympy.Rational(98, 100), sympy.Rational(102, 100)


def _holds(s: Sheet, a, b) -> bool | None:
    """Whether a exceeds b; None (the option is not listed) within 2% of b, where rounding would decide."""
    if s.compare(a, b * NEAR_BELOW) > 0 and s.compare(a, b * NEAR_ABOVE) < 0:
        return None
    return s.compare(a, b) > 0


def _findings(s: Sheet, noticing, restarting, redoing, both, half) -> None:
    """The week-2 draft's hypotheses, each held against last year's record."""
    more = _holds(s, noticing, restarting)
    s.judge("findings", NOTICING, more, f"the hangs waited {s.text(noticing)} in all to be noticed against "
            f"{s.text(restarting)} of restarts in all: " + ("noticing is where the job's time went" if more
                                                      else "restarts took as long as the waiting or longer"))
    # read12: this replaces 'the faulty nodes cost the job more than the hangs did', which set the opening's two
    # keys side by side. Which roadmap item leads, faster restarts or more frequent saves, is new.
    lead = _holds(s, restarting, redoing)
    s.judge("findings", RESTARTS_LEAD, lead, f"{s.text(restarting)} of restarts against {s.text(redoing)} of "
            "redone work" + (": faster restarts lead the roadmap, ahead of more frequent saves" if lead else
                             ": more frequent (or async) saves lead the roadmap, ahead of faster restarts"))
    redo = _holds(s, redoing, noticing)
    s.judge("findings", REDOING, redo, f"{s.text(redoing)} of redone work against {s.text(noticing)} of waiting"
            + (": saving more often is a roadmap item, not the month's fix" if redo else ""))
    wins = _holds(s, both, half)
    s.judge("findings", BOTH, wins, f"{s.text(both)} a year against half the cost, {s.text(half)}: "
            + ("the two small fixes are most of the roadmap's first page" if wins else
               "most of the loss is first crashes, restarts and redone work, which neither touches"))


def solve(p, s: Sheet) -> None:
    G, n_h, d, n_b = (s.param(sym, name) for sym, name in
                      (("G", "gpus"), ("n_h", "hangs"), ("d", "detect"), ("n_b", "bad_nodes")))
    r, t_r, T, w = (s.param(sym, name) for sym, name in
                    (("r", "repeats"), ("t_r", "restart"), ("T", "interval"), ("w", "watchdog")))

    crash = s.step("crash_time", "Job time one crash costs", "t_c", t_r + T / 2, "h",
                   "noticed at once: the restart, then the work since the last save, half an interval on average")
    hang = s.step("hang_time", "Job time one hang costs", "t_h", d + crash, "h",
                  "a hang first waits to be noticed, then costs what a crash does")
    hang_cost = s.step("hang_cost", "GPU-hours the hangs cost last year", "C_h", n_h * hang * G, "GPU-h",
                       "every GPU of the job idles while it is down")
    node_cost = s.step("node_cost", "GPU-hours the faulty nodes cost last year", "C_n", n_b * r * crash * G,
                       "GPU-h", "each faulty node crashed the job again and again until someone drained it")
    s.step("detect_share", "Share of a hang spent waiting to be noticed", "f_d", d / hang, "%",
           "from the job's side, most of a long hang is nobody looking")
    watchdog = s.step("save_watchdog", "GPU-hours a year the watchdog saves", "S_w", n_h * (d - w) * G, "GPU-h",
                      "it shortens only the wait to notice each hang")
    drain = s.step("save_drain", "GPU-hours a year draining after the first crash saves", "S_d",
                   n_b * (r - 1) * crash * G, "GPU-h", "it spares every crash after a node's first")
    if abs(s.value(watchdog) / s.value(drain) - 1) < 0.06:
        raise Reject("the two fixes save within 6% of each other: which ships would turn on rounding")
    saved = s.step("saved", "GPU-hours a year the fix saves", "S", max_of(watchdog, drain), "GPU-h",
                   "the larger of the two: the month has room for one small fix")
    failures = s.step("failures", "Failures last year", "N", n_h + n_b * r, "",
                      "every hang and every crash restarts the job")
    noticing = s.step("noticing", "Job time the hangs waited to be noticed", "t_n", n_h * d, "h",
                      "the part of each hang that only noticing sooner can shorten")
    restarting = s.step("restarting", "Job time every failure spent restarting", "t_R", failures * t_r, "h",
                        "one restart per failure, hang or crash")
    redoing = s.step("redoing", "Job time every failure spent redoing work since the last save", "t_W",
                     failures * T / 2, "h", "half an interval per failure: what more frequent saves would shrink")
    both = s.step("save_both", "GPU-hours a year the two fixes save together", "S_2", watchdog + drain, "GPU-h",
                  "they touch different failures, so their savings add")
    half = s.step("half_cost", "Half of what the failures cost last year", "C_half", (hang_cost + node_cost) / 2,
                  "GPU-h", "")
    _findings(s, noticing, restarting, redoing, both, half)
    s.regime_by(watchdog, drain, above=Side(
        WATCHDOG,
        f"Hangs noticed after {s.text(d)} on average waste more of the job than the faulty nodes' repeat crashes: "
        f"a watchdog paging within {s.text(w)} saves {s.text(watchdog)} a year against draining's {s.text(drain)}.",
        "With hangs noticed sooner (a team that already watches the step counter) or faulty nodes that crash "
        "the job more often before anyone drains them, draining after the first crash saves more."),
        below=Side(
        DRAIN,
        f"The faulty nodes' repeat crashes waste more of the job than the wait to notice hangs: draining after "
        f"the first crash saves {s.text(drain)} a year against the watchdog's {s.text(watchdog)}.",
        "With hangs that sit unnoticed for hours (overnight, no on-call) the watchdog saves "
        "more."))
    s.assume("Last year's record stands for next year's: the same failures at the same rate, on a job of the "
             "same size running all year.")
    s.assume("The record counts only the failures these fixes touch. A real job at this scale fails far more "
             "often (Llama 3: 419 unexpected interruptions in 54 days on 16,384 H100s, about 1,400 a year at "
             "8,192 GPUs), but most are crashes that the scheduler restarts on their own and whose node the "
             "health check drains at once; neither fix changes those.")
    s.assume("A hang on one rank (its data loader, a bad GPU) leaves every other rank waiting in the next "
             "collective, which hits the NCCL timeout (10 min by default in PyTorch, Megatron's "
             "--distributed-timeout-minutes) and crashes the job: that is a crash, not a hang. The hangs here stalled "
             "every rank at once outside any collective (a shared filesystem or object store that stops answering, "
             "a checkpoint write), where nothing times out until someone or something looks.")
    s.assume("Draining at the first crash needs the crash pinned on a node: the crash log's NCCL rank or XID "
             "error names it. A crash that names no node cannot be drained at once, and draining on a guess "
             "evicts healthy nodes.")
    s.assume("A crash is noticed at once (the job exits); a hang is noticed only when someone looks. Both "
             "redo the work since the last completed save, half an interval on average.")
    s.assume("The two fixes are the month's 'one small fix': each is days of work shipped through the team's "
             "review and deploy path. Larger changes (more frequent or async saves, faster restarts) belong in "
             "the roadmap the month ends with, built on what the record supports.")
    s.slip("the work since the last save left out", on=("hang_cost", "node_cost"),
           factor=s.evaluate(t_r / crash))
    ships = s.compare(watchdog, drain) > 0
    s.slip("every crash counted, not only those after the first", on="saved",
           factor=1 if ships else s.value(node_cost) / s.value(saved))
    s.slip("the watchdog's own time to page left out", on="saved", factor=s.evaluate(d / (d - w)) if ships else 1)
