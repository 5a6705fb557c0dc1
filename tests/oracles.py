"""Closed forms the tests hold the solvers' sheets to (the solvers derive these on their sheets, in sympy)."""
from __future__ import annotations

import math
from fractions import Fraction

from solvers.data import Record


def experts_touched(experts: float, k: float, batch: float) -> float:
    """Expected distinct experts a batch of independent tokens touches in one layer (each token picks k
    of E uniformly): E·(1 − (1 − k/E)^batch)."""
    return experts * (1 - (1 - k / experts) ** batch)


def batch_for_share(experts: float, k: float, share: float) -> float:
    """The batch at which the expected touched share reaches `share`."""
    return math.log(1 - share) / math.log(1 - k / experts)


def remote_nodes(model: Record, nodes: int) -> float:
    """Expected remote nodes a token reaches (once each) over `nodes` nodes, its k experts (or node-limited
    groups) drawn without replacement: (nodes − 1)·(1 − C(U − U/nodes, k)/C(U, k))."""
    units, picks = ((model.expert_groups, model.groups_per_token) if model.get("expert_groups")
                    else (model.experts, model.experts_per_token))
    return (nodes - 1) * (1 - math.comb(units - units // nodes, picks) / math.comb(units, picks))



def link_each_way(gpu: Record, tp: int) -> Fraction:
    """Bytes a second each way that a TP group of `tp` inside its scale-up domain runs its ring over (the
    tp-all-reduce card), exact: half the datasheet's both-ways figure through a switch; on a mesh with no switch
    (MI300X's Infinity Fabric) only the tp − 1 direct links among the group's GPUs."""
    each_way = Fraction(str(gpu.nvlink_gb_s)) * 10**9 / 2
    if gpu.get("mesh_links") and 0 < tp - 1 < gpu.mesh_links:
        return each_way * (tp - 1) / gpu.mesh_links
    return each_way
