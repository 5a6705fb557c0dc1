"""Fleet questions: what restarts cost a training job, how many GPUs a run needs, what network
bandwidth each GPU needs, and the bill of materials of a training cluster."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, ceil_of, log_of
from solvers.topics.common import dtype_bytes, hbm_bytes, model_params, peak_flops
from solvers.units import format_number, format_quantity

FLOPS_PER_PARAM_TOKEN = 6  # 2 forward + 4 backward (gradients of the input and of the weight)
BACKWARD_SHARE = sympy.Rational(2, 3)  # the backward pass's 4 of those 6 FLOPs
ADAM_STATE_BYTES = 16  # bf16 weights and grads, fp32 master weights and two moments (ZeRO)
MIN_FLEET_GPUS = 64  # below eight nodes the question is not about a fleet
MAX_FLEET_GPUS = 100_000  # about the largest single training clusters built so far
MAX_STALL_SHARE = 0.05  # a save that stalls more than 5% of training is a setup no team keeps
NEAR_OPTIMUM = 1.1  # within 10% of Young's minimum, retuning the interval gains little


# --- restart-goodput -------------------------------------------------------------------------


def restart_goodput(p, s: Sheet) -> None:
    if p.ckpt_storage / p.interval > MAX_STALL_SHARE:
        raise Reject("the checkpoint stalls take more than 5% of training time")
    R = s.param("R", "restarts")
    t_det = s.param("t_det", "detect")
    t_sch = s.param("t_sch", "reschedule")
    t_rel = s.param("t_rel", "reload")
    tau = s.param("tau", "interval")
    C_s = s.param("C_s", "ckpt_storage")
    C_m = s.param("C_m", "ckpt_memory")

    M = s.step("mtbf", "Mean time between failures of the job", "M", 1 / R, "h",
               "failures arrive at random at the job's rate, so the mean gap is its inverse")
    F = s.step("fixed_recovery", "Fixed recovery per restart", "F", t_det + t_sch + t_rel, "min",
               "detect, reschedule and reload cost the same whenever the failure strikes")
    W = s.step("rewound", "Rewound work per restart (average)", "W", tau / 2, "min",
               "a failure lands anywhere in the interval, on average halfway: that work since the last "
               "checkpoint is redone")
    L = s.step("lost_per_restart", "Time lost per restart", "L", F + W, "min", "fixed recovery plus rewound work")
    f_restart = s.step("restart_loss", "Share of training time lost to restarts", "f_restart", R * L, "%",
                       "restarts per day times the minutes each costs, over the minutes of a day")
    f_ckpt = s.step("ckpt_overhead", "Share lost to save stalls today", "f_ckpt", C_s / tau, "%",
                    "one stall per interval: the price of the interval that bounds the rewound work")
    f_today = s.step("today_loss", "Share lost today to stalls and restarts together", "f_today", f_ckpt + f_restart,
                     "%", "the two losses add: stalls on every save, restarts on every failure")
    f_redo = s.step("redo_loss", "Share lost to redone work today", "f_redo", R * W, "%",
                    "the part of the restart loss the interval sets")
    f_int = s.step("interval_loss", "Share the checkpoint interval sets today", "f_int", f_ckpt + f_redo, "%",
                   "stalls plus redone work: the two losses the interval trades against each other")
    f_fix = s.step("failure_floor", "Share paid per failure whatever the interval", "f_fix", R * F, "%",
                   "the fixed recovery alone: no checkpoint setting removes it")
    tau_s = s.step("young_storage", "Optimal interval, synchronous saves (Young)", "tau_s", sympy.sqrt(2 * C_s * M),
                   "min", "minimises C/τ + τ/(2M): stalls fall as 1/τ, rewound work grows with τ, and they "
                   "balance at √(2·C·M)")
    f_best = s.step("interval_loss_best", "Interval's share at the synchronous optimum", "f_best",
                    C_s / tau_s + tau_s / (2 * M), "%",
                    "the least the interval can cost with today's saves: √(2·C/M), stalls and redone work equal")
    tau_m = s.step("young_memory", "Optimal interval, asynchronous saves (Young)", "tau_m",
                   sympy.sqrt(2 * C_m * M), "min",
                   "the same balance with the smaller stall: the interval shrinks as √C")
    f_res = s.step("residual", "Share still lost with asynchronous saves at their optimum", "f_residual",
                   C_m / tau_m + R * (F + tau_m / 2), "%",
                   "stalls plus restarts at the new interval: the interval's part nearly vanishes, the fixed "
                   "recovery stays")
    _restart_levers(s, R, t_det, t_sch, L, f_today, f_int, f_best, f_res, C_s, C_m, tau)

    s.assume("Failures are independent and memoryless (a Poisson process at the stated rate), so a failure "
             "falls on average halfway through a checkpoint interval.")
    s.assume("Young's first-order optimum τ = √(2·C·M) (Young 1974), valid while the stall C is far shorter than "
             "the MTBF M; Daly's higher-order correction changes little at these ratios.")
    s.assume("An asynchronous save (a snapshot to host memory, then written to storage or copied to peers in the "
             "background: PyTorch DCP async_save, Gemini, NVIDIA's resiliency extension) cuts only the stall; "
             "detection, rescheduling and reload are kept as stated, although restoring from a peer's memory "
             "also shortens the reload in practice.")
    s.slip("the whole interval rewound, not half of it", on=("lost_per_restart", "restart_loss"),
           factor=s.evaluate(F + tau) / s.value(L))
    s.slip("the whole interval rewound, not half of it", on="today_loss",
           factor=s.evaluate(f_ckpt + R * (F + tau)) / s.evaluate(f_ckpt + f_restart))
    s.slip("Young's interval without the factor 2", 1 / 2**0.5, on=("young_storage", "young_memory"))

    _restart_regime(s, f_int, f_fix, f_ckpt, f_redo, f_best, tau, tau_s, tau_m)


LEVER_SHARE = sympy.Rational(1, 5)  # a lever worth naming first wins back at least a fifth of the loss
TOO_CLOSE = 0.03  # a lever or the regime this near its line is refused: readings of the stall differ by more


ASYNC_TODAY = "asynchronous saves, keeping today's interval"


def _restart_levers(s: Sheet, R, t_det, t_sch, L, f_today, f_int, f_best, f_res, C_s, C_m, tau) -> None:
    """Each lever's saving on today's loss, against a fifth of it: which ones matter follows from how
    this job's loss splits."""
    wins = {
        "detection in seconds (a watchdog instead of the collective timeout)": R * t_det,
        "booted hot spares that halve the rescheduling": R * t_sch / 2,
        "a watchdog and booted hot spares together: detection and rescheduling in seconds": R * (t_det + t_sch),
        "today's synchronous saves at Young's interval": f_int - f_best,
        ASYNC_TODAY: (C_s - C_m) / tau,
        "a quarter fewer failures (burn-in, draining flaky nodes)": R * L / 4,
    }
    bar = format_quantity(s.evaluate(LEVER_SHARE * f_today), "%", 3)
    close = [o for o, win in wins.items() if abs(s.evaluate(win / (LEVER_SHARE * f_today)) - 1) < TOO_CLOSE]
    if close:  # a lever a hair either side of the bar turns on how the stall is read, not on judgement
        raise Reject(f"'{close[0]}' sits within {TOO_CLOSE:.0%} of a fifth of the loss")
    # Asynchronous saves pay mostly through the shorter interval they allow, which the residual answer grades.
    best = (f"; at their own best interval they would win {format_quantity(s.evaluate(f_today - f_res), '%', 3)}, "
            "the redone work shrinking with the interval")
    for option, win in wins.items():
        s.judge("levers", option, s.compare(win, LEVER_SHARE * f_today) >= 0,
                f"wins back {format_quantity(s.evaluate(win), '%', 3)} of training time against a fifth of "
                f"today's loss, {bar}" + (best if option == ASYNC_TODAY else ""))
    if len(set(s.judged("levers").values())) == 1:
        raise Reject("every lever clears a fifth of the loss, or none does: nothing to choose between")


