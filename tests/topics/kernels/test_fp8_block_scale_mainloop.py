"""fp8-block-scale-mainloop: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError


def test_deepgemm_measured_time_sits_above_the_overlapped_time(variant):
    """DeepGEMM's release README: 1,358 FP8 TFLOP/s on H800 (H100's SM and clocks) at 4096 x 7168 x 16384 with
    this main loop, overlapped: slower than the model's hidden-promotion time (wave quantization, prologue and
    epilogue are left out), faster than the promotion in series would allow."""
    results = variant("fp8-block-scale-mainloop@default").sheet.results
    measured = 2 * 4096 * 7168 * 16384 / 1358e12
    assert results["gemm_time"] < measured < results["t_serial"] * 1.2
    assert results["gemm_time"] == results["t_ideal"]


@pytest.mark.parametrize("tile_n", [64, 96, 128, 160])
@pytest.mark.parametrize(("gpu", "block"), [("h100-sxm", 128), ("b200", 32), ("b200", 128)])
def test_promotion_share_is_independent_of_the_tile(variant, gpu, block, tile_n):
    results = variant(f"fp8-block-scale-mainloop@default+gpu={gpu}+tile_n={tile_n}+scale_block={block}").sheet.results
    rate = 8192 if gpu == "h100-sxm" else 16384
    assert results["promotion_share"] == rate / (2 * 128 * block)
    assert results["regime"] == ("promotion-exposed" if rate > 2 * 128 * block else "promotion-hidden")


@pytest.mark.parametrize("seed", range(0, 400, 9))
def test_turns_stretch_the_gemm_by_the_promotion_share_only_when_exposed(variant, seed):
    """Compute-bound draws: the overlapped time is the scales-free time times max(1, share), the block-scaled
    MMA shortens exactly the exposed draws, and no draw sits on the FFMA = MMA tie."""
    results = variant(f"fp8-block-scale-mainloop@{seed}").sheet.results
    share = results["promotion_share"]
    assert share != 1
    assert results["gemm_time"] == pytest.approx(results["t_ideal"] * max(1.0, share), rel=1e-9)
    shorter = results["block_scaled"]["moving the scales into it would shorten this GEMM"]
    assert shorter == (results["regime"] == "promotion-exposed")


def test_tie_is_refused(variant):
    with pytest.raises(VariantError, match="no_tie"):
        variant("fp8-block-scale-mainloop@default+scale_block=32")
