"""Accumulators in TMEM and B shared across SMs - what Blackwell gives back."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet
from solvers.models.common import dtype_bytes
from solvers.models.kernels import CONSUMER_WARPGROUPS, WARPGROUP_THREADS
from solvers.units import format_number

ACC_BYTES = 4  # FP32 accumulator


K_SLICE = 64  # bf16 elements per k-slice: one 128-byte swizzled row of each operand


TMEM_MIN_ALLOC = 32  # tcgen05.alloc: a power of two of columns, at least 32


def _tile_judgements(s: Sheet, *, share: sympy.Expr, regs: sympy.Expr, budget: sympy.Expr, tmem: sympy.Expr,
                     cols: sympy.Expr, demand: dict[str, sympy.Expr], limit: sympy.Expr, two: sympy.Expr,
                     hop: sympy.Expr) -> None:
    """The tile's options, decided on the sheet's exact values (the why lines' figures are floats)."""
    key = "tile_facts"
    shown = lambda x: format_number(s.evaluate(x))  # noqa: E731
    s.judge(key, "on Hopper the accumulator leaves at least half the register file for everything else",
            s.compare(share, sympy.Rational(1, 2)) <= 0, f"it takes {format_number(100 * s.evaluate(share), 3)}%")
    s.judge(key, "on Hopper the accumulator fits the consumers' {consumer_registers}-register budget",
            s.compare(regs, budget) <= 0, f"{shown(regs)} registers per thread for the accumulator alone")
    s.judge(key, "TMEM holds two of these accumulators, so one tile's epilogue can overlap the next one's MMAs",
            s.compare(2 * tmem, cols) <= 0, f"{shown(tmem)} of {shown(cols)} columns each")
    # At the rate itself shared memory is already the limit: the TMA writes into it come on top of the reads.
    smem = "shared memory's {hopper.smem_bytes_per_clk_sm} B per clock"
    for name, who in (("hopper", "at Hopper's rate, its 64-row warpgroup MMAs"), ("one", "at B200's rate, 1-SM MMAs"),
                      ("two", "at B200's rate, 2-CTA MMAs")):
        option = f"{who} read operands at least as fast as {smem}"
        s.judge(key, option, s.compare(demand[name], limit) >= 0,
                f"{format_number(s.evaluate(demand[name]), 3)} B/clock against {shown(limit)}")
    allocated = TMEM_MIN_ALLOC
    while s.compare(tmem, allocated) > 0:
        allocated *= 2
    s.judge(key, "tcgen05.alloc can give this accumulator exactly the TMEM columns it uses",
            s.compare(tmem, allocated) == 0, f"{shown(tmem)} columns used; the allocation is a power of two of "
            f"at least 32: {format_number(allocated)}")
    s.judge(key, "the 2-CTA MMA at least halves the operand bytes per SM against Hopper's",
            s.compare(two, hop / 2) <= 0, f"{shown(two / 1024)} KiB against {shown(hop / 1024)} KiB: B is split "
            "between the pair instead of read again for every 64 rows")


def solve(p, s: Sheet) -> None:
    """One SM's output tile of a GEMM, M × N in FP32: where its accumulator lives (Hopper: the consumer
    warpgroups' registers; Blackwell: TMEM) and how many operand bytes shared memory feeds the tensor
    cores per k-slice for Hopper's 64-row warpgroup MMAs, Blackwell's 128-row 1-SM MMA and its 2-CTA MMA."""
    hopper, blackwell = p.hopper, p.blackwell
    M = s.param("M", "tile_m")
    N = s.param("N", "tile_n")
    b_acc = s.given("b_acc", ACC_BYTES, "B", "bytes per FP32 accumulator element")
    RF = s.given("RF", hopper.regfile_kib_sm * 1024, "KiB", f"{hopper.name} register file per SM")
    threads = s.given("n_thr", CONSUMER_WARPGROUPS * WARPGROUP_THREADS, "", "consumer threads (two warpgroups)")
    budget = s.param("R_max", "consumer_registers")
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
    _tile_judgements(s, share=share, regs=regs, budget=budget, tmem=tmem, cols=cols, demand=demand, limit=S,
                     two=two, hop=hop)
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