def _restart_regime(s: Sheet, f_int, f_fix, f_ckpt, f_redo, f_best, tau, tau_s, tau_m) -> None:
    """Interval-bound when the interval's two losses (stalls and redone work) outweigh the fixed
    recovery paid per failure; which way to move the interval follows from the larger of the two."""
    interval, fixed, stalls, redone, best = (format_quantity(s.value(x), "%", 3)
                                             for x in (f_int, f_fix, f_ckpt, f_redo, f_best))
    storage, short = (format_quantity(s.value(x), "min") for x in (tau_s, tau_m))
    parts = f"{interval} of training time ({stalls} in save stalls, {redone} in redone work)"
    if s.value(f_int) <= NEAR_OPTIMUM * s.value(f_best):
        move = (f"Today's interval is already near Young's {storage}, where this part bottoms out at {best}: "
                f"retuning it gains little, and only a cheaper save (asynchronous, best every {short}) cuts it.")
    elif s.value(tau) < s.value(tau_s):
        move = (f"The stalls are the larger part: checkpoint less often, toward Young's {storage}, or make each "
                "save cheaper.")
    else:
        move = (f"The redone work is the larger part: checkpoint more often, toward Young's {storage}; a "
                f"cheaper asynchronous save lets the interval shrink to {short}.")
    if abs(s.value(f_int) / s.value(f_fix) - 1) < TOO_CLOSE:
        raise Reject("the interval's part and fixed recovery are within 3% of each other")
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


# --- spares: shared by fleet-gpu-count and cluster-bill-of-materials ---------------------------

SPARE_SIGMAS = 2  # the pool covers the mean nodes down plus two standard deviations (Poisson: √mean)


def spare_pool(s: Sheet, n_job, M_n, T_r) -> tuple[sympy.Symbol, sympy.Symbol]:
    """(nodes down at once by Little's law, the spare pool that covers them: the mean plus two
    standard deviations of a Poisson count)."""
    down = s.step("nodes_down", "Nodes down at any moment (average)", "n_down", n_job * T_r / M_n, "nodes",
                  "Little's law: failures arrive at n_job/M per day and each stays out T_rep days")
    return down, s.step("spare_pool", "Spare pool", "n_spare", ceil_of(down + SPARE_SIGMAS * sympy.sqrt(down)),
                        "nodes", "the mean nodes down plus two standard deviations (a Poisson count's is √mean): the "
                        "job rarely waits for a repair")


# --- fleet-gpu-count -------------------------------------------------------------------------

