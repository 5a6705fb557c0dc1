"""Fine-grained FP8 scales in the GEMM main loop - promotion on the CUDA cores."""
from __future__ import annotations

from solvers.derivation import Sheet, Side
from solvers.models.common import given_peak_flops
from solvers.models.kernels import CONSUMER_WARPGROUPS, WARPGROUP_THREADS
from solvers.sheetmath import min_of
from solvers.units import format_number


def _scale_judgements(s: Sheet, *, r, r_b, regs, budget, block, mx_block) -> None:
    """Decided on exact values: the rates are whole numbers, so the FFMAs and MMAs often end together, which
    the prompt calls hidden (done by the MMAs' end) and so not outlasting them."""
    key = "scale_facts"

    def pct(x) -> str:
        return format_number(100 * s.evaluate(x), 3) + "%"

    def versus(x) -> str:
        return " (they end together: done by the MMAs' end, not after)" if s.compare(x, 1) == 0 else ""

    s.judge(key, "ping-pong across two consumer warpgroups hides this variant's promotion entirely",
            s.compare(r, 1) <= 0, f"the FFMAs take {pct(r)} of the MMA time{versus(r)}")
    s.judge(key, "halving the scale block along K would make the FFMAs outlast the MMAs", s.compare(2 * r, 1) > 0,
            f"they would take {pct(2 * r)} of the MMA time{versus(2 * r)}")
    s.judge(key, "the main and temporary accumulators together fit the {consumer_registers}-register consumer budget",
            s.compare(regs, budget) <= 0, f"{format_number(s.evaluate(regs))} registers per thread for the two")
    s.judge(key, "on B200 the same software promotion would outlast the MMAs", s.compare(r_b, 1) > 0,
            f"{pct(r_b)} at B200's rate{versus(r_b)}")
    s.judge(key, "Blackwell's block-scaled MMA applies the scales inside the MMA: no temporary, no FFMA per output",
            True, "tcgen05.mma.kind::mxf8f6f4.block_scale multiplies by the scales as it accumulates (its scale "
            "factors read from TMEM, copied there from shared memory by tcgen05.cp)", fact=True)
    s.judge(key, "MXFP8's scales (E8M0, one per {mx_block} elements along K) are finer-grained along K than this "
            "variant's", s.compare(block, mx_block) > 0,
            f"the OCP MX format's {s.text(mx_block)}-element blocks against N_C = {s.text(block)}")
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


def solve(p, s: Sheet) -> None:
    """DeepSeek-V3's FP8 GEMM on Hopper: the scales change every N_C along K, so per K-block the WGMMAs
    accumulate into a temporary and the CUDA cores fold it into the FP32 accumulator, one FFMA per output
    element with the row's activation scale times the block's weight scale."""
    gpu, blackwell = p.gpu, p.blackwell
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    N_C = s.param("N_C", "scale_block")
    F = s.given("F_fp8", gpu.fp8_flop_per_clk_sm, "", f"{gpu.name} dense fp8 tensor FLOP per clock per SM")
    A = s.given("R_fma", gpu.fp32_fma_per_clk_sm, "", "FP32 FMA results per clock per SM")
    P = given_peak_flops(s, gpu, "fp8")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    budget = s.param("R_max", "consumer_registers")

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
    _scale_judgements(s, r=r, r_b=r_b, regs=2 * M * N / threads, budget=budget, block=N_C,
                      mx_block=s.param("N_MX", "mx_block"))
    s.assume("Per K-block the tile's M row scales are multiplied by the block's weight scale once (M FMULs, 1/N of "
             "the FFMAs, left out); the FFMA count is one per output element. The CUDA cores' other work (address "
             "math, barrier waits) is left out.")
    s.assume("Overlap: two consumer warpgroups alternate (DeepSeek-V3 sec. 3.3.2: one promotes while the other "
             "runs its WGMMAs); the promotion is hidden if the FFMAs finish no later than the MMAs.")
    s.slip("FLOPs per K-block not doubled", 2.0, on="promotion_share")
    _promotion_regime(s, N_C, N_star, r)

