"""Training compute the training, fleet and MoE-layout questions share: FLOPs per parameter per token."""
from __future__ import annotations

# FLOPs per parameter per token: 2 in the forward pass, 4 in the backward (input and weight grads).
FLOPS_PER_PARAM_TOKEN = 6

