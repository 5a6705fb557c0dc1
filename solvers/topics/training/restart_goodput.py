"""What restarts cost a training job, and the checkpoint interval."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import exp_of
from solvers.units import format_quantity

MAX_STALL_SHARE = 0.05  # a save that stalls more than 5% of training is a setup no team keeps


NEAR_OPTIMUM = sympy.Rational(11, 10)  # within 10% of Young's minimum, retuning the interval gains little


LEVER_SHARE = sympy.Rational(1, 5)  # a lever worth naming first wins back at least a fifth of the loss


TOO_CLOSE = 0.03  # the regime this near its line is refused: readings of the stall differ by more


# A lever this near a fifth of the loss is not listed: the half-cycle estimate of the redone work, which the keys
# accept, moves a lever's win by up to about 5% of the line (four draws in 400 flipped at 3%).
LEVER_TOO_CLOSE = 0.08


# The first-order redone work, half a cycle (τ + C)/2, is the interview answer; the keys take the exact mean and
# grade within 4%, so a draw where the two differ by more (an interval long against the MTBF) is refused.
FIRST_ORDER_WITHIN = sympy.Rational(4, 100)


ASYNC_TODAY = "asynchronous saves, keeping today's interval"
YOUNG = "today's synchronous saves at Young's interval"


def _saves_per_run(M, tau, C):
    """Saves a run completes on average: it outlasts k cycles of τ + C with probability e^(−k(τ+C)/M)."""
    return 1 / (exp_of((tau + C) / M) - 1)


def _lost_share(F, M, tau, N):
    """The share of wall clock lost to stalls and restarts: a run lasts M on average and completes N saves,
    each banking τ of work; each failure then costs F of recovery."""
    return 1 - tau * N / (M + F)


def _lever_losses(F, M, N, t_det, t_sch, tau, C_m, young=None) -> dict[str, sympy.Expr]:
    """The share each lever leaves lost, on the sheet's symbols or on their floats. The levers that keep
    today's interval and stall keep today's N, and Young's interval's is the f_best step (`young`; left out
    where not yet derived): only the two that move the cycle against the MTBF evaluate a new e^x."""
    saves_hot = 1 / ((1 + 1 / N) ** sympy.Rational(3, 4) - 1)  # M·4/3 in the exponent: e^(3x/4) = (e^x)^(3/4)
    losses = {
        "detection in seconds (a watchdog instead of the collective timeout)": _lost_share(F - t_det, M, tau, N),
        "booted hot spares that halve the rescheduling": _lost_share(F - t_sch / 2, M, tau, N),
        "a watchdog and booted hot spares together: detection and rescheduling in seconds":
            _lost_share(F - t_det - t_sch, M, tau, N),
        YOUNG: young,
        ASYNC_TODAY: _lost_share(F, M, tau, _saves_per_run(M, tau, C_m)),
        "a quarter fewer failures (burn-in, draining flaky nodes)": _lost_share(F, M * sympy.Rational(4, 3), tau,
                                                                                saves_hot),
    }
    return {option: loss for option, loss in losses.items() if loss is not None}


def _too_close(losses: dict[str, sympy.Expr], today: float) -> set[str]:
    """The levers a hair either side of a fifth of today's loss: their verdict turns on how the stall is read,
    not on judgement, so they are judged but not listed. Decided on floats (the verdict itself is exact)."""
    return {option for option, loss in losses.items()
            if abs((today - float(loss)) / (float(LEVER_SHARE) * today) - 1) < LEVER_TOO_CLOSE}


def _restart_levers(s: Sheet, losses: dict[str, sympy.Expr], f_today, f_res, close: set[str]) -> None:
    """Each lever's saving on today's loss, against a fifth of it: which ones matter follows from how
    this job's loss splits. A lever within 8% of the line (`close`) is not listed."""
    bar = format_quantity(s.evaluate(LEVER_SHARE * f_today), "%", 3)
    # Asynchronous saves pay mostly through the shorter interval they allow, which the residual answer grades.
    best = (f"; at their own best interval they would win {format_quantity(s.evaluate(f_today - f_res), '%', 3)}, "
            "the redone work shrinking with the interval")
    for option, loss in losses.items():
        win = f_today - loss
        why = (f"wins back {format_quantity(s.evaluate(win), '%', 3)} of training time against a fifth of "
               f"today's loss, {bar}")
        if option in close:
            s.judge("levers", option, None, why + f": within {LEVER_TOO_CLOSE:.0%} of the line, too close to call "
                    "(not listed)")
            continue
        s.judge("levers", option, s.compare(win, LEVER_SHARE * f_today) >= 0,
                why + (best if option == ASYNC_TODAY else ""))
    if len({holds for holds in s.judged("levers").values() if holds is not None}) == 1:
        raise Reject("every lever clears a fifth of the loss, or none does: nothing to choose between")


