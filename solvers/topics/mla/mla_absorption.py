"""Absorbed MLA on the roofline - the bill per cached token, and a regime GQA decode rarely visits."""
from __future__ import annotations

from solvers.derivation import Sheet, Side
from solvers.formulas.common import (
    compute_efficiency,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_kv_bytes,
    given_matmul_peaks,
    given_peak_flops,
)
from solvers.formulas.steptime import given_step_bandwidth
from solvers.sheetmath import ceil_of, max_of
from solvers.units import format_number

FP8_MATH = "with an fp8 latent cache (fp8 math) it would sit at or past the ridge"
FP8_DEQUANT = "with an fp8 latent cache dequantized to bf16 math it would sit at or past the ridge"
CONTEXT = "over a context four times as long it would sit on the other side of the ridge"
PEAK = "on a GPU with twice the peak (the same bandwidth) it would still sit at or past the ridge"
CHUNK = ("prefilling a follow-up turn of {prefill_chunk} over this cache, up-projecting the cached latents would "
         "cost fewer FLOPs than absorbing")
DATASHEET = "at the datasheet's peak and bandwidth (no efficiencies) it would sit on the same side of the ridge"


def _statements(s: Sheet, p, I_a, ridge, ratio_bf16, ratio_fp8, raw, q_x) -> None:
    """Each statement decided exactly on the sheet's values (a tie counts as at the ridge). `ratio_bf16` and
    `ratio_fp8` are the ridges (η·P/(η_bw·BW)) at bf16 and at fp8 math on this GPU."""
    fp8 = p.kv_dtype == "fp8"

    def past(intensity, against) -> bool:
        return s.compare(intensity, against) >= 0

    def shown(intensity, against) -> str:
        return (f"{format_number(s.evaluate(intensity), 3)} FLOP/B against a ridge of "
                f"{format_number(s.evaluate(against), 3)}")

    I_fp8 = I_a if fp8 else 2 * I_a  # half the bytes, the same FLOPs
    # Over an fp8 cache this option is the variant itself (the regime, asked at the opening): not listed there.
    s.judge("statements", FP8_MATH, None if fp8 else past(I_fp8, ratio_fp8),
            "half the bytes, the fp8 peak at its own efficiency: " + shown(I_fp8, ratio_fp8))
    s.judge("statements", FP8_DEQUANT, past(I_fp8, ratio_bf16),
            "half the bytes, the bf16 ridge: " + shown(I_fp8, ratio_bf16))
    # read3-R1: the head split answered the TP push's regime a stage early; the context is the conceptual anchor in its
    # place: the intensity is per cached token, so no context length moves it.
    s.judge("statements", CONTEXT, False,
            "the FLOPs and the bytes are both per cached token: a longer context multiplies both, the time grows, "
            "the intensity does not", fact=True)
    s.judge("statements", PEAK, past(I_a, 2 * ridge), "the ridge doubles: " + shown(I_a, 2 * ridge))
    pays = s.compare(s.param("q_chunk", "prefill_chunk"), q_x) > 0
    s.judge("statements", CHUNK, pays, f"{format_number(p.prefill_chunk)} new query tokens against the crossover "
            f"d_c·d_h/(d_c − d_h) = {format_number(s.value(q_x), 4)}: " + ("decompress for prefill" if pays else
                                                                          "absorbing still costs fewer FLOPs"))
    same = past(I_a, ridge) == past(I_a, raw)
    s.judge("statements", DATASHEET, same, "the datasheet ridge: " + shown(I_a, raw)
            + ("" if same else "; the efficiencies decide this draw"))


def _regime(s: Sheet, I_a, ridge) -> None:
    """The regime line is shown at the opening: it names no lever the later select judges (fp8, the head split)
    and no GQA figure the third stage asks; those are in the select's reasons."""
    at = f"{s.text(I_a, 3)} against a ridge of {format_number(s.value(ridge), 3)}"
    s.regime_by(I_a, ridge, tie="above", above=Side(
        "compute-bound",
        f"Absorbed attention runs at {at}: the tensor cores, not HBM, set its time. Each extra head on the GPU "
        "or query token now costs time.",
        "Below the ridge the latent reads set the time: fewer heads per GPU (TP attention) or one query token a "
        "step puts it there, and then a smaller cache speeds it up."),
        below=Side(
        "memory-bound",
        f"Absorbed attention runs at {at}: reading the latents sets its time. More query tokens per step (speculative "
        "drafts, MTP where the model ships it) ride almost free until the ridge.",
        "Past the ridge the math binds: more heads per GPU (data-parallel attention) or more query tokens per "
        "step push it there, and then only FLOP/s speeds it up."))


