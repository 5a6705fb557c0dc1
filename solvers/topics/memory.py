"""Memory questions: KV-cache sizing and what it does to concurrency."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import sympy

from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import all_reduce_terms, stage_send, tp_all_reduce
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    model_params,
    peak_flops,
)
from solvers.topics.kvcache import kv_bytes_per_token, kv_bytes_per_token_given, kv_heads_per_gpu
from solvers.units import format_number, format_quantity


def kv_bytes_per_token_question(p, s: Sheet) -> None:
    if p.model.attention != "gqa" or p.model.get("active_params_b") is not None:
        raise Reject("dense GQA models only: the step below reads every weight for every token")
    b_kv = s.given("b_kv", dtype_bytes(p.kv_dtype), "B", f"bytes per KV element ({p.kv_dtype})")
    kv_tok = kv_bytes_per_token(s, p.model, b_kv)
    C = s.param("C", "context")
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GiB",
                    "every token of the context keeps its keys and values")
    n = s.param("n", "tp")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable share of HBM (card: usable-hbm)")
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    W = s.step("weights", "Weight bytes", "W", N * b_w, "GB", "every parameter once, split evenly over the TP group")
    free = s.step("kv_memory", "KV memory across the group", "M_KV", n * M * u - W, "GB",
                  "usable HBM of all GPUs minus one copy of the weights; the KV heads split across the GPUs")
    users = s.step("users", "Requests that fit at this context", "U", floor_of(free / kv_req), "requests",
                   "whole requests: the KV memory over one request's cache")
    if s.value(users) < 1:
        raise Reject("not one request fits: nothing to compare")
    fit = _decode_step(p, s, n * M * u, N, W, kv_req, users)
    _kv_slips(p, s, free, kv_req, users)
    _concurrency_regime(s, users, fit)


@dataclass(frozen=True)
class _DecodeStep:
    """A decode step's time as fixed costs plus a cost per request on each side of the roofline,
    the batch a TPOT target allows, and the symbols a lever changes."""

    T: sympy.Symbol  # TPOT target
    M_use: sympy.Expr  # usable HBM of the group
    W: sympy.Symbol
    kv_req: sympy.Symbol
    byte_rate: sympy.Expr  # bytes/s one GPU reads
    flop_rate: sympy.Expr  # FLOP/s one GPU does
    flops_req: sympy.Expr  # FLOPs per request per step, one GPU
    n: sympy.Symbol
    ar_fixed: sympy.Expr  # all-reduce latency per step
    ar_req: sympy.Expr  # all-reduce time each request adds
    batch: sympy.Symbol  # requests within the TPOT target
    reads_bind: bool = True  # at the TPOT target, the read side caps the batch (else the math side)

    def batch_at(self, T=None, byte_rate=None, flop_rate=None, kv_req=None) -> sympy.Expr:
        """Requests per step within TPOT T: each side of the roofline bounds the batch."""
        T = self.T if T is None else T
        byte_rate = self.byte_rate if byte_rate is None else byte_rate
        flop_rate = self.flop_rate if flop_rate is None else flop_rate
        kv_req = self.kv_req if kv_req is None else kv_req
        by_reads = (T - self.ar_fixed - self.W / (self.n * byte_rate)) / (kv_req / (self.n * byte_rate) + self.ar_req)
        by_math = (T - self.ar_fixed) / (self.flops_req / flop_rate + self.ar_req)
        return floor_of(min_of(by_reads, by_math))


def _decode_step(p, s: Sheet, M_use, N, W, kv_req, users) -> _DecodeStep:
    """The card's roofline step (weights and every request's KV read once, 2 FLOPs per parameter
    per token at dense peak) plus the TP all-reduces, at the batch that fits and at the TPOT target."""
    n = s.param("n", "tp")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")
    P = s.given("P", peak_flops(p.gpu, p.weight_dtype), "TFLOP/s", f"{p.gpu.name} dense {p.weight_dtype} peak")
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, users, tag="fit", label="decode step at that batch")
    tpot = s.step("tpot_fit", "TPOT at the batch that fits", "t_fit",
           max_of((W + users * kv_req) / (n * BW), 2 * N * users / (n * P)) + t_ar, "ms",
           "each GPU reads its share of the weights and of every request's KV; the slower side of the roofline "
           + ("sets the step" if p.tp == 1 else "plus the all-reduces sets the step"))
    weights_only = s.evaluate(max_of(W / (n * BW), 2 * N * users / (n * P)) + t_ar)
    s.slip("the KV reads left out of the step", weights_only / s.value(tpot), on="tpot_fit")
    if p.tp > 1:
        s.slip("the all-reduces left out", s.evaluate(tpot - t_ar) / s.value(tpot), on="tpot_fit")
    T = s.param("T", "tpot")
    terms = all_reduce_terms(s, p.model, p.gpu, p.tp, tp_symbol=n)  # tp_all_reduce's, as fixed + per request
    ar_fixed, ar_req = terms.fixed, terms.per_token
    step = _DecodeStep(T, M_use, W, kv_req, BW, P, 2 * N / n, n, ar_fixed, ar_req, users)
    t_w = s.step("", "Time to read one GPU's share of the weights", "t_W", W / (n * BW), "ms",
                 "paid once per step, however many requests ride along")
    t_kv = s.step("", "Time each request adds on the read side", "t_kv", kv_req / (n * BW) + ar_req, "ms",
                  "its share of the KV read" + ("" if p.tp == 1 else ", plus its activations in the all-reduces"))
    t_f = s.step("", "Time each request adds on the math side", "t_F", step.flops_req / P + ar_req, "ms",
                 "2 FLOPs per parameter for its token" + ("" if p.tp == 1 else ", plus its all-reduce traffic"))
    fixed = sympy.Integer(0)
    if p.tp > 1:
        fixed = s.step("", "All-reduce latency per step", "t_α", ar_fixed, "ms", "two all-reduces per layer")
    batch = s.step("batch_tpot", "Requests a step carries within the TPOT target", "B_T",
                   floor_of(min_of((T - fixed - t_w) / t_kv, (T - fixed) / t_f)), "requests",
                   "t(B) ≤ T on each side of the roofline: the time left after the fixed costs over what each "
                   "request adds")
    if s.value(batch) < 1:
        raise Reject("the TPOT target is shorter than a step with one request")
    reads_bind = s.compare((T - fixed - t_w) / t_kv, (T - fixed) / t_f) <= 0
    s.step("served", "Users served within the TPOT target", "U_T", min_of(users, batch),
           "requests", "as many as fit, but no more than a step can carry in time")
    return replace(step, batch=batch, reads_bind=reads_bind)


def _kv_slips(p, s: Sheet, free, kv_req, users) -> None:
    s.slip("x layers: one layer's KV instead of all of them", on=("kv_per_token", "kv_per_request"),
           factor=1 / p.model.layers)
    s.slip("x layers: one layer's KV instead of all of them", on="users",
           factor=s.evaluate(floor_of(free * p.model.layers / kv_req)) / s.value(users))
    s.slip("x2: K and V counted once", 0.5, on=("kv_per_token", "kv_per_request"))
    s.slip("x2: K and V counted once", on="users", factor=s.evaluate(floor_of(2 * free / kv_req)) / s.value(users))
    s.assume(f"Usable HBM {format_number(GPU_MEMORY_UTILIZATION * 100)}% (card: usable-hbm); activations, "
             "CUDA graphs and fragmentation are ignored. Weights and KV heads split evenly over the TP group "
             "(TP stays within the KV heads).")
    s.assume("Every request holds its full context for the whole step; a real batch mixes ages, so this is "
             "the worst step the batch can take.")
    s.assume("Roofline at datasheet peak (cards: roofline-time, dense-peaks, flops-per-token): each step reads "
             "the weights and every request's KV once; attention FLOPs, kernel launches and the engine's "
             "own overhead are left out, so real TPOTs are longer.")


def _served(s: Sheet, step: _DecodeStep, M_use=None, kv_req=None, **batch) -> float:
    """Users served within the TPOT target: the smaller of what fits and what a step carries."""
    M_use = step.M_use if M_use is None else M_use
    fit = floor_of((M_use - step.W) / (step.kv_req if kv_req is None else kv_req))
    return s.evaluate(min_of(fit, step.batch_at(kv_req=kv_req, **batch)))


def _concurrency_regime(s: Sheet, users, step: _DecodeStep) -> None:
    fit, batch = format_number(s.value(users)), format_number(s.value(step.batch))
    served = min(s.value(users), s.value(step.batch))
    levers = (
        ("a KV cache half the bytes per token", dict(kv_req=step.kv_req / 2)),
        ("GPUs with twice the HBM capacity, same bandwidth", dict(M_use=2 * step.M_use)),
        ("GPUs with twice the HBM bandwidth, same capacity", dict(byte_rate=2 * step.byte_rate)),
        ("GPUs with twice the dense tensor peak", dict(flop_rate=2 * step.flop_rate)),
        ("a TPOT target 1.5× as long", dict(T=sympy.Rational(3, 2) * step.T)),
    )
    for option, change in levers:
        after = _served(s, step, **change)
        s.judge("levers", option, after > served,
                f"{format_number(served)} users served today ({fit} fit, {batch} within the TPOT); "
                f"with this change {format_number(after)}")
    s.regime_by(users, step.batch, tie="above", below=Side(
        "capacity-limited",
        f"Only {fit} requests fit in HBM, fewer than the {batch} a step could carry within the TPOT target: "
        "memory capacity caps concurrency, and every user gets a faster token than promised.",
        "Past the boundary the step is too slow before memory is full: shorter contexts or fp8 KV then "
        "let more in only until the TPOT target binds, and the step's bytes and all-reduces set the user count.",
        near=f"{fit} requests fit in HBM, just under the {batch} the TPOT target allows: memory binds first, "
             "but at that batch the step is already close to the target, so more capacity buys little."),
        above=Side(
        "latency-limited",
        f"{fit} requests fit in HBM, but a step carrying more than {batch} misses the TPOT target: "
        + ("the time to read the weights and every request's KV" if step.reads_bind
           else "the math of every token (at this short context it outlasts the token's KV read)")
        + ", not capacity, caps concurrency.",
        "With longer contexts, bf16 KV or fewer GPUs, fewer requests fit and memory becomes the cap: "
        "then more HBM or smaller KV let more users in, while more bandwidth only makes each token faster.",
        near=f"{fit} requests fit in HBM, just past the {batch} the TPOT target allows: the step's reads bind "
             "first, but memory is nearly full too, so only a change that helps both lets many more in."))


def users_per_gpu_question(p, s: Sheet) -> None:
    G = s.param("G", "gpus")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable share of HBM (card: usable-hbm)")
    R = s.param("R", "reserve")
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
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
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.gpus, users16, tag="wide", label="full batch")
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
    L = s.given("L", p.model.layers, "", "layers")
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
    fit16, t16 = format_number(s.value(users16)), format_quantity(s.value(tpot16), "ms")
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


def _profile_run_inputs(p, s: Sheet, utilization: float) -> tuple[sympy.Symbol, ...]:
    """What vLLM's start-up accounting works from: total memory, the utilisation cap, the TP group,
    the weights per GPU and what the profile run measured besides them."""
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} total memory (datasheet)")
    u = s.given("u", utilization, "", "gpu_memory_utilization")
    n = s.given("n", p.tp, "", "tensor-parallel GPUs")
    N = s.given("N", model_params(p.model), "", "parameters")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    A = s.param("A", "activation_peak")
    T = s.param("T", "non_torch")
    w = s.step("weights_per_gpu", "Weights per GPU", "w", N * b_w / n, "GiB",
               "tensor parallelism shards every weight matrix evenly over the group")
    return M, u, n, A, T, w


def kv_cache_block_count_question(p, s: Sheet) -> None:
    M, u, n, A, T, w = _profile_run_inputs(p, s, GPU_MEMORY_UTILIZATION)
    other = s.step("other_non_kv", "Activation peak plus non-torch memory", "O", A + T, "GiB",
                   "what the profile run measured besides the weights")
    avail = s.step("available", "Memory left for the KV cache per GPU", "M_KV", M * u - (w + other), "GiB",
                   "vLLM: total × gpu_memory_utilization − (weights + activation peak + non-torch)")
    if s.value(avail) <= 0:
        raise Reject("no memory for cache blocks: vLLM refuses to start")
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    L = s.given("L", p.model.layers, "", "layers")
    H = s.given("H_kv", p.model.kv_heads, "", "KV heads")
    bs = s.param("S_b", "block_size")
    heads = kv_heads_per_gpu(s, p.model, n)
    page = s.step("page_bytes", "Page per layer (one block)", "P", bs * kv_tok * heads / (H * L), "KiB",
                  "vLLM's page_size_bytes: the block's tokens times one layer's K and V for the heads this GPU keeps")
    block = s.step("block_bytes", "Bytes per block, all layers, per GPU", "B_blk", page * L, "MiB",
                   "a block id covers the same token slots in every layer")
    blocks = s.step("num_blocks", "KV cache blocks", "N_blk", floor_of(avail / block), "blocks",
                    "vLLM: available // page_size // num_layers (two floors give the same as one)")
    s.step("token_capacity", "Token slots in the cache", "K_tok", blocks * bs, "tokens",
           "what vLLM logs as the GPU KV cache size")
    C = s.param("C", "context")
    per_seq = s.step("blocks_per_sequence", "Blocks per full-context sequence", "k", ceil_of(C / bs),
                     "blocks", "a sequence's last block is allocated whole, however few tokens it holds")
    seqs = s.step("max_sequences", "Full-context sequences the blocks hold", "B_max",
                  floor_of(blocks / per_seq), "sequences",
                  "vLLM's 'maximum concurrency' line: the blocks over one sequence's blocks")
    if s.value(seqs) < 1:
        raise Reject("not one sequence fits at this context: vLLM refuses to start")
    cap = s.param("S_max", "max_num_seqs")
    if s.compare(seqs, cap) == 0:
        raise Reject("the blocks hold exactly max_num_seqs sequences: neither cap is the one that binds")
    s.step("concurrency", "Full-context sequences that run at once", "B_run", min_of(seqs, cap),
           "sequences", "the scheduler admits no more than max_num_seqs, and no more than the blocks hold")

    s.assume("total_memory is the datasheet capacity in GB; the driver reports about that figure in GiB (an "
             "80 GB H100 shows close to 80 GiB, some 85 GB), so a real vLLM log shows several percent more "
             f"blocks. gpu_memory_utilization = {format_number(GPU_MEMORY_UTILIZATION)} (card: usable-hbm) caps "
             "everything vLLM allocates; CUDA graphs, captured after the cache is sized, come out of the rest.")
    s.assume("The activation peak and non-torch memory are what the profile run measured on each GPU at "
             "max_num_batched_tokens; the peak grows with that token count, so halving it roughly halves the "
             "peak. The weights split evenly over the TP group (vocab-parallel embeddings and LM head included).")
    s.assume("KV heads per GPU follow vLLM: H_kv // TP, but at least one; past the KV heads each is replicated.")
    _block_slips(p, s, avail, page, blocks, per_seq, seqs)
    _ceiling_judgements(p, s, avail, A, block, blocks, per_seq, seqs, cap)
    _ceiling_regime(s, seqs, cap)


def _block_slips(p, s: Sheet, avail, page, blocks, per_seq, seqs) -> None:
    s.slip("x layers: one layer's page, not the whole block", 1 / p.model.layers, on="block_bytes")
    per_layer = floor_of(avail / page)  # blocks when the layers are not divided out
    s.slip("blocks counted per layer", s.evaluate(per_layer) / s.value(blocks), on="num_blocks")
    s.slip("blocks counted per layer", on="max_sequences",
           factor=s.evaluate(floor_of(per_layer / per_seq)) / s.value(seqs))
    kept = max(1, p.model.kv_heads // p.tp)  # KV heads each GPU holds
    if p.tp > p.model.kv_heads:
        s.slip("KV heads split past their count (no replication)", p.model.kv_heads / p.tp, on="block_bytes")
    s.slip("KV heads not split over TP", p.model.kv_heads / kept, on="block_bytes")


def _ceiling_judgements(p, s: Sheet, avail, A, block, blocks, per_seq, seqs, cap) -> None:
    """Why fewer full-context sequences run than a naive count suggests, judged on this variant."""
    count, limit = format_number(s.value(seqs)), format_number(s.value(cap))
    s.judge("ceiling", "max_num_seqs admits fewer sequences than the blocks hold", s.compare(cap, seqs) < 0,
            f"the blocks hold {count} full-context sequences; max_num_seqs is {limit}")
    s.judge("ceiling", "sequences shorter than the full context would let more of them run", s.compare(seqs, cap) < 0,
            f"{count} full-context sequences fill the blocks, "
            + ("below" if s.compare(seqs, cap) < 0 else "above") + f" max_num_seqs = {limit}: "
            + ("shorter ones need fewer blocks each" if s.compare(seqs, cap) < 0 else "the scheduler's cap binds"))
    s.judge("ceiling", "past the KV heads, a wider TP stops shrinking each block's bytes (the heads are copied)",
            p.tp > p.model.kv_heads,
            f"TP {p.tp} over {p.model.kv_heads} KV heads: "
            + (f"every GPU holds a copy of one head, {p.tp // p.model.kv_heads} GPUs per head, so a block costs "
               "each GPU as much as at TP = KV heads (the weights still shard further)"
               if p.tp > p.model.kv_heads else f"each GPU keeps {p.model.kv_heads // p.tp} heads, none copied"))
    spare = int(p.context) % int(p.block_size)
    s.judge("ceiling", "a full-context sequence leaves its last block partly empty", spare != 0,
            f"{format_number(p.context)} tokens in blocks of {format_number(p.block_size)}: "
            + (f"the last block holds {spare}" if spare else "the blocks fill exactly"))
    s.judge("ceiling", "the CUDA graphs captured after start-up take blocks back", False,
            "the blocks are allocated before the graphs are captured; the graphs come out of the memory "
            "outside gpu_memory_utilization, or OOM there", fact=True)
    gained = s.evaluate(floor_of((avail + A / 2) / block) / blocks - 1)
    s.judge("ceiling", "halving max_num_batched_tokens would add over 5% more blocks", gained > 0.05,
            f"half the {format_quantity(s.value(A), 'GiB')} activation peak returns "
            f"{format_quantity(s.value(A) / 2, 'GiB')}: {format_quantity(gained, '%')} more blocks")


def _ceiling_regime(s: Sheet, seqs, cap) -> None:
    count, limit = format_number(s.value(seqs)), format_number(s.value(cap))
    s.regime_by(seqs, cap, tie="above", below=Side(
        "block-limited",
        f"The blocks hold {count} full-context sequences, fewer than max_num_seqs = {limit}: the KV cache is the "
        "ceiling, and it is reached only if every sequence grows to the full context at once; shorter ones "
        "leave blocks for more, longer-lived ones force preemption.",
        "With shorter contexts, fp8 KV, more GPUs or fp8 weights the blocks outgrow max_num_seqs, which then "
        "caps the batch while blocks sit idle: raise it (and the CUDA-graph capture sizes) to use them.",
        near=f"The blocks hold {count} full-context sequences, just under max_num_seqs = {limit}: the cache binds "
             f"first, but more blocks buy at most {format_number(s.value(cap) - s.value(seqs))} more sequences "
             "before max_num_seqs does."),
        above=Side(
        "seqs-limited",
        f"The blocks hold {count} full-context sequences, but max_num_seqs = {limit} admits fewer: the scheduler's "
        "cap binds and the rest of the blocks serve only longer sequences or the prefix cache.",
        "With longer contexts, bf16 KV or narrower TP the blocks run out before max_num_seqs: the KV cache is "
        "then the ceiling, and every sequence that grows past its share forces a preemption.",
        near=f"max_num_seqs = {limit} caps the batch just below the {count} sequences the blocks hold: both "
             "limits are close, so raising max_num_seqs alone soon runs into the blocks."))


# --- hidden-memory-budget ------------------------------------------------------------------

# The three vLLM v1 start-ups the question draws from: before PR #25359 (September 2025) the first memory
# snapshot came before the NCCL communicators were set up, so their buffers showed up as non-torch growth in
# the profile and were subtracted; from that change they sit in the snapshot's baseline, which the budget never
# subtracts; from v0.21 start-up also captures the CUDA graphs in a trial and subtracts their estimate.
# v0.11 is left out: whether its first release has the change is not pinned down here.
BEFORE_25359, FROM_V021 = "v0.10", "v0.21"  # and v0.12-v0.20 between them
# Two facts of every release's ledger, and the two consumers the releases move. The weights (plainly
# subtracted) and fragmentation (plainly not: it builds up under load) are graded through the KV and the
# unbudgeted memory instead: four constants would outnumber what the release decides.
PROFILED = "the profile run's activation peak and its other non-torch growth"
CONSUMERS = (PROFILED, "the CUDA runtime context", "the NCCL communicators", "the CUDA graphs")


def _measured(release: str) -> dict[str, bool]:
    """Which consumers start-up subtracts before it sizes the KV cache, in this release."""
    return {PROFILED: True, "the CUDA runtime context": False,
            "the NCCL communicators": release == BEFORE_25359, "the CUDA graphs": release == FROM_V021}


MIN_KV_MEMORY = 2 * 2**30  # below 2 GiB of KV cache per GPU nobody would deploy this: it holds a few contexts


def hidden_memory_budget(p, s: Sheet) -> None:
    M, u, n, A, T, w = _profile_run_inputs(p, s, p.util)
    C = s.param("C", "cuda_context")
    X = s.param("X", "nccl")
    G = s.param("G", "cuda_graphs")
    F = s.param("F", "fragmentation")
    measured = _measured(p.release)
    terms = {"the NCCL communicators": X, "the CUDA graphs": G}
    counted = w + A + T + sum((v for k, v in terms.items() if measured[k]), sympy.Integer(0))
    outside = C + F + sum((v for k, v in terms.items() if not measured[k]), sympy.Integer(0))
    requested = s.step("requested", "Memory vLLM lets itself use", "M_req", M * u, "GiB",
                       "total memory × gpu_memory_utilization")
    subtracted = s.step("measured", "Non-KV memory start-up subtracts", "M_meas", counted, "GiB",
                        "weights, the profile's activation peak and non-torch growth"
                        + (", which here includes the communicators set up after the snapshot"
                           if measured["the NCCL communicators"] else "")
                        + (", and the CUDA graphs' trial estimate" if measured["the CUDA graphs"] else ""))
    kv = s.step("kv_memory", "KV cache vLLM allocates per GPU", "M_KV", requested - subtracted, "GiB",
                "whatever of the requested memory the subtracted consumers leave")
    if s.value(kv) < MIN_KV_MEMORY:
        raise Reject("under 2 GiB of KV cache per GPU: too little to serve, the deployment would be resized")
    s.step("paper_share", "Weights plus KV cache, share of the GPU", "S_paper", (w + kv) / M, "%",
           "the two numbers everyone checks: on paper they fit with room to spare")
    headroom = s.step("headroom", "Memory outside vLLM's budget", "H", M - requested, "GiB",
                      "the (1 − u) share vLLM never plans for; whatever it did not subtract must fit here")
    if s.compare(C, headroom) >= 0:
        raise Reject("the runtime context alone exceeds the headroom: vLLM refuses to start")
    unbudgeted = s.step("unbudgeted", "Memory vLLM did not budget for", "U", outside, "GiB",
                        "the snapshot's baseline"
                        + (" (runtime context and communicators)" if not measured["the NCCL communicators"]
                           else " (the runtime context)")
                        + ", fragmentation that builds up while serving"
                        + ("" if measured["the CUDA graphs"] else ", and the graphs captured after the cache"))
    s.step("peak_share", "Peak use, share of the GPU", "S_peak", (requested + unbudgeted) / M, "%",
           "the full budget in use (KV cache allocated up front) plus everything outside it")
    s.step("max_util", "Highest gpu_memory_utilization that fits", "u_max", 1 - unbudgeted / M, "%",
           "leave exactly the unbudgeted memory outside the budget")
    for item in CONSUMERS:
        s.judge("subtracted", item, measured[item], _accounting_why(item, p.release, measured[item]),
                fact=item in (PROFILED, "the CUDA runtime context"))

    s.assume("Total memory is the datasheet capacity in GB; vLLM reads the device's total from the driver, "
             "which for most GPUs is a few percent more. One GPU of the TP group stands for all of them.")
    s.assume("vLLM v1 start-up: a memory snapshot, weights measured while loading, a profile run at "
             "max_num_batched_tokens for the activation peak and the non-torch growth, then the KV cache, "
             "allocated whole; CUDA graphs are captured last. PR #25359 (September 2025) moved the NCCL set-up "
             "before the snapshot; v0.21 added the graphs' trial estimate (on by default, "
             "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off) and raised the default utilisation to 0.92. "
             "The estimate is taken as equal to the graphs' real pool.")
    s.assume("Fragmentation builds up only while serving, so no start-up profile sees it.")
    s.slip("only the CUDA graphs counted as unbudgeted", s.value(G) / s.value(unbudgeted), on="unbudgeted")
    s.slip("only the CUDA graphs counted as unbudgeted", on="max_util",
           factor=s.evaluate(1 - G / M) / s.evaluate(1 - unbudgeted / M))
    kv_room = s.value(kv)
    s.slip("the activation peak and non-torch memory not subtracted", on="kv_memory",
           factor=(kv_room + p.activation_peak + p.non_torch) / kv_room)
    _budget_regime(s, p.release, headroom, unbudgeted, u)


def _accounting_why(item: str, release: str, subtracted: bool) -> str:
    if item == "the NCCL communicators":
        return ("set up after the first snapshot in this release: their buffers are non-torch growth the profile "
                "subtracts" if subtracted else "set up before the first snapshot since PR #25359: part of the "
                "baseline, which the budget never subtracts")
    if item == "the CUDA graphs":
        return ("v0.21 captures them in a trial and subtracts the estimate" if subtracted else
                "captured after the KV cache is sized; this release makes no estimate by default")
    return {PROFILED: "the torch peak of the profile run and its non-torch increase over the snapshot, beside "
                      "the weights measured while loading",
            "the CUDA runtime context": "created before the first snapshot: in the baseline, never subtracted "
                                        "(nor is fragmentation, which builds up only under load)"}[item]


def _budget_regime(s: Sheet, release: str, headroom, unbudgeted, u) -> None:
    room, need = format_quantity(s.value(headroom), "GiB"), format_quantity(s.value(unbudgeted), "GiB")
    util = format_number(s.value(u))
    fixes = ("lower gpu_memory_utilization to the highest value that fits, capture fewer CUDA graph sizes, "
             + ("" if release == FROM_V021 else "move to v0.21's graph estimate, ")
             + "or set the KV cache size explicitly (kv_cache_memory_bytes) from a measured run")
    s.regime_by(unbudgeted, headroom, tie="below", below=Side(
        "fits",
        f"The {need} vLLM did not budget for fit in the {room} that gpu_memory_utilization = {util} leaves "
        "outside its budget: the deployment runs.",
        "Raising gpu_memory_utilization for more KV blocks, capturing more CUDA graph sizes or a fragmenting "
        "workload eats that headroom; past it the process OOMs although weights plus KV cache still fit on paper.",
        near=f"The {need} vLLM did not budget for just fit in the {room} of headroom: a few hundred MiB more "
             "graphs or fragmentation and the process OOMs under load."),
        above=Side(
        "oom",
        f"The {need} vLLM did not budget for overflow the {room} that gpu_memory_utilization = {util} leaves "
        "outside its budget: the process OOMs (at graph capture or under load) although weights plus KV cache fit.",
        f"To fit, {fixes}.",
        near=f"The {need} vLLM did not budget for overflow the {room} of headroom by a little: the OOM comes "
             f"late, under load as fragmentation grows. To fit, {fixes}."))


# --- paged-reservation-waste ---------------------------------------------------------------


def _reservation(p, s: Sheet) -> dict[str, sympy.Symbol]:
    """One request's slots under max-context reservation, averaged over its decode."""
    M = s.param("M", "max_context")
    L_p = s.param("L_p", "prompt_mean")
    L_o = s.param("L_o", "output_mean")
    used = s.step("used", "Slots holding tokens, averaged over a request's decode", "U", L_p + L_o / 2, "tokens",
                  "the prompt is there from the start; the output grows from nothing to L_o")
    reserved = s.step("reserved", "Slots reserved for tokens not yet generated", "R", L_o / 2, "tokens",
                      "they will be used, but later: on average half the output is still to come")
    frag = s.step("fragmentation", "Slots never used (internal fragmentation)", "F", M - L_p - L_o, "tokens",
                  "the request stops well short of the maximum it reserved")
    s.step("waste_share", "Share of the reservation wasted", "W_res", (reserved + frag) / M, "%",
           "reserved-but-not-yet-used plus never-used, over the reservation")
    boundary = s.step("boundary_output", "Output length where reservation equals fragmentation", "L_o_star",
                      2 * (M - L_p) / 3, "tokens", "solve L_o/2 = M − L_p − L_o for L_o")
    return {"M": M, "prompt": L_p, "output": L_o, "used": used, "reserved": reserved, "frag": frag,
            "boundary": boundary}


