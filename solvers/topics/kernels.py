"""Kernel questions (group N): what one SM's units can do per clock, set against what an attention
or GEMM kernel asks of them. Every rate comes from hardware.yaml's per-SM figures."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import tp_all_reduce
from solvers.topics.common import dtype_bytes, peak_flops
from solvers.topics.steptime import engine
from solvers.units import format_number

# --- flash-attention-exp-bound -------------------------------------------------------------

FA3_UTILISATION = 0.75  # FA3's measured share of the H100 bf16 peak at head dim 128 (arXiv:2407.08608)


def tensor_rate(gpu, dtype: str) -> int:
    """Dense tensor FLOP per clock per SM for the operand dtype."""
    return gpu.bf16_flop_per_clk_sm if dtype == "bf16" else gpu.fp8_flop_per_clk_sm


def flash_attention_exp_bound(p, s: Sheet) -> None:
    """Per score element (one query against one key, in one head) the forward pass does 4d matmul
    FLOPs on the tensor cores, one exp2 on the MUFU and a few FP32 instructions on the FMA pipe."""
    d = s.param("d", "head_dim")
    F = s.given("F_tc", tensor_rate(p.gpu, p.dtype), "", f"{p.gpu.name} dense {p.dtype} tensor FLOP per clock per SM")
    E = s.given("R_exp", p.gpu.mufu_per_clk_sm, "", "MUFU exp2 results per clock per SM")
    A = s.given("R_fma", p.gpu.fp32_fma_per_clk_sm, "", "FP32 FMA-pipe results per clock per SM")
    n = s.param("n_fp32", "fp32_ops")

    t_mm = s.step("matmul_clocks", "Tensor-core clocks per score element", "t_mm", 4 * d / F, "",
                  "QKᵀ and PV each do a multiply-add per head-dim element: 4d FLOPs per score")
    t_exp = s.step("", "MUFU clocks per score element", "t_exp", 1 / E, "", "one exp2 per score")
    r_exp = s.step("exp_ratio", "Exp time over matmul time", "r_exp", t_exp / t_mm, "x",
                   f"F_tc/(4d·R_exp): {format_number(s.value(F) / (4 * s.value(E)))}/d on this GPU and dtype")
    s.step("exp_ceiling", "Tensor-peak ceiling with exps and matmuls in series", "u_exp", 1 / (1 + r_exp), "%",
           "the tensor cores idle while each block's exponentials run")
    t_fp = s.step("", "FMA-pipe clocks per score element", "t_fp32", n / A, "", "the softmax's other FP32 work")
    r_fp = s.step("fp32_ratio", "Other FP32 time over matmul time", "r_fp32", t_fp / t_mm, "x",
                  "max, scale-subtract, sum and cast per score, on the FP32 pipe")
    r_sm = s.step("softmax_ratio", "Softmax time over matmul time", "r_sm", r_exp + r_fp, "x",
                  "the exp2 and the FP32 instructions of one score issue from the same warps in a dependent chain")
    u_serial = s.step("serial_ceiling", "Tensor-peak ceiling with the whole softmax in series", "u_serial",
                      1 / (1 + r_sm), "%", "what a kernel that never overlaps softmax with the GEMMs can reach")
    P = s.given("P", peak_flops(p.gpu, p.dtype), "TFLOP/s",
                f"{p.gpu.name} dense {p.dtype} peak ({p.gpu.sms} SMs × F_tc × {p.gpu.tensor_clock_ghz} GHz)")
    serial = s.step("serial_tflops", "Attention TFLOP/s at the serial ceiling", "X_serial", u_serial * P,
                    "TFLOP/s", "the chip's dense peak times the share the serial softmax leaves the tensor cores")
    s.step("overlap_ceiling", "Tensor-peak ceiling with perfect overlap", "u_overlap", min_of(1, 1 / r_sm), "%",
           "overlapped, the longer of the two pipes sets the pace")
    d_star = s.step("boundary_head_dim", "Head dim where softmax and matmuls take equally long", "d_star",
                    F * (1 / E + n / A) / 4, "", "solve 4d/F_tc = 1/R_exp + n/R_fma for d")

    _fa3_techniques(s, s.value(r_exp), s.value(r_sm), p.dtype == "fp8")
    _exp_levers(s, s.value(r_exp), s.value(r_fp), s.value(serial))
    s.assume("Forward pass, per SM: the tensor cores, the MUFU and the FP32 pipe run at their per-clock peaks "
             "(hardware.yaml), the same clock for all three; memory traffic is hidden (attention at long "
             "sequence is compute-bound).")
    s.assume("The FP32 instructions per score beside the exp2: the row max (FMNMX), the scale-and-subtract in "
             "log2 units (FFMA), the row sum (FADD) and the cast of P (F2F); the output rescale, once per row "
             "per K/V block, is left out. The cast is counted at the FP32 rate as the prompt states; the CUDA "
             "guide lists most conversions at 16 per clock per SM, so even packed (two-value) casts rival the exp.")
    s.assume("A score's exp2 and FP32 instructions form one dependent chain, so their times add (the prompt's "
             "model). The MUFU and the FMA pipe are separate units and, across enough warps, overlap: the softmax "
             "then costs the longer of the two, which is what FA4's polynomial exp2 exploits.")
    s.assume("FA2 measures about 35% of the H100 bf16 peak and FA3 75% (740 TFLOP/s) at head dim 128 "
             "(Shah et al., FlashAttention-3, arXiv:2407.08608). FA2 sits below even the serial ceiling: on Hopper "
             "it still runs Ampere's mma.sync and synchronous copies, which the ceiling here does not charge.")
    s.slip("exp counted per FLOP instead of per score (4d FLOPs per score forgotten)", on="exp_ratio",
           factor=s.value(r_exp) / (4 * s.value(d)))
    s.slip("only one matmul (QKᵀ) counted: 2d FLOPs per score", 2.0, on=("exp_ratio", "fp32_ratio"))
    _exp_regime(s, d, d_star, r_sm)


FA3_TECHNIQUES = "fa3_techniques"


def _fa3_techniques(s: Sheet, r_exp: float, r_sm: float, fp8: bool) -> None:
    """What each FA3 technique could hide of this variant's softmax, judged on its ratios, and three facts
    about which stall a technique addresses at all."""
    ratio = f"the softmax takes {format_number(r_sm, 3)}x the matmul time"
    s.judge(FA3_TECHNIQUES, "ping-pong across two warpgroups could hide all of this variant's softmax behind GEMMs",
            r_sm <= 1, ratio + (": the other warpgroup's GEMMs outlast it" if r_sm <= 1 else ": it outlasts them"))
    s.judge(FA3_TECHNIQUES, "twice the tensor rate (FP8) would raise this variant's TFLOP/s under perfect overlap",
            r_sm < 1, ratio + ("; halved GEMMs still hide part of it and finish sooner" if r_sm < 1 else
                               "; the softmax already sets the pace, so halving the GEMMs gains nothing"))
    s.judge(FA3_TECHNIQUES, "ping-pong could hide this variant's exponentials but not the whole softmax",
            r_exp <= 1 < r_sm, f"the exponentials take {format_number(r_exp, 3)}x the matmul time and the whole "
            f"softmax {format_number(r_sm, 3)}x: " + ("the FP32 work beside the exp2 tips it past the GEMMs"
                                                        if r_exp <= 1 < r_sm else "both sit on the same side of 1"))
    s.judge(FA3_TECHNIQUES, "intra-warpgroup pipelining alone, overlapping a block's exponentials with the next "
            "block's QKᵀ GEMM (half the matmuls), could hide them here", r_exp <= 0.5,
            f"the exponentials take {format_number(r_exp, 3)}x the matmul time, "
            + ("within" if r_exp < 0.5 else "exactly" if r_exp == 0.5 else "past") + " the QKᵀ half of it")
    with_fp8 = r_sm if fp8 else 2 * r_sm
    s.judge(FA3_TECHNIQUES, "at FP8's tensor rate the perfectly overlapped ceiling here would fall below half the "
            "tensor peak", with_fp8 > 2, f"at the FP8 rate the softmax takes {format_number(with_fp8, 3)}x the "
            f"matmul time, a ceiling of {format_number(min(100, 100 / with_fp8), 3)}%: FP8 moves the tensor side, "
            "not the softmax, so the exponentials weigh relatively more")
    for option, holds, why in (
        ("producer warps issuing TMA loads (warp specialization) hide the K/V tile loads from HBM", True,
         "a producer warp issues the copies and the consumers only wait on a barrier"),
        ("producer warps issuing TMA loads hide the exponentials", False,
         "TMA moves bytes; the exponentials still run on the consumers' MUFU"),
        ("ping-pong across warpgroups raises the MUFU's exp2 throughput", False,
         "it overlaps the exponentials with GEMMs; the MUFU's rate per clock is fixed"),
    ):
        s.judge(FA3_TECHNIQUES, option, holds, why, fact=True)


FA3_TFLOPS = 740e12  # FA3's measured bf16 forward at head dim 128 on H100 SXM (arXiv:2407.08608)


def _exp_levers(s: Sheet, r_exp: float, r_fp: float, serial: float) -> None:
    """Judged on this variant's ratios: what overlap, a faster tensor core or cheaper exps would do."""
    r_sm = r_exp + r_fp
    pct = lambda u: format_number(100 * u, 3) + "%"  # noqa: E731
    s.judge("levers", "with no overlap the exponentials alone cap the kernel below 75% of the tensor peak",
            1 / (1 + r_exp) < FA3_UTILISATION, f"the exp-only ceiling is {pct(1 / (1 + r_exp))}")
    s.judge("levers", "with the whole softmax in series the kernel stays under half the tensor peak", r_sm > 1,
            f"the serial ceiling is {pct(1 / (1 + r_sm))}")
    s.judge("levers", "even with the softmax in series this variant beats FA3's overlapped H100 measurement "
            "(740 TFLOP/s, bf16, head dim 128)", serial > FA3_TFLOPS,
            f"in series it reaches {format_number(serial / 1e12, 3)} TFLOP/s")
    # Only the MUFU side: the polynomial's ~7 FP32 instructions per emulated exp2 pay off only on an FMA pipe
    # with room to spare, i.e. once the pipes overlap; in series they would eat the gain.
    half = 1 / (1 + r_exp / 2)
    s.judge("levers", "emulating half the exp2s with FMA polynomials, counting only MUFU time, would lift the "
            "exps-in-series ceiling to 75% or more", half >= FA3_UTILISATION,
            f"{pct(half)} with half the MUFU time, against {pct(1 / (1 + r_exp))} now")
    s.judge("levers", "twice the head dim would bring the softmax under half the matmul time", r_sm / 2 < 0.5,
            f"the ratio would be {format_number(r_sm / 2, 3)}x")


