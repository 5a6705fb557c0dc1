"""Training compute and state the training, fleet and MoE-layout questions share: FLOPs per parameter per
token, the bytes mixed-precision Adam keeps per parameter, and the power-of-two group sizes layouts take."""
from __future__ import annotations

import sympy

from solvers.sheetmath import ceil_of, log_of

# FLOPs per parameter per token: 2 in the forward pass, 4 in the backward (input and weight grads).
FLOPS_PER_PARAM_TOKEN = 6

# Mixed-precision Adam (ZeRO, Rajbhandari et al. 2020): an fp32 master copy and two fp32 moments per weight.
ADAM_FP32_COPIES = 3


def least_power_of_two(x: sympy.Expr) -> sympy.Expr:
    """The least power of two at or above x (exact: log2 of a power of two is whole). A layout's groups
    are powers of two so that they tile a power-of-two job."""
    return 2 ** ceil_of(log_of(x, 2))
