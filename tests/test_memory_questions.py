"""Golden checks for the memory questions: kv-bytes-per-token, users-per-gpu, kv-cache-block-count."""
from __future__ import annotations

import math

import pytest

from solvers.topics.memory import GPU_MEMORY_UTILIZATION

GiB = 2**30

# --- kv-bytes-per-token --------------------------------------------------------------------


@pytest.mark.parametrize("overrides, per_token", [
    ("", 327_680),  # Llama-3-70B: 2 x 80 layers x 8 KV heads x 128 x 2 B = 320 KiB
    ("+model=llama-3-8b", 131_072),
    ("+model=qwen2.5-72b", 327_680),
    # 405B weights fit 8 x H100 only in fp8; the KV stays bf16.
    ("+model=llama-3.1-405b+weight_dtype=fp8", 516_096),
    # MLA: one 512 + 64 latent per layer, 61 x 576 x 2 B.
    ("+model=deepseek-v3+gpu=h200-sxm+weight_dtype=fp8", 70_272),
])
def test_kv_bytes_per_token_matches_config_figures(variant, overrides, per_token):
    assert variant(f"kv-bytes-per-token@default{overrides}").expected["kv_per_token"] == per_token


def test_kv_bytes_per_token_default_matches_catalogue(variant):
    expected = variant("kv-bytes-per-token@default").expected
    assert expected["kv_per_token"] == 320 * 1024
    assert expected["kv_per_request"] == 327_680 * 8192  # 2.5 GiB at 8K
    # 8 x H100, 90% usable, one bf16 copy of the weights: (576 - 141.1) GB / 2.5 GiB.
    assert expected["users"] == math.floor((8 * 80e9 * GPU_MEMORY_UTILIZATION - 141.1e9) / (327_680 * 8192))
    assert expected["regime"] == "capacity-limited"


# --- users-per-gpu -------------------------------------------------------------------------


def test_users_per_gpu_default(variant):
    """Llama-3-70B on 8 x H100, 8K context, 4 GiB reserve: 72 - 4.29 = 67.7 GB usable per GPU."""
    solution = variant("users-per-gpu@default")
    results = solution.sheet.results
    assert results["weights_16_per_gpu"] == pytest.approx(17.6375e9)  # 141.1 GB / 8
    assert results["kv_per_request_gpu"] == 0.3125 * GiB  # 320 KiB x 8192 / 8
    assert results["users_16"] == 149  # 50.07 GB / 0.3125 GiB
    assert results["users_8"] == 350  # 58.89 GB / 0.15625 GiB
    assert results["tp_half"] == pytest.approx(4.168, rel=1e-3)  # 282.2 GB / 67.7 GB
    assert results["doubling_gain"] == pytest.approx(2.352, rel=1e-3)  # 2 + 17.64 / 50.07
    assert results["regime"] == "kv-dominated"


def _users_by_hand(model, gpu, tp: int, context: int, reserve: float, weight_bytes: float) -> float:
    """Unfloored full-context requests per TP group, recomputed in plain Python from the records."""
    usable = gpu.hbm_gb * 1e9 * GPU_MEMORY_UTILIZATION - reserve
    room = usable - model.params_b * 1e9 * weight_bytes / tp
    kv_request_per_gpu = 2 * model.layers * model.kv_heads * model.head_dim * weight_bytes * context / tp
    return max(room, 0) / kv_request_per_gpu


@pytest.mark.parametrize("seed", range(20))
def test_users_per_gpu_matches_plain_arithmetic(variant, seed):
    solution = variant(f"users-per-gpu@{seed}")
    p = {param.name: param.value for param in solution.params}
    args = (p["model"], p["gpu"], p["tp"], p["context"], p["reserve"])
    assert solution.expected["users_16"] == math.floor(_users_by_hand(*args, 2))
    assert solution.expected["users_8"] == math.floor(_users_by_hand(*args, 1))
    usable = p["gpu"].hbm_gb * 1e9 * GPU_MEMORY_UTILIZATION - p["reserve"]
    weights = p["model"].params_b * 1e9 * 2 / p["tp"]
    if weights >= usable:
        assert solution.expected["users_16"] == 0
        assert solution.expected["regime"] == "weights-do-not-fit"
        return
    # The regime's claim: weights above half the usable memory <=> doubling TP more than triples the users.
    gain = _users_by_hand(p["model"], p["gpu"], 2 * p["tp"], p["context"], p["reserve"], 2) / _users_by_hand(*args, 2)
    assert solution.sheet.results["doubling_gain"] == pytest.approx(gain, rel=1e-9)
    assert (solution.expected["regime"] == "weight-dominated") == (gain > 3)


