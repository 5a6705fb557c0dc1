"""Fleet sizing the training and network questions share: the spare pool, a training run's figures,
and a fat tree's switches."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.formulas.common import given_peak_flops, model_params
from solvers.formulas.training import FLOPS_PER_PARAM_TOKEN
from solvers.sheetmath import ceil_of, log_of

SPARE_SIGMAS = 2  # the pool covers the mean nodes down plus two standard deviations (Poisson: √mean)


def spare_pool(s: Sheet, n_job, M_n, T_r) -> tuple[sympy.Symbol, sympy.Symbol]:
    """(nodes down at once by Little's law, the spare pool that covers them: the mean plus two
    standard deviations of a Poisson count)."""
    down = s.step("nodes_down", "Nodes down at any moment (average)", "n_down", n_job * T_r / M_n, "nodes",
                  "Little's law: failures arrive at n_job/M per day and each stays out T_rep days")
    return down, s.step("spare_pool", "Spare pool", "n_spare", ceil_of(down + SPARE_SIGMAS * sympy.sqrt(down)),
                        "nodes", "the mean nodes down plus two standard deviations (a Poisson count's is √mean): the "
                        "job rarely waits for a repair")


def training_run(p, s: Sheet) -> tuple[sympy.Symbol, ...]:
    """The run a fleet is sized for: its 6·N·D (training-compute-budget's result), the days of
    compute, the GPU's dense peak and the MFU."""
    F = s.prerequisite("training-compute-budget", "F", FLOPS_PER_PARAM_TOKEN * model_params(p.model) * p.tokens,
                       "FLOP", f"training FLOPs, 6·N·D for {p.model.name} on the run's tokens")
    P = given_peak_flops(s, p.gpu, "bf16")
    return F, s.param("T", "days"), P, s.param("MFU", "mfu")


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
    # Each leaf spreads its k/2 uplinks evenly over the spines, so their count divides k/2 (a power of two):
    # the least such count whose k ports take every leaf's uplinks (39 leaves on 20 spines cannot be wired).
    S = s.step("spines", "Spine switches", "S", 2 ** ceil_of(log_of(L / 2, 2)), "switches",
               "every leaf's k/2 uplinks spread evenly, as many to each spine: a power of two at or above "
               "L·(k/2)/k, the spines whose k ports take them all")
    return s.step("switches", "Switches in the compute fabric", "N_sw", L + S, "switches",
                  "two tiers: leaves and spines")

