"""Concurrent users per GPU group, bf16 vs fp8, and the TP split."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from solvers.conventions import convention_value
from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, tp_all_reduce
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    compute_efficiency,
    dtype_bytes,
    fabric_name,
    given_compute_efficiencies,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
)
from solvers.formulas.kvcache import kv_bytes_per_token
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number

# Layouts within a tenth of each other are no call to grade: the step model's own error (its 80% of bandwidth,
# 60% of peak, 2 ms of overhead) is larger than the served users' 3% tolerance.
CLOSE_USERS = sympy.Rational(1, 10)
MAX_BATCH = 1024  # one engine's batch: TensorRT-LLM's peak-throughput tables (performance.md) go to 1,024
MAX_FULL_BATCH = 4096  # the memory-full batch whose TPOT stage 2 prices: past this it is no batch anyone sizes
CLOSE_TPOT = sympy.Rational(3, 100)  # the TPOT's tolerance: a full batch this near the target is no call either


@dataclass(frozen=True)
class _Served:
    """One layout of the node: the users it serves within the TPOT, and its TPOT as a function of the
    users it carries (each step's reads, math and communication at that load)."""

    users: sympy.Symbol
    tpot: Callable[[sympy.Expr], sympy.Expr]


def _layout(p, s: Sheet, n: int, G, usable, W, N, kv_req, BW, P, T, t_oh) -> _Served:
    """G/n replicas of TP n: what one replica holds, what its step carries within the TPOT, and the node's total."""
    terms = all_reduce_terms(s, p.model, p.gpu, n, tp_symbol=s.integer(n))  # one layout among several
    fixed, per = terms.fixed, terms.per_token
    fit = s.step(f"fit_tp{n}", f"Requests one TP{n} replica holds", f"B_fit{n}",
                 floor_of((usable - W / n) / (kv_req / n)), "requests",
                 "each of its GPUs holds 1/n of the weights and of every request")
    within = s.step(f"batch_tp{n}", f"Requests a TP{n} step carries within the TPOT", f"B_T{n}",
                    max_of(0, floor_of(min_of((T - t_oh - fixed - W / (n * BW)) / (kv_req / (n * BW) + per),
                                                 (T - t_oh - fixed) / (2 * N / (n * P) + per)))),
                    "requests", "t(B) ≤ T on both sides of the roofline, the step's overhead paid"
                    + ("" if n == 1 else ", all-reduce latency and traffic included"))
    users = s.step(f"served_tp{n}", f"Users served by {p.gpus // n} × TP{n}", f"U_{n}",
                   (G / n) * min_of(fit, within), "requests",
                   "each replica serves what fits, capped by what its step carries in time")

    def tpot(load: sympy.Expr) -> sympy.Expr:
        b = load / (G / n)  # each replica's batch
        return max_of((W / n + b * kv_req / n) / BW, 2 * N * b / (n * P)) + fixed + per * b + t_oh
    return _Served(users, tpot)


def _layout_regime(s: Sheet, p, layouts: dict[int, _Served], users16, tpot16) -> None:
    """One TP group over all the GPUs, or replicas of a narrower TP: whichever serves more users within the
    TPOT (a tie goes to the one group: fewer replicas to run). The served users come with their TPOT."""
    n_wide = p.gpus
    wide = layouts[n_wide]
    others = {n: v for n, v in layouts.items() if n < n_wide}
    at_load = {n: s.step(f"tpot_tp{n}", f"TPOT of {p.gpus // n} × TP{n} at the users it serves", f"t_{n}",
                         v.tpot(v.users), "ms", "the step's reads, math and communication at that load")
               for n, v in layouts.items()}
    runner = max(others, key=lambda n: (s.value(others[n].users), n)) if others else n_wide
    split = s.step("served_split", "Users the best narrower layout serves", "U_split",
                   others[runner].users if others else sympy.Integer(0), "requests",
                   f"{p.gpus // runner} × TP{runner}: the most of the replica layouts" if others else
                   "no narrower TP holds the bf16 weights beside a KV pool")
    top = max_of(wide.users, split)
    if others and s.compare(abs(wide.users - split), CLOSE_USERS * top) < 0:
        raise Reject("one group and the best replicas serve users within the served users' tolerance: no call")
    one = s.compare(wide.users, split) >= 0
    best = n_wide if one else runner
    if s.compare(top / (p.gpus // best), MAX_BATCH) > 0:
        raise Reject(f"the better layout runs over {MAX_BATCH:,} requests a step in a replica: no engine's batch")
    s.step("served", "Users the better layout serves within the TPOT", "U", top, "requests",
           f"{p.gpus // best} × TP{best}" + (": the one group, the weights stored once" if one else
                                            ": replicas, each carrying a smaller all-reduce per request"))
    t_best = s.step("tpot_served", "Its TPOT at that load", "t_U", at_load[best], "ms",
                    "what each user waits per token with that many served: just under the target, which caps it")
    s.step("tokens_per_gpu", "Output tokens per second per GPU at that load", "X",
           top / (t_best * s.symbol("G")), "tok/s",
           "every served user gets a token each step: the users over the TPOT, shared by the node's GPUs")
    fit16, t16 = format_number(s.value(users16)), s.text(tpot16)
    u_wide, u_split = format_number(s.value(wide.users)), format_number(s.value(split))
    t_wide = s.text(at_load[n_wide])
    alone = (f"Only TP{n_wide} holds the bf16 weights beside a KV pool: the node runs one group, which serves "
             f"{u_wide} users within the TPOT at {t_wide} ({fit16} full-context requests fit, at {t16} per token).")
    s.regime_by(wide.users, split, tie="above", above=Side(
        "one-group",
        alone if not others else
        f"One TP{n_wide} group serves {u_wide} users within the TPOT at {t_wide}, against {u_split} for "
        f"{p.gpus // runner} × TP{runner}: the full batch of {fit16} is too slow ({t16}), but each narrower replica "
        "reads its own copy of the weights every step, which leaves it less of the TPOT for requests.",
        "With shorter contexts or a tighter TPOT the step's time, not memory, caps the batch; then the all-reduce "
        "traffic each request adds, which grows with the TP width, lets replicas of a narrower TP serve more.",
        near=f"One TP{n_wide} group serves {u_wide} users against {u_split} for the best split, a clear margin "
             "but not a wide one: the weights read once per step still win, while the all-reduces take back part "
             "of the gain."),
        below=Side(
        "replicas",
        f"{p.gpus // runner} × TP{runner} serve {u_split} users within the TPOT at "
        f"{s.text(at_load[runner])}, against {u_wide} for one TP{n_wide} group: the TPOT, not "
        "memory, caps the wide group's batch, and narrower replicas pay less all-reduce per request and per step. "
        "The whole margin is that all-reduce traffic: overlapping it with the GEMMs, or a faster all-reduce, "
        "narrows it.",
        "With longer contexts or a looser TPOT memory binds again, and one wide group serves more: it holds one "
        "copy of the weights where replicas hold several.",
        near=f"The best split, {p.gpus // runner} × TP{runner}, serves {u_split} users against one TP{n_wide} "
             f"group's {u_wide}, a clear margin but not a wide one: at this context the all-reduce each request "
             "adds to the wide group outweighs the weights the replicas read again."))


def solve(p, s: Sheet) -> None:
    G = s.param("G", "gpus")
    M = given_hbm_bytes(s, p.gpu)
    u = given_usable_share(s)
    R = s.param("R", "reserve")
    N = given_model_params(s, p.model)
    usable = s.step("usable", "Usable memory per GPU", "M_use", M * u - R, "GB",
                    "the utilisation cap, less what the engine keeps for everything that is not weights or KV")
    b16 = s.given("b_16", dtype_bytes("bf16"), "B", "bytes per bf16 element")
    b8 = s.given("b_8", dtype_bytes("fp8"), "B", "bytes per fp8 element")
    kv_tok = kv_bytes_per_token(s, p.model, b16)
    C = s.param("C", "context")
    kv_req = s.step("kv_per_request", "bf16 KV per full-context request", "KV_req", kv_tok * C, "GiB",
                    "every token of the context keeps its keys and values")
    W = s.step("weights", "bf16 weight bytes", "W", N * b16, "GB", "every parameter once")
    w16 = s.step("weights_16_per_gpu", "bf16 weights per GPU, one TP group over the node", "w_16", W / G, "GB",
                 "tensor parallelism shards every weight matrix evenly over the group")
    kv16 = s.step("kv_per_request_gpu", "bf16 KV per request per GPU, one TP group", "KV_16", kv_req / G, "GiB",
                  "each GPU keeps H_kv/G of the KV heads of every request")
    users16 = s.step("users_16", "Full-context requests, one bf16 group over the node", "B_16",
                     floor_of((usable - w16) / kv16), "requests",
                     "what the weights leave on each GPU over each GPU's share of one request")
    if s.value(users16) < 1:
        raise Reject("the bf16 weights leave no room for a request even over the whole node")
    if s.compare(users16, MAX_FULL_BATCH) > 0:
        raise Reject(f"over {MAX_FULL_BATCH:,} full-context requests fit: no engine runs a batch that large")
    users8 = s.step("users_8", "Full-context requests, one fp8 group (weights and KV)", "B_8",
                    floor_of((usable - w16 * b8 / b16) / (kv16 * b8 / b16)), "requests",
                    "one byte per element halves the weights and every request's KV")
    f_min = s.given("f_min", convention_value("minimal-kv-pool"), "%",
                    "share of each GPU's HBM a deployment leaves for KV at least (minimal-kv-pool)")
    n_fit = s.step("", "TP at which the bf16 weights leave just the minimal KV pool", "n_fit",
                   W / (usable - f_min * M), "", "N·b/n = M_use − f_min·M: less, and a handful of requests is all "
                   "that fits")
    # TP degrees are powers of two that divide the heads: the first at or above n_fit, decided exactly.
    first = next((n for n in (2**k for k in range(int(math.log2(p.gpus)) + 1)) if s.compare(n, n_fit) >= 0), None)
    if first is None or first == p.gpus:
        raise Reject("only one group over all the GPUs holds the bf16 weights beside a KV pool: no split to choose")
    n_min = s.step("tp_min_16", "Smallest deployable TP for bf16", "n_min", sympy.Integer(first), "",
                   "the first power of two at or above n_fit: a TP group must split the heads evenly")
    BW = given_hbm_bandwidth(s, p.gpu) * given_step_bandwidth(s)  # what a decode step's reads reach
    eta_c, _ = given_compute_efficiencies(s, p.gpu, "bf16", "bf16")
    P = given_peak_flops(s, p.gpu, "bf16") * eta_c  # what its matmuls reach
    t_oh = given_step_overhead(s)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.gpus, users16, tag="wide", label="full batch", tp_symbol=G)
    tpot16 = s.step("tpot_16", "TPOT of the full bf16 batch, one group", "t_16",
                    max_of((W / G + users16 * kv16) / BW, 2 * N * users16 / (G * P)) + t_ar + t_oh, "ms",
                    "each GPU reads its weights and its share of every request's KV at the share of bandwidth a "
                    "decode step reaches, or does its math at the share of peak its matmuls reach, whichever is "
                    "longer, plus the all-reduces and the step's overhead")
    s.slip("the all-reduces left out", s.evaluate(tpot16 - t_ar) / s.value(tpot16), on="tpot_16")
    eta_8 = s.given("η_8", compute_efficiency("fp8"), "%", "achievable fraction of the fp8 dense peak")
    P8 = given_peak_flops(s, p.gpu, "fp8", symbol="P_8") * eta_8
    t_ar8 = tp_all_reduce(s, p.model, p.gpu, p.gpus, users8, tag="fp8", label="full fp8 batch", tp_symbol=G)
    s.step("tpot_8", "TPOT of the full fp8 batch, one group", "t_fp8",
           max_of((W / G + users8 * kv16) * b8 / b16 / BW, 2 * N * users8 / (G * P8)) + t_ar8 + t_oh, "ms",
           "half the bytes a request, but twice the requests: the reads barely move, the math runs at the fp8 "
           "peak, and the all-reduces (bf16 activations) grow with the batch")
    T = s.param("T", "tpot")
    if s.compare(tpot16, T * (1 + CLOSE_TPOT)) <= 0:
        raise Reject("the full batch already meets the TPOT: the served users would repeat what fits")
    layouts = {n: _layout(p, s, n, G, usable, W, N, kv_req, BW, P, T, t_oh)
               for n in (2**k for k in range(int(math.log2(p.gpus)) + 1)) if s.compare(n, n_min) >= 0}
    if s.value(layouts[p.gpus].users) < 1:
        raise Reject("no layout meets the TPOT target with one request")
    s.assume(f"Usable HBM {format_number(GPU_MEMORY_UTILIZATION * 100)}% of each GPU (card: usable-hbm), less "
             f"a reserve of {format_number(p.reserve / 2**30)} GiB for activations, CUDA graphs and NCCL buffers.")
    s.assume("Weights and KV heads split evenly over a TP group; no TP here exceeds the 8 KV heads, so none "
             "is replicated. Replicas of a narrower TP each hold a full copy of the weights.")
    s.assume("Every request holds its full context. Step time: the bank's step model, the reads at 80% of HBM "
             "bandwidth or 2 FLOPs per parameter per token at 60% of the bf16 peak, whichever is longer, plus the "
             f"TP all-reduces over {fabric_name(p.gpu)} (card: tp-all-reduce) and 2 ms of overhead a step; "
             "attention's FLOPs are left out (its KV reads are counted: decode reads far more than it computes "
             "there).")
    s.assume("What fits is counted in memory alone; an engine also caps its batch (vLLM's max_num_seqs, 256 to "
             "1,024 by default). At short contexts the memory-full batch runs to thousands of sequences, past any "
             "default cap: stage 2 prices it to show that memory is not what caps the node, not as a batch anyone "
             "runs. The TPOT caps it far lower: the served users never pass "
             f"{MAX_BATCH:,} a replica.")
    s.assume("fp8 weights and KV: the weight matmuls run at the fp8 peak (scaled fp8 GEMMs), the activations "
             "and so the all-reduces stay bf16.")
    s.slip("/n: requests per GPU, not per TP group", 1 / p.gpus, on=("users_16", "users_8"))
    s.slip("x n: the whole request's KV, not one GPU's share", p.gpus, on="kv_per_request_gpu")
    s.slip("x layers: one layer's KV instead of all of them", 1 / p.model.layers, on="kv_per_request_gpu")
    s.assume("A TP × PP pipeline over the GPUs is left out: it stores the weights once, like the one group, and "
             "adds a bubble and stage sends; which of the two serves more is a question of its own.")
    _layout_regime(s, p, layouts, users16, tpot16)