def _exp_regime(s: Sheet, d, d_star, r_sm) -> None:
    ratio = format_number(s.value(r_sm), 3)
    s.regime_by(d, d_star, tie="above", above=Side(
        "matmul-bound",
        f"The softmax takes {ratio}x the matmul time: with perfect overlap the GEMMs set the pace, so the "
        "ceiling is the tensor peak and the gap to it is scheduling (FA3's ping-pong and pipelining close it). "
        "Without deliberate overlap (FA2's schedule) the exponentials still cost the share computed above.",
        "Below the boundary head dim (or with a faster tensor core: FP8, Blackwell) the softmax outlasts the "
        "GEMMs: no overlap reaches the peak, and only cheaper exponentials (FMA-polynomial exp2, a faster MUFU) "
        "help."),
        below=Side(
        "softmax-bound",
        f"The softmax takes {ratio}x the matmul time: even perfectly overlapped, the MUFU and the FP32 pipe "
        "set the pace and the tensor cores wait on them. Cheaper exponentials (FA4 emulates part of exp2 with "
        "FMA polynomials), not more overlap, raise the ceiling.",
        "Above the boundary head dim the GEMMs are the longer pipe and overlap alone can reach the peak."))


# --- split-kv-decode-merge ------------------------------------------------------------------

PARTIAL_BYTES = 4  # split-KV kernels keep each partial output and its LSE in FP32

