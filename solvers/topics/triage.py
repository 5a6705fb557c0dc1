"""Triage and planning questions: a loss that went flat, and a first month on an infra team."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Reject, Sheet, Side, floor_of, min_of
from solvers.units import format_number, format_quantity

# --- loss-plateau-triage ---------------------------------------------------------------------

# The checks in the order a strong answer runs them: from whether the run does anything at all to the
# causes particular to its setup. A frozen step counter voids every other reading (and is a job problem,
# not a training one); then whether the updates have any size (LR, grad norm); then whether the data
# are new; then fp16's loss scaler; last one rank of the split. The first check that fails is the cause.
CHECKS = ("is the step counter moving", "learning rate and grad norm", "data repetition (epochs seen)",
          "loss scale history", "per-rank gradient norms")
CAUSE_OF_CHECK = dict(zip(CHECKS, ("job-not-stepping", "lr-or-grad-zero", "data-repeating", "loss-scale-collapsed",
                                   "rank-sending-zeros")))
ACT_BEFORE_READING = "a restart from the last checkpoint to see if it clears"  # acting before diagnosing
VANISHED_GRAD_NORM = 1e-4  # healthy global grad norms in LLM pretraining sit around 0.1-1


def _lr_at(s: Sheet, k: sympy.Symbol, eta, W, T, rho) -> sympy.Symbol:
    """The schedule's LR at step k: linear warmup, cosine decay to rho·peak at T, then flat."""
    step = s.value(k)
    if step < s.value(W):
        expr, why = eta * k / W, "still in the linear warmup"
    elif step <= s.value(T):
        expr = rho * eta + (1 - rho) * eta * (1 + sympy.cos(sympy.pi * (k - W) / (T - W))) / 2
        why = "cosine from the peak at the end of warmup to the floor at the decay step"
    else:
        expr, why = rho * eta, "past the configured decay steps the schedule holds its floor"
    return s.step("lr_plateau", "LR at the plateau step", "eta_1", expr, "", why)


NEAR_FLOOR = 0.1  # an LR above its floor but under a tenth of the peak reads as the floor


def _lr_share_why(share: float) -> str:
    if share <= 0.0101:
        return "at the floor: every update is a hundredth of the peak's, too small to move the loss"
    if share < 0.1:
        return "near the floor: the updates are small, and the loss moves slowly by design"
    return "far from the floor: the schedule alone does not explain a flat loss"


def loss_plateau_triage(p, s: Sheet) -> None:
    eta = s.param("eta", "peak_lr")
    W = s.param("W", "warmup")
    T = s.param("T", "decay_steps")
    rho = s.param("rho", "lr_floor")
    B = s.param("B", "batch")
    L = s.param("L", "seq_len")
    D = s.param("D", "dataset")
    S0 = s.given("S_0", 2 ** p.scale_power, "", "initial loss scale")
    S11 = s.param("S_11", "scale_1100")
    s1 = s.param("s_1", "step_0900")
    s2 = s.param("s_2", "step_1100")

    s.step("advance", "Steps taken between the two readings", "ds", s2 - s1, "steps",
           "a healthy run advances hundreds of steps in two hours")
    lr = _lr_at(s, s1, eta, W, T, rho)
    share = s.evaluate(lr / eta)
    if s.compare(lr, rho * eta) > 0 and share < NEAR_FLOOR:
        # A reading of 1.02% of peak beside a floor of 1% cannot be told from the floor: the LR check
        # would turn on a rounding, not on the triage.
        raise Reject("the LR sits just above its floor: its check reads either way")
    s.step("lr_share", "LR at the plateau against the peak", "r_lr", lr / eta, "%", _lr_share_why(share))
    epochs = s.step("epochs", "Epochs of data seen by 11:00", "E", s2 * B * L / D, "",
                    "tokens consumed over unique tokens; above 1 the run is re-reading its data")
    s.step("halvings", "Fewest overflows from the initial scale to the 11:00 one", "n_h",
           sympy.log(S0 / S11, 2), "", "each overflow halves the scale and skips its step; regrowth only adds "
           "overflows, so the skipped-steps counter must be at least this")

    ranks = list(p.rank_norms)
    fired = [check for check, firing in zip(CHECKS, (
        p.step_1100 == p.step_0900,
        s.compare(lr, rho * eta) <= 0 or p.grad_norm < VANISHED_GRAD_NORM,
        s.compare(epochs, 1) > 0,
        p.scale_1100 <= 1,
        min(ranks) == 0,
    )) if firing]
    if len(fired) != 1:
        raise Reject(f"the incident points to {len(fired)} causes, expected one")
    cause = CAUSE_OF_CHECK[fired[0]]
    s.choose("cause", cause)
    # A flat loss with a frozen step counter is no training pathology: the job has stopped stepping.
    s.choose("kind", "job-not-training" if cause == "job-not-stepping" else "training-problem")
    _checks_run(s, CHECKS.index(fired[0]))

    s.assume("The schedule is Megatron-style (the lr-schedule card): linear warmup to the peak, cosine decay to "
             "the floor at the configured decay step (warmup included), then flat at the floor. The floor of 1% "
             "of the peak is Llama 3 405B's (8e-5 decaying to 8e-7).")
    s.assume("The run was planned as a single pass over its data, so more than one epoch means the loader "
             "re-reads data it has seen. Every step consumes the full global batch.")
    s.assume("fp16 dynamic loss scaling (the loss-scaling card) halves the scale on each overflowing step and "
             "skips that step's update; at the floor of 1 it can fall no further and every step is wasted. A "
             "bf16 run would need no scaler: this cause belongs to legacy fp16 recipes (V100-era fleets). A "
             "skipped step logs no grad norm, so the norms shown are those of the last step that updated.")
    s.assume("Each rank's gradient norm covers the weight gradients of its own slice of the layers, so a rank "
             "at exactly zero is a slice whose weights get no gradient (left frozen after a reload, or its "
             "gradient buffers zeroed before the step) while it still passes gradients back to the stages "
             "before it, which stay healthy.")
    s.slip("epochs from sequences, not tokens", 1 / p.seq_len, on="epochs")
    _lr_slips(p, s, p.step_0900, s.value(lr))