SCHEDULE_MISS = sympy.Rational(11, 10)  # a tenth over the schedule is a slip one can negotiate
MFU_SHORTFALL = sympy.Rational(9, 10)  # an MFU a tenth below plan is a common first-month surprise
POWER_OF_TWO_WASTE = sympy.Rational(5, 4)  # a round-up past a quarter of the need is worth arguing


def _job_size(s: Sheet, need: sympy.Symbol, rule: str) -> tuple[sympy.Expr, sympy.Expr, str]:
    """(job size, the next smaller size under the rule, the rule in words): the smallest size the
    lab's rule allows that covers the need."""
    if rule == "next-power-of-two":
        job = 2 ** ceil_of(log_of(need, 2))
        return job, job / 2, "next-power-of-two"
    U = s.param("U", "pod") if rule == "whole-pods" else s.param("U", "block")
    job = U * ceil_of(need / U)
    return job, job - U, rule


def _training_run(p, s: Sheet) -> tuple[sympy.Symbol, ...]:
    """The run a fleet is sized for: its 6·N·D (training-compute-budget's result), the days of
    compute, the GPU's dense peak and the MFU."""
    F = s.prerequisite("training-compute-budget", "F", FLOPS_PER_PARAM_TOKEN * model_params(p.model) * p.tokens,
                       "FLOP", f"training FLOPs, 6·N·D for {p.model.name} on the run's tokens")
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    return F, s.param("T", "days"), P, s.param("MFU", "mfu")


def fleet_gpu_count(p, s: Sheet) -> None:
    flops = FLOPS_PER_PARAM_TOKEN * model_params(p.model) * p.tokens
    if p.rule == "whole-pods" and flops / (p.days * peak_flops(p.gpu, "bf16") * p.mfu) < p.pod:
        raise Reject("a job smaller than one pod is not rounded to pods")
    F, T, P, u = _training_run(p, s)
    m = s.param("m", "margin")
    g = s.param("g", "gpus_per_node")

    X = s.step("per_gpu_rate", "Sustained FLOP/s per GPU", "X", P * u, "TFLOP/s", "dense peak times MFU")
    need = s.step("gpus_needed", "GPUs the arithmetic calls for", "G", F / (T * X), "GPUs",
                  "the fleet equation F = G·T·P·MFU solved for G")
    if s.value(need) < MIN_FLEET_GPUS:
        raise Reject("a few nodes, not a fleet")
    job_expr, smaller_expr, words = _job_size(s, need, p.rule)
    unit_why = {"next-power-of-two": "the lab's rule: every parallel degree a power of two, so the job is one too",
                "whole-pods": "the lab's rule: the job takes whole non-blocking pods, so no ring crosses the "
                              "oversubscribed core more than it must",
                "whole-scheduler-units": "the lab's rule: the scheduler hands out whole 32-node scalable units"}[p.rule]
    job = s.step("job_gpus", f"Job size by the lab's rule ({words})", "G_job", job_expr, "GPUs", unit_why)
    s.step("job_days", "Compute days on that job", "T_job", F / (job * X), "days",
           "more GPUs than the need finish early: slack for restarts and an MFU below plan")
    fleet = s.step("fleet_gpus", "GPUs to buy, margin included, in whole nodes", "G_fleet",
                   g * ceil_of(job * (1 + m) / g), "GPUs",
                   "hot spares to swap in after failures, nodes in repair and burn-in, and room for evals and "
                   "debugging beside the main job")
    if s.value(fleet) > MAX_FLEET_GPUS:
        raise Reject("a fleet larger than any single cluster built so far")
    rounding = s.step("round_up", "GPUs the rounding adds", "G_round", job - need, "GPUs",
                      "what the job-size rule costs over the arithmetic")
    spare = s.step("margin_gpus", "GPUs the margin adds", "G_margin", fleet - job, "GPUs",
                   "what the fleet carries beside the job")
    pod = s.param("E_pod", "pod") if p.rule != "whole-pods" else s.param("U", "pod")
    _fleet_judgements(s, need, job, smaller_expr, pod, p.rule)
    _margin_judgements(s, need, job, spare, g)

    s.assume("Model FLOPs are 6·N·D (the conventions card's flops-per-token; Kaplan et al. 2020), taken from "
             "training-compute-budget; MFU as stated for the whole run, against the dense bf16 datasheet peak "
             "(dense-peaks; Llama 3 405B: 38-43%).")
    s.assume("The job-size rule is the lab's and is given: a power of two is a convenience (parallel degrees and "
             "collectives that split evenly), not a law. DP need only divide the global batch and PP stages need "
             "not be 2^k (Llama 3 405B: 126 layers; its 16K-GPU job is 2^14, its 24K clusters are not).")
    s.assume("The schedule is compute time. Each node failure stops the whole job for the stated cost "
             "(detection, rescheduling, reload, rewound work: restart-goodput prices them), paid out of the "
             "slack the round-up leaves; a spare node swaps in, so the job keeps its size. Checkpoint stalls "
             "and slow nodes are left out.")
    s.assume("Node failures arrive at random, one per node MTBF per node (Llama 3 405B: 466 interruptions in 54 "
             "days on 2,048 nodes, one per ~240 node-days); a failed node is out for the repair time. The spare "
             "pool covers the mean nodes out plus two standard deviations of a Poisson count.")
    s.slip("x1/3: 2·N·D counts the forward pass only", 1 / 3, on="gpus_needed")
    s.slip("MFU left out: the GPUs at datasheet peak", p.mfu, on="gpus_needed")
    s.slip("margin added to the need instead of the job", on="fleet_gpus",
           factor=s.evaluate(g * ceil_of(need * (1 + m) / g)) / s.value(fleet))
    if p.rule != "next-power-of-two":
        s.slip("rounded to a power of two against the lab's rule", on="job_gpus",
               factor=s.evaluate(2 ** ceil_of(log_of(need, 2))) / s.value(job))

    extra, margin_text = (format_number(s.value(x)) for x in (rounding, spare))
    s.regime_by(rounding, spare, tie="below", above=Side(
        "rounding-dominates",
        f"The {words} rule adds {extra} GPUs to the need, more than the {margin_text} of margin: the layout "
        "rule, not the spares, is the larger overhead.",
        "Where the need sits just under a job size (or the rule is finer: whole scheduler units), the round-up "
        "shrinks below the margin and the spares become the main overhead.",
        near=f"The {words} rule adds {extra} GPUs, about as many as the {margin_text} of margin: a small change "
             "in the need moves which overhead is larger."),
        below=Side(
        "margin-dominates",
        f"The {words} rule adds only {extra} GPUs to the need, fewer than the {margin_text} of margin: the "
        "spares are the larger overhead, and the job finishes close to the schedule.",
        "A coarser rule (a power of two, whole large pods) or a need just past a job size would make the round-up "
        "the larger overhead: then a longer schedule or fewer tokens can bring the need under a smaller job.",
        near=f"The {words} rule adds {extra} GPUs, about as many as the {margin_text} of margin: a small change "
             "in the need moves which overhead is larger."))