def _restart_regime(s: Sheet, f_int, f_fix, f_ckpt, f_redo, f_best, tau, tau_s) -> None:
    """Interval-bound when the interval's two losses (stalls and redone work) outweigh the fixed
    recovery paid per failure; which way to move the interval follows from the larger of the two."""
    interval, fixed, stalls, redone, best = (s.text(x, 3)
                                             for x in (f_int, f_fix, f_ckpt, f_redo, f_best))
    storage = s.text(tau_s)
    parts = f"{interval} of training time ({stalls} in save stalls, {redone} in redone work)"
    if s.compare(f_int, NEAR_OPTIMUM * f_best) <= 0:
        move = (f"Today's interval is already near Young's {storage}, where this part bottoms out at {best}: "
                "retuning it gains little, and only a cheaper save cuts it.")
    elif s.compare(tau, tau_s) < 0:
        move = (f"The stalls are the larger part: checkpoint less often, toward Young's {storage}, or make each "
                "save cheaper.")
    else:
        move = (f"The redone work is the larger part: checkpoint more often, toward Young's {storage}; a "
                "cheaper save lets the interval shrink further.")
    s.regime_by(f_int, f_fix, tie="below", above=Side(
        "interval-bound",
        f"Today the checkpoint interval costs {parts}, more than the {fixed} that fixed recovery costs, "
        f"paid per failure: the interval sets most of the loss. {move}",
        f"With the interval's part below {fixed} the loss would be failure-bound. With synchronous saves "
        f"that part falls at best to {best} (at Young's interval), and only a cheaper save takes it lower; "
        "past that, faster detection, hot spares, faster reload and fewer failures are the levers.",
        near=f"The checkpoint interval costs {parts}, only a little more than the {fixed} of fixed recovery: "
             f"both halves matter, and fixing the interval alone leaves the loss failure-bound. {move}"),
        below=Side(
        "failure-bound",
        f"Today the checkpoint interval costs {parts}, less than the {fixed} that fixed recovery costs, paid "
        "per failure: the failures set the loss. Retuning the interval moves only the smaller part; the "
        "levers are faster detection, hot spares, faster reload, and above all fewer failures.",
        f"An interval far from Young's {storage} (much shorter: stalls; much longer: redone work) would push "
        f"the interval's part above {fixed}, and the interval would become the lever.",
        near=f"The checkpoint interval costs {parts}, a little less than the {fixed} of fixed recovery: the "
             "failures set slightly more of the loss, but a worse interval would tip it; both kinds of lever "
             "count here."))