def solve(p, s: Sheet) -> None:
    model, gqa = p.model, p.gqa_model
    h = given_config(s, model, "heads")
    n = s.param("TP_a", "tp_attn")
    q = s.param("q", "query_tokens")
    d_c = given_config(s, model, "kv_lora_rank")
    d_r = given_config(s, model, "qk_rope_head_dim")
    d_h = s.given("d_h", model.head_dim, "", "per-head key (no RoPE) and value dim")
    b = given_kv_bytes(s, p.kv_dtype)
    P, P_att = given_matmul_peaks(s, p.gpu, "bf16", p.kv_dtype)
    eta_c, eta_att = given_compute_efficiencies(s, p.gpu, "bf16", p.kv_dtype)
    BW = given_hbm_bandwidth(s, p.gpu)
    eta_bw = given_step_bandwidth(s)
    flop_rate = s.step("", "Attention's achieved FLOP rate", "R_att", eta_att * P_att, "TFLOP/s",
                       f"the step model's share of the {p.kv_dtype} peak: attention's matmuls run in the cache's "
                       "dtype")
    byte_rate = s.step("", "Achieved HBM bandwidth", "R_bw", eta_bw * BW, "TB/s",
                       "the step model's share of the datasheet bandwidth")

    h_g = s.step("heads_per_gpu", "Query heads on each GPU", "h", h / n, "", "attention heads split over TP_a GPUs")
    F = s.step("flops", "FLOPs per cached token per layer (absorbed)", "F_abs", 2 * h * q * (2 * d_c + d_r) / n,
               "FLOP", "each head and query token: a multiply-add over d_c + d_r for the score, over d_c for the "
               "value sum")
    M = s.step("bytes", "Bytes per cached token per layer", "M_abs", (d_c + d_r) * b, "B",
               "the latent and the RoPE key, read once for every head and query token on the GPU")
    I_a = s.step("intensity", "Arithmetic intensity of absorbed attention", "I_abs", F / M, "FLOP/B",
                 "FLOPs grow with heads × query tokens; the bytes do not")
    ridge = s.step("ridge", "Ridge point at the step model's ceilings", "I_ridge", flop_rate / byte_rate, "FLOP/B",
                   "the achieved FLOP rate over the achieved bandwidth, as every step of the bank is timed")
    T = s.param("T", "context")
    t_abs = s.step("t_layer", "One layer's attention over the sequence's cache, on a GPU", "t_layer",
                   T * max_of(F / flop_rate, M / byte_rate), "us",
                   "each cached token takes the longer of its FLOPs at the achieved rate and its bytes at the "
                   "achieved bandwidth")
    L = given_config(s, model, "layers")
    s.step("group_cache", "The sequence's latent cache, summed over the GPUs that hold it", "C_group",
           n * L * T * M, "GiB",
           "split by heads, every GPU keeps the whole latent, which has no head dimension: TP_a copies of "
           "L·T·M, where data-parallel attention keeps one")
    s.step("q_min", "Fewest query tokens per step that make it compute-bound", "q_min",
           ceil_of(ridge * M / (2 * h_g * (2 * d_c + d_r))), "tokens",
           "each query token adds the same FLOPs over the same bytes")

    # Unabsorbed: up-project each cached latent every step, or cache per-head K and V.
    U = s.step("upproj", "Up-projection of one cached latent to per-head K and V, each step", "F_up",
               2 * d_c * h_g * d_h * 2, "MFLOP",
               "W_UK and W_UV each map the d_c latent to d_h for every head on the GPU, a multiply-add per weight, "
               "once per cached token whatever the query count")
    weight_rate = s.step("", "The up-projection's achieved FLOP rate", "R_w", eta_c * P, "TFLOP/s",
                         "W_UK and W_UV taken as bf16 weights: the bf16 peak at the step model's share")
    s.step("t_upproj", "One layer's up-projection over the sequence's cache, on a GPU", "t_up",
                  T * U / weight_rate, "us", "every cached latent, every step, before attention even starts")
    F_d = s.step("flops_decompressed", "Attention FLOPs per cached token per layer over per-head K/V", "F_dec",
                 2 * h_g * q * (d_h + d_r + d_h), "FLOP",
                 "scores over d_h + d_r, values over d_h, for every head and query token")
    M_d = s.step("cache_decompressed", "A per-head K/V cache, bytes per token per layer on the GPU", "M_dec",
                 h_g * (d_h + d_r + d_h) * b, "KiB",
                 "K (d_h + d_r, the RoPE key copied to every head as a standard MHA cache keeps it) and V (d_h) "
                 "for every head on the GPU")
    t_dec = s.step("t_decompressed", "One layer's attention over a per-head K/V cache of the sequence, on a GPU",
                   "t_dec", T * max_of(F_d / flop_rate, M_d / byte_rate), "us",
                   "the same roofline over the per-head cache: far fewer FLOPs, many times the bytes")
    s.step("bill", "Absorbed ÷ per-head attention FLOPs per cached token", "β", F / F_d, "",
           "the price of attending in the latent space: d_c is four times d_h")
    s.step("upproj_ratio", "Up-projection ÷ absorbed attention FLOPs", "ρ_up", U / F, "",
           "decompressing every cached latent each step costs this many absorbed kernels")
    s.step("", "Bytes saved by caching the latent", "σ", M_d / M, "", "every head on the GPU shares one latent")
    q_x = s.step("q_cross", "Query tokens a step where up-projecting and absorbing cost the same FLOPs", "q_x",
           2 * d_c * d_h * 2 / (2 * (2 * d_c + d_r) - 2 * (2 * d_h + d_r)), "tokens",
           "per cached token and head, absorbing pays 2(2d_c + d_r) a query token; up-projecting pays 4·d_c·d_h "
           "once and 2(2d_h + d_r) a query token: they meet at d_c·d_h/(d_c − d_h), whatever the heads")

    g = s.given("g", gqa.heads // gqa.kv_heads, "", f"{gqa.name} query heads per KV head")
    s.step("gqa_intensity", f"{gqa.name} GQA attention intensity at q query tokens a step", "I_GQA",
                 2 * g * q / b, "FLOP/B",
                 "each of the g query heads pays 4·d_h FLOPs per query token against 2·d_h·b bytes of K and V "
                 "per KV head: 2·g·q/b, at the step's q query tokens as the MLA kernel is")
    s.step("gqa_q_min", f"{gqa.name}: fewest query tokens per step that make it compute-bound", "q_GQA",
           ceil_of(ridge * b / (2 * g)), "tokens", "the group size sets the intensity per query token")

    if p.kv_dtype == "fp8":
        fp8_ridge = ridge
    else:  # the fp8 peak at its own share, for the statement that asks about an fp8 cache
        P8 = given_peak_flops(s, p.gpu, "fp8", "P_fp8")
        eta8 = s.given("η_fp8", compute_efficiency("fp8"), "%", "achievable fraction of the fp8 dense peak "
                       "(step-compute-fp8)")
        fp8_ridge = eta8 * P8 / byte_rate
    _statements(s, p, I_a, ridge, eta_c * P / byte_rate, fp8_ridge, P_att / BW, q_x)
    s.assume("Per cached token and layer, on one GPU, for one sequence: the latent is read from HBM once per step "
             "and every head and query token on the GPU reuses it from on-chip memory (FlashMLA).")
    s.assume("The query's absorption (q·W_UK) and the output's (·W_UV) are per query token, not per cached token, "
             "so they are left out; so are softmax and the RoPE of the query.")
    s.assume("The bank's one step model prices both sides: attention's matmuls at the share of the peak of the "
             "cache's dtype (an fp8 cache runs fp8 math, the queries quantised to fp8, as million-token-context "
             "takes it), the reads at its share of the HBM bandwidth. The select also asks about the other fp8 "
             "kernel, FlashMLA's FP8 path, which reads fp8 latents and dequantizes them to bf16 math: fp8 bytes at "
             "the bf16 ridge. A split of the heads over TP_a GPUs gives "
             "each GPU 1/TP_a of them and the whole latent.")
    s.assume("Grounding: FlashMLA (docs/20250422-new-kernel-deep-dive.md, README) measures 660 TFLOP/s (67% of "
             "H800's 989) compute-bound with 128 query heads a token, and 3,000 GB/s (90% of 3.35 TB/s) "
             "memory-bound: a ridge of 220 FLOP/B, by the step model's 221 on the same silicon (H100), and under "
             "one token's 242, compute-bound as measured. At the datasheet's 295 it would read memory-bound.")
    s.assume("The GQA model's K/V cache is taken in the same dtype as the latent cache.")
    s.assume("The deployment: the attention layout drawn is one part of a larger expert-parallel serving group. "
             "DeepSeek-V3's and Kimi-K2's FP8 weights (about 0.7 and 1 TB) need two nodes of H100, or at least a "
             "node of H200, B200 or MI300X; what follows is per GPU of that group.")
    s.assume("W_UK and W_UV (kv_b_proj) are priced as bf16 weights at the bf16 peak's share. DeepSeek-V3 ships "
             "them in FP8 (block-scaled); at the fp8 peak's share the up-projection would take 0.6x as "
             "long on Hopper (60% of 989 against 50% of 1,979): still hundreds of absorbed kernels.")
    s.slip("x2: FLOPs not doubled (a multiply-add counted once)", 0.5,
           on=("flops", "intensity", "gqa_intensity"))
    s.slip("every head of the model, not this GPU's share", p.tp_attn, on=("t_upproj", "t_decompressed"))
    s.slip("one copy of the latent for the group, not one on every GPU", 1 / p.tp_attn, on="group_cache")
    s.slip("half: only K up-projected (W_UV left out), or a multiply-add counted once", 0.5, on="t_upproj")
    rope_once = T * max_of(F_d / flop_rate, h_g * (2 * d_h + d_r / h_g) * b / byte_rate)
    s.slip("RoPE key cached once, not copied to every head", s.evaluate(rope_once) / s.value(t_dec),
           on="t_decompressed")
    s.slip("datasheet peak and bandwidth, no efficiencies",
           s.evaluate(T * max_of(F / P_att, M / BW)) / s.value(t_abs), on="t_layer")
    s.slip("latent counted without the RoPE key", s.evaluate((d_c + d_r) / d_c), on="intensity")
    _regime(s, I_a, ridge)