MAX_RESTART_LOSS = sympy.Rational(1, 2)  # a run that would lose half its time to restarts fixes recovery first
RESTART_BAR = sympy.Rational(1, 20)  # restarts past a twentieth of the time are a line item of their own
FAILURES_PER_DAY = sympy.Rational(6, 86_400)  # six a day (per second): recovery on someone's pager every shift
KNIFE_EDGE = 0.005  # a judgement within half a percent of its bar turns on rounding, not on the plan


def _margin_judgements(s: Sheet, need, job, spare, g) -> None:
    """What the margin and the round-up's slack must carry: the spare nodes that stand in for nodes in
    repair, and the time each failure costs the job; which of them binds follows from the job's size and
    its failure and repair figures."""
    M_n = s.param("M_node", "node_mtbf")
    T_r = s.param("T_rep", "repair")
    C_r = s.param("C_r", "restart_cost")
    n_job = s.step("job_nodes", "Nodes the job runs on", "n_job", job / g, "nodes", "the job in whole nodes")
    rate = s.step("failure_rate", "Node failures the job sees", "λ", n_job / M_n, "interruptions/day",
                  "each of its nodes fails once per MTBF, and any one of them stops the job")
    loss = s.step("restart_loss", "Share of the job's time lost to restarts", "f_r", rate * C_r, "%",
                  "failures per day times what each costs, over a day")
    if s.compare(loss, MAX_RESTART_LOSS) > 0:
        raise Reject("restarts would take more than half of the run: recovery comes before fleet size")
    down, pool = spare_pool(s, n_job, M_n, T_r)
    room = s.step("margin_nodes", "Nodes the margin holds", "n_margin", spare / g, "nodes",
                  "the margin's GPUs in whole nodes")
    doubled = ceil_of(2 * down + SPARE_SIGMAS * sympy.sqrt(2 * down))
    for value, bar, what in ((job * (1 - loss), need, "the slack against the restarts"),
                             (loss, RESTART_BAR, "the restart loss against a twentieth"),
                             (rate, FAILURES_PER_DAY, "the failure rate against six a day")):
        if abs(s.evaluate(value / bar) - 1) < KNIFE_EDGE:
            raise Reject(f"{what} sits within {KNIFE_EDGE:.1%} of its bar")
    spares, holds = format_number(s.value(pool)), format_number(s.value(room))
    against = (f"a pool of {spares} nodes (mean {format_number(s.value(down), 3)} out) against the {holds} the "
               "margin holds")
    s.judge("margin", "the margin holds the spare pool for the nodes in repair", s.compare(pool, room) <= 0,
            against)
    s.judge("margin", "the margin would still hold the spare pool at twice the failure rate",
            s.compare(doubled, room) <= 0,
            f"at twice the rate {format_number(s.evaluate(doubled))} spare nodes against the {holds} the margin holds")
    s.judge("margin", "the spare pool takes over half of the margin", s.compare(2 * pool, room) > 0, against)
    lost = format_quantity(s.value(loss), "%", 3)
    per_day = format_quantity(s.value(rate), "interruptions/day", 3)
    slack = format_quantity(s.evaluate(1 - need / job), "%", 3)
    s.judge("margin", "the round-up's slack absorbs the time restarts cost", s.compare(job * (1 - loss), need) >= 0,
            f"restarts take {lost} of the job's time; the round-up leaves {slack} of the schedule free")
    s.judge("margin", "restarts cost the job more than a twentieth of its time", s.compare(loss, RESTART_BAR) > 0,
            f"{per_day} at {format_quantity(s.value(C_r), 'min')} each: {lost}")
    s.judge("margin", "the job loses a node more than once every four hours",
            s.compare(rate, FAILURES_PER_DAY) > 0,
            f"{format_number(s.value(n_job))} nodes at one failure per {format_quantity(s.value(M_n), 'days')} "
            f"each: {per_day}")