# The mean request leaves room under the maximum for the longer ones of the mix. 0.85 rather than a roomier
# 0.75: the reservation-dominated regime needs requests that fill most of their reservation.
MEAN_REQUEST_SHARE = 0.85
MAX_OUTPUT_PER_PROMPT = 20  # a workload averaging a tiny prompt and a reply 20+ times longer is not a real mix


def paged_reservation_waste(p, s: Sheet) -> None:
    if p.prompt_mean + p.output_mean > MEAN_REQUEST_SHARE * p.max_context:
        raise Reject("the mean request leaves no room under the maximum context for longer requests")
    if p.output_mean > MAX_OUTPUT_PER_PROMPT * p.prompt_mean:
        raise Reject(f"a mean reply over {MAX_OUTPUT_PER_PROMPT} times the mean prompt is not a realistic mix")
    res = _reservation(p, s)
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes("bf16"), "bf16")
    pool = s.param("K", "kv_pool")
    slots = s.step("pool_tokens", "Token slots in the pool", "K_tok", floor_of(pool / kv_tok), "tokens",
                   "the pool over the bytes of one token's keys and values")
    before = s.step("requests_before", "Requests that fit with max-context reservation", "N_res",
                    floor_of(slots / res["M"]), "requests", "every request holds the maximum from admission on")
    if s.value(before) < 1:
        raise Reject("the pool cannot hold one max-context reservation")
    s.step("", "Slots no reservation can use (external fragmentation)", "X", slots - before * res["M"], "tokens",
           "the pool's remainder after whole contiguous reservations; with reservations of different sizes, "
           "gaps open between them as requests come and go")
    bs = s.param("S_b", "block_size")
    tail = s.step("", "Empty slots in the last block, on average", "E", (bs - 1) / 2, "tokens",
                  "a sequence's length is as likely to end anywhere within its last block")
    paged = s.step("paged_allocation", "Slots a paged request holds, on average", "A_pg", res["used"] + tail,
                   "tokens", "the block table maps its blocks anywhere in the pool, allocated as tokens arrive: "
                   "only the last one is partly empty")
    waste = s.step("paged_waste", "Share of block slots empty with paging", "W_pg", tail / paged, "%",
                   "the partly filled last block is all that is left of the waste")
    if s.compare(waste, sympy.Rational(4, 100)) >= 0:  # blocks as long as the requests: under 1% of draws
        raise Reject("blocks too large for these requests: the paper's under-4% paged waste would not hold")
    after = s.step("requests_after", "Requests that fit with paging", "N_pg", floor_of(slots / paged),
                   "requests", "the pool over what a request holds on average")
    gain = s.step("capacity_gain", "Capacity paging returns", "G", after / before, "x",
                  "requests in flight with paging over requests with reservation")
    final = s.step("", "Slots a paged request holds at its last token", "A_end", res["prompt"] + res["output"] + tail,
                   "tokens", "prompt and the whole output, in whole blocks")
    s.step("requests_final", "Requests that fit if all reach their final length at once", "N_end",
           floor_of(slots / final), "requests",
           "admit more than this and a pool that fills up must preempt someone to let the others grow")

    s.assume("Every request is the mean one: its prompt and output lengths are the means, and averages over "
             "its decode stand for a pool of requests at all stages (long requests staying longer is ignored).")
    s.assume("Reservation: each request holds the maximum context from admission to completion, contiguous; "
             "with equal reservations the only external fragmentation is the pool's remainder.")
    s.assume("Paging: blocks are allocated on demand through a per-request block table, anywhere in the pool; "
             "the last block's fill is uniform, so it is (block − 1)/2 slots short on average. KV cache in bf16; "
             "no prefix sharing. Admitting on the average leaves no growth headroom: vLLM then preempts "
             "(recomputes or swaps) the newest request when a block cannot be allocated.")
    s.slip("reserved-for-later slots counted as used", on="waste_share",
           factor=s.value(res["frag"]) / s.evaluate(res["reserved"] + res["frag"]))
    if p.block_size > 1:  # with one-token blocks nothing is empty, whatever the lengths
        s.slip("the final lengths counted as used, not the average over the decode", on="paged_waste",
               factor=s.value(paged) / s.value(final))
    s.slip("the final lengths counted as used, not the average over the decode", on="requests_after",
           factor=s.evaluate(floor_of(slots / final)) / s.value(after))
    _paging_judgements(s, res, waste, gain)
    _waste_regime(s, res)


