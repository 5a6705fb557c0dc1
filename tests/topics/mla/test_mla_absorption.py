"""mla-absorption: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from tests.by_hand import DTYPE_BYTES, param_values


def test_mla_absorption_default(variant):
    """DeepSeek-V3, all 128 heads on one H100, bf16 latents, one query token (the keys are pinned in the question
    file): absorption costs 3.4x the FLOPs per cached token of decompressed heads."""
    assert variant("mla-absorption@default").sheet.results["bill"] == pytest.approx(1088 / 320)


@pytest.mark.parametrize("seed", range(40))
def test_mla_absorption_matches_plain_arithmetic(variant, seed):
    """Both sides at the step model's ceilings (bar 8): attention's matmuls at the share of the cache dtype's peak
    (fp8 math over an fp8 cache, matmul-precision), the reads at 80% of HBM bandwidth."""
    solution = variant(f"mla-absorption@{seed}")
    p, r = param_values(solution), solution.sheet.results
    b = DTYPE_BYTES[p["kv_dtype"]]
    heads, q = p["model"].heads / p["tp_attn"], p["query_tokens"]
    flops = 2 * heads * q * (2 * 512 + 64)
    intensity = flops / (576 * b)
    bf16 = 0.6 * p["gpu"].bf16_dense_tflops * 1e12
    rate = bf16 if b == 2 else 0.5 * p["gpu"].fp8_dense_tflops * 1e12
    bandwidth = 0.8 * p["gpu"].hbm_tb_s * 1e12
    ridge = rate / bandwidth
    assert r["intensity"] == pytest.approx(intensity)
    assert r["ridge"] == pytest.approx(ridge)
    assert (r["regime"] == "compute-bound") == (intensity >= ridge)
    # one layer's attention: every cached token at the slower of its math and its read
    assert r["t_layer"] == pytest.approx(p["context"] * max(flops / rate, 576 * b / bandwidth))
    # q_min (a worked step) is the first whole token count at or past the ridge
    q_min = int(r["q_min"])
    assert intensity / q * q_min >= ridge * (1 - 1e-12) and intensity / q * (q_min - 1) < ridge
    # Unabsorbed: W_UK and W_UV (512 -> 128 for each head on the GPU, bf16 weights) once per cached token,
    # whatever q; attention over per-head K (128 + 64) and V (128); a per-head cache of those values
    assert r["upproj"] == pytest.approx(2 * 2 * 512 * 128 * heads)
    assert r["t_upproj"] == pytest.approx(p["context"] * r["upproj"] / bf16)
    assert r["flops_decompressed"] == pytest.approx(2 * heads * q * 320)
    assert r["cache_decompressed"] == pytest.approx(heads * 320 * b)
    assert r["t_decompressed"] == pytest.approx(
        p["context"] * max(r["flops_decompressed"] / rate, r["cache_decompressed"] / bandwidth))
    # the bill: absorbed attention costs more FLOPs than per-head attention, far fewer than decompressing, and
    # reads far fewer bytes than a per-head cache wherever a GPU holds more than two heads
    assert r["flops_decompressed"] < flops < r["upproj"] / 30
    assert r["t_layer"] < r["t_decompressed"] < r["t_upproj"]
    assert r["cache_decompressed"] > 4 * 576 * b
    # where absorption stops paying: d_c·d_h/(d_c − d_h) query tokens, whatever the heads
    assert r["q_cross"] == pytest.approx(512 * 128 / 384)
    group = p["gqa_model"].heads // p["gqa_model"].kv_heads
    assert r["gqa_intensity"] == pytest.approx(2 * group * q / b)  # at this step's q query tokens, not one
    assert r["gqa_q_min"] > 4  # no realistic speculation depth takes GQA attention to the ridge


@pytest.mark.parametrize("seed", range(40))
def test_mla_absorption_push_crosses_from_each_side(variant, seed):
    """The push: a memory-bound kernel goes data-parallel with two query tokens (one draft; read4-R3: four put
    every push at one intensity), a compute-bound one shards its heads over 8 GPUs at its own query tokens
    (nothing else moves, so the words never switch off an MTP that was never on); each lands on the other side of
    the ridge, every draw, at an intensity that moves with the model and the cache's dtype."""
    solution = variant(f"mla-absorption@{seed}")
    r = solution.sheet.results
    code = f"mla-absorption@{seed}+" + ("tp_attn=1+query_tokens=2" if r["regime"] == "memory-bound"
                                        else "tp_attn=8")
    pushed = variant(code)
    assert pushed.sheet.results["regime"] != r["regime"]
    # Both pushes ask the cache (read3-R1: the data-parallel push listed it unasked): sharding the heads copies the
    # whole latent to every GPU; data-parallel attention keeps one copy.
    p = param_values(pushed)
    b = DTYPE_BYTES[p["kv_dtype"]]
    copy = p["model"].layers * p["context"] * 576 * b
    copies = 1 if r["regime"] == "memory-bound" else 8
    assert pushed.sheet.results["group_cache"] == pytest.approx(copies * copy)
    push = next(stage for stage in solution.question.stages
                if stage.when == r["regime"])
    assert "group_cache" in push.ask
    if r["regime"] == "memory-bound":
        heads = p["model"].heads
        assert pushed.sheet.results["intensity"] == pytest.approx(2 * heads * 2 * 1088 / (576 * b))