def _checks_run(s: Sheet, found: int) -> None:
    """The checks run in order up to the first that fails, which names the cause."""
    for index, check in enumerate(CHECKS):
        why = ("clean: on to the next check" if index < found else
               "fails: it names the cause, and triage stops here" if index == found else
               "never reached: an earlier check already found the cause")
        # The first check runs in every triage, a frozen counter voiding every other reading: a fact.
        s.judge("checks", check, index <= found, why, fact=index == 0)
    s.judge("checks", ACT_BEFORE_READING, False,
            "acting before reading the log throws away the evidence and can repeat the stall", fact=True)


def _lr_slips(p, s: Sheet, step: int, lr: float) -> None:
    """Two classic ways to misread the cosine part of the schedule."""
    if not p.warmup <= step <= p.decay_steps:
        return
    peak, floor = p.peak_lr, p.lr_floor * p.peak_lr
    linear = floor + (peak - floor) * (1 - (step - p.warmup) / (p.decay_steps - p.warmup))
    no_warmup = floor + (peak - floor) * (1 + math.cos(math.pi * step / p.decay_steps)) / 2
    s.slip("linear decay instead of cosine", linear / lr, on="lr_plateau")
    s.slip("cosine counted from step 0, ignoring the warmup", no_warmup / lr, on="lr_plateau")


# --- first-month-plan ------------------------------------------------------------------------

# The plan that lands, whatever the numbers, and the one that fails: facts of the month. The map and the
# fix are budgeted in the prompt itself, and the week-one flaky fix is the roadmap's mistake again, so the
# select keeps one of each beside the reading, which the hours decide.
MONTH_ALWAYS = ("end the month with a written list of questions nobody on the team could answer",)
MONTH_NEVER = ("hand your manager a roadmap of larger changes at the end of week 2",)
READ_ALL = "read every postmortem the team has written, with its dashboards and fixes"
READ_SOME = "read the most recent and the most severe postmortems, and stop when the hours run out"


def first_month_plan(p, s: Sheet) -> None:
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


def _month_choices(s: Sheet, fits: bool, planned, F, readable) -> None:
    need, have = format_quantity(s.value(planned), "h"), format_quantity(s.value(F), "h")
    budget = f"the plan needs {need} of {have} of focus time"
    s.judge("month", READ_ALL, fits, f"{budget}: " + ("every postmortem fits beside the map and the fix" if fits
            else f"only {format_number(s.value(readable))} fit beside the map and the fix"))
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
    need, have = format_quantity(s.value(planned), "h"), format_quantity(s.value(F), "h")
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
        f"{format_number(s.value(n))} postmortems does not fit beside the map and the fix.",
        f"Read about {format_number(s.value(readable))} of them, the most recent and the most severe "
        "first, and keep the map and the fix: they are what the month is for. With fewer meetings or "
        "postmortems the whole plan fits."))