def split_kv_decode_merge(p, s: Sheet) -> None:
    """Decode attention at a small batch: one thread block per (sequence, KV head), the query heads of
    the group packed into it. Splitting each sequence's keys across more blocks fills the SMs; each split
    returns a partial output and its log-sum-exp, and a second pass merges them exactly."""
    e = engine(s, p.model, p.gpu, p.tp, dtype=p.dtype, communication=p.tp > 1, kv_prerequisite=True)
    B = s.param("B", "batch")
    T = s.param("T", "context")
    n_sm = s.given("n_SM", p.gpu.sms, "", f"{p.gpu.name} SMs")
    # KV heads per GPU: the engine's own step (kvcache.kv_heads_per_gpu), carried rather than declared again.
    H_g = s.symbol("H_gpu")
    H = s.given("H_q", p.model.heads, "", "query heads")
    H_kv = s.given("H_kv", p.model.kv_heads, "", "KV heads")
    d = s.given("d_h", p.model.head_dim, "", "head dim")
    L = s.given("L", p.model.layers, "", "layers")

    blocks = s.step("blocks", "Thread blocks without a split", "n_blk", B * H_g, "",
                    "one per sequence and KV head this GPU holds; the query heads sharing a KV head ride in it")
    s.step("fill", "Share of the SMs those blocks occupy", "u_fill", min_of(1, blocks / n_sm), "%",
           "each block runs on one SM; the rest idle through the attention")
    B_star = s.step("boundary_batch", "Batch that fills the SMs without a split", "B_star", n_sm / H_g, "sequences",
                    "solve B·H_gpu = n_SM for B")
    n_split = s.step("splits", "Splits per sequence that fill the SMs", "n_split", ceil_of(n_sm / blocks), "",
                     "the fewest splits with blocks × splits ≥ SMs (1 once the batch alone fills them)")
    tile = s.param("t_kv", "kv_tile")
    tiles = ceil_of(T / tile)  # key tiles per sequence, the last one maybe partial
    per_split = s.step("tiles_per_split", "Key tiles per split", "n_per", ceil_of(tiles / n_split), "",
                       "⌈T/tile⌉ tiles divided by the splits, rounded up (FlashAttention-2's n_blocks_per_split)")
    n_empty = s.step("empty_splits", "Splits left with no keys", "n_empty",
                     n_split - ceil_of(tiles / per_split), "",
                     "the rounding up hands all tiles to the first splits; the ones after them get none")

    # The exact merge, on two of the splits.
    gap = s.param("Δ", "lse_gap")
    s.step("merge_weight", "Weight of the lower-LSE split in the merge", "w_1", 1 / (1 + sympy.exp(gap)), "%",
           "w_i = exp(LSE_i − LSE) with LSE = log Σ exp(LSE_i): here 1/(1 + e^Δ)")
    s.step("merged_lse", "Merged LSE above the larger one", "ΔLSE", sympy.log(1 + sympy.exp(-gap)), "",
           "LSE = LSE_2 + log(1 + e^−Δ): the merged softmax denominator, in log space")

    # Traffic: with splits every split writes its partial output and LSE in FP32 and the merge reads them back;
    # a single split writes the output directly and launches no merge (FlashAttention-2's non-split path).
    b_p = s.given("b_p", PARTIAL_BYTES, "B", "bytes per partial value (FP32)")
    kv_read = s.step("kv_read", "KV bytes each GPU reads per step", "M_KV", e.KV * B * T, "GB",
                     "every sequence's own keys and values, all layers")
    if s.value(n_split) > 1:
        partial = s.step("partial_bytes", "Partial-output traffic per step", "M_part",
                         2 * L * B * H_g * n_split * (H / H_kv) * (d + 1) * b_p, "MB",
                         "per layer, split and query head: d output values and one LSE, written then read by the merge")
    else:
        partial = s.step("partial_bytes", "Partial-output traffic per step", "M_part", sympy.S.Zero, "MB",
                         "one split writes the output itself: no FP32 partials, no merge pass")
    overhead = s.step("partial_overhead", "Partial traffic over the KV read", "r_part", partial / kv_read, "%",
                      "what the split adds to the attention's traffic")

    # Per-user speed, unsplit and split: the weights stream at full bandwidth, the attention at the SMs' share.
    weights = s.step("t_weights", "Weight read per step", "t_W", e.W / e.TP / e.byte_rate, "ms",
                     "each GPU's share of the weights at achievable bandwidth")
    t_att0 = s.step("attention_unsplit", "Attention read without a split", "t_att0",
                    kv_read / (e.byte_rate * min_of(1, blocks / n_sm)), "ms",
                    "only the busy SMs pull from HBM: the KV read gets their share of the bandwidth")
    t_att1 = s.step("attention_split", "Attention read with the splits", "t_att1",
                    (kv_read + partial) / (e.byte_rate * min_of(1, blocks * (n_split - n_empty) / n_sm)), "ms",
                    "the KV read and the partials, on the SMs the splits with keys keep busy (an empty one exits "
                    "at once)")
    t_math = s.step("", "Math time of the step", "t_F", (2 * e.N * B + e.A * B * T) / e.flop_rate, "ms",
                    "2 FLOPs per weight per token plus attention over the context, at achievable FLOP/s")
    ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    for tag, t_att, label in (("unsplit", t_att0, "without a split"), ("split", t_att1, "split")):
        s.step(f"per_user_{tag}", f"Tokens per second per user, {label}", f"X_{tag}",
               1 / (max_of(weights + t_att, t_math) + ar + e.t_oh), "tokens/s",
               "one token per step: reads (weights, then attention) or math, whichever is longer"
               + (", plus the all-reduces" if p.tp > 1 else "") + ", plus the step's overhead")

    _merge_judgements(s, splits=s.value(n_split), empty=s.value(n_empty), overhead=s.value(overhead),
                      gain=s.value(t_att0) / s.value(t_att1))
    s.assume("One thread block per (sequence, KV head) with its query heads packed together (FlashAttention-2's "
             "decode path swaps the query-head group into the rows; FlashInfer and FlashDecoding do the same); "
             "the blocks of all splits run at once (several fit on one SM).")
    s.assume("Attention's reads get the busy SMs' share of HBM bandwidth, as the prompt states: 1/SMs of it per "
             "busy SM. A lone SM can pull several times its share, so the unsplit time is an upper bound and the "
             "speed-up from splitting is larger here than measured (Flash-Decoding reports up to 8x on attention).")
    s.assume("Splits: the bank's rule, the fewest that fill the SMs, with ⌈tiles/splits⌉ tiles a split "
             "(FlashAttention-2's n_blocks_per_split). FlashAttention-2 picks its count differently: at most "
             "min(SMs, tiles, 128), the fewest within 85% of the best wave efficiency, skipping counts that give "
             "the same tiles per split as one fewer (those leave a split empty), and no split once the batch fills "
             "80% of the SMs. In practice empty splits come from mixed-length batches, where the split is sized by "
             "the longest sequence.")
    s.slip("query heads counted instead of KV heads", on="blocks", factor=p.model.heads / p.model.kv_heads)
    s.slip("query heads counted instead of KV heads", on="fill", factor=p.model.heads / p.model.kv_heads)
    _split_regime(s, B, B_star, blocks, n_split, n_sm)


