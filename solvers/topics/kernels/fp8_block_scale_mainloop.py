"""Fine-grained FP8 scales in the GEMM main loop - promotion on the CUDA cores."""
from __future__ import annotations

from solvers.derivation import Sheet, Side
from solvers.formulas.common import given_hbm_bandwidth, given_peak_flops
from solvers.formulas.kernels import CONSUMER_WARPGROUPS, WARPGROUP_THREADS
from solvers.sheetmath import max_of, min_of
from solvers.units import format_number

INSIDE = "it applies the scales inside the MMA: no temporary accumulator, no FMA per output"
SHORTER = "moving the scales into it would shorten this GEMM"
AS_IS = "it could take this checkpoint's scales as they are"
ROUNDED = "this checkpoint's scales would have to be rounded to powers of two, and the model evaluated again"


def _block_scaled(s: Sheet, p, *, t_ideal, t_gemm) -> None:
    """What Blackwell's block-scaled MMA (tcgen05.mma kind::mxf8f6f4) would change for this variant: it runs
    at the fp8 peak with the scales applied as it accumulates, so it gains exactly what the promotion costs."""
    key = "block_scaled"
    s.judge(key, INSIDE, True, "tcgen05.mma.kind::mxf8f6f4.block_scale multiplies by the scales as it "
            "accumulates, its scale factors read from Tensor Memory (copied there by tcgen05.cp)", fact=True)
    slower = s.compare(t_gemm, t_ideal) > 0
    s.judge(key, SHORTER, slower,
            f"the promotion stretches the GEMM from {s.text(t_ideal)} to {s.text(t_gemm)}: in the MMA it costs "
            "nothing" if slower else "the promotion is already hidden: the GEMM runs at the peak either way")
    e8m0 = p.scale_dtype == "ue8m0"
    s.judge(key, AS_IS, e8m0,
            "UE8M0 scales per 1 × N_C and N_C × N_C, repeated over each 32-element sub-block, are what it reads"
            if e8m0 else "it takes E8M0 (power-of-two) scales: FP32 scales must be rounded to powers of two first, "
            "and the checkpoint tested again")
    s.judge(key, ROUNDED, not e8m0, "FP32 scales are not powers of two: rounding them re-rounds every block, a model "
            "nobody evaluated" if not e8m0 else "UE8M0 scales are powers of two already: they load as they are")


def _promotion_regime(s: Sheet, N_C, N_star, r) -> None:
    share = format_number(100 * s.value(r), 3) + "%"
    # No draw ties (the no_tie constraint); an override that did would read hidden, as the overlap ceiling does.
    s.regime_by(N_C, N_star, tie="above", above=Side(
        "promotion-hidden",
        f"The FFMAs take {share} of the MMA time: overlapped with the MMAs the promotion hides behind them, at the "
        "cost of a second accumulator.",
        "With finer scale blocks (or a faster tensor core) the FFMAs outlast the MMAs and no overlap hides them: "
        "the scales have to move into the MMA itself, as Blackwell's block-scaled MMA does."),
        below=Side(
        "promotion-exposed",
        f"The FFMAs take {share} of the MMA time: even overlapped, the CUDA cores, not the tensor cores, set the "
        "pace. Coarser scale blocks, or scales applied inside the MMA (Blackwell), are the way out.",
        "With coarser scale blocks the FFMAs finish before the MMAs and alternating warpgroups hide them."))


