"""Concurrent users per GPU group, bf16 vs fp8, and the TP split."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.models.collective import all_reduce_terms, stage_send, tp_all_reduce
from solvers.models.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
)
from solvers.models.kvcache import kv_bytes_per_token
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of
from solvers.units import format_number, format_quantity

TIED_TPOT = 0.02  # layouts serving as many users with tokens this close are a coin toss, not a choice


@dataclass(frozen=True)
class _Served:
    """One layout of the node: the users it serves within the TPOT, and its TPOT as a function of the
    users it carries (each step's reads, math and communication at that load)."""

    users: sympy.Symbol
    tpot: Callable[[sympy.Expr], sympy.Expr]


def _best_layout(p, s: Sheet, layouts: dict[str, _Served], n_pp: int) -> str:
    """The layout that serves the most users; among layouts that serve as many (memory caps the wide
    group and the pipeline alike, both storing the weights once), the one with the faster token at that
    load. Each layout's TPOT at its load is a step: capacity comes with its latency."""
    at_load = {name: s.step(f"tpot_{name.lower()}", f"TPOT of {_layout_name(p, name, n_pp)} at its load",
                            f"t_{name}", layout.tpot(layout.users), "ms",
                            "the step's reads, math and communication with the users it serves")
               for name, layout in layouts.items()}
    top = max(s.value(layout.users) for layout in layouts.values())
    tied = [name for name, layout in layouts.items() if s.compare(layout.users, top) == 0]
    fastest = sorted(s.value(at_load[name]) for name in tied)
    if len(fastest) > 1 and fastest[1] < (1 + TIED_TPOT) * fastest[0]:
        raise Reject(f"layouts serving as many users have TPOTs within {TIED_TPOT:.0%}: the choice turns on rounding")
    best = min(tied, key=lambda name: s.value(at_load[name]))
    s.choose("best_layout", best)
    why = ": the most of the layouts above" if len(tied) == 1 else (
        f": as many users as {', '.join(_layout_name(p, n, n_pp) for n in tied if n != best)}, with the faster token")
    s.step("served_best", "Users the best layout serves within the TPOT", "U_best", layouts[best].users,
           "requests", _layout_name(p, best, n_pp) + why)
    s.step("tpot_best", "TPOT of the best layout at that load", "t_best", at_load[best], "ms",
           f"what each of its users waits per token with {format_number(s.value(layouts[best].users))} served")
    return best


def _layout_name(p, name: str, n_pp: int) -> str:
    if name == "PP":
        return f"one TP{n_pp} × PP{p.gpus // n_pp} pipeline"
    n = int(name[2:])
    return f"{p.gpus // n} × TP{n}"


def _layout(p, s: Sheet, n: int, G, usable, W, N, kv_req, BW, P, T) -> _Served:
    """G/n replicas of TP n: what one replica holds, what its step carries within the TPOT, and the node's total."""
    terms = all_reduce_terms(s, p.model, p.gpu, n, tp_symbol=s.integer(n))  # one layout among several
    fixed, per = terms.fixed, terms.per_token
    fit = s.step(f"fit_tp{n}", f"Requests one TP{n} replica holds", f"B_fit{n}",
                 floor_of((usable - W / n) / (kv_req / n)), "requests",
                 "each of its GPUs holds 1/n of the weights and of every request")
    within = s.step(f"batch_tp{n}", f"Requests a TP{n} step carries within the TPOT", f"B_T{n}",
                    max_of(0, floor_of(min_of((T - fixed - W / (n * BW)) / (kv_req / (n * BW) + per),
                                                 (T - fixed) / (2 * N / (n * P) + per)))),
                    "requests", "t(B) ≤ T on both sides of the roofline"
                    + ("" if n == 1 else ", all-reduce latency and traffic included"))
    users = s.step(f"served_tp{n}", f"Users served by {p.gpus // n} × TP{n}", f"U_{n}",
                   (G / n) * min_of(fit, within), "requests",
                   "each replica serves what fits, capped by what its step carries in time")

    def tpot(load: sympy.Expr) -> sympy.Expr:
        b = load / (G / n)  # each replica's batch
        return max_of((W / n + b * kv_req / n) / BW, 2 * N * b / (n * P)) + fixed + per * b
    return _Served(users, tpot)


def _pipeline(p, s: Sheet, n: int, G, usable, W, N, kv_req, BW, P, T) -> _Served:
    """One replica over the node: TP n within each of G/n pipeline stages of whole layers. Decode keeps every
    stage busy with G/n micro-batches in flight; each token passes every stage once, so the TPOT is the sum of
    one micro-batch's stage times, and the slowest (most layers) stage sets the pace of all."""
    S = s.step("pp_stages", f"Pipeline stages of TP{n}", "S", G / n, "", "the node's GPUs over the TP width")
    L = given_config(s, p.model, "layers")
    L_s = s.step("pp_layers", "Layers in the largest stage", "L_s", ceil_of(L / S), "",
                 "whole layers per stage; an uneven split leaves one stage heavier")
    w_pp = s.step("pp_weights_gpu", "bf16 weights per GPU of the pipeline", "w_pp", W * L_s / (L * n), "GB",
                  "its stage's layers, split over the stage's TP group")
    kv_pp = s.step("pp_kv_gpu", "bf16 KV per request per GPU of the pipeline", "KV_pp", kv_req * L_s / (L * n),
                   "GiB", "each stage keeps its layers' KV for every request in flight")
    fit = s.step("pp_fit", "Requests the pipeline holds", "B_fitPP", floor_of((usable - w_pp) / kv_pp),
                 "requests", "what the stage's weights leave on each GPU over its share of one request")
    terms = all_reduce_terms(s, p.model, p.gpu, n, tp_symbol=s.integer(n))
    stage = L_s / L  # the largest stage's share of the layers' all-reduces
    send = stage_send(s, p.model, p.gpu, p.gpus)
    fixed = S * stage * terms.fixed
    per = S * stage * terms.per_token + (S - 1) * send  # seconds of TPOT each request of a micro-batch adds
    micro = s.step("pp_micro", "Micro-batch a token's pass carries within the TPOT", "m_T",
                   max_of(0, floor_of(min_of((T - fixed - S * w_pp / BW) / (S * kv_pp / BW + per),
                                                (T - fixed) / (S * 2 * N * stage / (n * P) + per)))),
                   "requests", "S·t_stage(m) + (S − 1)·m·x ≤ T on both sides of the roofline: the token passes "
                   "every stage once" + ("" if n == 1 else ", each stage's all-reduces included"))
    users = s.step("served_pp", f"Users one TP{n} × PP{p.gpus // n} pipeline serves", "U_PP",
                   min_of(fit, S * micro), "requests",
                   "S micro-batches in flight keep every stage busy: what fits, capped by S micro-batches in time")

    def tpot(load: sympy.Expr) -> sympy.Expr:
        m = load / S  # micro-batches of the load's S-th part, on average
        return max_of(S * (w_pp + m * kv_pp) / BW, S * 2 * N * stage * m / (n * P)) + fixed + per * m
    return _Served(users, tpot)


def _pipeline_note(s: Sheet, p, n: int, pp, piped: bool) -> str:
    """Why the pipeline does or does not serve the most, from which of its caps binds."""
    def result(key: str) -> float:
        return s.number(key)

    layout, users = f"One TP{n} × PP{p.gpus // n} pipeline", format_number(s.value(pp))
    replicas = {key[7:]: result(key) for key in s.results if key.startswith("served_tp")}
    tied = max(replicas.values()) == result("served_pp")
    t_pp = format_quantity(result("tpot_pp"), "ms")
    if piped and tied:
        rival = min(result(f"tpot_{n}") for n, users in replicas.items() if users == result("served_pp"))
        return (f" {layout} serves as many, {users}, with the faster token: {t_pp} against "
                f"{format_quantity(rival, 'ms')}, its TP{n} all-reduces lighter than the wider group's.")
    if piped:
        return (f" {layout} serves more still, {users}: it stores the weights once, like the wide group, while a "
                f"token meets only TP{n} all-reduces, and each stage's run while the other stages compute.")
    if tied:
        return (f" {layout} serves as many, {users}, but its token is slower ({t_pp} against "
                f"{format_quantity(result('tpot_best'), 'ms')}): each token reads a TP{n} replica's share of the "
                "weights, stage after stage.")
    if result("pp_fit") <= result("pp_stages") * result("pp_micro"):
        return f" {layout} holds the same {users} requests as one wide group, and no more: memory caps both."
    return (f" {layout} serves {users}: a token's pass reads the weights stage after stage, a TP{n} replica's "
            "share per GPU in all, so the TPOT caps its micro-batches.")


def _layout_regime(s: Sheet, p, served, best, users16, tpot16, pp_note: str) -> None:
    wide = served[p.gpus]
    others = {n: v for n, v in served.items() if n < p.gpus}
    runner = max(others, key=lambda n: (s.value(others[n]), n)) if others else None
    split = s.step("served_split", "Users the best narrower layout serves", "U_split",
                   others[runner] if others else sympy.Integer(0), "requests",
                   f"TP{runner} × {p.gpus // runner}" if others else "no narrower TP holds the bf16 weights")
    fit16, t16 = format_number(s.value(users16)), s.text(tpot16)
    n_wide, u_wide = p.gpus, format_number(s.value(wide))
    u_split = format_number(s.value(split))
    alone = (f"Only TP{n_wide} holds the bf16 weights with room for a request: the node runs one group, which "
             f"serves {u_wide} users within the TPOT ({fit16} full-context requests fit, at {t16} per token)."
             + pp_note)
    s.regime_by(wide, split, tie="above", above=Side(
        "one-group",
        alone if not others else
        f"One TP{n_wide} group serves {u_wide} users within the TPOT, against {u_split} for the best split: it stores "
        f"the weights once, so each GPU keeps more room for KV ({fit16} full-context requests at {t16} per token)."
        + pp_note,
        "With shorter contexts or a tighter TPOT the step's time, not memory, caps the batch; then the all-reduce "
        "traffic each request adds, which grows with the TP width, lets replicas of a narrower TP serve more.",
        near=f"One TP{n_wide} group serves {u_wide} users, barely more than the {u_split} of the best split: "
             "the weights stored once still win, but the all-reduces nearly cancel the gain." + pp_note),
        below=Side(
        "replicas",
        f"{p.gpus // best} × TP{best} serve {format_number(s.value(served[best]))} users within the TPOT, against "
        f"{u_wide} for one TP{n_wide} group: the TPOT, not memory, caps the wide group's batch, and narrower "
        "replicas pay less all-reduce per request and per step." + pp_note,
        "With longer contexts or a looser TPOT memory binds again, and one wide group serves more: it holds one "
        "copy of the weights where replicas hold several.",
        near=f"The best split serves {format_number(s.value(served[best]))} users, barely more than one TP{n_wide} "
             f"group's {u_wide}: the two are close, and a small change in context or TPOT flips the choice."
             + pp_note))


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
    s.step("users_8", "Full-context requests, one fp8 group (weights and KV)", "B_8",
                    floor_of((usable - w16 * b8 / b16) / (kv16 * b8 / b16)), "requests",
                    "one byte per element halves the weights and every request's KV")
    n_fit = s.step("", "TP at which the bf16 weights and one request just fit", "n_fit", (W + kv_req) / usable, "",
                   "N·b/n + KV_req/n = M_use")
    # TP degrees are powers of two that divide the heads: the first at or above n_fit, decided exactly.
    first = next(n for n in (2**k for k in range(int(math.log2(p.gpus)) + 1)) if s.compare(n, n_fit) >= 0)
    n_min = s.step("tp_min_16", "Smallest deployable TP for bf16", "n_min", sympy.Integer(first), "",
                   "the first power of two at or above n_fit: a TP group must split the heads evenly")
    BW = given_hbm_bandwidth(s, p.gpu)
    P = given_peak_flops(s, p.gpu, "bf16")
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.gpus, users16, tag="wide", label="full batch", tp_symbol=G)
    tpot16 = s.step("tpot_16", "TPOT of the full bf16 batch, one group", "t_16",
                    max_of((W / G + users16 * kv16) / BW, 2 * N * users16 / (G * P)) + t_ar, "ms",
                    "each GPU reads its weights and its share of every request's KV (card: roofline-time), "
                    "plus the all-reduces")
    s.slip("the all-reduces left out", s.evaluate(tpot16 - t_ar) / s.value(tpot16), on="tpot_16")
    T = s.param("T", "tpot")
    layouts: dict[str, _Served] = {}
    for n in (2**k for k in range(int(math.log2(p.gpus)) + 1)):
        if s.compare(n, n_min) >= 0:
            layouts[f"TP{n}"] = _layout(p, s, n, G, usable, W, N, kv_req, BW, P, T)
    n_pp = min(first, p.gpus // 2)  # the narrowest TP that holds the model alone, but at least two stages
    layouts["PP"] = _pipeline(p, s, n_pp, G, usable, W, N, kv_req, BW, P, T)
    if max(s.value(layout.users) for layout in layouts.values()) < 1:
        raise Reject("no layout meets the TPOT target with one request")
    served = {int(name[2:]): layout.users for name, layout in layouts.items() if name != "PP"}
    pp = layouts["PP"].users
    best = max(served, key=lambda n: (s.value(served[n]), n))  # a tie goes to the wider group: fewer replicas
    piped = _best_layout(p, s, layouts, n_pp) == "PP"
    s.assume(f"Usable HBM {format_number(GPU_MEMORY_UTILIZATION * 100)}% of each GPU (card: usable-hbm), less "
             f"a reserve of {format_number(p.reserve / 2**30)} GiB for activations, CUDA graphs and NCCL buffers.")
    s.assume("Weights and KV heads split evenly over a TP group; no TP here exceeds the 8 KV heads, so none "
             "is replicated. Replicas of a narrower TP each hold a full copy of the weights.")
    s.assume("Every request holds its full context. Step time: the card's roofline at datasheet peak, 2 FLOPs "
             "per parameter per token, plus the TP all-reduces over NVLink (card: tp-all-reduce); attention "
             "FLOPs and engine overhead are left out.")
    s.slip("/n: requests per GPU, not per TP group", 1 / p.gpus, on=("users_16", "users_8"))
    s.slip("x n: the whole request's KV, not one GPU's share", p.gpus, on="kv_per_request_gpu")
    s.slip("x layers: one layer's KV instead of all of them", 1 / p.model.layers, on="kv_per_request_gpu")
    s.assume("The pipeline runs S micro-batches in flight with no bubble in steady decode; sending the sampled token "
             "back to the first stage, and the sends' latency, are left out.")
    _layout_regime(s, p, served, best, users16, tpot16, _pipeline_note(s, p, n_pp, pp, piped))

