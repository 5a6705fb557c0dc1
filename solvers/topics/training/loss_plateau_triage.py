"""Triage a loss that stopped moving."""
from __future__ import annotations

import math

from solvers.derivation import Reject, Sheet
from solvers.formulas.triage import CAUSE_OF_CHECK, CHECKS, lr_at

# Where a frozen step counter sends the triage next: where each rank is stuck (a hung collective, a dead
# node), which no training reading can say. Read only for a job that has stopped stepping.
STACK_DUMPS = "stack dumps of every rank (py-spy, the NCCL flight recorder)"


VANISHED_GRAD_NORM = 1e-4  # healthy global grad norms in LLM pretraining sit around 0.1-1


NEAR_FLOOR = 0.1  # an LR above its floor but under a tenth of the peak reads as the floor


# Passes over the data before re-reading costs anything a flat loss could show: Muennighoff et al. (2023) find up
# to about four epochs of repeated data nearly as good as fresh data, and a second pass lowers the training loss
# rather than stalling it. Under this many passes the repetition check is clean.
HARMFUL_PASSES = 4

HEALTHY = "healthy-run"


def _lr_share_why(s: Sheet, lr, floor, peak) -> str:
    if s.compare(lr, floor) <= 0:
        return "at the floor: every update is a hundredth of the peak's, too small to move the loss"
    if s.compare(lr, NEAR_FLOOR * peak) < 0:
        return "near the floor: the updates are small, and the loss moves slowly by design"
    return "far from the floor: the schedule alone does not explain a flat loss"


def _checks_run(s: Sheet, found: int) -> None:
    """The checks run in order up to the first that fails, which names the cause; a frozen counter then sends
    the triage to the stacks. `found` past the last check: every check ran clean."""
    for index, check in enumerate(CHECKS):
        why = ("clean: nothing in the log is wrong" if index == found - 1 == len(CHECKS) - 1 else
               "clean: on to the next check" if index < found else
               "fails: it names the cause, and triage stops here" if index == found else
               "never reached: an earlier check already found the cause")
        # The first check runs in every triage, a frozen counter voiding every other reading: a fact.
        s.judge("checks", check, index <= found, why, fact=index == 0)
    hung = found == 0
    s.judge("checks", STACK_DUMPS, hung,
            "the job has stopped stepping: where each rank is stuck is what to fix, and only the stacks say it"
            if hung else "the job is stepping: its stacks would show a healthy loop, and the cause is in the log")


def _lr_slips(p, s: Sheet, step: int, lr: float) -> None:
    """Two classic ways to misread the cosine part of the schedule."""
    if not p.warmup <= step <= p.decay_steps:
        return
    peak, floor = p.peak_lr, p.lr_floor * p.peak_lr
    linear = floor + (peak - floor) * (1 - (step - p.warmup) / (p.decay_steps - p.warmup))
    no_warmup = floor + (peak - floor) * (1 + math.cos(math.pi * step / p.decay_steps)) / 2
    s.slip("linear decay instead of cosine", linear / lr, on="lr_plateau")
    s.slip("cosine counted from step 0, ignoring the warmup", no_warmup / lr, on="lr_plateau")