def test_users_per_gpu_70b_needs_four_h100s_in_bf16(variant):
    """The familiar figure: 141 GB of bf16 weights leave no KV room on 2 x H100, but fp8 does."""
    expected = variant("users-per-gpu@default+tp=2").expected
    assert expected["users_16"] == 0
    assert expected["users_8"] > 0
    assert expected["regime"] == "weights-do-not-fit"


def test_users_per_gpu_pinned_seed(variant):
    solution = variant("users-per-gpu@0")
    assert [p.raw for p in solution.params] == ["llama-3.1-405b", "h200-sxm", 8, 14080, 7.5]
    assert solution.expected["users_16"] == 19
    assert solution.expected["users_8"] == 149
    assert solution.expected["regime"] == "weight-dominated"


# --- kv-cache-block-count ------------------------------------------------------------------


def test_block_count_default(variant):
    """Llama-3-70B on 4 x H100, bf16, block 16, 2 GiB activation peak, 1 GiB non-torch."""
    results = variant("kv-cache-block-count@default").sheet.results
    assert results["available"] == pytest.approx(72e9 - 35.275e9 - 3 * GiB)  # 31.2 GiB
    assert results["page_bytes"] == 16 * 1024  # 2 x 16 x 2 heads x 128 x 2 B
    assert results["block_bytes"] == 1.25 * 2**20  # x 80 layers
    assert results["num_blocks"] == 25_561
    assert results["blocks_per_sequence"] == 512
    assert results["max_sequences"] == 49
    assert results["regime"] == "weight-limited"


def test_block_page_size_matches_vllm_formula(variant):
    """vLLM's page_size_bytes for Llama-3-8B in bf16, block 16, one GPU: 2 x 16 x 8 x 128 x 2 = 64 KiB."""
    results = variant("kv-cache-block-count@default+model=llama-3-8b+tp=1").sheet.results
    assert results["page_bytes"] == 65_536
    assert results["block_bytes"] == 65_536 * 32


def _vllm_block_count(model, gpu, tp: int, weight_bytes: float, kv_bytes: float, block_size: int,
                      activation_peak: float, non_torch: float, context: int) -> tuple[int, int]:
    """vLLM's integer code path (gpu_worker, kv_cache_interface, kv_cache_utils) in plain Python."""
    requested_memory = gpu.hbm_gb * 1e9 * GPU_MEMORY_UTILIZATION
    non_kv_cache_memory = model.params_b * 1e9 * weight_bytes / tp + activation_peak + non_torch
    available_memory = int(requested_memory - non_kv_cache_memory)
    page_size = int(2 * block_size * (model.kv_heads // tp) * model.head_dim * kv_bytes)
    num_blocks = available_memory // page_size // model.layers
    blocks_per_request = -(-context // block_size)
    return num_blocks, num_blocks // blocks_per_request


@pytest.mark.parametrize("seed", range(20))
def test_block_count_matches_vllm_code_path(variant, seed):
    solution = variant(f"kv-cache-block-count@{seed}")
    p = {param.name: param.value for param in solution.params}
    dtype_bytes = {"bf16": 2, "fp8": 1}
    blocks, sequences = _vllm_block_count(
        p["model"], p["gpu"], p["tp"], dtype_bytes[p["weight_dtype"]], dtype_bytes[p["kv_dtype"]],
        p["block_size"], p["activation_peak"], p["non_torch"], p["context"])
    assert solution.expected["num_blocks"] == blocks
    assert solution.expected["max_sequences"] == sequences
    weights = p["model"].params_b * 1e9 * dtype_bytes[p["weight_dtype"]] / p["tp"]
    limited = "weight-limited" if weights > p["activation_peak"] + p["non_torch"] else "activation-limited"
    assert solution.expected["regime"] == limited


def test_block_count_pinned_seed(variant):
    solution = variant("kv-cache-block-count@0")
    assert [p.raw for p in solution.params] == ["llama-3.1-405b", "h200-sxm", 4, "fp8", "bf16", 16, 8.2, 1.8, 4600]
    assert solution.expected["num_blocks"] == 7120
    assert solution.expected["max_sequences"] == 24
    assert solution.expected["regime"] == "weight-limited"
