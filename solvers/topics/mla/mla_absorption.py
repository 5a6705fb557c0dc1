"""Absorbed MLA on the roofline - the bill per cached token, and a regime GQA never visits."""
from __future__ import annotations

from solvers.derivation import Sheet, Side
from solvers.models.common import given_config, given_hbm_bandwidth, given_kv_bytes, given_peak_flops
from solvers.sheetmath import ceil_of, max_of
from solvers.units import format_number


def _statements(s: Sheet, p, I_a, ridge, I_g, q, n) -> None:
    """Each statement decided exactly on the sheet's values (a tie counts as at the ridge)."""
    fp8 = p.kv_dtype == "fp8"

    def past(intensity) -> bool:
        return s.compare(intensity, ridge) >= 0

    def shown(intensity) -> str:
        return f"{format_number(s.evaluate(intensity), 3)} FLOP/B against a ridge of {format_number(s.value(ridge), 3)}"

    s.judge("statements", "one more query token per step (MTP or a draft token) would put it at or past the ridge",
            past(I_a * (q + 1) / q), f"{shown(I_a * (q + 1) / q)} at {format_number(p.query_tokens + 1)} query tokens")
    fp8_intensity = I_a if fp8 else 2 * I_a
    s.judge("statements", "with an fp8 latent cache (bf16 math) it would sit at or past the ridge",
            past(fp8_intensity), ("the cache is already fp8: " if fp8 else "half the bytes: ") + shown(fp8_intensity))
    s.judge("statements", "with its heads split over twice as many GPUs it would still sit at or past the ridge",
            past(I_a / 2), "each GPU keeps the whole latent for half the heads: " + shown(I_a / 2))
    bound = not past(I_a)
    s.judge("statements", "a GPU with twice the HBM bandwidth (the same peak) would run it faster", bound,
            shown(I_a) + ("; the reads set its time" if bound else "; the math sets its time, the reads already wait"))
    one = I_a / q * n  # one query token, every head on this GPU
    s.judge("statements", "with one query token and every head on one GPU it would sit at or past the ridge",
            past(one), "data-parallel attention, no draft token: " + shown(one))
    s.judge("statements", "on a GPU with twice the peak (the same bandwidth) it would still sit at or past the ridge",
            s.compare(I_a, 2 * ridge) >= 0, f"{s.text(I_a, 3)} against a ridge of "
            f"{format_number(2 * s.value(ridge), 3)}")
    s.judge("statements", "the GQA model's attention at eight times this many query tokens would sit at or past "
            "the ridge", past(8 * I_g), f"{p.gqa_model.name}: " + shown(8 * I_g))


def _regime(s: Sheet, I_a, ridge, I_g, gqa_name: str) -> None:
    at = f"{s.text(I_a, 3)} against a ridge of {format_number(s.value(ridge), 3)}"
    s.regime_by(I_a, ridge, tie="above", above=Side(
        "compute-bound",
        f"Absorbed attention runs at {at}: the tensor cores, not HBM, set its time, a regime decode attention "
        "never reaches with GQA. Each extra head or query token now costs time; FP8 math or fewer heads per GPU "
        "would help, a cheaper cache would not.",
        "Below the ridge the latent reads set the time: fewer heads per GPU (TP attention) or one query token a "
        "step puts it there, and then a smaller cache (fp8 latents) speeds it up."),
        below=Side(
        "memory-bound",
        f"Absorbed attention runs at {at}: reading the latents sets its time, though at "
        f"{format_number(s.evaluate(I_a / I_g), 3)}x the intensity of {gqa_name}'s GQA attention. More query "
        "tokens per step (MTP, speculative drafts) ride almost free until the ridge.",
        "Past the ridge the math binds: more heads per GPU (data-parallel attention), more query tokens per "
        "step or an fp8 cache push it there, and then only FLOP/s speeds it up."))