def _smaller_why(s: Sheet, need, smaller) -> str:
    if s.evaluate(smaller) <= 0:
        return "no smaller job under the rule"
    stretch = s.evaluate(need / smaller)
    close = stretch <= SCHEDULE_MISS
    return (f"{format_number(s.evaluate(smaller))} GPUs would take {format_number(stretch, 3)}× the schedule"
            + (": worth asking for the extra days instead of the extra GPUs" if close else ""))


def _fleet_judgements(s: Sheet, need, job, smaller, pod, rule: str) -> None:
    """What the chosen job buys, judged on this variant's numbers."""
    ratio = s.value(job) / s.value(need)
    over = f"the job is {format_number(ratio, 3)}× the need"
    power = 2 ** ceil_of(log_of(need, 2))
    size = int(s.value(job))
    is_power = size & (size - 1) == 0
    s.judge("judgement", "the job is a power of two", bool(is_power),
            f"{format_number(s.value(job))} GPUs {'is' if is_power else 'is not'} 2^k under the {rule} rule")
    s.judge("judgement", "the job meets the schedule even at an MFU a tenth below plan",
            s.compare(job * MFU_SHORTFALL, need) >= 0,
            f"{over}; a tenth less MFU needs {format_number(s.evaluate(need / MFU_SHORTFALL))} GPUs")
    s.judge("judgement", "the round-up leaves under a tenth of the schedule as slack",
            s.compare(job * MFU_SHORTFALL, need) < 0,
            f"{over}: it finishes in {format_number(s.evaluate(need / job), 3)} of the schedule")
    s.judge("judgement", "the job spans more than one fabric pod", s.compare(job, pod) > 0,
            f"{format_number(s.value(job))} GPUs against pods of {format_number(s.value(pod))}: "
            + ("cross-pod traffic goes through the core" if s.compare(job, pod) > 0 else "it stays inside one pod"))
    s.judge("judgement", "the next smaller job under the rule misses the schedule by under a tenth",
            s.compare(smaller * SCHEDULE_MISS, need) >= 0,
            _smaller_why(s, need, smaller))
    s.judge("judgement", "a power-of-two job would exceed the need by more than a quarter",
            s.compare(power, POWER_OF_TWO_WASTE * need) > 0,
            f"the next power of two is {format_number(s.evaluate(power))} GPUs, "
            f"{format_number(s.evaluate(power / need), 3)}× the need")


# --- nic-bandwidth-per-gpu -------------------------------------------------------------------


def nic_bandwidth_per_gpu(p, s: Sheet) -> None:
    shard = model_params(p.model) / (p.tp * p.pp)
    if shard * ADAM_STATE_BYTES > hbm_bytes(p.gpu):
        raise Reject("the training state of one GPU's shard does not fit its HBM")
    N = s.given("N", model_params(p.model), "billion params", f"{p.model.name} parameters")
    h = s.given("h", p.model.hidden, "", f"{p.model.name} hidden size")
    tp = s.param("TP", "tp")
    pp = s.param("PP", "pp")
    d = s.param("d", "dp")
    m = s.param("m", "microbatches")
    S = s.param("S", "seq")
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per bf16 gradient")
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    u = s.param("MFU", "mfu")
    B_nic = s.given("B_nic", p.nic.gbit_s * 1e9 / 8, "Gb/s", f"{p.nic.name} line rate")

    N_s = s.step("params_per_gpu", "Parameters per GPU", "N_s", N / (tp * pp), "billion params",
                 "each GPU holds one tensor-parallel slice of one pipeline stage")
    G = s.step("grad_bytes", "Gradient bytes per GPU", "G", N_s * b, "GB",
               "the shard the data-parallel group must sum across replicas")
    V = s.step("bytes_per_step", "Bytes each GPU sends per step for the reduction", "V", 2 * (d - 1) / d * G, "GB",
               "ring all-reduce: a reduce-scatter and an all-gather, each sending (d−1)/d of the buffer")
    T = s.step("tokens_per_replica", "Tokens per replica per step", "T", m * S, "tokens",
               "micro-batches of one sequence each")
    t_bwd = s.step("backward_time", "Backward pass of the whole step", "t_bwd",
                   4 * N_s * T / (P * u), "ms",
                   "4 of the 6 FLOPs per local parameter per token (flops-per-token) are backward, at peak × MFU")
    best = s.step("bandwidth_step", "Bandwidth if the reduction could spread over the whole backward", "B_step",
                  V / t_bwd, "Gb/s", "the best case: the shard cancels, (d−1)/d·P·MFU/T, so it falls as the batch "
                  "per replica grows")
    t_mb = s.step("micro_backward", "Backward of the last micro-batch", "t_mb", t_bwd / m, "ms",
                  "the gradients accumulate over the micro-batches and are final only in the last one's backward: "
                  "the window the reduction really has")
    moved = V
    if p.pp > 1:
        A = s.step("pp_bytes", "Activation gradient sent to the previous stage in that window", "A",
                   S * h * b / tp, "MB", "one sequence's hidden states, each TP rank sending its 1/TP slice "
                   "(Megatron's scatter-gather): the pipeline's share of the same link")
        moved = V + A
    need = s.step("bandwidth", "Bandwidth per GPU to hide it in the last micro-batch's backward", "B_need",
                  moved / t_mb, "Gb/s", "the bytes over the real window: ≈ (d−1)/d·P·MFU/S, set by the GPU's speed "
                  "and one sequence, whatever the batch")
    t_comm = s.step("comm_time", "Reduction time on the NIC", "t_comm", moved / B_nic, "ms", "the bytes at line rate")
    _nic_judgements(s, best, need, B_nic)

    s.assume("Data parallelism with a bucketed ring all-reduce overlapping the backward pass (PyTorch DDP, or "
             "Megatron's overlap_grad_reduce); a distributed optimizer's reduce-scatter plus all-gather moves the "
             "same bytes. Gradients accumulate locally over the micro-batches and are reduced once per step.")
    s.assume("One NIC per GPU on its own rail, taken at line rate (large messages reach close to it), no in-network "
             "reduction (SHARP); tensor-parallel traffic stays on NVLink inside the node.")
    s.assume("The whole-step window is a bound no schedule reaches: a stage's accumulated gradients are final only "
             "in its last micro-batch's backward. The first stage finishes last and has only that window (later "
             "stages also have the pipeline's drain), so it is the window the key grades. Reducing after every "
             "micro-batch instead would send the bytes m times.")
    s.slip("all-reduce counted as one pass of the buffer, not two", 0.5, on=("bytes_per_step", "bandwidth"))
    s.slip("the whole step's backward as the window", on="bandwidth", factor=s.value(best) / s.value(need))
    s.slip("the whole step (forward too) as the window, not the backward", 2 / 3, on="bandwidth_step")

    _overlap_regime(s, need, best, B_nic, t_comm, t_mb)


