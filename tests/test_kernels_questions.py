"""Golden checks for the kernel questions (group N) and the per-SM figures they read from hardware.yaml."""
from __future__ import annotations

import pytest

PER_SM_GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200")


@pytest.mark.parametrize("key", PER_SM_GPUS)
def test_per_sm_figures_rebuild_the_dense_peaks(catalog, key):
    """SMs x tensor FLOP per clock per SM x the tensor clock = the datasheet's dense peak, per dtype."""
    gpu = catalog.get("gpus", key)
    per_clock = gpu.sms * gpu.tensor_clock_ghz * 1e9 / 1e12
    assert gpu.bf16_dense_tflops == pytest.approx(gpu.bf16_flop_per_clk_sm * per_clock, rel=1e-3)
    if "fp8_dense_tflops" in gpu:
        assert gpu.fp8_dense_tflops == pytest.approx(gpu.fp8_flop_per_clk_sm * per_clock, rel=1e-3)


def test_fa3_special_function_throughput(catalog):
    """FlashAttention-3 sec. 3.1: H100 SXM5 has 3.9 TFLOPS of special functions (16 x 132 x 1.83 GHz)."""
    gpu = catalog.get("gpus", "h100-sxm")
    assert gpu.mufu_per_clk_sm * gpu.sms * gpu.tensor_clock_ghz * 1e9 == pytest.approx(3.9e12, rel=0.01)


def test_tmem_is_128_lanes_by_512_columns_of_32_bits(catalog):
    assert catalog.get("gpus", "b200").tmem_kib_sm * 1024 == 128 * 512 * 4
    assert catalog.get("gpus", "b200").regfile_kib_sm * 1024 == 65536 * 4