def test_mla_absorption_asks_the_cache_at_the_drawn_split(variant):
    """read4-R3: the TP_a copies of the latent were only in a derivation; the second stage asks the cache summed
    over the drawn split, so a push to data-parallel attention (one copy) is graded against it."""
    solution = variant("mla-absorption@default+tp_attn=4")
    assert any("group_cache" in stage.ask for stage in solution.question.stages if not stage.when)
    one = variant("mla-absorption@default").sheet.results["group_cache"]
    assert solution.sheet.results["group_cache"] == pytest.approx(4 * one)


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_mla_absorption_opening_gives_no_later_answer_away(variant, seed):
    """The opening's regime line names neither the levers the third stage's select judges (fp8, the head split,
    a cheaper cache) nor the GQA comparison it asks; an fp8 draw does not list 'with an fp8 latent cache (fp8
    math)', which would be the variant itself."""
    solution = variant(f"mla-absorption@{'default' if seed is None else seed}")
    summary = solution.sheet.regime.summary
    for word in ("fp8", "FP8", "GQA", "fewer heads", "cache alone", "intensity of"):
        assert word not in summary, (word, summary)
    fp8_math = "with an fp8 latent cache (fp8 math) it would sit at or past the ridge"
    # read3-R1 (@9603): the head-split option answered the TP push's regime a stage early; no option moves TP now
    assert not any("split" in option for option in solution.sheet.results["statements"])
    if param_values(solution)["kv_dtype"] == "fp8":
        assert solution.sheet.results["statements"][fp8_math] is None
        assert fp8_math not in solution.shown.get("statements", ())


def test_mla_absorption_push_words_hold_on_every_draw(variant, catalog):
    """read12 (rf-m): the memory-bound side's push said "Say each GPU runs all heads (DP attention), at 2 tokens of
    query a step (one speculative draft)": on a draw already at DP attention (@77, Kimi-K2) nothing but the query
    moved, and on a 3-token draw the query fell to 2. The words now state the layout the push lands on."""
    from solvers.interview import stage_run

    seen = set()
    for seed in range(200):
        solution = variant(f"mla-absorption@{seed}")
        if solution.regime_name != "memory-bound":
            continue
        run = next(run for i in range(3, len(solution.question.stages))
                   if (run := stage_run(solution, catalog, i)) is not None and run.kind == "push")
        assert "speculative draft" not in run.say and not run.say.startswith("Say each GPU")
        seen.add(param_values(solution)["tp_attn"])
    assert 1 in seen  # a draw already at DP attention is among them


def test_mla_absorption_title_matches_what_the_gqa_stage_computes(variant):
    """read12 (rf-m): the title said GQA "never" visits the compute-bound side, while stage 3 computes the query
    tokens a step (9 to 20 on these models) that take GQA decode there: rarely, not never."""
    solution = variant("mla-absorption@default")
    assert "never" not in solution.question.title and solution.sheet.results["gqa_q_min"] > 1