def _nic_judgements(s: Sheet, best, need, B_nic) -> None:
    """Which links and levers hide the reduction, from this variant's two needs."""
    line, strict, loose = (format_quantity(s.value(x), "Gb/s") for x in (B_nic, need, best))
    tenth = s.compare(10 * best, B_nic) <= 0
    s.judge("nic", "a NIC of a tenth of this rate would hide it over the whole step's backward", tenth,
            f"the best case needs {loose} against a tenth of {line}" + (": on paper the whole-step bound makes "
            "even a tenth of the NIC look enough" if tenth else ""))
    s.judge("nic", "a NIC of half this rate would hide it over the whole step's backward",
            s.compare(2 * best, B_nic) <= 0, f"{loose} against half of {line}")
    s.judge("nic", "a NIC of twice this rate hides it in the last micro-batch's backward",
            s.compare(need, 2 * B_nic) <= 0, f"{strict} against twice {line}")
    s.judge("nic", "more micro-batches per step lower the need in the last micro-batch's window", False,
            f"the real need, {strict}, is one sequence's backward over the same bytes: more micro-batches lengthen "
            "the step, not the window", fact=True)
    s.judge("nic", "more micro-batches per step lower the whole-step bound", True,
            f"the bound, {loose}, falls as the tokens per replica grow: it is what a bigger batch buys on paper",
            fact=True)


def _overlap_regime(s: Sheet, need, best, B_nic, t_comm, t_mb) -> None:
    needed, line, loose = (format_quantity(s.value(x), "Gb/s") for x in (need, B_nic, best))
    comm, window = format_quantity(s.value(t_comm), "ms"), format_quantity(s.value(t_mb), "ms")
    s.regime_by(need, B_nic, tie="below", below=Side(
        "comms-hidden",
        f"The reduction needs {needed} in the last micro-batch's backward and the NIC gives {line}: it takes {comm} "
        f"inside a {window} window, so the network costs no step time. The whole-step bound, {loose}, would "
        "suggest a far slower link suffices: it is the last micro-batch, one sequence per GPU, that sets the port.",
        "A faster GPU or a higher MFU (more FLOP/s per byte of gradient) or shorter sequences shrink the window "
        "without shrinking the bytes: past the line rate the rest of the reduction is exposed and each step waits.",
        near=f"The reduction needs {needed} in the last micro-batch's backward, just under the NIC's {line}: it "
             f"takes {comm} of a {window} window. This is why ports ship near what one GPU's backward of one "
             "sequence demands: a faster GPU of the next generation would expose it on this port."),
        above=Side(
        "comms-exposed",
        f"The reduction needs {needed} in the last micro-batch's backward but the NIC gives {line}: it takes {comm} "
        f"against a {window} window, and the step waits for the rest. The whole-step bound, {loose}, hides this: "
        "the accumulated gradients are final only at the end.",
        "A faster NIC, longer sequences per micro-batch, or fewer bytes in the window (a distributed optimizer "
        "sends the reduce-scatter now and leaves the all-gather to the next forward; in-network reduction) bring "
        "the need under the line rate.",
        near=f"The reduction needs {needed} in the last micro-batch's backward, just over the NIC's {line}: a "
             f"small part of the {comm} is exposed past the {window} window; a slightly lower MFU or longer "
             "sequences would hide it."))


# --- cluster-bill-of-materials ---------------------------------------------------------------


