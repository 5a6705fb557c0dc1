"""KV cache bytes per token, and who caps concurrency."""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, tp_all_reduce
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    given_compute_efficiencies,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_kv_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
    given_weight_bytes,
)
from solvers.formulas.kvcache import kv_bytes_per_token
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number

FP8_KV = "an fp8 KV cache (half the bytes per token)"
# r7 finding 3: 1,877 users in one step on 8 MI300X is no batch an engine runs. As users-per-gpu: one engine's
# batch goes to 1,024 (vLLM's max_num_seqs on large GPUs, TensorRT-LLM's peak-throughput tables), and a
# memory-full batch past 4,096 is not one whose TPOT anyone sizes.
MAX_BATCH = 1024
MAX_FULL_BATCH = 4096


@dataclass(frozen=True)
class _DecodeStep:
    """A decode step's time as fixed costs plus a cost per request on each side of the roofline,
    the batch a TPOT target allows, and the symbols a lever changes."""

    T: sympy.Symbol  # TPOT target
    M_use: sympy.Expr  # usable HBM of the group
    W: sympy.Symbol
    kv_req: sympy.Symbol
    byte_rate: sympy.Expr  # bytes/s one GPU's reads reach (η_bw·BW)
    flop_rate: sympy.Expr  # FLOP/s one GPU's matmuls reach (η_c·P)
    flops_req: sympy.Expr  # FLOPs per request per step, one GPU
    n: sympy.Symbol
    ar_fixed: sympy.Expr  # all-reduce latency per step, plus the step's overhead
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
    """The bank's step model (weights and every request's KV read once at 80% of HBM bandwidth, 2 FLOPs per
    parameter per token at 60% of the weights' dense peak (50% in fp8), 2 ms a step) plus the TP all-reduces,
    at the batch that fits and at the TPOT target."""
    n = s.param("n", "tp")
    BW = given_hbm_bandwidth(s, p.gpu)
    P = given_peak_flops(s, p.gpu, p.weight_dtype)
    eta_c, _ = given_compute_efficiencies(s, p.gpu, p.weight_dtype, p.weight_dtype)
    eta_bw = given_step_bandwidth(s)
    t_oh = given_step_overhead(s)
    reads, flops = eta_bw * BW, eta_c * P  # what the kernels reach
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, users, tag="fit", label="decode step at that batch", tp_symbol=n)
    tpot = s.step("tpot_fit", "TPOT at the batch that fits", "t_fit",
                  max_of((W + users * kv_req) / (n * reads), 2 * N * users / (n * flops)) + t_ar + t_oh, "ms",
                  "each GPU reads its share of the weights and of every request's KV at the bandwidth its kernels "
                  "reach, or does its math at the FLOP/s they reach; the slower side "
                  + ("plus the overhead" if p.tp == 1 else "plus the all-reduces and the overhead") + " sets the step")
    weights_only = s.evaluate(max_of(W / (n * reads), 2 * N * users / (n * flops)) + t_ar + t_oh)
    s.slip("the KV reads left out of the step", weights_only / s.value(tpot), on="tpot_fit")
    if p.tp > 1:
        s.slip("the all-reduces left out", s.evaluate(tpot - t_ar) / s.value(tpot), on="tpot_fit")
    s.slip("the step overhead left out", s.evaluate(tpot - t_oh) / s.value(tpot), on="tpot_fit")
    s.slip("datasheet peaks: the kernels' efficiencies and the overhead left out", on="tpot_fit",
           factor=s.evaluate(max_of((W + users * kv_req) / (n * BW), 2 * N * users / (n * P)) + t_ar)
           / s.value(tpot))
    T = s.param("T", "tpot")
    terms = all_reduce_terms(s, p.model, p.gpu, p.tp, tp_symbol=n)  # tp_all_reduce's, as fixed + per request
    ar_req = terms.per_token
    t_w = s.step("", "Time to read one GPU's share of the weights", "t_W", W / (n * reads), "ms",
                 "paid once per step, however many requests ride along")
    t_kv = s.step("", "Time each request adds on the read side", "t_kv", kv_req / (n * reads) + ar_req, "ms",
                  "its share of the KV read" + ("" if p.tp == 1 else ", plus its activations in the all-reduces"))
    t_f = s.step("", "Time each request adds on the math side", "t_F", 2 * N / (n * flops) + ar_req, "ms",
                 "2 FLOPs per parameter for its token" + ("" if p.tp == 1 else ", plus its all-reduce traffic"))
    fixed = s.step("", "Fixed time per step", "t_0", terms.fixed + t_oh, "ms",
                   "the overhead" + ("" if p.tp == 1 else " and two all-reduces' latency per layer"))
    step = _DecodeStep(T, M_use, W, kv_req, reads, flops, 2 * N / n, n, fixed, ar_req, users)
    batch = s.step("batch_tpot", "Requests a step carries within the TPOT target", "B_T",
                   floor_of(min_of((T - fixed - t_w) / t_kv, (T - fixed) / t_f)), "requests",
                   "t(B) ≤ T on each side of the roofline: the time left after the fixed costs over what each "
                   "request adds")
    if s.value(batch) < 1:
        raise Reject("the TPOT target is shorter than a step with one request")
    reads_bind = s.compare((T - fixed - t_w) / t_kv, (T - fixed) / t_f) <= 0
    if min(s.value(users), s.value(batch)) > MAX_BATCH:
        raise Reject("more users in one step than an engine schedules (max_num_seqs)")
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
             "the worst step the batch can take. Draws that would serve more than 1,024 users in one step "
             "(an engine's max_num_seqs) or fill memory with more than 4,096 are left out.")
    s.assume("The bank's step model (step-bandwidth, step-compute, step-overhead), as kv-cache-block-count and "
             "users-per-gpu price a step: each step reads the weights and every request's KV once at 80% of HBM "
             "bandwidth, or does 2 FLOPs per parameter per token at 60% of the weights' dense peak (50% in fp8), "
             "whichever is longer, plus the all-reduces and 2 ms. Attention's FLOPs are left out (kv-cache-block-count "
             "counts them): at GQA's 4-16 FLOPs per KV byte they add a few percent to the math.")


