"""What the triage questions share: the checks they grade, and the learning-rate schedule."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet

# The checks in the order a strong answer runs them: from whether the run does anything at all to the
# causes particular to its setup. A frozen step counter voids every other reading (and is a job problem,
# not a training one); then whether the updates have any size (LR, grad norm); then whether the data
# are new; then fp16's loss scaler; last one rank of the split. The first check that fails is the cause.
CHECKS = ("is the step counter moving", "learning rate and grad norm", "data repetition (epochs seen)",
          "loss scale history", "per-rank gradient norms")


CAUSE_OF_CHECK = dict(zip(CHECKS, ("job-not-stepping", "lr-or-grad-zero", "data-repeating", "loss-scale-collapsed",
                                   "rank-sending-zeros")))


def lr_at(s: Sheet, k: sympy.Symbol, eta, W, T, rho) -> sympy.Symbol:
    """The schedule's LR at step k: linear warmup, cosine decay to rho·peak at T, then flat."""
    if s.compare(k, W) < 0:
        expr, why = eta * k / W, "still in the linear warmup"
    elif s.compare(k, T) <= 0:
        expr = rho * eta + (1 - rho) * eta * (1 + sympy.cos(sympy.pi * (k - W) / (T - W))) / 2
        why = "cosine from the peak at the end of warmup to the floor at the decay step"
    else:
        expr, why = rho * eta, "past the configured decay steps the schedule holds its floor"
    return s.step("lr_plateau", "LR at the plateau step", "eta_1", expr, "", why)