def solve(p, s: Sheet) -> None:
    eta = s.param("eta", "peak_lr")
    W = s.param("W", "warmup")
    T = s.param("T", "decay_steps")
    rho = s.param("rho", "lr_floor")
    B = s.param("B", "batch")
    L = s.param("L", "seq_len")
    D = s.param("D", "dataset")
    s1 = s.param("s_1", "step_0900")
    s2 = s.param("s_2", "step_1100")

    s.step("advance", "Steps taken between the two readings", "ds", s2 - s1, "steps",
           "a healthy run advances hundreds of steps in two hours")
    lr = lr_at(s, s1, eta, W, T, rho)
    if s.compare(lr, rho * eta) > 0 and s.compare(lr, NEAR_FLOOR * eta) < 0:
        # A reading of 1.02% of peak beside a floor of 1% cannot be told from the floor: the LR check
        # would turn on a rounding, not on the triage.
        raise Reject("the LR sits just above its floor: its check reads either way")
    s.step("lr_share", "LR at the plateau against the peak", "r_lr", lr / eta, "%",
           _lr_share_why(s, lr, rho * eta, eta))
    epochs = s.step("epochs", "Epochs of data seen by 11:00", "E", s2 * B * L / D, "",
                    "tokens consumed over unique tokens; above 1 the run is re-reading its data")

    ranks = list(p.rank_norms)
    fired = [check for check, firing in zip(CHECKS, (
        p.step_1100 == p.step_0900,
        s.compare(lr, rho * eta) <= 0 or p.grad_norm < VANISHED_GRAD_NORM,
        s.compare(epochs, HARMFUL_PASSES) > 0,
        p.scale_1100 <= 1,
        min(ranks) == 0,
    )) if firing]
    if len(fired) > 1:
        raise Reject(f"the incident points to {len(fired)} causes, expected one")
    # Every check clean: a run stepping at full size, re-reading nothing that matters, whose loss moves as little
    # over two hours as a healthy run's does this far in. The call is not to restart it.
    s.choose("cause", CAUSE_OF_CHECK[fired[0]] if fired else HEALTHY)
    _checks_run(s, CHECKS.index(fired[0]) if fired else len(CHECKS))

    s.assume("The schedule is the lr-schedule card's (Megatron-LM's cosine style; its default decay is linear): "
             "linear warmup to the peak, cosine decay to "
             "the floor at the configured decay step (warmup included), then flat at the floor. The floor of 1% "
             "of the peak is Llama 3 405B's (8e-5 decaying to 8e-7). An LR at its floor fails the learning-rate "
             "check (lr-or-grad-zero): the schedule has run its course, and updates a hundredth of the peak's "
             "leave the loss flat.")
    s.assume("The checks run most decisive first, in the hint's order, and stop at the first that fails: the "
             "answer is the set run, that one included.")
    s.assume("The schedule was set when the dataset was meant to last it; the data may since have shrunk "
             "(deduplication, a filter, a shard list cut short), so more than one epoch means the loader re-reads "
             "data it has seen. That alone does not stall a loss: up to about four passes, repeated tokens train "
             "nearly as well as fresh ones (Muennighoff et al., Scaling Data-Constrained Language Models, 2023), "
             "and a second pass lowers the training loss rather than flattening it; the repetition check fails "
             f"only past {HARMFUL_PASSES} passes, and no draw here reaches two. With every check clean the run is "
             "healthy: late in a schedule a loss moves by thousandths over two hours, and a restart would only "
             "lose work. Every step consumes "
             "the full global batch. Llama 3 405B reached its 1.2M steps with a batch ramp (4M, 8M, then 16M "
             "tokens a step); at a constant 16.8M the same schedule would read 20.1T tokens, 1.29 passes of its "
             "15.6T.")
    s.assume("fp16 dynamic loss scaling (the loss-scaling card) halves the scale on each overflowing step and "
             "skips that step's update, and doubles it after every clean growth interval (2,000 steps in "
             "PyTorch's GradScaler, 1,000 in Megatron's): at its ceiling a healthy run overflows about once an "
             "interval, so hundreds of skips by step 500K are normal. At the floor of 1 it can fall no further "
             "and every step is wasted. A skipped step logs no grad norm, so the norms shown are those of the "
             "last step that updated.")
    s.assume("A run of this size in the H100 era trains in bf16 and keeps no loss scaler (Llama 3 405B did); "
             "the fp16 recipe here is the bank's, carried over so the scaler check has something to read. On a "
             "bf16 run that check drops out of the triage and the rest stand as they are.")
    s.assume("Each rank's gradient norm covers the weight gradients of its own slice of the layers, so a rank "
             "at exactly zero is a slice whose weights get no gradient (left frozen after a reload, or its "
             "gradient buffers zeroed before the step) while it still passes gradients back to the stages "
             "before it, which stay healthy.")
    s.slip("the epochs of the whole schedule (the decay step), not of the steps run by 11:00",
           p.decay_steps / p.step_1100, on="epochs")
    _lr_slips(p, s, p.step_0900, s.value(lr))

