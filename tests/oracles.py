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


def one_f_one_b(stages: int, microbatches: int, forward: float, backward: float) -> dict[tuple[str, int, int], tuple]:
    """A 1F1B pipeline step simulated op by op: each stage runs its warm-up forwards, then one forward and one
    backward in turn, then its last backwards; an op starts once its stage is free and its input has arrived (a
    forward from the stage before, a backward from the stage after, the last stage's from its own forward).
    Returns each op's (start, end), keyed (kind, stage, micro-batch)."""
    times: dict[tuple[str, int, int], tuple] = {}
    orders = []
    for stage in range(stages):
        warm = min(stages - stage - 1, microbatches)
        order = [("F", j) for j in range(warm)]
        for j in range(microbatches - warm):
            order += [("F", warm + j), ("B", j)]
        orders.append(order + [("B", j) for j in range(microbatches - warm, microbatches)])
    free, cursor = [0.0] * stages, [0] * stages
    while any(cursor[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while cursor[s] < len(orders[s]):
                kind, j = orders[s][cursor[s]]
                need = ("F", s - 1, j) if kind == "F" else ("B", s + 1, j) if s < stages - 1 else ("F", s, j)
                if not (kind == "F" and s == 0) and need not in times:  # the first stage's forwards need nothing
                    break
                start = max(free[s], times[need][1] if need in times else 0.0)
                free[s] = start + (forward if kind == "F" else backward)
                times[(kind, s, j)] = (start, free[s])
                cursor[s] += 1
                progressed = True
        assert progressed
    return times
