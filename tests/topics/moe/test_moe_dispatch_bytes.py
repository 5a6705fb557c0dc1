"""moe-dispatch-bytes: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.engine import VariantError
from tests.by_hand import param_values

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


def _push(solution, catalog):
    """The push this variant's interview asks (the stage for its side)."""
    from solvers.script import script

    return script(solution, catalog).stages[-1].run


def test_dispatch_push_from_the_default_lands_on_the_calls_latency(variant, catalog):
    """From the default (NIC-bound at 128 tokens a GPU) the push drops to 16 tokens a GPU: the NIC's direct copies
    fall under the two calls' 50 us each, and the step is 58 layers of bytes plus 100 us (the review's point: without
    the latency 16 tokens a GPU looked nearly free). The push asks the levers again, and there half the call latency
    pays where twice the NIC does not."""
    pushed = _push(variant("moe-dispatch-bytes@default"), catalog)
    assert pushed.declared and "levers" in pushed.ask
    results = pushed.solution.sheet.results
    tokens = next(param.value for param in pushed.solution.params if param.name == "tokens")
    assert results["regime"] == "latency-bound" and tokens == 16
    assert results["comm_step"] == pytest.approx(58 * (tokens * 7 * COPY / 50e9 + 2 * 50e-6))
    levers = pushed.solution.sheet.judged("levers")
    assert levers["Kernels with half the fixed latency per call"] is True
    assert levers["NICs of twice the bandwidth (ConnectX-8)"] is False


def test_dispatch_push_from_latency_lands_on_a_prefill_chunk(variant, catalog):
    """From a latency-bound decode step the push brings a 4,096-token prefill chunk: the normal kernel (once per
    node) and NIC-bound, whatever the draw."""
    solution = variant("moe-dispatch-bytes@default+ep=16+tokens=16")
    assert solution.regime_name == "latency-bound"
    run = _push(solution, catalog)
    assert run.declared and "kernel" in run.ask
    pushed = run.solution.sheet.results
    assert pushed["kernel"] == "normal-node-aware" and pushed["regime"] == "nic-bound"
    assert pushed["nic_copies"] == pytest.approx(69 / 70)


@pytest.mark.parametrize("seed", range(20))
def test_dispatch_step_matches_plain_arithmetic(variant, seed):
    """The kernel follows the batch: direct sends (k(D − 1)/D NIC copies) up to 256 tokens a GPU, once per node
    above. Each layer: the slower of the NIC's copies and NVLink's, plus two calls' latency; the regime is the
    larger of the NIC's bytes and the calls' latency (NVLink never binds with a ConnectX-7)."""
    from tests.oracles import remote_nodes

    solution = variant(f"moe-dispatch-bytes@{seed}")
    p = param_values(solution)
    model, gpu, tokens = p["model"], p["gpu"], p["tokens"]
    g, k, nodes = gpu.nvlink_domain, model.experts_per_token, int(p["ep"]) // gpu.nvlink_domain
    direct = tokens <= 256
    assert tokens <= 256 or tokens >= 1024
    copies = k * (nodes - 1) / nodes if direct else remote_nodes(model, nodes)
    assert solution.expected["kernel"] == ("low-latency-direct" if direct else "normal-node-aware")
    assert solution.expected["nic_copies"] == pytest.approx(copies)
    assert solution.expected["saving"] == pytest.approx(k * (nodes - 1) / nodes / remote_nodes(model, nodes))
    per = model.hidden * ((1 + 4 / 128) if p["dispatch_dtype"] == "fp8" else 2) + 2 * model.hidden
    nic = tokens * copies * per / (p["nic"].gbit_s * 1e9 / 8)
    nvl_copies = k * (g - 1) / int(p["ep"]) if direct else k * (g - 1) / g
    nvlink = tokens * nvl_copies * per / (gpu.nvlink_gb_s * 1e9 / 2)
    calls = 2 * 50e-6
    assert nvlink < nic
    assert solution.sheet.results["nic_time"] == pytest.approx(nic)
    assert solution.expected["layer_time"] == pytest.approx(nic + calls)
    assert solution.expected["comm_step"] == pytest.approx(
        (model.layers - model.dense_layers) * (nic + calls))
    assert solution.expected["regime"] == ("latency-bound" if calls > nic else "nic-bound")


def test_dispatch_default_runs_the_low_latency_kernel(variant):
    """Reader finding: the default is DeepEP's own low-latency benchmark (128 tokens a GPU, EP 64), whose kernel
    sends every copy to its expert: 7 NIC copies, not the normal kernel's 3.5, and with the two calls' 100 us the
    layer is 489 us against DeepEP's measured 173 + 314 = 487 us (the old key, 195 us of bytes, was 0.40x)."""
    results = variant("moe-dispatch-bytes@default").sheet.results
    assert results["kernel"] == "low-latency-direct"
    assert results["nic_copies"] == 7
    assert results["nic_time"] + 100e-6 == pytest.approx(487e-6, rel=0.01)