def _served(step: _DecodeStep, M_use=None, kv_req=None, **batch) -> sympy.Expr:
    """Users served within the TPOT target: the smaller of what fits and what a step carries."""
    M_use = step.M_use if M_use is None else M_use
    fit = floor_of((M_use - step.W) / (step.kv_req if kv_req is None else kv_req))
    return min_of(fit, step.batch_at(kv_req=kv_req, **batch))


def _concurrency_regime(s: Sheet, users, step: _DecodeStep, kv_fp8: bool) -> None:
    """At a tie (as many fit as a step carries) the stage that asks calls it latency-limited: tie="above"."""
    fit, batch = format_number(s.value(users)), format_number(s.value(step.batch))
    served = min_of(users, step.batch)
    levers = (
        (FP8_KV, dict(kv_req=step.kv_req / 2)),
        ("GPUs with twice the HBM capacity, same bandwidth", dict(M_use=2 * step.M_use)),
        ("GPUs with twice the HBM bandwidth, same capacity", dict(byte_rate=2 * step.byte_rate)),
        ("GPUs with twice the dense tensor peak", dict(flop_rate=2 * step.flop_rate)),
        ("a TPOT target {longer_tpot} as long", dict(T=s.param("k_T", "longer_tpot") * step.T)),
    )
    for option, change in levers:
        if option == FP8_KV and kv_fp8:
            # Halving an fp8 cache means 4-bit KV, which few engines ship (r7 finding 4): not asked.
            s.judge("levers", option, None, "the KV cache is fp8 already")
            continue
        after = _served(step, **change)
        s.judge("levers", option, s.compare(after, served) > 0,
                f"{format_number(s.evaluate(served))} users served today ({fit} fit, {batch} within the TPOT); "
                f"with this change {format_number(s.evaluate(after))}")
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
        near=f"{fit} requests fit in HBM, {'as many as' if s.compare(users, step.batch) == 0 else 'just past'} the "
             f"{batch} the TPOT target allows: the step's reads bind "
             "first, but memory is nearly full too, so only a change that helps both lets many more in."))


def solve(p, s: Sheet) -> None:
    if p.model.attention != "gqa" or p.model.get("active_params_b") is not None:
        raise Reject("dense GQA models only: the step below reads every weight for every token")
    b_kv = given_kv_bytes(s, p.kv_dtype)
    kv_tok = kv_bytes_per_token(s, p.model, b_kv)
    C = s.param("C", "context")
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GiB",
                    "every token of the context keeps its keys and values")
    n = s.param("n", "tp")
    M = given_hbm_bytes(s, p.gpu)
    u = given_usable_share(s)
    N = given_model_params(s, p.model)
    b_w = given_weight_bytes(s, p.weight_dtype)
    W = s.step("weights", "Weight bytes", "W", N * b_w, "GB", "every parameter once, split evenly over the TP group")
    free = s.step("kv_memory", "KV memory across the group", "M_KV", n * M * u - W, "GB",
                  "usable HBM of all GPUs minus one copy of the weights; the KV heads split across the GPUs")
    users = s.step("users", "Requests that fit at this context", "U", floor_of(free / kv_req), "requests",
                   "whole requests: the KV memory over one request's cache")
    if s.value(users) < 1:
        raise Reject("not one request fits: nothing to compare")
    if s.value(users) > MAX_FULL_BATCH:
        raise Reject("the memory-full batch is no batch anyone sizes: its TPOT would price a fiction")
    fit = _decode_step(p, s, n * M * u, N, W, kv_req, users)
    if p.gpu.get("mesh_links") and p.tp > 1:  # r7 finding 7: the fabric is no switch, and its figure is weak
        s.assume(f"{p.gpu.name}'s Infinity Fabric is a mesh of direct links, not NVLink's switch: its all-reduces are "
                 "priced by the same ring model and 10 us a call, from an aggregate figure whose public source is "
                 "weak (REFERENCE-DATA); RCCL over the mesh may reach less, which only makes the TPOT longer.")
    _kv_slips(p, s, free, kv_req, users)
    _concurrency_regime(s, users, fit, p.kv_dtype == "fp8")

