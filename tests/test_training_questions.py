"""Golden checks for the training questions: training-compute-budget, training-state-bytes."""
from __future__ import annotations

import math

import pytest

DAY = 86_400

# --- training-compute-budget -----------------------------------------------------------------

# Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): 466 interruptions in 54 days on 16,384 H100.
LLAMA3_RATE_PER_GPU_DAY = 466 / (54 * 16_384)


def test_compute_budget_default_matches_catalogue(variant):
    """400B x 10T on 16,384 H100 at 40% MFU: 2.4e25 FLOPs, ~43 days, ~380 interruptions."""
    expected = variant("training-compute-budget@default").expected
    assert expected["flops"] == pytest.approx(2.4e25)
    days = 2.4e25 / (16_384 * 989.4e12 * 0.40) / DAY
    assert expected["days"] / DAY == pytest.approx(days) == pytest.approx(42.84, abs=0.01)
    # The catalogue's "about 380" rounds up; Llama 3's own rate gives 370, 2.7% below it.
    assert expected["interruptions"] == pytest.approx(16_384 * days * LLAMA3_RATE_PER_GPU_DAY)
    assert expected["interruptions"] == pytest.approx(380, rel=0.05)
    assert expected["regime"] == "fits-deadline"  # 42.8 of 60 days


def test_compute_budget_matches_llama3_405b_flops(variant, catalog):
    """Llama 3 405B: 15.6T tokens, published as 3.8e25 FLOPs; 6·N·D with models.yaml's 405.85B agrees."""
    params_b = catalog.get("models", "llama-3.1-405b").params_b
    expected = variant(f"training-compute-budget@default+params={params_b}+tokens=15.6").expected
    assert expected["flops"] == pytest.approx(3.8e25, rel=0.01)


def test_compute_budget_interruptions_follow_gpu_days_not_gpus(variant):
    """Quartering the GPUs quadruples the days but leaves the interruptions unchanged."""
    full = variant("training-compute-budget@default").expected
    quarter = variant("training-compute-budget@default+gpus=4096").expected
    assert quarter["days"] == pytest.approx(4 * full["days"])
    assert quarter["interruptions"] == pytest.approx(full["interruptions"])
    assert quarter["regime"] == "misses-deadline"  # 171 days against 60


@pytest.mark.parametrize("seed", range(20))
def test_compute_budget_matches_plain_arithmetic(variant, seed):
    solution = variant(f"training-compute-budget@{seed}")
    p = {param.name: param.value for param in solution.params}
    flops = 6 * p["params"] * p["tokens"]
    seconds = flops / (p["gpus"] * p["gpu"].bf16_dense_tflops * 1e12 * p["mfu"])
    assert solution.expected["flops"] == pytest.approx(flops, rel=1e-12)
    assert solution.expected["days"] == pytest.approx(seconds, rel=1e-12)
    interruptions = p["gpus"] * seconds / DAY * LLAMA3_RATE_PER_GPU_DAY
    assert solution.expected["interruptions"] == pytest.approx(interruptions, rel=1e-12)
    assert (solution.expected["regime"] == "fits-deadline") == (seconds <= p["deadline"])


def test_compute_budget_pinned_seed(variant):
    """Pins the sampling: a change in the ranges or the draw order shows up here."""
    solution = variant("training-compute-budget@1")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"params": 89, "tokens": 25, "gpus": 1024, "gpu": "a100-sxm-80gb", "mfu": 38, "deadline": 41,
                   "ref_interruptions": 466, "ref_days": 54, "ref_gpus": 16_384}
    # 6 x 89e9 x 25e12 = 1.335e25 FLOP on 1,024 x 312 TFLOP/s x 38%: 1,273 days.
    assert solution.expected["days"] / DAY == pytest.approx(1.335e25 / (1024 * 312e12 * 0.38) / DAY)
    assert solution.expected["regime"] == "misses-deadline"


# --- training-state-bytes --------------------------------------------------------------------


def test_state_bytes_default_matches_catalogue(variant):
    """100B params x 16 B = 1.6 TB against a 640 GB H100 node (75% of it for state: 480 GB)."""
    solution = variant("training-state-bytes@default")
    results = solution.sheet.results
    assert results["bytes_per_param"] == 16
    assert results["state"] == pytest.approx(1.6e12)
    assert results["node_hbm"] == pytest.approx(640e9)
    assert results["nodes"] == 4  # 1.6 TB / 480 GB = 3.3
    assert results["state_per_gpu"] == pytest.approx(50e9)  # 1.6 TB over 32 GPUs
    assert results["max_params_one_node"] == pytest.approx(30e9)  # 480 GB / 16 B
    assert results["regime"] == "multi-node"


@pytest.mark.parametrize("params, state", [
    (1.5, 24e9),  # ZeRO paper, sec. 3.1: GPT-2 (1.5B) needs at least 24 GB
    (7.5, 120e9),  # ZeRO paper, fig. 1: a 7.5B model needs 120 GB per data-parallel replica
])
def test_state_bytes_matches_zero_paper(variant, params, state):
    expected = variant(f"training-state-bytes@default+params={params}").expected
    assert expected["state"] == pytest.approx(state)
    assert expected["regime"] == "one-node"


def test_state_bytes_fp32_accumulation_is_20_bytes(variant):
    """An fp32 accumulator beside bf16 gradients: 20 B/param (Megatron-LM's distributed-optimizer table)."""
    expected = variant("training-state-bytes@default+grad_accum=fp32").expected
    assert expected["bytes_per_param"] == 20
    assert expected["nodes"] == 5  # 2.0 TB / 480 GB = 4.2


@pytest.mark.parametrize("seed", range(20))
def test_state_bytes_matches_plain_arithmetic(variant, seed):
    solution = variant(f"training-state-bytes@{seed}")
    p = {param.name: param.value for param in solution.params}
    per_param = 16 + (4 if p["grad_accum"] == "fp32" else 0)
    state = p["params"] * per_param
    room = p["gpus_per_node"] * p["gpu"].hbm_gb * 1e9 * p["usable"]
    nodes = math.ceil(state / room)
    assert solution.expected["bytes_per_param"] == per_param
    assert solution.expected["state"] == pytest.approx(state, rel=1e-12)
    assert solution.expected["nodes"] == nodes
    assert solution.expected["state_per_gpu"] == pytest.approx(state / (nodes * p["gpus_per_node"]), rel=1e-12)
    assert (solution.expected["regime"] == "one-node") == (p["params"] <= room / per_param)


def test_state_bytes_pinned_seed(variant):
    solution = variant("training-state-bytes@4")
    raw = {param.name: param.raw for param in solution.params}
    assert raw == {"params": 670, "gpu": "h200-sxm", "grad_accum": "fp32", "usable": 60, "gpus_per_node": 8}
    # 670e9 x 20 B = 13.4 TB over 8 x 141 GB x 60% = 676.8 GB per node: 20 nodes, 83.75 GB per GPU.
    assert solution.expected["nodes"] == 20
    assert solution.expected["state_per_gpu"] == pytest.approx(83.75e9)