CHECKPOINT_BYTES = 12  # fp32 master weights and two fp32 Adam moments; the bf16 weights are a cast of the master
SMALL_POOL = sympy.Rational(2, 100)  # a spare pool under 2% of the job is one finance signs off without a fight
FAST_STORAGE = 100e9  # past 100 GB/s of sustained writes the filesystem is a project of its own
BIG_FEED = 20e6  # past 20 MW the site is a utility negotiation (substation, years of lead time)
MIN_CLUSTER_GPUS = 1024  # below a thousand GPUs the bill is a few racks, not a fabric design
MAX_CLUSTER_GPUS = 65_536  # k³/4 for 64-port switches: the most a three-tier fat tree of them reaches


def cluster_bill_of_materials(p, s: Sheet) -> None:
    F, T, P, u = _training_run(p, s)
    g = s.param("g", "gpus_per_node")
    M_n = s.param("M_node", "node_mtbf")
    T_r = s.param("T_rep", "repair")
    k = s.param("k", "radix")
    r = s.param("r", "oversub")
    N = s.given("N", model_params(p.model), "billion params", f"{p.model.name} parameters")
    b_st = s.given("b_st", CHECKPOINT_BYTES, "B", "checkpoint bytes per parameter (fp32 master weights, Adam m and v)")
    T_w = s.param("T_w", "window")
    P_n = s.param("P_node", "node_kw")
    P_port = s.param("P_port", "port_w")
    pue = s.param("PUE", "pue")

    need = s.step("gpus_needed", "GPUs the FLOPs call for", "G", F / (T * P * u), "GPUs",
                  "the fleet equation F = G·T·P·MFU solved for G")
    if s.value(need) < MIN_CLUSTER_GPUS:
        raise Reject("a few racks, not a cluster fabric")
    n_job = s.step("job_nodes", "Nodes the job runs on", "n_job", ceil_of(need / g), "nodes",
                   "the need in whole nodes")
    down, pool = spare_pool(s, n_job, M_n, T_r)
    E0 = s.step("gpus_wanted", "GPUs with the spares", "E_0", g * (n_job + pool), "GPUs", "job nodes plus spares")
    E2 = s.step("two_tier_max", "Most GPUs a two-tier fat tree reaches", "E_2", k**2 / 2, "GPUs",
                "k leaves' worth of spine ports, each leaf with k/2 GPUs below: k·k/2")
    three_tier = s.compare(E0, E2) > 0
    pod = None  # pods of (k/2)² GPUs exist only under a core tier
    if three_tier:
        pod = s.step("pod_gpus", "GPUs per pod", "E_pod", (k / 2) ** 2, "GPUs",
                     "k/2 leaves of k/2 GPUs under k/2 spines, whose other half of ports faces the core")
        E = s.step("gpus", "GPUs installed: whole pods", "E", pod * ceil_of(E0 / pod), "GPUs",
                   "the fabric is bought pod by pod; the last pod's free slots hold more spares")
        s.step("pods", "Pods", "pods", E / pod, "pods", "whole pods of (k/2)² GPUs")
    else:
        E = s.step("gpus", "GPUs installed: whole leaves", "E", (k / 2) * ceil_of(E0 / (k / 2)), "GPUs",
                   "one two-tier pod, bought leaf by leaf; the last leaf's free ports hold more spares")
        s.step("pods", "Pods", "pods", ceil_of(E / E2), "pods", "the whole fabric is one two-tier pod")
    if s.value(E) > MAX_CLUSTER_GPUS:
        raise Reject("past what a three-tier fat tree of 64-port switches reaches")
    nodes = s.step("nodes", "Nodes", "n", E / g, "nodes", "eight GPUs to a node, job and spares alike")
    total = fat_tree_switches(s, E, k, r, three_tier)
    ckpt = s.step("checkpoint", "Checkpoint size", "S_ck", N * b_st, "TB",
                  "the training state a restart needs: fp32 master weights and both Adam moments")
    rate = s.step("storage_rate", "Storage write bandwidth for the checkpoint", "B_st", ckpt / T_w, "GB/s",
                  "the whole checkpoint inside the window the training stall allows")
    IT = s.step("it_power", "IT power: nodes and fabric", "P_IT", nodes * P_n + total * k * P_port, "MW",
                "nodes at their maximum system power, plus every switch port with its optics: the IT load, "
                "before cooling")
    site = s.step("facility_power", "Site power: the feed the site must supply", "P_site", IT * pue, "MW",
                  "the IT load times PUE: cooling and power conversion on top")
    _bom_judgements(s, E0, E, pod, n_job, g, pool, rate, site)

    s.assume("Model FLOPs 6·N·D (flops-per-token, from training-compute-budget) over the dense bf16 peak "
             "(dense-peaks) at the stated MFU; the schedule is compute time.")
    s.assume("Node failures arrive at random, one per node MTBF per node (Llama 3 405B: 466 interruptions in 54 "
             "days on 2,048 nodes, one per ~240 node-days); a failed node is out for the repair time (diagnosis, RMA "
             "or reseat, burn-in). The pool covers the mean plus two standard deviations of a Poisson count.")
    s.assume("Rail-optimised compute fabric (NIC i of every node on rail i, as in DGX SuperPOD): the rails decide "
             "which leaf each NIC reaches, not how many switches there are, so the count is that of a fat tree.")
    s.assume("Fat tree of one switch model: leaves and spines split their ports half down, half up (non-blocking "
             "inside a pod); above the pods the core may be oversubscribed, as large clusters do (Llama 3's "
             "24K-GPU cluster: 1:7 between pods). Storage, front-end and management networks are not counted.")
    s.assume(f"Node power {format_quantity(p.node_kw, 'kW')} (DGX H100 datasheet maximum); each switch port "
             f"{format_quantity(p.port_w, 'W')} with its optics, an estimate (32 twin-port OSFP cages rated at "
             "17 W per transceiver in a 64-port QM9700, plus the switch itself). Storage power left out.")
    s.slip("MFU left out: the GPUs at datasheet peak", p.mfu, on="gpus_needed")
    s.slip("GPUs per node forgotten: one node per GPU", p.gpus_per_node, on="nodes")
    s.slip("the spares' mean only, no cover for its spread", on="spare_pool",
           factor=s.evaluate(ceil_of(down)) / s.value(pool))
    s.slip("bf16 weights only in the checkpoint", 2 / CHECKPOINT_BYTES, on="storage_rate")
    s.slip("PUE left out", 1 / p.pue, on="facility_power")

    _tier_regime(s, E0, E2, k)