def test_dispatch_levers_no_longer_hold_constant_options(variant):
    """Reader findings: "NVLink of twice the bandwidth" could never pay (NIC over NVLink is 4.5x or more with a
    ConnectX-7) and "FP8 dispatch" was decided by the dtype alone: both are gone; node-limited routing is worded as
    a trained model's and saves no copy under the direct kernel; the regime has no NVLink side."""
    solution = variant("moe-dispatch-bytes@default")
    pool = next(spec for spec in solution.question.answers if spec.key == "levers").pool
    assert not any("NVLink of twice" in option or "FP8 dispatch" in option for option in pool)
    regime = next(spec for spec in solution.question.answers if spec.key == "regime")
    assert "nvlink-bound" not in regime.choices
    judged = solution.sheet.judged("levers")
    assert judged[HALF] is False


HALF = "Had the model been trained to keep a token's experts on half the group's nodes"


@pytest.mark.parametrize("code, holds", [
    ("13100+tokens=16", False),  # 4 nodes, direct kernel: every copy sent, however few nodes
    ("default+ep=32+tokens=4096", True),  # 4 nodes, node-aware: 2.36 remote nodes a token down to 1.5
    ("default+model=kimi-k2+tokens=2048", True),  # 8 nodes: 4.62 down to 3.5
    ("default+tokens=4096", False),  # DeepSeek-V3 on 8 nodes: 4 of 8 already
    ("default+ep=16+tokens=4096", None),  # 2 nodes: half is one, not listed
    ("default+model=kimi-k2+ep=128+tokens=2048", None),  # 16 nodes: 8 experts never span more than 8
])
def test_node_limit_is_listed_only_where_it_can_bind(variant, code, holds):
    """r10 finding 4: "at most 4 nodes a token" was listed at EP 32, four nodes, where it can bind nothing, and at
    two. The lever now keeps a token on half the group's nodes (DeepSeek-V3's 4 of 8), which binds wherever it is
    listed; on two nodes (half is one) and where half the nodes exceed a token's experts it is not listed."""
    solution = variant(f"moe-dispatch-bytes@{code}")
    assert solution.sheet.judged("levers")[HALF] is holds
    if holds is None:
        assert HALF not in solution.shown["levers"]


def test_dispatch_stage_texts_give_nothing_away(variant):
    """Reader findings: the opening no longer states the FP8 scale (the slip it grades), and a model without expert
    groups reads "no expert groups", not "groups n/a, top n/a"."""
    from solvers.engine import fill

    solution = variant("moe-dispatch-bytes@default+model=kimi-k2")
    opening, second = (fill(stage.say, solution.params) for stage in solution.question.stages[:2])
    assert "scale" not in opening and "128" not in opening
    assert "n/a" not in second and "no expert groups" in second
    deepseek = variant("moe-dispatch-bytes@default")
    assert "at most 4 of 8 groups" in fill(deepseek.question.stages[1].say, deepseek.params)


def test_dispatch_draws_only_connectx7(variant):
    """Reader finding: HGX H100, H200 and B200 ship with ConnectX-7; ConnectX-8 (B300, GB300) is a lever here."""
    nic = next(spec for spec in variant("moe-dispatch-bytes@default").question.parameters if spec.name == "nic")
    assert tuple(nic.choices) == ("connectx-7",)


def test_dispatch_group_inside_one_domain_is_refused(variant):
    """EP 64 inside a 72-GPU GB200 rack: no copy meets a NIC, every NIC answer would be 0; the question's rule
    refuses it (the EP choices start at 16, past an HGX node)."""

    with pytest.raises(VariantError, match="crosses_nodes"):
        variant("moe-dispatch-bytes@default+gpu=gb200")


def test_dispatch_reality_compares_the_layer_with_its_calls(bank, catalog):
    """Reader finding (rf-m2): the published row set DeepEP's 173 + 314 = 487 us, timed with each call's latency,
    beside the NIC's bytes alone (389 us, "0.80x"). The graded figure it compares is now the layer's dispatch and
    combine with the two calls, 489 us: 1.00x."""
    from dataclasses import replace

    from solvers.reality import compare

    question = bank.get("moe-dispatch-bytes")
    (entry,) = question.reality
    assert entry.answer == "layer_time"
    (found,) = compare(replace(question, reality=(entry,)), catalog)
    assert found.bank == pytest.approx(489.37, rel=1e-3)
    assert found.ratio == pytest.approx(1.005, abs=0.005)


def test_dispatch_low_latency_key_says_nvlink_inside_the_node(variant):
    """Reader finding (rf-m2): the kernel's key said "pure RDMA" while its NIC count (k(D - 1)/D) sends the
    copies for its own node's GPUs over NVLink, as DeepEP's low-latency kernels do now."""
    why = variant("moe-dispatch-bytes@default").sheet.choice_whys["kernel"]
    assert "pure RDMA" not in why and "NVLink inside" in why