def solve(p, s: Sheet) -> None:
    model, gqa = p.model, p.gqa_model
    h = given_config(s, model, "heads")
    n = s.param("TP_a", "tp_attn")
    q = s.param("q", "query_tokens")
    d_c = given_config(s, model, "kv_lora_rank")
    d_r = given_config(s, model, "qk_rope_head_dim")
    d_h = s.given("d_h", model.head_dim, "", "per-head key (no RoPE) and value dim")
    b = given_kv_bytes(s, p.kv_dtype)
    P = given_peak_flops(s, p.gpu, "bf16")
    BW = given_hbm_bandwidth(s, p.gpu)

    h_g = s.step("heads_per_gpu", "Query heads on each GPU", "h", h / n, "", "attention heads split over TP_a GPUs")
    F = s.step("flops", "FLOPs per cached token per layer (absorbed)", "F_abs", 2 * h * q * (2 * d_c + d_r) / n,
               "FLOP", "each head and query token: a multiply-add over d_c + d_r for the score, over d_c for the "
               "value sum")
    M = s.step("bytes", "Bytes per cached token per layer", "M_abs", (d_c + d_r) * b, "B",
               "the latent and the RoPE key, read once for every head and query token on the GPU")
    I_a = s.step("intensity", "Arithmetic intensity of absorbed attention", "I_abs", F / M, "FLOP/B",
               "FLOPs grow with heads × query tokens; the bytes do not")
    ridge = s.step("ridge", "Ridge point (bf16)", "I_ridge", P / BW, "FLOP/B",
                   "the math runs in bf16 whatever the cache dtype")
    T = s.param("T", "context")
    s.step("t_layer", "One layer's attention over the sequence's cache, on a GPU", "t_layer",
           T * max_of(F / P, M / BW), "us",
           "each cached token takes the longer of its FLOPs at the bf16 peak and its bytes at the HBM bandwidth")
    s.step("q_min", "Fewest query tokens per step that make it compute-bound", "q_min",
           ceil_of(ridge * M / (2 * h_g * (2 * d_c + d_r))), "tokens",
           "each query token adds the same FLOPs over the same bytes")
    U = s.step("upproj", "Up-projection of one cached latent to per-head K and V, each step", "F_up",
               2 * d_c * h_g * d_h * 2, "MFLOP",
               "W_UK and W_UV each map the d_c latent to d_h for every head on the GPU, a multiply-add per weight, "
               "once per cached token whatever the query count")
    F_d = s.step("flops_decompressed", "Attention FLOPs per cached token per layer over per-head K/V", "F_dec",
                 2 * h_g * q * (d_h + d_r + d_h), "FLOP",
                 "scores over d_h + d_r, values over d_h, for every head and query token")
    M_d = s.step("cache_decompressed", "A per-head K/V cache, bytes per token per layer on the GPU", "M_dec",
                 h_g * (d_h + d_r + d_h) * b, "KiB",
                 "K (d_h + d_r, the RoPE key copied to every head as the unabsorbed kernel reads it) and V (d_h) "
                 "for every head on the GPU")
    s.step("bill", "Absorbed ÷ per-head attention FLOPs per cached token", "β", F / F_d, "",
           "the price of attending in the latent space: d_c is four times d_h")
    s.step("upproj_ratio", "Up-projection ÷ absorbed attention FLOPs", "ρ_up", U / F, "",
           "decompressing every cached latent each step costs this many absorbed kernels")
    s.step("", "Bytes saved by caching the latent", "σ", M_d / M, "", "every head on the GPU shares one latent")

    g = s.given("g", gqa.heads // gqa.kv_heads, "", f"{gqa.name} query heads per KV head")
    I_g = s.step("gqa_intensity", f"{gqa.name} GQA attention intensity at q query tokens a step", "I_GQA",
                 2 * g * q / b, "FLOP/B",
                 "each of the g query heads pays 4·d_h FLOPs per query token against 2·d_h·b bytes of K and V "
                 "per KV head: 2·g·q/b, at the step's q query tokens as the MLA kernel is")
    s.step("gqa_q_min", f"{gqa.name}: fewest query tokens per step that make it compute-bound", "q_GQA",
           ceil_of(ridge * b / (2 * g)), "tokens", "the group size sets the intensity per query token")

    _statements(s, p, I_a, ridge, I_g, q, n)
    s.assume("Per cached token and layer, on one GPU, for one sequence: the latent is read from HBM once per step "
             "and every head and query token on the GPU reuses it from on-chip memory (FlashMLA).")
    s.assume("The query's absorption (q·W_UK) and the output's (·W_UV) are per query token, not per cached token, "
             "so they are left out; so are softmax and the RoPE of the query.")
    s.assume("An fp8 cache is dequantized on the fly and the math stays bf16 (FlashMLA's fp8 path), so the ridge "
             "is the bf16 one; a split of the heads over TP_a GPUs gives each GPU 1/TP_a of them and the whole "
             "latent.")
    s.assume("The ridge is the datasheet's (dense-peaks). FlashMLA's authors (docs/20250422-new-kernel-deep-dive.md) "
             "call the kernel compute-bound from 128 query heads per token on H800, against a throttled 865 "
             "TFLOP/s; at the 660 TFLOP/s and 3.0 TB/s it achieves the ridge is ~220 FLOP/B, under one token's "
             "242. Near the ridge the regime depends on which ceilings one takes.")
    s.assume("The GQA model's K/V cache is taken in the same dtype as the latent cache.")
    s.slip("x2: FLOPs not doubled (a multiply-add counted once)", 0.5,
           on=("flops", "intensity", "gqa_intensity", "flops_decompressed"))
    s.slip("half: only K up-projected (W_UV left out), or a multiply-add counted once", 0.5, on="upproj")
    s.slip("every head of the model, not this GPU's share", p.tp_attn, on=("upproj", "cache_decompressed"))
    s.slip("RoPE key cached once, not copied to every head", s.evaluate((2 * d_h + d_r / h_g) / (2 * d_h + d_r)),
           on="cache_decompressed")
    s.slip("latent counted without the RoPE key", s.evaluate((d_c + d_r) / d_c), on="intensity")
    _regime(s, I_a, ridge, I_g, p.gqa_model.name)