def solve(p, s: Sheet) -> None:
    if p.ckpt_storage / p.interval > MAX_STALL_SHARE:
        raise Reject("the checkpoint stalls take more than 5% of training time")
    R = s.param("R", "restarts")
    t_det = s.param("t_det", "detect")
    t_sch = s.param("t_sch", "reschedule")
    t_rel = s.param("t_rel", "reload")
    tau = s.param("tau", "interval")
    C_s = s.param("C_s", "ckpt_storage")
    C_m = s.param("C_m", "ckpt_memory")

    M = s.step("mtbf", "Mean running time between failures", "M", 1 / R, "h",
               "failures arrive at random while the job runs, so the mean run between them is the rate's inverse")
    F = s.step("fixed_recovery", "Fixed recovery per restart", "F", t_det + t_sch + t_rel, "min",
               "detect, reschedule and reload cost the same whenever the failure strikes")
    N = s.step("saves_per_run", "Saves completed per run (average)", "N", _saves_per_run(M, tau, C_s), "",
               "a run outlasts k cycles of τ + C with probability e^(−k(τ+C)/M); summed over k")
    W = s.step("rewound", "Rewound work per restart (average)", "W", M - N * (tau + C_s), "min",
               "the run past its last completed save (a save cut short banks nothing): close to (τ + C)/2, a "
               "little less because a failure is likelier early in a cycle")
    L = s.step("lost_per_restart", "Time lost per restart", "L", F + W, "min", "fixed recovery plus rewound work")
    if s.compare(F + (tau + C_s) / 2, (1 + FIRST_ORDER_WITHIN) * L) > 0:
        # Half a cycle is the answer a strong candidate gives; where it misses the exact mean by more than the
        # keys' tolerance, the interval is long against the MTBF and the draw is refused.
        raise Reject("half a cycle of redone work is more than 4% off the exact mean: the interval is too long "
                     "against the MTBF")
    f_restart = s.step("restart_loss", "Share of wall-clock time lost to restarts", "f_restart", L / (M + F), "%",
                       "each failure's loss over its wall clock, the run plus the recovery")
    f_ckpt = s.step("ckpt_overhead", "Share lost to save stalls today", "f_ckpt", N * C_s / (M + F), "%",
                    "one stall per completed save: the price of the interval that bounds the rewound work")
    f_today = s.step("today_loss", "Share lost today to stalls and restarts together", "f_today", f_ckpt + f_restart,
                     "%", "the two losses add: stalls on every save, restarts on every failure")
    f_redo = s.step("redo_loss", "Share lost to redone work today", "f_redo", W / (M + F), "%",
                    "the part of the restart loss the interval sets")
    f_int = s.step("interval_loss", "Share the checkpoint interval sets today", "f_int", f_ckpt + f_redo, "%",
                   "stalls plus redone work: the two losses the interval trades against each other")
    f_fix = s.step("failure_floor", "Share paid per failure whatever the interval", "f_fix", F / (M + F), "%",
                   "the fixed recovery alone: no checkpoint setting removes it")
    if abs(s.value(f_int) / s.value(f_fix) - 1) < TOO_CLOSE:  # refused before the costly square roots and e^x
        raise Reject("the interval's part and fixed recovery are within 3% of each other")
    levers = (F, M, N, t_det, t_sch, tau, C_m)
    close = _too_close(_lever_losses(*(s.value(x) for x in levers)), s.value(f_today))
    tau_s = s.step("young_storage", "Optimal interval, synchronous saves (Young)", "tau_s", sympy.sqrt(2 * C_s * M),
                   "min", "minimises C/τ + τ/(2M): stalls fall as 1/τ, rewound work grows with τ, and they "
                   "balance at √(2·C·M)")
    f_best = s.step("interval_loss_best", "Interval's share at the synchronous optimum", "f_best",
                    _lost_share(F, M, tau_s, _saves_per_run(M, tau_s, C_s)) - f_fix, "%",
                    "the least the interval can cost with today's saves, about √(2·C/M): stalls and redone work equal")
    close |= _too_close({YOUNG: s.value(f_best) + s.value(f_fix)}, s.value(f_today))
    tau_m = s.step("young_memory", "Optimal interval, asynchronous saves (Young)", "tau_m",
                   sympy.sqrt(2 * C_m * M), "min",
                   "the same balance with the smaller stall: the interval shrinks as √C")
    f_res = s.step("residual", "Share still lost with asynchronous saves at their optimum", "f_residual",
                   _lost_share(F, M, tau_m, _saves_per_run(M, tau_m, C_m)), "%",
                   "stalls plus restarts at the new interval: the interval's part nearly vanishes, the fixed "
                   "recovery stays")
    _restart_levers(s, _lever_losses(*levers, young=f_best + f_fix), f_today, f_res, close)

    s.assume("Failures are independent and memoryless (a Poisson process at the stated rate of running time: "
             "none strike during a recovery), and each restart resumes from the last completed save, so the "
             "work lost is the run past it, close to half a cycle of τ + C.")
    s.assume("The redone work is taken at its exact mean for memoryless failures, a little under half a cycle "
             "(a failure is likelier early in a cycle); the keys accept the first-order half cycle, F + (τ + C)/2 "
             "a restart, which no draw puts more than 4% off.")
    s.assume("Young's first-order optimum τ = √(2·C·M) (Young 1974), valid while the stall C is far shorter than "
             "the MTBF M; Daly's higher-order correction changes little at these ratios.")
    s.assume("An asynchronous save (a snapshot to host memory, copied on to a peer's host memory in the "
             "background: Gemini, PyTorch DCP async_save, NVIDIA's resiliency extension) cuts only the stall; "
             "detection, rescheduling and reload are kept as stated, although restoring from a peer's memory "
             "also shortens the reload in practice.")
    s.assume("The background copy finishes well inside the asynchronous interval: a GPU's shard, a gigabyte or "
             "two, crosses a ~50 GB/s NIC to the peer in well under a second, against intervals of half a minute "
             "or more. Written to shared storage instead, a checkpoint takes minutes and would set a floor under "
             "the interval; storage still gets a copy now and then, for failures that take the peer too.")
    s.slip("the whole interval rewound, not half of it", on=("lost_per_restart", "restart_loss"),
           factor=s.evaluate(F + tau) / s.value(L))
    s.slip("the whole interval rewound, not half of it", on="today_loss",
           factor=s.evaluate(f_ckpt + (F + tau) / (M + F)) / s.value(f_today))
    s.slip("R·(F + τ/2): recovery left off the wall clock, the stall off the rewound cycle", on="restart_loss",
           factor=s.evaluate(R * (F + tau / 2)) / s.value(f_restart))
    s.slip("Young's interval without the factor 2", 1 / 2**0.5, on=("young_storage", "young_memory"))

    _restart_regime(s, f_int, f_fix, f_ckpt, f_redo, f_best, tau, tau_s)