def _merge_judgements(s: Sheet, *, splits: float, empty: float, overhead: float, gain: float) -> None:
    key = "merge_facts"
    s.judge(key, "every split of this variant gets at least one key tile", empty == 0,
            f"{format_number(empty)} of {format_number(splits)} splits get none")
    s.judge(key, "averaging the partial outputs with equal weights would be exact here", splits == 1,
            "one split: nothing to merge" if splits == 1 else
            "splits with different LSEs carry different shares of the softmax mass")
    s.judge(key, "the partial outputs add under 5% to this step's attention traffic", overhead < 0.05,
            f"they add {format_number(100 * overhead, 3)}%")
    s.judge(key, "splitting at least halves this step's attention time", gain >= 2,
            f"{format_number(gain, 3)}x faster split")
    s.judge(key, "an empty split must still write LSE = −inf and a zero output before the merge", True,
            "the merge reads every split's slot; left unwritten it holds garbage (FlashAttention-2 writes both)",
            fact=True)
    s.judge(key, "an empty split's −inf LSE minus the finite merged LSE gives NaN", False,
            "−inf minus a finite number is −inf, and exp(−inf) = 0: weights exp(LSE_i − max LSE) give an empty "
            "split weight 0 while one split has keys; the NaN comes only from −inf − (−inf)", fact=True)
    s.judge(key, "the merged LSE is the largest split's LSE", splits == 1,
            "one split: its LSE is the result" if splits == 1 else
            "it is log Σ exp(LSE_i), above the largest by log(1 + the others' relative mass)")


def _split_regime(s: Sheet, B, B_star, blocks, n_split, n_sm) -> None:
    count, splits = format_number(s.value(blocks)), format_number(s.value(n_split))
    idle = format_number(max(0, s.value(n_sm) - s.value(blocks)))
    s.regime_by(B, B_star, tie="above", above=Side(
        "grid-filled",
        f"The batch alone gives {count} blocks, enough for every SM: no split is needed, and one would only add "
        "partial-output traffic and a merge pass.",
        "Below the boundary batch the blocks leave SMs idle through the attention: split each sequence's keys "
        "and merge the partials by their LSEs."),
        below=Side(
        "split-needed",
        f"{count} blocks leave {idle} of {format_number(s.value(n_sm))} SMs idle while the attention streams the "
        f"KV cache: {splits} splits per sequence fill them, at the price of FP32 partials and a merge.",
        "From the boundary batch up the batch fills the SMs by itself and splitting only adds traffic."))


# --- blackwell-tmem-tiles -------------------------------------------------------------------

ACC_BYTES = 4  # FP32 accumulator
CONSUMER_WARPGROUPS = 2  # Hopper's cooperative GEMM: two consumer warpgroups share the CTA tile along M
WARPGROUP_THREADS = 128
CONSUMER_REGISTERS = 232  # CUTLASS sm90's consumer budget under setmaxnreg (40 producer / 232 consumer)
K_SLICE = 64  # bf16 elements per k-slice: one 128-byte swizzled row of each operand
TMEM_MIN_ALLOC = 32  # tcgen05.alloc: a power of two of columns, at least 32


