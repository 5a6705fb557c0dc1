"""moe-dispatch-bytes: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.engine import VariantError
from solvers.followup import follow_up

COPY = 7168 + 7168 // 128 * 4 + 7168 * 2  # DeepSeek-V3: FP8 dispatch with scales + bf16 combine, 21,728 B


# DeepEP docs/legacy.md, low-latency kernels on H800 + CX-7, 128 tokens per rank, hidden 7168, top-8, FP8
# dispatch, BF16 combine: (EP, dispatch us, dispatch GB/s, combine us, combine GB/s).
DEEPEP_LOW_LATENCY = [(8, 77, 98, 114, 127), (16, 118, 63, 195, 74), (32, 155, 48, 273, 53),
                      (64, 173, 43, 314, 46), (128, 192, 39, 369, 39), (256, 194, 39, 360, 40)]


@pytest.mark.parametrize(("ep", "d_us", "d_gb_s", "c_us", "c_gb_s"), DEEPEP_LOW_LATENCY)
def test_dispatch_bytes_match_deepep_low_latency(variant, ep, d_us, d_gb_s, c_us, c_gb_s):
    """DeepEP prints latency and GB/s, not bytes; their product is the bytes a rank moves, 7.57 MB of dispatch and
    14.68 MB of combine at 128 tokens to about 2% at every EP size (its bandwidth counts all k copies, as the
    per-rank figures here do). Its test counts 16 B more per dispatched copy (7,408 B, a header): 0.2%."""
    results = variant("moe-dispatch-bytes@default").sheet.results
    assert results["rank_combine"] == 128 * 8 * 14336 == 14_680_064
    assert d_us * 1e-6 * d_gb_s * 1e9 == pytest.approx(results["rank_dispatch"], rel=0.02)
    assert c_us * 1e-6 * c_gb_s * 1e9 == pytest.approx(results["rank_combine"], rel=0.02)


@pytest.mark.parametrize(("model", "nodes"), [("deepseek-v3", 2), ("deepseek-v3", 4), ("deepseek-v3", 8),
                                              ("kimi-k2", 4), ("qwen3-235b-a22b", 16)])
def test_remote_nodes_match_a_seeded_simulation(catalog, model, nodes):
    """Tokens on node 0 pick m of U units (groups, or experts) laid out evenly over the nodes: the mean count of
    other nodes reached, over 20,000 seeded tokens, is the closed form (D - 1)(1 - C(U - U/D, m)/C(U, m))."""
    from tests.oracles import remote_nodes

    entry = catalog.get("models", model)
    units, picks = ((entry.expert_groups, entry.groups_per_token) if entry.get("expert_groups")
                    else (entry.experts, entry.experts_per_token))
    rng = np.random.default_rng(nodes * 7919 + units)
    chosen = np.argsort(rng.random((20_000, units)), axis=1)[:, :picks]
    node_of = chosen // (units // nodes)
    reached = np.array([len(set(row) - {0}) for row in node_of])
    assert abs(reached.mean() - remote_nodes(entry, nodes)) < 4 * reached.std() / math.sqrt(len(reached)) + 1e-9


def test_dispatch_push_from_the_default_lands_on_the_calls_latency(variant, catalog):
    """From the default (NIC-bound at 128 tokens a GPU) the push takes fewer tokens: the NIC's bytes fall under the
    two calls' 50 us each, and the step is 58 layers of bytes plus 100 us (the review's point: without the latency
    16 tokens a GPU looked nearly free)."""
    pushed = follow_up(variant("moe-dispatch-bytes@default"), catalog)
    results = pushed.solution.sheet.results
    tokens = next(param.value for param in pushed.solution.params if param.name == "tokens")
    assert results["regime"] == "latency-bound" and tokens < 128
    assert results["comm_step"] == pytest.approx(58 * (tokens * 3.5 * COPY / 50e9 + 2 * 50e-6))


@pytest.mark.parametrize("seed", range(20))
def test_dispatch_step_matches_plain_arithmetic(variant, seed):
    """Each layer: the slower of the NIC's remote copies and NVLink's forwarded ones, plus two calls' latency;
    the regime is whichever of the three is largest."""
    solution = variant(f"moe-dispatch-bytes@{seed}")
    p = {param.name: param.value for param in solution.params}
    model, gpu, tokens = p["model"], p["gpu"], p["tokens"]
    g, k = gpu.nvlink_domain, model.experts_per_token
    per = model.hidden * ((1 + 4 / 128) if p["dispatch_dtype"] == "fp8" else 2) + 2 * model.hidden
    nic = tokens * solution.expected["nic_copies"] * per / (p["nic"].gbit_s * 1e9 / 8)
    nvlink = tokens * k * (g - 1) / g * per / (gpu.nvlink_gb_s * 1e9 / 2)
    calls = 2 * 50e-6
    assert solution.expected["nic_time"] == pytest.approx(nic)
    assert solution.expected["comm_step"] == pytest.approx(
        (model.layers - model.dense_layers) * (max(nic, nvlink) + calls))
    assert solution.expected["regime"] == ("latency-bound" if calls > max(nic, nvlink) else
                                           "nic-bound" if nic >= nvlink else "nvlink-bound")


def test_dispatch_group_inside_one_domain_is_refused(variant):
    """EP 64 inside a 72-GPU GB200 rack: no copy meets a NIC, every NIC answer would be 0; the question's rule
    refuses it (the EP choices start at 16, past an HGX node)."""

    with pytest.raises(VariantError, match="crosses_nodes"):
        variant("moe-dispatch-bytes@default+gpu=gb200")