def fat_tree_switches(s: Sheet, E, k, r, three_tier: bool) -> sympy.Symbol:
    """Leaves, spines and (under three tiers) core switches of a fat tree of k-port switches joining E GPUs,
    the core thinned by the oversubscription r; returns the total's symbol."""
    L = s.step("leaves", "Leaf switches", "L", ceil_of(E / (k / 2)), "switches",
               "half of each leaf's ports face GPUs, half face up: non-blocking at the first hop")
    if three_tier:
        S = s.step("spines", "Spine switches", "S", L, "switches",
                   "each spine takes one uplink from each of k/2 leaves: one spine per leaf, full bandwidth in the pod")
        core = s.step("core", "Core switches", "C", ceil_of(S * (k / 2) / (r * k)), "switches",
                      "the spines' k/2 uplinks each, thinned by the oversubscription, over k ports per core switch")
        return s.step("switches", "Switches in the compute fabric", "N_sw", L + S + core, "switches",
                      "three tiers: leaves, spines and core")
    S = s.step("spines", "Spine switches", "S", ceil_of(L * (k / 2) / k), "switches",
               "with no tier above, every spine port faces a leaf uplink")
    return s.step("switches", "Switches in the compute fabric", "N_sw", L + S, "switches",
                  "two tiers: leaves and spines")


def _bom_judgements(s: Sheet, E0, E, pod, n_job, g, pool, rate, site) -> None:
    wanted = format_number(s.value(E0))
    s.judge("bom", "with 128-port switches this fabric would need only two tiers", s.value(E0) <= 128**2 / 2,
            f"{wanted} GPUs against the 8,192 that two tiers of 128-port switches reach (k²/2)")
    if pod is None:
        whole_pod, why = False, "a two-tier fabric is a single pod: losing it is losing the cluster"
    else:
        whole_pod = s.compare(E - pod, g * n_job) >= 0
        why = (f"{format_number(s.value(E))} GPUs less a pod of {format_number(s.value(pod))} against a job of "
               f"{format_number(s.evaluate(g * n_job))}")
    s.judge("bom", "the job keeps its full size with one whole pod out", whole_pod, why)
    s.judge("bom", "losing one whole pod would shrink the job", not whole_pod, why)
    s.judge("bom", "the spare pool is under 2% of the job's nodes", s.compare(pool, SMALL_POOL * n_job) < 0,
            f"{format_number(s.value(pool))} spare nodes for a job of {format_number(s.value(n_job))}")
    s.judge("bom", "the checkpoint needs more than 100 GB/s of storage writes", s.value(rate) > FAST_STORAGE,
            f"it needs {format_quantity(s.value(rate), 'GB/s')}")
    s.judge("bom", "the site needs a feed of more than 20 MW", s.value(site) > BIG_FEED,
            f"the site draws {format_quantity(s.value(site), 'MW')}")


def _tier_regime(s: Sheet, E0, E2, k) -> None:
    gpus, limit, radix = (format_number(s.value(x)) for x in (E0, E2, k))
    pod_size = format_number((s.value(k) / 2) ** 2)
    s.regime_by(E0, E2, tie="below", above=Side(
        "three-tier",
        f"{gpus} GPUs with their spares exceed the {limit} that leaves and spines of {radix}-port switches can "
        f"join: a core tier joins pods of {pod_size} GPUs, and its switches and optics are the price of the size.",
        f"At or below {limit} GPUs (k²/2) two tiers suffice: no core switches and one hop fewer. A higher "
        "radix moves the boundary with its square.",
        near=f"{gpus} GPUs with their spares only just exceed the {limit} that two tiers of {radix}-port switches "
             "reach: a slightly smaller job, a smaller spare pool or a longer schedule would save the whole core "
             "tier."),
        below=Side(
        "two-tier",
        f"{gpus} GPUs with their spares fit the {limit} that leaves and spines of {radix}-port switches can join "
        "(k²/2): no core tier is needed.",
        f"Past {limit} GPUs a third tier appears: spines give half their ports to uplinks, pods of {pod_size} "
        "GPUs form, and core switches join them, adding switches, optics and a hop for cross-pod traffic.",
        near=f"{gpus} GPUs with their spares only just fit the {limit} of two tiers of {radix}-port switches: a "
             "few more nodes (a shorter schedule, a lower MFU, more spares) would bring in a whole core tier."))