def blackwell_tmem_tiles(p, s: Sheet) -> None:
    """One SM's output tile of a GEMM, M × N in FP32: where its accumulator lives (Hopper: the consumer
    warpgroups' registers; Blackwell: TMEM) and how many operand bytes shared memory feeds the tensor
    cores per k-slice for Hopper's 64-row warpgroup MMAs, Blackwell's 128-row 1-SM MMA and its 2-CTA MMA."""
    hopper, blackwell = p.hopper, p.blackwell
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    b_acc = s.given("b_acc", ACC_BYTES, "B", "bytes per FP32 accumulator element")
    RF = s.given("RF", hopper.regfile_kib_sm * 1024, "KiB", f"{hopper.name} register file per SM")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    budget = s.given("R_max", CONSUMER_REGISTERS, "", "consumer registers per thread under setmaxnreg (CUTLASS sm90)")
    lanes = s.given("n_lane", 128, "", "TMEM lanes (rows)")
    cols = s.given("n_col", blackwell.tmem_kib_sm * 1024 // (128 * 4), "", "TMEM columns of 32 bits")

    acc = s.step("accumulator", "Accumulator bytes", "C", M * N * b_acc, "KiB", "one FP32 value per output element")
    share = s.step("rf_share", "Share of Hopper's register file", "s_RF", acc / RF, "%",
                   "on Hopper the accumulator lives in the consumer warpgroups' registers")
    regs = s.step("acc_registers", "Accumulator registers per consumer thread", "r_acc", M * N / threads, "",
                  "the tile's elements spread over the consumer threads, one 32-bit register each")
    tmem = s.step("tmem_columns", "TMEM columns the accumulator uses", "n_tmem", M / lanes * N, "",
                  "128 lanes hold 128 rows; each row of N FP32 values takes N columns (the allocation rounds up)")

    # Operand bytes shared memory delivers per k-slice, one SM, 128 B of every operand row read.
    K = s.given("K", K_SLICE, "", "elements of each operand row per k-slice (128 B of bf16)")
    b = s.given("b_op", dtype_bytes("bf16"), "B", "bytes per operand element (bf16)")
    hop = s.step("hopper_bytes", "Hopper: operand bytes per k-slice", "Q_H", (M + M / 64 * N) * K * b, "KiB",
                 "each 64-row warpgroup MMA reads its own A rows and all N rows of B again")
    one = s.step("one_sm_bytes", "Blackwell 1-SM MMA: operand bytes per k-slice", "Q_1", (M + M / 128 * N) * K * b,
                 "KiB", "one 128-row MMA reads B once for all its 128 rows")
    two = s.step("two_cta_bytes", "Blackwell 2-CTA MMA: operand bytes per k-slice, per SM", "Q_2",
                 (M + M / 128 * N / 2) * K * b, "KiB", "the SM pair shares B: each SM holds and feeds half of it")
    flops = s.step("", "FLOPs per k-slice, one SM", "F_k", 2 * M * N * K, "", "a multiply-add per output and k")
    F_h = s.given("F_H", hopper.bf16_flop_per_clk_sm, "", f"{hopper.name} bf16 FLOP per clock per SM")
    F_b = s.given("F_B", blackwell.bf16_flop_per_clk_sm, "", f"{blackwell.name} bf16 FLOP per clock per SM")
    S = s.given("S_smem", hopper.smem_bytes_per_clk_sm, "", "shared-memory bytes per clock per SM (32 banks × 4 B)")
    demand = {name: s.step(key, title, sym, expr * F / flops, "", "operand bytes over the clocks the MMAs take")
              for name, key, title, sym, expr, F in (
                  ("hopper", "hopper_demand", "Hopper: operand bytes per clock", "q_H", hop, F_h),
                  ("one", "one_sm_demand", "Blackwell 1-SM: operand bytes per clock", "q_1", one, F_b),
                  ("two", "two_cta_demand", "Blackwell 2-CTA: operand bytes per clock", "q_2", two, F_b),
                  ("hopper_style", "", "64-row MMAs at Blackwell's rate: bytes per clock", "q_HB", hop, F_b))}
    _tile_judgements(s, share=s.value(share), regs=s.value(regs), budget=s.value(budget), tmem=s.value(tmem),
                     cols=s.value(cols), demand={k: s.value(v) for k, v in demand.items()}, limit=s.value(S),
                     halved=s.compare(two, hop / 2) <= 0, bytes_kib=(s.value(two) / 1024, s.value(hop) / 1024))
    s.assume("Hopper: a cooperative CTA with two consumer warpgroups splits the tile along M; each issues "
             "64-row WGMMAs with A and B from shared memory. Blackwell: tcgen05.mma, 128 rows per SM, the "
             "accumulator in TMEM; the 2-CTA form (cta_group::2) computes a 256-row pair tile from each SM's "
             "own A rows and half of B.")
    s.assume("Operands in bf16, 128 B of each row per k-slice (64 elements; fp8 doubles the elements and the "
             "FLOP rate alike, so bytes per clock do not change). Only the tensor cores' operand reads are "
             "counted; the TMA writes into shared memory and the epilogue come on top.")
    s.slip("accumulator in bf16 instead of FP32", 0.5, on=("accumulator", "rf_share", "acc_registers"))
    s.slip("B counted once on Hopper (the second warpgroup's read forgotten)", on="hopper_bytes",
           factor=s.value(one) / s.value(hop))


def _tile_judgements(s: Sheet, *, share, regs, budget, tmem, cols, demand, limit, halved, bytes_kib) -> None:
    key = "tile_facts"
    rate = lambda name: format_number(demand[name], 3) + " B/clock"  # noqa: E731
    s.judge(key, "on Hopper the accumulator leaves at least half the register file for everything else", share <= 0.5,
            f"it takes {format_number(100 * share, 3)}%")
    s.judge(key, "on Hopper the accumulator fits the consumers' 232-register budget", regs <= budget,
            f"{format_number(regs)} registers per thread for the accumulator alone")
    s.judge(key, "TMEM holds two of these accumulators, so one tile's epilogue can overlap the next one's MMAs",
            2 * tmem <= cols, f"{format_number(tmem)} of {format_number(cols)} columns each")
    # At the rate itself shared memory is already the limit: the TMA writes into it come on top of the reads.
    for name, option in (("hopper", "at Hopper's rate, its 64-row warpgroup MMAs read operands at least as fast as "
                                    "shared memory's 128 B per clock"),
                         ("one", "at B200's rate, 1-SM MMAs read operands at least as fast as shared memory's 128 B "
                                 "per clock"),
                         ("two", "at B200's rate, 2-CTA MMAs read operands at least as fast as shared memory's 128 B "
                                 "per clock")):
        s.judge(key, option, demand[name] >= limit, f"{rate(name)} against {format_number(limit)}")
    allocated = max(TMEM_MIN_ALLOC, 2 ** math.ceil(math.log2(tmem)))
    s.judge(key, "tcgen05.alloc can give this accumulator exactly the TMEM columns it uses", allocated == tmem,
            f"{format_number(tmem)} columns used; the allocation is a power of two of at least 32: "
            f"{format_number(allocated)}")
    s.judge(key, "the 2-CTA MMA at least halves the operand bytes per SM against Hopper's", halved,
            f"{format_number(bytes_kib[0])} KiB against {format_number(bytes_kib[1])} KiB: B is split between "
            "the pair instead of read again for every 64 rows")


# --- fp8-block-scale-mainloop ----------------------------------------------------------------


def fp8_block_scale_mainloop(p, s: Sheet) -> None:
    """DeepSeek-V3's FP8 GEMM on Hopper: the scales change every N_C along K, so per K-block the WGMMAs
    accumulate into a temporary and the CUDA cores fold it into the FP32 accumulator, one FFMA per output
    element with the row's activation scale times the block's weight scale."""
    gpu, blackwell = p.gpu, p.blackwell
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    N_C = s.param("N_C", "scale_block")
    F = s.given("F_fp8", gpu.fp8_flop_per_clk_sm, "", f"{gpu.name} dense fp8 tensor FLOP per clock per SM")
    A = s.given("R_fma", gpu.fp32_fma_per_clk_sm, "", "FP32 FMA results per clock per SM")
    P = s.given("P", peak_flops(gpu, "fp8"), "TFLOP/s", f"{gpu.name} dense fp8 peak")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    budget = s.given("R_max", CONSUMER_REGISTERS, "", "consumer registers per thread under setmaxnreg (CUTLASS sm90)")

    t_mma = s.step("mma_clocks", "MMA clocks per K-block", "t_MMA", 2 * M * N * N_C / F, "",
                   "the tile's multiply-adds over one scale block of K, at the fp8 tensor rate")
    t_ffma = s.step("ffma_clocks", "FFMA clocks per K-block", "t_FFMA", M * N / A, "",
                    "one FFMA per output element: acc += temporary × (row scale × block scale)")
    r = s.step("promotion_share", "Promotion time over MMA time", "r", t_ffma / t_mma, "%",
               f"F/(2·R_fma·N_C): the tile cancels; {format_number(s.value(F) / (2 * s.value(A)))}/N_C on this GPU")
    u = s.step("serial_ceiling", "FP8-peak ceiling, promotion not overlapped", "u_serial", 1 / (1 + r), "%",
               "the tensor cores wait while the CUDA cores promote")
    s.step("serial_tflops", "TFLOP/s at that ceiling", "X_serial", u * P, "TFLOP/s", "the dense fp8 peak times it")
    s.step("temp_registers", "Temporary accumulator registers per consumer thread", "r_tmp", M * N / threads, "",
           "a second FP32 copy of the tile, spread over the two consumer warpgroups")
    N_star = s.step("boundary_block", "Scale block at which FFMAs take as long as the MMAs", "N_C_star", F / (2 * A),
                    "", "solve M·N/R_fma = 2·M·N·N_C/F for N_C")
    s.step("overlap_ceiling", "FP8-peak ceiling with ping-pong overlap", "u_overlap", min_of(1, 1 / r), "%",
           "one warpgroup promotes while the other's WGMMAs run: the longer of the two sets the pace")
    F_b = s.given("F_B", blackwell.fp8_flop_per_clk_sm, "", f"{blackwell.name} fp8 tensor FLOP per clock per SM")
    A_b = s.given("R_fma_B", blackwell.fp32_fma_per_clk_sm, "", f"{blackwell.name} FP32 FMA per clock per SM")
    r_b = s.step("blackwell_share", f"The same software promotion on {blackwell.name}", "r_B",
                 F_b / (2 * A_b * N_C), "%", "the tensor rate doubled, the CUDA cores did not")
    _scale_judgements(s, r=s.value(r), r_b=s.value(r_b), regs=2 * s.value(M) * s.value(N) / s.value(threads),
                      budget=s.value(budget), block=s.value(N_C))
    s.assume("Per K-block the tile's M row scales are multiplied by the block's weight scale once (M FMULs, 1/N of "
             "the FFMAs, left out); the FFMA count is one per output element. The CUDA cores' other work (address "
             "math, barrier waits) is left out.")
    s.assume("Overlap: two consumer warpgroups alternate (DeepSeek-V3 sec. 3.3.2: one promotes while the other "
             "runs its WGMMAs); the promotion is hidden if the FFMAs finish no later than the MMAs.")
    s.slip("FLOPs per K-block not doubled", 2.0, on="promotion_share")
    _promotion_regime(s, N_C, N_star, r)


MX_BLOCK = 32  # OCP MX formats: one shared E8M0 scale per 32 elements


def _scale_judgements(s: Sheet, *, r: float, r_b: float, regs: float, budget: float, block: float) -> None:
    key = "scale_facts"
    pct = lambda x: format_number(100 * x, 3) + "%"  # noqa: E731
    s.judge(key, "ping-pong across two consumer warpgroups hides this variant's promotion entirely", r <= 1,
            f"the FFMAs take {pct(r)} of the MMA time")
    s.judge(key, "halving the scale block along K would make the FFMAs outlast the MMAs", 2 * r > 1,
            f"they would take {pct(2 * r)} of the MMA time")
    s.judge(key, "the main and temporary accumulators together fit the 232-register consumer budget", regs <= budget,
            f"{format_number(regs)} registers per thread for the two")
    s.judge(key, "on B200 the same software promotion would outlast the MMAs", r_b > 1,
            f"{pct(r_b)} at B200's rate")
    s.judge(key, "Blackwell's block-scaled MMA applies the scales inside the MMA: no temporary, no FFMA per output",
            True, "tcgen05.mma.kind::mxf8f6f4.block_scale multiplies by the scales as it accumulates (its scale "
            "factors read from TMEM, copied there from shared memory by tcgen05.cp)", fact=True)
    s.judge(key, "MXFP8's scales (E8M0, one per 32 elements along K) are finer-grained along K than this variant's",
            block > MX_BLOCK, f"the OCP MX format's 32-element blocks against N_C = {format_number(block)}")
    s.judge(key, "the block-scaled MMA takes an arbitrary FP32 scale per 128 × 128 weight block", False,
            "its scales are E8M0 (or E4M3 for NVFP4) per 32 (or 16) elements along K; FP32 per-block scales stay "
            "in software", fact=True)


def _promotion_regime(s: Sheet, N_C, N_star, r) -> None:
    share = format_number(100 * s.value(r), 3) + "%"
    # A tie (N_C = 32 on Hopper, not drawn) reads as hidden, as the overlap ceiling does, and as the bank's other
    # overlap questions decide theirs.
    s.regime_by(N_C, N_star, tie="above", above=Side(
        "promotion-hidden",
        f"The FFMAs take {share} of the MMA time: with two consumer warpgroups in ping-pong the promotion hides "
        "behind the other warpgroup's WGMMAs, at the cost of a second accumulator in registers.",
        "With finer scale blocks (or a faster tensor core) the FFMAs outlast the MMAs and no overlap hides them: "
        "the scales have to move into the MMA itself, as Blackwell's block-scaled MMA does."),
        below=Side(
        "promotion-exposed",
        f"The FFMAs take {share} of the MMA time: even in ping-pong the CUDA cores, not the tensor cores, set the "
        "pace. Coarser scale blocks, or scales applied inside the MMA (Blackwell), are the way out.",
        "With coarser scale blocks the FFMAs finish before the MMAs and ping-pong hides them."))


# --- tma-warp-specialization -----------------------------------------------------------------

COPY_BYTES = 16  # cp.async moves at most 16 bytes per thread-instruction
WARP = 32
LDMATRIX_BYTES = 512  # ldmatrix.x4: four 8 × 8 tiles of 16-bit values per warp-instruction
MMA_SYNC_MACS = 16 * 8 * 16  # mma.sync m16n8k16
SETMAXNREG_MAX = 256


def tma_warp_specialization(p, s: Sheet) -> None:
    """One CTA tile's k-step two ways. Ampere-style: every warp issues cp.async copies (with their address
    and bounds work), waits at __syncthreads, stages operands into registers with ldmatrix and runs mma.sync.
    Hopper-style: one producer thread issues two TMA copies, consumer warpgroups wait on an mbarrier and run
    WGMMAs straight from shared memory, and setmaxnreg moves registers from producer to consumers."""
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    K = s.param("K", "k_step")
    o = s.param("o", "copy_overhead")
    n = s.param("n_c", "consumers")
    r_p = s.param("r_p", "producer_regs")
    reserve = s.param("r_0", "reserve")
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per operand element (bf16)")
    c = s.given("c", COPY_BYTES, "B", "bytes per cp.async")
    w = s.given("w", WARP, "", "threads per warp")

    tile_bytes = s.step("tile_bytes", "Operand bytes per k-step", "Q", (M + N) * K * b, "KiB",
                        "an M × K slice of A and an N × K slice of B land in shared memory")
    copies = s.step("copies", "cp.async thread copies per k-step", "n_cp", tile_bytes / c, "",
                    "16 bytes per thread-instruction")
    cp_warp = s.step("cp_instructions", "Copy-path warp instructions per k-step", "I_cp", copies * (1 + o) / w, "",
                     "each copy plus its address and bounds instructions, 32 threads to a warp instruction")
    tma = s.given("I_TMA", 2, "", "TMA instructions per k-step (one per operand tile, from one thread)")
    s.step("tma_removed", "Instructions TMA removes per k-step", "ΔI_TMA", cp_warp - tma, "",
           "the tensor map holds shape, strides and bounds: the copy engine generates every address")
    # The 8 warps split the longer side of the tile four ways: the squarer warp tile stages fewer bytes.
    rows, cols = (4, 2) if p.tile_m > p.tile_n else (2, 4)
    warps = s.given("n_w", rows * cols, "", f"warps of the Ampere-style CTA, {rows} × {cols} over the tile")
    w_m = s.given("w_m", rows, "", "warps along M")
    w_n = s.given("w_n", cols, "", "warps along N")
    ldm = s.step("ldmatrix", "ldmatrix staging instructions per k-step", "I_ldm",
                 warps * (M / w_m + N / w_n) * K * b / LDMATRIX_BYTES, "",
                 f"each warp stages its (M/{rows} + N/{cols}) × K operand rows into registers, 512 B a warp "
                 "instruction")
    F = s.given("F", p.gpu.bf16_flop_per_clk_sm, "", f"{p.gpu.name} bf16 FLOP per clock per SM")
    slots = s.step("issue_slots", "Issue slots during the k-step's MMAs", "S", 4 * 2 * M * N * K / F, "",
                   "four schedulers, one warp instruction a clock each, for the clocks the tensor cores take")
    share = s.step("issue_share", "Ampere-style instructions over those slots", "s_issue",
                   (cp_warp + ldm + M * N * K / MMA_SYNC_MACS) / slots, "%",
                   "copies, staging and mma.sync (2,048 multiply-adds each), all from the same warps")

    # Registers: the even split every thread gets without setmaxnreg, and the split CUTLASS computes.
    R = s.given("R", p.gpu.regfile_kib_sm * 256, "", "32-bit registers per SM")
    T = s.given("T_wg", WARPGROUP_THREADS, "", "threads per warpgroup")
    even = s.step("even_split", "Registers per thread, even split", "r_even", 8 * floor_of(R / (T * (n + 1)) / 8),
                  "", "the register file over the producer and consumer warpgroups, in units of 8")
    budget = s.step("consumer_budget", "Consumer registers per thread under setmaxnreg", "r_c",
                    min_of(SETMAXNREG_MAX, 8 * floor_of((even * (n + 1) - r_p) / (8 * n))), "",
                    "what the producer gives up, shared by the consumers, in units of 8 (CUTLASS's formula)")
    acc = s.step("acc_registers", "Accumulator registers per consumer thread", "r_acc", M * N / (T * n), "",
                 "the FP32 tile spread over the consumer warpgroups")
    need = s.step("consumer_need", "Registers a consumer thread needs", "r_need", acc + reserve, "",
                  "its accumulator plus the stated reserve")
    _specialization_judgements(s, share=s.value(share), gain=s.value(budget) - s.value(even),
                               tile=(s.value(M), s.value(N)))
    s.assume("Ampere-style path: 16-byte cp.async copies, each with the stated address and bounds instructions, "
             "eight warps (4 × 2 over a tile taller than wide, else 2 × 4: 64 × 64 warp tiles at 256 × 128, as "
             "CUTLASS's Ampere configurations) staging with ldmatrix.x4 and computing with mma.sync m16n8k16; "
             "commit, wait and __syncthreads per k-step are left out. Issue slots are counted over the clocks "
             "the tensor cores need at the GPU's dense (WGMMA) rate.")
    s.assume("Hopper path: one producer warp (of a producer warpgroup) issues the two TMA copies after an "
             "mbarrier wait; consumers' WGMMAs read A and B from shared memory, so nothing is staged in "
             "registers. Register split: CUTLASS sm90's formula (even share in units of 8, producer's "
             "surplus to the consumers, at most 256).")
    s.slip("copies counted per warp instead of per thread (16 B × 32)", on="copies", factor=1 / WARP)
    _register_regime(s, need, even, budget)


ISSUE_SHARE_LINE = 0.42  # between the drawn tiles' shares (40.1% and 43.75%), clear of both


def _specialization_judgements(s: Sheet, *, share: float, gain: float, tile: tuple[float, float]) -> None:
    key = "pipeline_facts"
    s.judge(key, "the Ampere-style k-step issues instructions for over 42% of the MMAs' issue slots",
            share > ISSUE_SHARE_LINE, f"{format_number(100 * share, 3)}% of them")
    s.judge(key, "setmaxnreg gives each consumer thread at least 64 registers more than the even split", gain >= 64,
            f"{format_number(gain)} more")
    m, n = tile
    s.judge(key, "a 4 × 2 warp layout stages fewer operand bytes than a 2 × 4 one for this tile", m > n,
            f"rows staged per warp: M/4 + N/2 = {format_number(m / 4 + n / 2)} against M/2 + N/4 = "
            f"{format_number(m / 2 + n / 4)}")
    s.judge(key, "the producer waits on a stage's 'empty' barrier, arms 'full' with the bytes to expect, then "
            "issues the TMA copies", True, "the transaction count on 'full' completes when the bytes land; the "
            "consumers wait on 'full', run their WGMMAs and arrive on 'empty' to release the stage: no CTA-wide "
            "__syncthreads, each stage has its own pair of barriers", fact=True)
    s.judge(key, "the producer warpgroup needs its registers for the addresses it generates", False,
            "TMA generates them from the tensor map and one coordinate per copy (no thread computes a tile's "
            "addresses), so the producer runs on 24 to 56 registers and gives the rest away", fact=True)


def _register_regime(s: Sheet, need, even, budget) -> None:
    shown = {k: format_number(s.value(v)) for k, v in (("need", need), ("even", even), ("budget", budget))}
    s.regime_by(need, even, tie="below", below=Side(
        "even-split-fits",
        f"A consumer needs {shown['need']} registers and the even split gives {shown['even']}: the tile runs "
        f"without reallocation, and setmaxnreg's {shown['budget']} only buys headroom (deeper pipelining, "
        "fewer spills).",
        "A larger tile (or more consumer warpgroups sharing the file) needs more than the even split: then the "
        "producer must give its registers away with setmaxnreg, or the consumers spill."),
        above=Side(
        "needs-setmaxnreg",
        f"A consumer needs {shown['need']} registers but the even split gives only {shown['even']}: without "
        f"setmaxnreg it spills; with the producer cut down, consumers get {shown['budget']} and the tile fits.",
        "A smaller tile fits the even split, and the reallocation becomes headroom rather than a requirement."))