PAPER_PAGED_WASTE = 0.04  # PagedAttention (SOSP 2023): vLLM wastes under 4% of its KV memory


def _paging_judgements(s: Sheet, res: dict[str, sympy.Symbol], waste, gain) -> None:
    """What this workload says about reservation and paging, judged on its numbers."""
    g, w = format_quantity(s.value(gain), "x"), format_quantity(s.value(waste), "%")
    s.judge("holds", "paging returns more than three times the requests", s.compare(gain, 3) > 0,
            f"the gain is {g}")
    s.judge("holds", "paging leaves under 4% of the slots empty, as the PagedAttention paper reports",
            s.compare(waste, sympy.Rational(4, 100)) < 0, f"{w} of a paged request's slots sit empty: only the last "
            "block is partly filled, whatever the lengths drawn here", fact=True)
    s.judge("holds", "paging leaves under 1% of the slots empty, a quarter of the PagedAttention paper's 4%",
            s.compare(waste, sympy.Rational(1, 100)) < 0, f"{w} of a paged request's slots sit empty: (block − 1)/2 "
            "against what the request holds, so long requests in small blocks waste least")
    untouched = s.compare(res["frag"], res["M"] / 2) > 0
    s.judge("holds", "most of each reservation is never touched at all", untouched,
            f"{format_quantity(s.value(res['frag']), 'tokens')} of {format_quantity(s.value(res['M']), 'tokens')} "
            "are never used")
    s.judge("holds", "a paged request's blocks must sit next to each other in the pool", False,
            "the block table maps each logical block to any free physical block: no contiguity is needed, "
            "which is what removes external fragmentation", fact=True)


def _waste_regime(s: Sheet, res: dict[str, sympy.Symbol]) -> None:
    reserved, frag = (format_quantity(s.value(res[k]), "tokens") for k in ("reserved", "frag"))
    if s.compare(res["output"], res["boundary"]) > 0:
        s.set_regime(
            "reservation-dominated",
            f"Outputs run long enough to fill most of the maximum: the slots held for tokens still to come "
            f"({reserved} on average) outweigh the slots never used ({frag}).",
            res["boundary"], res["output"],
            "With shorter outputs, or a generous maximum context, most of each reservation is never touched: "
            "the waste is fragmentation, and paging returns many times the capacity.")
    else:
        s.set_regime(
            "fragmentation-dominated",
            f"Requests stop far short of the maximum they reserve: the slots never used ({frag}) outweigh "
            f"those held for tokens still to come ({reserved} on average).",
            res["boundary"], res["output"],
            "When outputs fill most of the maximum context, the bigger waste is slots reserved for tokens that "
            "arrive later; paging still removes it, but there is less to win.")