def solve(p, s: Sheet) -> None:
    """DeepSeek-V3's FP8 GEMM: the scales change every N_C along K, so per K-block the MMAs accumulate into a
    temporary and the CUDA cores fold it into the FP32 accumulator, one FFMA per output element with the row's
    activation scale times the block's weight scale."""
    gpu = p.gpu
    T = s.param("T", "tokens")
    N_w, K_w = s.param("N_w", "n"), s.param("K_w", "k")
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    N_C = s.param("N_C", "scale_block")
    P = given_peak_flops(s, gpu, "fp8")
    BW = given_hbm_bandwidth(s, gpu)
    blackwell = gpu.fp8_flop_per_clk_sm > 8192
    if blackwell and p.scale_dtype == "ue8m0":
        # Blackwell's block-scaled MMA takes UE8M0 scales as they are (DeepGEMM's SM100 path): nobody promotes them in
        # software there, so no opening puts them on B200. A push's what-if (still in software) may, and its select
        # asks whether the hardware could take them.
        s.refuse_if_asked(("t_ideal", "mma_clocks", "t_serial"), "UE8M0 scales on Blackwell go into the "
                          "block-scaled MMA: software promotion of them is only the push's what-if")
    F = s.given("F_fp8", gpu.fp8_flop_per_clk_sm, "", f"{gpu.name} dense fp8 tensor FLOP per clock per SM" + (
        " (NVIDIA publishes no B200 clock: twice Hopper's per SM, as kernel codebases take it)" if blackwell else ""))
    A = s.given("R_fma", gpu.fp32_fma_per_clk_sm, "", "FP32 FMA results per clock per SM")

    flops = s.step("gemm_flops", "GEMM FLOPs", "W", 2 * T * N_w * K_w, "TFLOP", "a multiply and an add per "
                   "weight per row")
    moved = s.step("gemm_bytes", "Bytes the GEMM moves", "D", T * K_w + N_w * K_w + 2 * T * N_w, "MB",
                   "fp8 activations and weights read once, the bf16 output written (the scales are a few KB)")
    t_read = s.step("t_read", "Time to move them", "t_D", moved / BW, "µs", "at the HBM bandwidth")
    t_ideal = s.step("t_ideal", "GEMM time, scales free", "t_0", max_of(flops / P, t_read), "µs",
                     "the slower of the FLOPs at the fp8 peak and the bytes at the bandwidth")
    t_mma = s.step("mma_clocks", "MMA clocks per K-block", "t_MMA", 2 * M * N * N_C / F, "",
                   "the tile's multiply-adds over one scale block of K, at the fp8 tensor rate")
    t_ffma = s.step("ffma_clocks", "FFMA clocks per K-block", "t_FFMA", M * N / A, "",
                    "one FFMA per output element: acc += temporary × (row scale × block scale)")
    r = s.step("promotion_share", "Promotion time over MMA time", "r", t_ffma / t_mma, "%",
               f"F/(2·R_fma·N_C): the tile cancels; {format_number(s.value(F) / (2 * s.value(A)))}/N_C on this GPU")
    u = s.step("serial_ceiling", "FP8-peak ceiling, promotion in series", "u_serial", 1 / (1 + r), "%",
               "the tensor cores wait while the CUDA cores promote")
    t_serial = s.step("t_serial", "GEMM time, promotion in series", "t_serial", max_of(flops / (P * u), t_read), "µs",
           "the FLOPs at that share of the peak, or the bytes, whichever is slower")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    s.step("temp_registers", "Temporary accumulator registers per consumer thread", "r_tmp", M * N / threads, "",
           "a second FP32 copy of the tile, spread over the two consumer warpgroups (on Hopper, beside the main "
           "accumulator's as many; on Blackwell the temporary sits in TMEM and is read out by tcgen05.ld)")
    N_star = s.step("boundary_block", "Scale block at which FFMAs take as long as the MMAs", "N_C_star", F / (2 * A),
                    "", "solve M·N/R_fma = 2·M·N·N_C/F for N_C")
    overlap = ("the MMA issues the next K-block into TMEM while other warps read the last one's temporary out and "
               "promote it" if blackwell else "one warpgroup promotes while the other's MMAs run")
    u_o = s.step("overlap_ceiling", "FP8-peak ceiling, promotion overlapped", "u_overlap", min_of(1, 1 / r), "%",
                 f"{overlap}: the longer of the two sets the pace")
    t_gemm = s.step("gemm_time", "GEMM time with the promotion overlapped", "t_GEMM",
                    max_of(flops / (P * u_o), t_read), "µs", "the FLOPs at that share of the peak, or the bytes")
    _block_scaled(s, p, t_ideal=t_ideal, t_gemm=t_gemm)
    s.assume("Per K-block the tile's row scales are multiplied by the block's weight scale once (M FMULs, 1/N of "
             "the FFMAs, left out); the FFMA count is one per output element. The CUDA cores' other work (scale "
             "loads, address math, barrier waits) is left out, which is why no draw puts the FFMAs level with the "
             "MMAs.")
    s.assume("Overlap: on Hopper two consumer warpgroups alternate (DeepSeek-V3 sec. 3.3.2: one promotes while the "
             "other runs its MMAs); on Blackwell one thread issues tcgen05.mma into Tensor Memory while promotion "
             "warps read the last K-block's temporary out (tcgen05.ld) and fold it into the accumulator (CUTLASS's "
             "sm100 blockwise-scaled GEMM, the software path for FP32 scales). The promotion is hidden if the FFMAs "
             "finish no later than the MMAs; the TMEM read bandwidth (a 128 × N FP32 tile per K-block) is a second "
             "limit left out. The block-scaled MMA runs at the fp8 dense peak.")
    s.assume("A kernel's ceiling, not an engine step: the GEMM runs at the dense peak times the ceiling, tiles "
             "spread evenly over the SMs, so the bank's end-to-end FP8 efficiency (50% of peak) is not applied. "
             "DeepGEMM reaches 69% of H800's peak with the promotion hidden: the rest goes to the wait on each "
             "WGMMA before its promotion (a warpgroup's own MMAs serialise), register pressure, wave quantization "
             "(the last wave's idle SMs), the prologue and epilogue, and the clock under FP8 load.")
    s.assume("Weight scales per 128 rows of N_w and N_C along K (DeepSeek's 128 × 128 at N_C = 128): a tile of up to "
             "128 columns shares one per K-block, and a 160-column tile picks one of two per column, so the "
             "promotion stays one FFMA per output; MXFP8's own weight scales, one per row per 32 along K, would "
             "need a scale product per output as well.")
    s.slip("FLOPs per K-block not doubled", 2.0, on="promotion_share")
    s.slip("FLOPs not doubled (a multiply-add counted as one)", 0.5, on="t_ideal")
    if s.compare(t_serial, t_gemm) > 0:  # only where the promotion costs anything: else the slip is the key
        s.slip("promotion added in series, not overlapped", s.value(t_serial) / s.value(t_gemm), on="gemm_time")
    _promotion_regime(s, N_C, N_star, r)
