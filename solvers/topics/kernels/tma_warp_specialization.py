"""TMA and warp specialization - the instructions they take off the threads."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, Side
from solvers.formulas.common import dtype_bytes
from solvers.formulas.kernels import WARPGROUP_THREADS
from solvers.sheetmath import floor_of, min_of
from solvers.units import format_number

WARP = 32


LDMATRIX_BYTES = 512  # ldmatrix.x4: four 8 × 8 tiles of 16-bit values per warp-instruction


MMA_SYNC_MACS = 16 * 8 * 16  # mma.sync m16n8k16


SETMAXNREG_MAX = 256


def _specialization_judgements(s: Sheet, p, *, acc: sympy.Expr, budget: sympy.Expr, tile: tuple[sympy.Expr,
                               sympy.Expr], reserve: sympy.Expr) -> None:
    """The pipeline's options, decided on the sheet's exact values. read7 #1: none is answered by an earlier key or
    hint (the barrier protocol is the recall's, the issue share stage 1's, the warp layout stage 1's hint)."""
    key = "pipeline_facts"
    m, n = tile
    more = p.consumers + 1
    even_more = 8 * (65536 // (WARPGROUP_THREADS * (more + 1)) // 8)
    need_more = m * n / (WARPGROUP_THREADS * more) + reserve
    s.judge(key, "with one more consumer warpgroup on this tile, each consumer would fit its even split",
            s.compare(need_more, even_more) <= 0,
            f"{more} consumers: {format_number(s.evaluate(need_more))} registers needed against an even split of "
            f"{even_more} (the file over {more + 1} warpgroups)")
    s.judge(key, "the accumulator alone takes more than half of a consumer's setmaxnreg budget",
            s.compare(2 * acc, budget) > 0,
            f"{format_number(s.evaluate(acc))} accumulator registers against {format_number(s.evaluate(budget))}")
    floor = s.param("r_floor", "producer_floor")
    n_c = s.symbol("n_c")
    even = s.symbol("r_even")
    lower = min_of(SETMAXNREG_MAX, 8 * floor_of((even * (n_c + 1) - floor) / (8 * n_c)))
    s.judge(key, "cutting the producer to {producer_floor} registers would give each consumer more",
            s.compare(lower, budget) > 0,
            f"at {format_number(p.producer_floor)} a consumer gets {format_number(s.evaluate(lower))} against "
            f"{format_number(s.evaluate(budget))}: the surplus moves in units of 8 per consumer thread")
    s.judge(key, "the producer is a whole warpgroup because setmaxnreg acts on a warpgroup at a time", True,
            "setmaxnreg is warpgroup-wide (all four warps execute it): the producer's registers can go to the "
            "consumers only if it is its own warpgroup, though one warp of it issues the TMA copies", fact=True)


def _register_regime(s: Sheet, need, even, budget) -> None:
    if s.compare(need, even) == 0:
        # read7 #5: @12011's push landed on 168 = 168, the tie rule only in stage 3's hints.
        s.refuse_if_asked(["regime"], "a consumer needs exactly the even split: the fit turns on the tie rule")
    shown = {k: s.text(v) for k, v in (("need", need), ("even", even), ("budget", budget))}
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


def solve(p, s: Sheet) -> None:
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
    c = s.param("c", "copy_bytes")
    w = s.given("w", WARP, "", "threads per warp")

    tile_bytes = s.step("tile_bytes", "Operand bytes per k-step", "Q", (M + N) * K * b, "KiB",
                        "an M × K slice of A and an N × K slice of B land in shared memory")
    copies = s.step("copies", "cp.async thread copies per k-step", "n_cp", tile_bytes / c, "",
                    "16 bytes per thread-instruction")
    cp_warp = s.step("cp_instructions", "Copy-path warp instructions per k-step, address and bounds included", "I_cp",
                     copies * (1 + o) / w, "",
                     "each copy plus its address and bounds instructions, 32 threads to a warp instruction")
    tma = s.given("I_TMA", 2, "", "TMA instructions per k-step (one per operand tile, from one thread)")
    s.step("tma_removed", "Instructions TMA removes per k-step, net of its own", "ΔI_TMA", cp_warp - tma, "",
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
    s.step("overhead_share", "Copy and ldmatrix instructions over those slots", "s_over",
                   (cp_warp + ldm) / slots, "%", "the instructions TMA and WGMMA take away, against the slots the "
                   "MMAs leave")
    s.step("issue_share", "Every Ampere-style instruction over those slots", "s_issue",
           (cp_warp + ldm + M * N * K / MMA_SYNC_MACS) / slots, "%",
           "with the mma.sync themselves (2,048 multiply-adds each), all from the same warps")

    # Registers: the even split every thread gets without setmaxnreg, and the split CUTLASS computes.
    R = s.given("R", p.gpu.regfile_kib_sm * 256, "", "32-bit registers per SM")
    T = s.given("T_wg", WARPGROUP_THREADS, "", "threads per warpgroup")
    even = s.step("even_split", "Registers per thread, even split", "r_even", 8 * floor_of(R / (T * (n + 1)) / 8),
                  "", "the register file over the producer and consumer warpgroups, in units of 8")
    budget = s.step("consumer_budget", "Consumer registers per thread under setmaxnreg", "r_c",
                    min_of(SETMAXNREG_MAX, 8 * floor_of((even * (n + 1) - r_p) / (8 * n))), "",
                    "setmaxnreg moves registers only within the launch's allocation, the even split for every "
                    "thread (not the whole file): what the producer gives up, shared by the consumers, in units of "
                    "8 (CUTLASS's formula)")
    acc = s.step("acc_registers", "Accumulator registers per consumer thread", "r_acc", M * N / (T * n), "",
                 "the FP32 tile spread over the consumer warpgroups")
    need = s.step("consumer_need", "Registers a consumer thread needs", "r_need", acc + reserve, "",
                  "its accumulator plus the stated reserve")
    # One block a SM takes at most the per-block limit (227 of Hopper's 228 KiB): a ring sized on the SM's
    # whole shared memory could count a stage no kernel can allocate.
    smem = s.given("S_smem", p.gpu.smem_block_kib * 1024, "KiB", f"{p.gpu.name} shared memory one block may take")
    # read7 #4: the epilogue stages the bf16 C tile in shared memory for its TMA store (CUTLASS's
    # StageCountAutoCarveout carves it out before counting stages): 192 × 128 leaves 4 stages of 40 KiB, not 5.
    epi = s.step("epilogue_bytes", "The epilogue's C tile staged for the TMA store", "S_epi", M * N * 2, "KiB",
                 "the bf16 output tile, carved out of shared memory before the ring")
    s.step("stages", "k-steps of this tile shared memory holds", "n_stage",
                    floor_of((smem - epi) / tile_bytes), "",
                    "a ring of stages, each a k-step's A and B slices with its pair of barriers, in what the "
                    "epilogue's staging leaves")
    _specialization_judgements(s, p, acc=acc, budget=budget, tile=(M, N), reserve=reserve)
    s.assume("Ampere-style path: 16-byte cp.async copies, each with the stated address and bounds instructions, "
             "eight warps (4 × 2 over a tile taller than wide, else 2 × 4: 64 × 64 warp tiles at 256 × 128, as "
             "CUTLASS's Ampere configurations) staging with ldmatrix.x4 and computing with mma.sync m16n8k16; "
             "commit, wait and __syncthreads per k-step are left out. Issue slots are counted over the clocks "
             "the tensor cores need at the GPU's dense (WGMMA) rate.")
    s.assume("Hopper path: one producer warp (of a producer warpgroup) issues the two TMA copies after an "
             "mbarrier wait; consumers' WGMMAs read A and B from shared memory, so nothing is staged in "
             "registers. Register split: CUTLASS sm90's formula (even share in units of 8, producer's "
             "surplus to the consumers, at most 256).")
    s.slip("copies counted per warp instead of per thread (16 B × 32)", on="cp_instructions", factor=1 / WARP)
    s.slip("the address and bounds instructions left out", on="cp_instructions", factor=1 / (1 + p.copy_overhead))
    _register_regime(s, need, even, budget)

