"""Accumulators in TMEM and B shared across SMs - what Blackwell gives back."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, Side
from solvers.formulas.common import dtype_bytes
from solvers.formulas.kernels import CONSUMER_WARPGROUPS, WARPGROUP_THREADS
from solvers.sheetmath import floor_of
from solvers.units import format_number

ACC_BYTES = 4  # FP32 accumulator


_PER_CLOCK = {"bf16": "bf16_flop_per_clk_sm", "fp8": "fp8_flop_per_clk_sm"}


def _tile_judgements(s: Sheet, *, demand: dict[str, sympy.Expr], stages: dict[str, sympy.Expr],
                     limit: sympy.Expr, deep: sympy.Expr, columns: sympy.Expr, buffers: sympy.Expr) -> None:
    """The Blackwell stage's options, decided on the sheet's exact values (the why lines' figures are floats)."""
    key = "tile_facts"
    shown = lambda x: format_number(s.evaluate(x), 3)  # noqa: E731
    two_under = s.compare(demand["two"], limit) < 0
    one_under = s.compare(demand["one"], limit) < 0
    if not two_under:
        two_why = "not even halving B's share is enough: A's rows, read against so few columns, are most of the bytes"
    elif one_under:
        two_why = "with more to spare than the 1-SM form, which is under already"
    else:
        two_why = "the 1-SM form is past it, so splitting B over the pair is what rescues this tile"
    s.judge(key, "on the 2-CTA form this tile's reads per SM come under shared memory's rate", two_under,
            f"{shown(demand['two'])} B a clock per SM against {shown(limit)}: {two_why}")
    s.judge(key, "the 1-SM form's ring has no room for {deep} K-block stages in the shared memory one block may "
            "take", s.compare(stages["one"], deep) < 0,
            f"{shown(stages['one'])} stages of A and B fit in shared memory")
    s.judge(key, "TMEM holds three or more of this tile's FP32 accumulators at once (one allocation, each at its "
            "own column offset)", s.compare(buffers, 3) >= 0,
            f"each takes {shown(columns)} of the 512 columns: {shown(buffers)} fit")


def _regime(s: Sheet, demand: sympy.Expr, limit: sympy.Expr) -> None:
    shown = format_number(s.evaluate(demand), 3)
    cap = format_number(s.evaluate(limit))
    s.regime_by(demand, limit, tie="above", above=Side(
        "smem-bound",
        f"B200's 1-SM MMAs would read {shown} B per clock, at or past shared memory's {cap}: with the TMA writes "
        "on top, shared memory, not the tensor cores, sets the pace of this tile.",
        "A wider tile (N past 128) reuses each A row over more columns: the reads per FLOP fall under shared "
        "memory's rate and the tensor cores bind.",
        f"B200's 1-SM MMAs read {shown} B per clock against shared memory's {cap}: at its rate or just past it, "
        "and with the TMA writes on top shared memory sets the pace, with nothing to spare."),
        below=Side(
        "tensor-bound",
        f"B200's 1-SM MMAs read {shown} B per clock, under shared memory's {cap}: the tensor cores set the pace.",
        "A narrower tile (N of 128 or less) reads A against too few columns: the 1-SM MMA then asks shared memory "
        "for 128 B a clock or more. The 2-CTA form, halving B's share, brings N of 96 to 128 back under; below "
        "that A's rows are most of the bytes and even the pair stays on shared memory's pace.",
        f"B200's 1-SM MMAs read {shown} B per clock, just under shared memory's {cap}: the tensor cores set the pace, "
        "with little to spare for the TMA writes."))


def _two_cta_pace(s: Sheet, demand: sympy.Expr, one: sympy.Expr, limit: sympy.Expr) -> None:
    """The 2-CTA form's own pace (a tie to shared memory, as for 1-SM): whether splitting B over the pair rescues a
    tile the 1-SM form leaves to shared memory. Its line sits at 8,192/N + 32 = 128, N = 85.3 in bf16 or fp8."""
    shown, cap = format_number(s.evaluate(demand), 3), format_number(s.evaluate(limit))
    bound = s.compare(demand, limit) >= 0
    one_bound = s.compare(one, limit) >= 0
    if bound:
        why = (f"{shown} B a clock per SM, at or past shared memory's {cap}: halving B's share is not enough, since "
               "A's rows, read against so few columns, are most of the bytes; shared memory still sets the pace. "
               "To fill the SMs, keep the wide tile and split K instead (split-K or stream-K, at the cost of "
               "reducing partial tiles), or accept a partly empty last wave")
    elif one_bound:
        why = (f"{shown} B a clock per SM, under shared memory's {cap}: splitting B over the pair rescues a tile the "
               "1-SM form leaves to shared memory; the tensor cores set the pace. The pair's tile is 256 rows, "
               "though: where M is small that wastes rows, and keeping the wide 1-SM tile with split-K or "
               "stream-K is the other way to fill the SMs")
    else:
        why = (f"{shown} B a clock per SM, under shared memory's {cap}, with more to spare than the 1-SM form: "
               "tensor-bound")
    s.choose("two_cta_regime", "smem-bound" if bound else "tensor-bound", why)


def solve(p, s: Sheet) -> None:
    """One SM's output tile of a GEMM, M × N in FP32: where its accumulator lives (Hopper: the consumer
    warpgroups' registers; Blackwell: TMEM) and how many operand bytes shared memory feeds the tensor
    cores per K block for Hopper's 64-row warpgroup MMAs, Blackwell's 128-row 1-SM MMA and its 2-CTA MMA."""
    hopper, blackwell = p.hopper, p.blackwell
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    K_total = s.param("K", "k")
    b_acc = s.given("b_acc", ACC_BYTES, "B", "bytes per FP32 accumulator element")
    RF = s.given("RF", hopper.regfile_kib_sm * 1024, "KiB", f"{hopper.name} register file per SM")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    lanes = s.given("n_lane", 128, "", "TMEM lanes (rows)")
    cols = s.given("n_col", blackwell.tmem_kib_sm * 1024 // (128 * 4), "", "TMEM columns of 32 bits")

    acc = s.step("accumulator", "Accumulator bytes", "C", M * N * b_acc, "KiB", "one FP32 value per output element")
    s.step("rf_share", "Share of Hopper's register file", "s_RF", acc / RF, "%",
           "on Hopper the accumulator lives in the consumer warpgroups' registers")
    s.step("acc_registers", "Accumulator registers per consumer thread", "r_acc", M * N / threads, "",
           "the tile's elements spread over the consumer threads, one 32-bit register each")

    # Operand bytes shared memory delivers per K block, one SM, 128 B of every operand row read.
    b = s.given("b_op", dtype_bytes(p.dtype), "B", f"bytes per operand element ({p.dtype})")
    K = s.step("", "Elements of each operand row per K block", "K_s", s.param("w_s", "slice_bytes") / b, "",
               "a 128-byte swizzled row of each operand")
    hop = s.step("hopper_bytes", "Hopper: operand bytes per K block", "Q_H", (M + M / 64 * N) * K * b, "KiB",
                 "each 64-row warpgroup MMA reads its own A rows and all N rows of B again")
    one = s.step("one_sm_bytes", "Blackwell 1-SM MMA: operand bytes per K block", "Q_1", (M + M / 128 * N) * K * b,
                 "KiB", "one 128-row MMA reads B once for all its 128 rows")
    two = s.step("two_cta_bytes", "Blackwell 2-CTA MMA: operand bytes per K block, per SM", "Q_2",
                 (M + M / 128 * N / 2) * K * b, "KiB", "the SM pair shares B: each SM holds and feeds half of it")
    flops = s.step("", "FLOPs per K block, one SM", "F_k", 2 * M * N * K, "", "a multiply-add per output and k")
    rate = _PER_CLOCK[p.dtype]
    F_h = s.given("F_H", getattr(hopper, rate), "", f"{hopper.name} {p.dtype} FLOP per clock per SM")
    F_b = s.given("F_B", getattr(blackwell, rate), "",
                  f"{blackwell.name} {p.dtype} FLOP per clock per SM (unpublished: twice Hopper's, at a derived clock)")
    S = s.given("S_smem", hopper.smem_bytes_per_clk_sm, "", "shared-memory bytes per clock per SM (32 banks × 4 B; on "
                f"{blackwell.name} a working assumption: NVIDIA publishes no rate for tcgen05's operand reads)")
    demand = {name: s.step(key, title, sym, expr * F / flops, "", "operand bytes over the clocks the MMAs take")
              for name, key, title, sym, expr, F in (
                  ("hopper", "hopper_demand", "Hopper: operand bytes per clock", "q_H", hop, F_h),
                  ("one", "one_sm_demand", "Blackwell 1-SM: operand bytes per clock", "q_1", one, F_b),
                  ("two", "two_cta_demand", "Blackwell 2-CTA: operand bytes per clock", "q_2", two, F_b))}

    # TMEM: 128 lanes are the rows; a 256-row tile stacks its second 128 rows in further columns.
    tmem = s.step("tmem_columns", "TMEM columns the accumulator uses", "n_tmem", M / lanes * N, "",
                  "128 lanes hold 128 rows; each row of N FP32 values takes N columns")
    buffers = s.step("tmem_buffers", "Accumulators TMEM holds at once", "n_buf", floor_of(cols / tmem), "",
                     "the kernel allocates TMEM once and places each accumulator at its own column offset; two or "
                     "more let one tile's epilogue drain while the next tile's MMAs run")

    # Shared memory as a ring of K block stages: A's rows and the B this SM holds.
    # A block may take 227 KiB of the SM's 228 (1 KiB is reserved for the system): the ring fits in that.
    smem = s.given("S_cap", blackwell.smem_block_kib * 1024, "KiB",
                   f"{blackwell.name} shared memory one block may take")
    stage_one = s.step("", "1-SM stage: A and all of B per K block", "P_1", (M + N) * K * b, "KiB",
                       "shared memory holds each operand tile once, whoever reads it")
    stage_two = s.step("", "2-CTA stage per SM: A and half of B", "P_2", (M + N / 2) * K * b, "KiB",
                       "each SM of the pair holds half of B")
    stages = {"one": s.step("stages_one", "1-SM: K block stages shared memory holds", "n_1",
                            floor_of(smem / stage_one), "", "the ring the producer runs ahead in"),
              "two": s.step("stages_two", "2-CTA: K block stages shared memory holds", "n_2",
                            floor_of(smem / stage_two), "", "half of B a stage leaves room for more")}
    s.step("loop_saving", "2-CTA: B bytes each SM is spared over the K loop", "ΔQ",
           (one - two) * K_total / K, "MiB",
           "half of B a K block, over K / K_s K blocks: each SM loads (TMA) and feeds that much less")
    _tile_judgements(s, demand=demand, stages=stages, limit=S, deep=s.param("n_deep", "deep"),
                     columns=tmem, buffers=buffers)
    s.assume("Hopper: a cooperative CTA with two consumer warpgroups splits the tile along M; each issues "
             "64-row WGMMAs with A and B from shared memory. Blackwell: tcgen05.mma, 128 rows per SM, the "
             "accumulator in TMEM; the 2-CTA form (cta_group::2) computes a 256-row pair tile from each SM's "
             "own A rows and half of B.")
    s.assume("Hopper's register figures are what holding the tile takes. CUTLASS's cooperative kernel gives each "
             "consumer thread 232 registers: its standard 128 × 256 tile (128 accumulator registers a thread) "
             "builds, but an accumulator much past that leaves too little for addresses and the epilogue and "
             "spills. That limit is the one TMEM lifts.")
    peak = blackwell.bf16_dense_tflops if p.dtype == "bf16" else blackwell.fp8_dense_tflops
    s.assume(f"NVIDIA publishes no FLOP per clock per SM for {blackwell.name}, nor the clock its peaks assume: "
             f"{format_number(getattr(blackwell, rate))} is twice Hopper's {format_number(getattr(hopper, rate))}, "
             f"what {blackwell.sms} SMs need to give the datasheet's {format_number(peak)} TFLOP/s dense {p.dtype} "
             f"at {format_number(blackwell.tensor_clock_ghz, 4)} GHz (derived). The paces turn on that 2× ratio "
             "to Hopper per SM and clock: a slower rate per clock would ask shared memory for less.")
    s.assume("128 B of each operand row per K block (64 bf16 or 128 fp8 elements: fp8 doubles the elements and "
             "the FLOP rate alike, so bytes per clock do not change). Only the tensor cores' operand reads are "
             "counted; the TMA writes into shared memory and the epilogue come on top, so a tie with shared "
             "memory's rate already binds. Pipeline stages fill all the shared memory one block may take, 227 KiB "
             "of the SM's 228 (the epilogue's staging and the barriers left out).")
    s.assume(f"Shared memory's 128 B a clock per SM is Hopper's 32 banks × 4 B. For {blackwell.name} it is a working "
             "assumption, as the FLOP per clock is: NVIDIA publishes no rate for the tcgen05 MMAs' operand reads, and "
             "public Blackwell GEMM analyses take the same 128. A faster path would move the smem-bound lines.")
    s.slip("accumulator in bf16 instead of FP32", 0.5, on=("rf_share", "acc_registers"))
    s.slip("B counted once on Hopper (the second warpgroup's read forgotten)", on="hopper_bytes",
           factor=s.value(one) / s.value(hop))
    s.slip("2-CTA: B counted whole on each SM", on="two_cta_demand", factor=s.value(one) / s.value(two))
    s.slip("the whole of B counted as spared, or the pair's saving (each SM still feeds half)", on="loop_saving",
           factor=2)
    _regime(s, demand["one"], S)
    _two_cta_pace(s, demand["two"], demand["one"], S)
