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


# Review 7 (read7/fp8-block-scale-mainloop.md), one test per finding.

INSIDE = "it applies the scales inside the MMA: no temporary accumulator, no FMA per output"
AS_IS = "it could take this checkpoint's scales as they are"
SHORTER = "moving the scales into it would shorten this GEMM"
ROUNDED = "this checkpoint's scales would have to be rounded to powers of two, and the model evaluated again"


def test_no_software_promotion_of_ue8m0_scales_on_blackwell(variant):
    """Finding 1: a B200 opening with UE8M0 scales asked why the tensor cores cannot apply scales its block-scaled
    MMA takes as they are. B200 draws carry FP32 scales (CUTLASS's sm100 blockwise path); only the push's what-if
    puts a UE8M0 checkpoint on B200, and there the select says the hardware could take them."""
    solution = variant("fp8-block-scale-mainloop@default+gpu=b200+scale_dtype=ue8m0")
    assert any("only the push's what-if" in reason for _, reason in solution.sheet.refusals_if_asked)
    for seed in range(60):
        solution = variant(f"fp8-block-scale-mainloop@{seed}")
        if solution.param("gpu").raw == "b200":
            assert solution.param("scale_dtype").raw == "fp32"
    pushed = variant("fp8-block-scale-mainloop@default+scale_dtype=ue8m0+gpu=b200+scale_block=32")
    assert pushed.sheet.results["block_scaled"][AS_IS] is True
    plan = pushed.question.answer("main_loop").points
    assert any("FP32 scales like these still take the software promotion" in point for point in plan)


def test_the_push_select_has_no_option_fixed_by_the_push(variant):
    """Finding 2: 'finer than this variant's' was false in every push to N_C = 32 (and its 32 a constant in the
    parameter table). The options left vary over the pushes: the scales taken as they are with the checkpoint's
    format, the shortening with the side the push lands on."""
    options = {option for seed in range(5) for option in variant(f"fp8-block-scale-mainloop@{seed}").sheet.results[
        "block_scaled"]}
    assert options == {INSIDE, AS_IS, SHORTER, ROUNDED}
    back = variant("fp8-block-scale-mainloop@default+gpu=b200+scale_block=128").sheet.results["block_scaled"]
    forth = variant("fp8-block-scale-mainloop@default+gpu=b200+scale_block=32").sheet.results["block_scaled"]
    assert (back[SHORTER], forth[SHORTER]) == (False, True)


def test_stage_three_asks_the_serial_time_not_a_copy_of_the_opening(variant):
    """Finding 3: in a hidden draw the overlapped GEMM time equals the opening's key; stage 3 asks the time with
    the promotion in series instead, and the overlapped time only in the push."""
    solution = variant("fp8-block-scale-mainloop@default")
    stages = solution.question.stages
    assert "t_serial" in stages[2].ask and "gemm_time" not in stages[2].ask
    assert all("gemm_time" in stage.ask for stage in stages[3:])
    results = solution.sheet.results
    assert results["t_serial"] == pytest.approx(results["t_ideal"] * 1.25)


def test_a_kernel_ceiling_says_why_it_runs_at_the_peak(variant):
    """Finding 4: the bank's FP8 step efficiency (50%) is an engine's end to end; a kernel question prices the
    ceiling, and says where DeepGEMM's other 31% goes."""
    text = " ".join(variant("fp8-block-scale-mainloop@default").sheet.assumptions)
    assert "not an engine step" in text and "69%" in text and "WGMMA" in text


def test_blackwell_overlap_is_not_two_warpgroups(variant):
    """Finding 5: on Blackwell the MMA issues into TMEM and promotion warps read it out with tcgen05.ld; the TMEM
    read bandwidth is named as a limit left out."""
    sheet = variant("fp8-block-scale-mainloop@default+gpu=b200").sheet
    why = next(step.why for step in sheet.steps if step.key == "overlap_ceiling")
    assert "TMEM" in why and "warpgroup" not in why
    assert any("TMEM read bandwidth" in text for text in sheet.assumptions)


def test_weight_scales_keep_128_rows(variant):
    """Finding 6: square N_C × N_C weight blocks at N_C = 32 would not let a 128-column tile share one scale; the
    weight scales keep 128 rows of N_w and change only along K."""
    text = " ".join(variant("fp8-block-scale-mainloop@default").sheet.assumptions)
    assert "per 128 rows of N_w" in text and "square" not in text


def test_weight_dimensions_are_not_the_tiles_n(variant):
    """Finding 7: the parameter table called the weight's rows N, the tile's columns N too."""
    labels = {param.name: param.label for param in variant("fp8-block-scale-mainloop@default").params}
    assert labels["n"] == "weight rows (N_w)" and labels["k"] == "reduction length (K_w)"


def test_no_constant_in_the_table_and_the_b200_rate_says_its_source(variant):
    """Finding 8: MXFP8's 32 was a parameter; B200's FLOP per clock rests on an unpublished clock."""
    solution = variant("fp8-block-scale-mainloop@default+gpu=b200")
    assert "mx_block" not in {param.name for param in solution.params}
    given = next(g for g in solution.sheet.givens if g.symbol == "F_fp8")
    assert "publishes no B200 clock" in given.label


def test_the_stem_keeps_128_weight_rows_per_scale(variant):
    """Finding 6, in the words: the stem said N_C × N_C weight blocks."""
    prompt = " ".join(variant("fp8-block-scale-mainloop@default+gpu=b200+scale_block=32").prompt.split())
    assert "per 128 × 32 weight block" in prompt and "32 × 32" not in prompt


def test_the_push_to_mx_scales_says_why_the_gpu_is_b200(variant, catalog):
    """read12 #4: from an H100 opening the push moves the GPU and the scale block together, but its line only named
    B200 in passing ('... on B200 HGX'), as if the GPU had been there all along; it now says the MX scales are for the
    B200 build, and reads the same from a B200 opening."""
    from solvers.interview import stage_run
    for code in ("fp8-block-scale-mainloop@default", "fp8-block-scale-mainloop@default+gpu=b200"):
        run = stage_run(variant(code), catalog, 3)
        assert run is not None and run.declared and "scale_block" in run.moved
        assert run.say.startswith("For the B200 HGX build the quant team wants scales every 32 along K, MXFP8's "
                                  "block, still fp32")


def test_the_push_select_keeps_the_pair_that_keeps_it_answerable(variant):
    """read12 #2, declined: 'as they are' and 'rounded to powers of two' are each other's negation, but the pair is
    what keeps a false option in the list. An exposed push on FP32 scales has the fact, the shortening and the
    rounding all true; without 'as they are' every listed option would hold and the draw would be refused."""
    results = variant("fp8-block-scale-mainloop@default+gpu=b200+scale_block=32").sheet.results["block_scaled"]
    assert results[INSIDE] and results[SHORTER] and results[ROUNDED] and results[AS_IS] is False
