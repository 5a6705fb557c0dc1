"""KV-cache layout questions: what evicting a request costs, where MLA and GQA caches land on
GPUs under tensor parallelism, and the per-request state of hybrid recurrent/attention models.

KV bytes per token stand as kv-bytes-per-token's result (kvcache.kv_bytes_per_token_given); a sheet
that needs two models' figures sees the helper through `_Tagged`, which suffixes the symbol.
"""
from __future__ import annotations

import math
from dataclasses import replace

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import ACTIVATION_BYTES, link_bandwidth, link_latency, tp_all_reduce
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    model_params,
    peak_flops,
)
from solvers.topics.kvcache import (
    kv_bytes_per_token_given,
    kv_bytes_per_token_per_gpu_given,
)
from solvers.topics.steptime import DEFAULT_CONSTANTS, STEP_OVERHEAD, engine, step_time, step_work
from solvers.units import format_number, format_quantity

GPUS_PER_NODE = 8  # an HGX/DGX or MI300X platform board


class _Tagged:
    """One model's view of a sheet for the shared KV helper: its prerequisite's symbol gets a suffix and its
    label the model's name, so two models' bytes per token can stand side by side."""

    def __init__(self, sheet: Sheet, tag: str, name: str):
        self._sheet, self._tag, self._name = sheet, tag, name

    def prerequisite(self, question_id: str, symbol: str, value: float, unit: str, label: str) -> sympy.Symbol:
        return self._sheet.prerequisite(question_id, f"{symbol}_{self._tag}", value, unit, f"{label}, {self._name}")


class lcm(sympy.Function):  # lower case: it prints as the familiar lcm(a, b)
    """Least common multiple, left symbolic until both arguments are integers (sympy's own lcm
    treats symbols as polynomials and returns their product)."""

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(math.lcm(int(a), int(b)))
        return None


def _usable(s: Sheet, gpu: Record) -> sympy.Symbol:
    M = s.given("M", hbm_bytes(gpu), "GB", f"{gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable fraction of HBM")
    return s.step("usable", "Usable memory per GPU", "M_use", M * u, "GB",
                  "the engine's memory cap (vLLM's gpu_memory_utilization)")


def _fp8_latent_note(s: Sheet, kv_dtype: str) -> None:
    if kv_dtype == "fp8":
        s.assume("fp8 latents are costed at one byte per element; real fp8 MLA caches carry scales and keep the RoPE "
                 "key in bf16 (FlashMLA's fp8 layout: 656 B per token per layer against 576 here).")


# --- preemption-policies ---------------------------------------------------------------------

# A stall that hits more than this share of a stream's decode steps sets its p99 inter-token latency.
P99_SHARE = sympy.Rational(1, 100)
MEAN_SHARE = sympy.Rational(1, 10)  # stalls that add this much to the mean time per token are more than a tail effect


def preemption_policies(p, s: Sheet) -> None:
    model, n_gpus = p.model, p.tp
    peak = peak_flops(p.gpu, p.weight_dtype)

    n = s.param("TP", "tp")
    C = s.param("C", "context")
    N = s.given("N", model_params(model), "", "parameters (dense: all of them work on every token)")
    L = s.given("L", model.layers, "", "layers")
    H = s.given("H_q", model.heads, "", "query heads")
    d = s.given("d_h", model.head_dim, "", "head dim")
    F_w = s.step("flops_weights", "Weight FLOPs of the re-prefill", "F_w", 2 * N * C, "TFLOP",
                 "a multiply-add (2 FLOPs) per parameter per token, embeddings included")
    F_a = s.step("flops_attention", "Attention FLOPs of the re-prefill", "F_a", 2 * L * H * d * C**2, "TFLOP",
                 "QKᵀ and AV cost 4·C²·H·d per layer; the causal mask halves it")
    F = s.step("flops", "FLOPs recompute redoes", "F", F_w + F_a, "TFLOP",
               "the victim's whole prefill, done again")
    P = s.given("P", peak, "TFLOP/s", f"{p.gpu.name} dense {p.weight_dtype} peak")
    eta = s.param("eta", "mfu")
    t_math = s.step("t_recompute_math", "Recompute math", "t_math", F / (n * P * eta), "ms",
                    "the TP group shares the prefill at its achievable compute")
    t_ar = tp_all_reduce(s, model, p.gpu, n_gpus, C, tag="rec", label="re-prefill")
    t_rec = s.step("t_recompute", "Recompute time", "t_rec", t_math + t_ar, "ms",
                   "the math, then the TP all-reduces it cannot overlap" if n_gpus > 1 else
                   "one GPU: no all-reduces")

    kv_gpu = kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype, n)
    V = s.step("swap_bytes", "Victim's KV on each GPU", "V", kv_gpu * C, "GB",
               "each GPU holds its KV heads' share of the victim's context")
    W = s.param("W", "pcie")
    t_swap = s.step("t_swap", "Swap time (out and back in)", "t_swap", 2 * V / W, "ms",
                    "each GPU copies its share to host memory and later back, over its own link")
    W_star = s.step("breakeven_bw", "PCIe bandwidth at which swap and recompute cost the same", "W_star",
                    2 * V / t_rec, "GB/s", "set 2V/W equal to the recompute time and solve for W")

    b = s.param("b", "batch")
    R = s.param("R", "remaining")
    T = s.param("T", "tpot")
    s.step("t_free", "Time until the nearest request finishes", "t_free", R * T, "s",
           "the first blocks to come free, if the batch could keep decoding")
    S = s.step("steps_bought", "Decode steps one eviction buys", "S", floor_of(C / b), "steps",
               "the victim frees C tokens of KV; the running streams write b tokens of it per step")
    s.step("reserve", "KV the batch writes before that completion (each GPU)", "V_res", b * R * kv_gpu, "GB",
           "what a scheduler must hold back for waiting to be safe: b streams, R tokens each")
    k = s.step("evictions", "Victims of this size evicted before the nearest completion", "k",
               ceil_of((b + 1) * R / (C + R)), "requests",
               "k victims free k·C tokens and stop writing; the b + 1 − k left write R each: k·C ≥ (b + 1 − k)·R")

    s.assume(f"Recompute at {format_number(p.mfu * 100)}% of the dense {p.weight_dtype} peak across the TP group "
             "(prefill is compute-bound), plus the TP all-reduces by the card's tp-all-reduce model; all weights "
             "and the causal attention over the context counted, nothing of the victim left in a prefix cache.")
    s.assume(f"Swap at an effective {format_quantity(p.pcie, 'GB/s')} per GPU, each GPU over its own PCIe link: "
             "PCIe Gen5 x16 carries about 64 GB/s each way, but block-by-block copies of small pages and "
             "links shared behind a PCIe switch deliver a fraction of it (an assumption; measure it).")
    s.assume("Either eviction stalls the engine step it runs in: the re-prefill shares the step with the decode "
             "streams, and vLLM V0 ran its swaps in the worker before the forward pass. So every running stream "
             "waits out the eviction's time once.")
    s.assume("The pool is full and nothing is reserved: each running stream needs a new block within one block's "
             "worth of tokens, so evicting no one stalls them all, the nearest-to-done request included (it "
             "is R tokens from done). Engines avoid this by stopping admissions early (a watermark or a "
             "reserve of blocks) and by preempting, never by waiting.")
    s.assume(f"Victims evicted later are of the same size; the {format_number(p.batch)} other streams grow by one "
             "token per step and none finishes before the nearest one; block granularity is ignored.")
    one_gpu = f"x{n_gpus}: one GPU doing the whole recompute or copy, not its 1/{n_gpus} share"
    s.slip(one_gpu, n_gpus, on="t_swap")
    s.slip(one_gpu, on="t_recompute", factor=s.evaluate(n * t_math + t_ar) / s.value(t_rec))
    s.slip("x2: the copy counted one way only", 0.5, on=("t_swap", "breakeven_bw"))
    s.slip("attention FLOPs left out", s.value(F_w) / s.value(F), on="flops")
    s.slip("attention FLOPs left out", on="t_recompute", factor=s.evaluate(t_math * F_w / F + t_ar) / s.value(t_rec))
    if n_gpus > 1:
        s.slip("TP all-reduces left out", s.value(t_math) / s.value(t_rec), on="t_recompute")
        s.slip("TP all-reduces left out", s.value(t_rec) / s.value(t_math), on="breakeven_bw")

    stall = min_of(t_rec, t_swap)
    s.judge("who_pays", "Waiting with no one evicted stalls every running stream, not just the one that asked", True,
            "the pool is full: every stream needs a block within one block's worth of tokens, and the nearest "
            f"completion is {format_number(p.remaining)} tokens away, so the whole batch stops (or deadlocks)",
            fact=True)
    s.judge("who_pays", "Evicting the victim stalls only the victim; the running streams decode on", False,
            "the re-prefill shares the engine step with the decode streams (a swap runs before the forward pass): "
            "every running stream waits out the eviction once", fact=True)
    one = s.compare(S, R) >= 0
    s.judge("who_pays", "One eviction of this victim frees enough KV for the batch to reach its next completion", one,
            f"{format_number(p.context)} tokens freed last the {format_number(p.batch)} streams "
            f"{format_number(s.value(S))} steps, {'at least' if one else 'short of'} the "
            f"{format_number(p.remaining)} the nearest request needs: {format_number(s.value(k))} victim(s) go first")
    long_stall = s.compare(stall, T) > 0
    s.judge("who_pays", "Even the cheaper eviction stalls every running stream for longer than one TPOT",
            long_stall, f"the cheaper eviction takes {format_quantity(s.evaluate(stall), 'ms')}, "
            f"{'more' if long_stall else 'less'} than the {format_quantity(p.tpot, 'ms')} TPOT")
    tail = s.compare(1 / S, P99_SHARE) > 0
    s.judge("who_pays", "The stalls land in more than 1 decode step in 100, so they set every stream's p99 "
            "inter-token latency", tail, f"one eviction every {format_number(s.value(S))} steps: "
            + ("above 1%, inside the p99" if tail else "under 1%, beyond the p99 (p99.9 and the maximum)"))
    added, mean = s.evaluate(stall / (S * T)), s.compare(stall / (S * T), MEAN_SHARE) > 0
    s.judge("who_pays", "Spread over the steps one eviction buys, the stalls add over 10% to every stream's mean "
            "time per token", mean, f"{format_quantity(s.evaluate(stall), 'ms')} every "
            f"{format_number(s.value(S))} steps of {format_quantity(p.tpot, 'ms')}: "
            f"{format_quantity(added, '%')} on the mean" + ("" if mean else ", a tail effect more than a mean one"))
    _preemption_regime(s, t_rec, t_swap, W_star, W)


def _preemption_regime(s: Sheet, t_rec, t_swap, W_star, W) -> None:
    rec, swap = format_quantity(s.value(t_rec), "ms"), format_quantity(s.value(t_swap), "ms")
    breakeven = format_quantity(s.value(W_star), "GB/s")
    s.regime_by(W, W_star, tie="below", above=Side(
        "swap-cheaper",
        f"Copying the victim's KV out and back takes {swap}, against {rec} to recompute it: swap is "
        f"{format_number(s.value(t_rec) / s.value(t_swap), 3)}x cheaper. Nobody redoes work; the victim waits "
        "for its copy back and every running stream waits out the copies once, a tail inter-token event.",
        f"Below {breakeven} of effective PCIe bandwidth recompute wins, and the break-even rises for a model "
        "that redoes fewer FLOPs per KV byte it would move (a small dense model, bf16 KV) or for faster "
        "compute (fp8, a newer GPU): the victim then redoes its prefill and every running stream waits for "
        "it. Engines that only recompute (vLLM V1) lean on the prefix cache to make part of it free."),
        below=Side(
        "recompute-cheaper",
        f"Re-prefilling the victim takes {rec} of the group's compute, less than the {swap} the PCIe copy "
        f"out and back would take: recompute is {format_number(s.value(t_swap) / s.value(t_rec), 3)}x cheaper. "
        "The victim waits and redoes its prefill, and every running stream waits for that step.",
        f"Above {breakeven} of effective PCIe bandwidth swap wins, and the break-even falls for a model "
        "that redoes more FLOPs per KV byte (a larger model, fp8 KV, a longer context) or for slower "
        "compute: nobody then redoes work, and the running streams wait only for the copies."))


# --- mla-vs-gqa-under-tp ---------------------------------------------------------------------

ROPE_DIM = 64  # the decoupled RoPE key MLA caches beside its latent (DeepSeek-V2/V3 qk_rope_head_dim)


def _mla_requests(s: Sheet, usable, W, kv, C, G, tp: int) -> float:
    """Requests the node holds with the latent whole on every GPU of TP-`tp` replicas (0 where the weights
    do not fit)."""
    room = usable - W / tp
    if s.evaluate(room) <= 0:
        return 0.0
    return s.evaluate(G / tp * floor_of(room / (kv * C)))


def mla_vs_gqa_under_tp(p, s: Sheet) -> None:
    gqa = p.model
    mla = Record(name=f"{gqa.name} with MLA", layers=gqa.layers, kv_lora_rank=p.kv_lora_rank,
                 qk_rope_head_dim=ROPE_DIM, attention="mla")
    e = engine(s, gqa, p.gpu, p.tp, dtype=p.weight_dtype, kv_dtype=p.kv_dtype, communication=True,
               kv_prerequisite=True)
    kv_g = e.KV  # kv_per_token_gpu: TP splits the GQA cache by KV head
    kv_tok_m = kv_bytes_per_token_given(_Tagged(s, "MLA", "MLA variant"), mla, dtype_bytes(p.kv_dtype), p.kv_dtype)
    kv_m = s.step("kv_gpu_mla", "MLA: KV bytes per token on each GPU", "KV_gpu_MLA", kv_tok_m, "KiB",
                  "the latent belongs to every head at once: each TP rank keeps all of it")
    H_kv = s.given("H_kv", gqa.kv_heads, "", "KV heads")
    d_h = s.given("d_h", gqa.head_dim, "", "head dim")
    d_c = s.param("d_c", "kv_lora_rank")
    d_r = s.given("d_r", ROPE_DIM, "", "decoupled RoPE key dim")
    n_star = s.step("tp_crossover", "TP at which the two per-GPU shares are equal", "n_star",
                    2 * H_kv * d_h / (d_c + d_r), "GPUs",
                    "2·H_kv·d_h/n = d_c + d_r per layer: a boundary, not a layout")
    s.step("tp_flip", "Smallest deployable TP at which GQA's share is the smaller", "n_flip",
           2 ** ceil_of(sympy.log(n_star, 2)), "GPUs", "TP degrees come in powers of two; this n* is not one")

    usable = _usable(s, p.gpu)
    room = s.step("room", "KV room per GPU (the same weights either way)", "F", usable - e.W / e.TP, "GB",
                  "usable memory less this GPU's 1/TP of the weights")
    C = s.param("C", "context")
    G = s.given("G", GPUS_PER_NODE, "GPUs", "GPUs in the node")
    per_g = s.step("per_replica_gqa", "GQA: requests one replica holds", "U_GQA", floor_of(room / (kv_g * C)),
                   "requests", "every GPU of the replica holds its heads' share of every request")
    per_m = s.step("per_replica_mla", "MLA: requests one replica holds", "U_MLA", floor_of(room / (kv_m * C)),
                   "requests", "every GPU of the replica holds every request's whole latent")
    if s.value(per_g) < 1 or s.value(per_m) < 1:
        raise Reject("a replica holds no request of this length")
    req_g = s.step("requests_gqa", "GQA: requests the node holds", "R_GQA", G / e.TP * per_g, "requests",
                   "G/TP replicas fill the node")
    req_m = s.step("requests_mla", "MLA: requests the node holds", "R_MLA", G / e.TP * per_m, "requests",
                   "G/TP replicas fill the node")

    # Each decode step reads every request's cache once; absorbed MLA attends over the latent itself.
    H = s.given("H_q", gqa.heads, "", "query heads")
    L = s.given("L", gqa.layers, "", "layers")
    A_m = s.step("attention_pair_flops_mla", "MLA: attention FLOPs per query-key pair", "A_MLA",
                 2 * L * H * (2 * d_c + d_r), "FLOP",
                 "absorbed MLA: scores over d_c + d_r, values over d_c, a multiply-add each, every head and layer")
    e_m = replace(e, KV=kv_m, A=A_m)
    tpot = {}
    for tag, eng, users, name in (("gqa", e, per_g, "GQA"), ("mla", e_m, per_m, "MLA")):
        work = step_work(s, eng, tag, f"{name} decode step", users, users * C, users * C)
        t_ar = tp_all_reduce(s, gqa, p.gpu, p.tp, users, tag=tag, label=f"{name} decode step")
        tpot[tag] = step_time(s, eng, tag, f"{name} decode step at that batch", work, key=f"tpot_{tag}",
                              communication=t_ar)

    s.assume(f"The MLA variant is {gqa.name} retrofitted with multi-head latent attention (as TransMLA and "
             f"MHA2MLA convert GQA models): a latent of {format_number(p.kv_lora_rank)} plus a {ROPE_DIM}-dim "
             "RoPE key per layer, the same layers, heads and weights (the K/V projections change, a few percent "
             "of the parameters, taken as equal).")
    s.assume("MLA decodes in the absorbed form (DeepSeek-V2, section 2.1.3; vLLM and SGLang MLA kernels): each "
             "query head scores against the latent and RoPE key and sums values in the latent, 2·(2·d_c + d_r) "
             "FLOPs per query-key pair per head per layer instead of GQA's 4·d_h.")
    _fp8_latent_note(s, p.kv_dtype)
    s.assume(f"Both run TP {p.tp} replicas over the node's {GPUS_PER_NODE} GPUs, attention tensor-parallel too; "
             "data-parallel attention for the MLA variant is mla-tp-duplication's subject.")
    s.slip("the MLA latent split over TP like KV heads", 1 / p.tp, on="kv_gpu_mla")
    s.slip(f"x{p.tp}: the whole GQA token per GPU, not its share", p.tp, on="kv_per_token_gpu")
    s.slip("MLA counted with K and V separately", 2.0, on="kv_gpu_mla")
    s.slip("the MLA latent split over TP like KV heads", on="requests_mla",
           factor=s.evaluate(G / e.TP * floor_of(room * e.TP / (kv_m * C))) / s.value(req_m))
    s.slip("one replica only: the other G/TP − 1 forgotten", 1 / (GPUS_PER_NODE / p.tp), on=("requests_gqa",
                                                                                            "requests_mla"))
    _mla_levers(s, p, usable, e, kv_m, C, G, req_m)
    _layout_regime(s, e.TP, n_star, req_g, req_m, tpot)


def _mla_levers(s: Sheet, p, usable, e, kv_m, C, G, req_m) -> None:
    key, now = "mla_levers", s.value(req_m)
    held = format_number(now)
    # Data-parallel attention: every GPU copies the attention weights whole and keeps only its own
    # requests' latents; the MLP stays tensor-parallel.
    m = p.model
    N_att = s.given("N_att", m.layers * 2 * m.hidden * (m.heads + m.kv_heads) * m.head_dim, "",
                    "attention parameters (q, o, and k, v at the GQA size the retrofit keeps)")
    W_att = N_att * e.W / e.N
    room_dp = usable - (e.W - W_att) / e.TP - W_att
    dp_total = G * floor_of(max_of(room_dp, 0) / (kv_m * C))
    dp_held = format_number(s.evaluate(dp_total))
    s.judge(key, "data-parallel attention, each GPU keeping only its own requests' latents",
            s.compare(dp_total, req_m) > 0,
            f"each GPU copies {format_quantity(s.evaluate(W_att), 'GB')} of attention weights and keeps its own "
            f"requests' latents: the node holds {dp_held} against {held} with TP attention")
    s.judge(key, "an fp8 KV cache", p.kv_dtype != "fp8",
            "it halves every latent" if p.kv_dtype != "fp8" else "the cache is already fp8")
    # Doubling the TP pays only where the weights fill over 2/3 of each GPU: 3 draws in 100, too rare to ask.
    tp = p.tp // 2
    then = _mla_requests(s, usable, e.W, kv_m, C, G, tp)
    s.judge(key, "halving its TP", then > now, f"TP {tp}: {format_number(then)} requests on the node against {held}: "
            + ("more replicas outweigh the weights each GPU gains" if then > now else
               "the latent is copied on every GPU either way, so only the weights' share moves, and not enough"))
    s.judge(key, "splitting the latent over the TP ranks like KV heads", False,
            "every head attends over the whole latent: there is nothing per head to split", fact=True)
    if not any(s.judged(key).values()):
        raise Reject("no lever holds more requests on this node: nothing to choose between")


def _layout_regime(s: Sheet, TP, n_star, req_g, req_m, tpot) -> None:
    gqa, mla = format_number(s.value(req_g)), format_number(s.value(req_m))
    crossover = format_number(s.value(n_star), 3)
    speed = (f"At those batches a decode step takes {format_quantity(s.value(tpot['gqa']), 'ms')} (GQA) and "
             f"{format_quantity(s.value(tpot['mla']), 'ms')} (MLA) per token.")
    s.regime_by(TP, n_star, tie="above", above=Side(
        "gqa-holds-more",
        f"Past TP {crossover} each GPU's slice of the GQA heads is smaller than the whole latent every GPU "
        f"keeps: the node holds {gqa} GQA requests against {mla} with MLA, though MLA's token is the smaller. "
        f"{speed}",
        f"Below TP {crossover} (fewer GPUs per replica, or a larger latent rank) the GQA share per GPU grows "
        "past the latent and MLA's compact cache holds more. Data-parallel attention removes MLA's copies "
        "instead of narrowing TP."),
        below=Side(
        "mla-holds-more",
        f"Below TP {crossover} a GPU still holds more GQA heads than the latent is worth: the node holds {mla} "
        f"MLA requests against {gqa} GQA. {speed}",
        f"Past TP {crossover} the GQA heads split thinner while every GPU keeps the whole latent, and the "
        "reassuring MLA figure becomes the request that does not fit."))


# --- mla-tp-duplication ----------------------------------------------------------------------


def _dp_requests(s: Sheet, room, A, E, kv_tok, C, n, dp: int) -> float:
    """Requests the node holds with `dp` attention groups of n/dp GPUs each (SGLang's layout)."""
    room_dp = room - (A * (dp / n - 1 / n) + E * (1 - 1 / n))
    if s.evaluate(room_dp) <= 0:
        return 0.0
    return s.evaluate(dp * floor_of(room_dp / (kv_tok * C)))


def mla_tp_duplication(p, s: Sheet) -> None:
    model = p.model
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    n = s.param("n", "tp")
    usable = _usable(s, p.gpu)
    N = s.given("N", model_params(model), "", "parameters")
    b_w = s.given("b_w", dtype_bytes("fp8"), "B", "bytes per weight (fp8 as served)")
    V = s.given("V", model.vocab, "", "vocabulary size")
    h = s.given("h", model.hidden, "", "hidden size")
    b_e = s.given("b_e", dtype_bytes("bf16"), "B", "bytes per embedding and LM-head weight (bf16)")
    weights = s.step("weights", "Weight bytes of the model", "W", N * b_w + 2 * V * h * (b_e - b_w), "GB",
                     "every parameter at 1 byte, plus a second byte for the embedding and LM head (V × h each)")
    room = s.step("room_tp", "KV memory per GPU (TP attention)", "F", usable - weights / n, "GB",
                  "usable memory less this GPU's 1/n of the weights")
    if s.value(room) <= 0:
        raise Reject("the weights do not fit the node")
    s.step("duplicate_bytes", "Redundant copies in the node's full KV pool", "D", (n - 1) * room, "GB",
           "every GPU holds the same latents: one GPU's pool is the useful copy, the other n − 1 repeat it")
    C = s.param("C", "context")
    req_tp = s.step("requests_tp", "Requests the node holds (TP attention)", "U_TP",
                    floor_of(room / (kv_tok * C)), "requests",
                    "each GPU keeps every request's whole latent: what one GPU fits is what the node fits")

    q_r = s.param("q_r", "q_lora_rank")
    H = s.given("H", model.heads, "", "attention heads")
    d_n = s.param("d_n", "qk_nope_head_dim")
    d_r = s.given("d_r", model.qk_rope_head_dim, "", "decoupled RoPE key dim")
    d_c = s.given("d_c", model.kv_lora_rank, "", "KV latent rank (kv_lora_rank)")
    d_v = s.param("d_v", "v_head_dim")
    L = s.given("L", model.layers, "", "layers")
    A_l = s.step("attn_params_layer", "Attention weights per layer", "A_l",
                 h * q_r + q_r * H * (d_n + d_r) + h * (d_c + d_r) + d_c * H * (d_n + d_v) + H * d_v * h, "",
                 "q_a, q_b, kv_a (latent plus RoPE key), kv_b (up-projection to keys and values), o")
    A = s.step("attn_weights", "Attention weights, all layers", "A", L * A_l * b_w, "GB",
               "the projections each attention group splits only over its own GPUs")
    E = s.step("embedding_bytes", "Token embedding", "E", V * h * b_e, "GB",
               "copied whole onto every GPU (SGLang turns TP off for the embedding under DP attention)")
    d = s.param("d", "dp")
    a = s.step("attn_tp", "GPUs per attention group", "a", n / d, "GPUs", "the node's GPUs split into d groups")
    extra = s.step("dp_extra_weights", "Extra weight bytes per GPU (DP attention)", "dW",
                   A * (1 / a - 1 / n) + E * (1 - 1 / n), "GB",
                   "attention projections split a ways instead of n, and the whole embedding instead of 1/n")
    room_dp = s.step("room_dp", "KV memory per GPU (DP attention)", "F_DP", room - extra, "GB",
                     "the replicated weights come out of the KV room")
    req_dp = s.step("requests_dp", "Requests the node holds (DP attention)", "U_DP",
                    d * floor_of(room_dp / (kv_tok * C)), "requests",
                    "each group's GPUs keep only that group's latents: d independent pools")
    s.step("capacity_gain", "KV capacity gained by DP attention", "g", d * room_dp / room, "x",
           "d pools of unique tokens, each a little smaller, against one duplicated pool")
    demand = s.param("U_d", "demand")
    if s.value(demand) > s.value(req_dp):
        raise Reject("neither layout holds the demand on one node")

    # The latency side: one decode step of each layout, at the batch it runs.
    busiest = s.step("busiest_group", "Requests in the busiest attention group", "U_g", ceil_of(demand / d),
                     "requests", "the whole demand, spread as evenly as whole requests allow")
    run_tp = s.step("running_tp", "Requests TP attention runs", "U_run", min_of(demand, req_tp),
                    "requests", "the demand, or as many as fit")
    tpot_tp, tpot_dp = _attention_step_times(s, p, weights, A, kv_tok, C, n, a, d, L, h, H, d_c, d_r, b_w,
                                             run_tp, demand, busiest)

    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM usable (the usable-hbm card); activations, "
             "CUDA graphs and communication buffers are ignored.")
    s.assume("Weights in fp8 at one byte per parameter, except the token embedding and LM head, which the "
             "released checkpoint keeps in bf16 (block scales, norms and the multi-token-prediction module "
             "ignored).")
    _fp8_latent_note(s, p.kv_dtype)
    s.assume("DP attention as SGLang lays it out (--enable-dp-attention --dp d): d attention groups of n/d GPUs, "
             "each running attention for its own requests with the projections split over its GPUs; the token "
             "embedding is copied whole onto every GPU; the MoE and dense MLP weights and the LM head stay "
             "sharded n ways (the LM head is copied too only with --enable-dp-lm-head).")
    all_shares = "all n GPUs' pools counted, not the n − 1 that repeat one"
    s.slip(all_shares, p.tp / (p.tp - 1), on="duplicate_bytes")
    s.slip("the attention projections copied whole onto every GPU, whatever the group", on="dp_extra_weights",
           factor=s.evaluate(A * (1 - 1 / n) + E * (1 - 1 / n)) / s.value(extra))
    s.slip("/d: DP capacity of one group, not the node", 1 / p.dp, on="requests_dp")
    faster = s.compare(tpot_dp, tpot_tp) < 0
    s.judge("dp_tradeoffs", "DP attention runs the whole demand at a shorter time per token than TP attention runs "
            "what it holds", faster, f"{format_quantity(s.value(tpot_dp), 'ms')} against "
            f"{format_quantity(s.value(tpot_tp), 'ms')}: "
            + ("each GPU reads only its group's latents" if faster else
               "the larger batch touches more experts and its busiest group reads more than TP's batch"))
    _attention_judgements(s, p, room, A, E, kv_tok, C, n, extra, req_dp, demand)
    _attention_regime(s, req_tp, req_dp, demand, tpot_tp, tpot_dp)


def _attention_step_times(s: Sheet, p, weights, A, kv_tok, C, n, a, d, L, h, H, d_c, d_r, b_w, run_tp, demand,
                          busiest) -> tuple[sympy.Symbol, sympy.Symbol]:
    """TPOT of a decode step under TP and DP attention: a roofline over each GPU's reads (its weight share, the
    routed experts the batch touches, the latents it holds) and math, then the collectives and the overhead."""
    model, c = p.model, DEFAULT_CONSTANTS
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")
    eta_c = s.given("η_c", c.compute, "%", "achievable fraction of peak compute")
    eta_bw = s.given("η_bw", c.bandwidth, "%", "achievable fraction of HBM bandwidth")
    t_oh = s.given("t_oh", STEP_OVERHEAD, "ms", "fixed overhead per step")
    N_a = s.given("N_act", model.active_params_b * 1e9, "", "active parameters per token")
    E_x = s.given("E_x", model.experts, "", "routed experts per MoE layer")
    k_x = s.given("k_x", model.experts_per_token, "", "routed experts per token")
    L_m = s.param("L_moe", "moe_layers")
    f_x = s.param("f_x", "moe_ffn")
    X = s.step("expert_weights", "Routed-expert weights", "X", L_m * E_x * 3 * h * f_x * b_w, "GB",
               "gate, up and down projections of every routed expert: most of the model")
    A_m = s.step("attention_pair_flops", "Attention FLOPs per query-key pair (absorbed MLA)", "A_pair",
                 2 * L * H * (2 * d_c + d_r), "FLOP", "scores over d_c + d_r and values over d_c, every head and layer")
    bw, alpha = link_bandwidth(s, p.gpu, p.tp), link_latency(s, p.gpu, p.tp)
    b_a = s.given("b_a", ACTIVATION_BYTES, "B", "bytes per activation (bf16)")

    phi_tp = s.step("touched_tp", "Share of routed experts a step reads (TP attention)", "φ_TP",
                    1 - (1 - k_x / E_x) ** run_tp, "%", "each token picks k of E experts in every MoE layer")
    M_tp = s.step("bytes_tp", "Bytes each GPU reads per step (TP attention)", "M_TP",
                  (weights - X + phi_tp * X) / n + run_tp * C * kv_tok, "GB",
                  "its share of the weights the step touches, and every running request's whole latent")
    F_tp = s.step("flops_tp", "FLOPs each GPU does per step (TP attention)", "Fl_TP",
                  (2 * N_a * run_tp + A_m * run_tp * C) / n, "TFLOP", "heads and experts split n ways")
    t_ar = tp_all_reduce(s, model, p.gpu, p.tp, run_tp, tag="tp", label="TP-attention decode step")
    tpot_tp = s.step("tpot_tp", "Time per output token (TP attention)", "t_TP",
                     max_of(M_tp / (eta_bw * BW), F_tp / (eta_c * P)) + t_ar + t_oh, "ms",
                     "the slower of reads and math, then two all-reduces per layer, plus overhead")

    phi_dp = s.step("touched_dp", "Share of routed experts a step reads (DP attention)", "φ_DP",
                    1 - (1 - k_x / E_x) ** demand, "%", "the MoE sees every group's tokens at once")
    M_dp = s.step("bytes_dp", "Bytes each GPU reads per step (DP attention)", "M_DP",
                  (weights - X + phi_dp * X) / n + A * (d - 1) / n + busiest * C * kv_tok, "GB",
                  "the same shares, a larger slice of the attention projections, and only its group's latents")
    F_dp = s.step("flops_dp", "FLOPs each GPU does per step (DP attention)", "Fl_DP",
                  2 * N_a * demand / n + A_m * busiest * C / a, "TFLOP",
                  "the weights' math split n ways; attention for the busiest group split a ways")
    comm = 2 * L * (alpha + (n - 1) / n * demand * h * b_a / bw)
    why = "an all-gather before and a reduce-scatter after each MoE block, (n − 1)/n of the tokens each"
    if p.tp // p.dp > 1:
        comm += L * (alpha + 2 * (a - 1) / a * busiest * h * b_a / bw)
        why += ", and the group's all-reduce after attention"
    t_g = s.step("gather_dp", "Collectives of the DP-attention decode step", "t_AG", comm, "ms", why)
    tpot_dp = s.step("tpot_dp", "Time per output token (DP attention)", "t_DP",
                     max_of(M_dp / (eta_bw * BW), F_dp / (eta_c * P)) + t_g + t_oh, "ms",
                     "the busiest group sets the pace, then the collectives, plus overhead")
    s.assume(f"Step model as the roofline-time card with the bank's step constants: reads at "
             f"{format_quantity(c.bandwidth, '%')} of HBM bandwidth, math at {format_quantity(c.compute, '%')} of "
             f"the dense bf16 peak, {format_quantity(STEP_OVERHEAD, 'ms')} of overhead per step; a routed expert is "
             "read when any token of the step picks it (tokens pick independently and uniformly); the MoE stays "
             "tensor-parallel over the node.")
    s.slip("every routed expert read, whatever the batch", on="tpot_tp",
           factor=s.evaluate(max_of((weights / n + run_tp * C * kv_tok) / (eta_bw * BW), F_tp / (eta_c * P))
                             + t_ar + t_oh) / s.value(tpot_tp))
    return tpot_tp, tpot_dp


def _attention_judgements(s: Sheet, p, room, A, E, kv_tok, C, n, extra, req_dp, demand) -> None:
    key = "dp_tradeoffs"
    share = s.value(extra) / s.value(room)
    s.judge(key, "DP attention's extra weights take over a tenth of each GPU's KV room", share > 0.1,
            f"{format_quantity(s.value(extra), 'GB')} of copied weights out of {format_quantity(s.value(room), 'GB')} "
            f"of room: {format_quantity(share, '%')}, for {format_number(p.dp)} groups")
    wider = 2 * p.dp
    then = _dp_requests(s, room, A, E, kv_tok, C, n, wider) if wider <= p.tp else 0.0
    s.judge(key, "Twice the DP size would hold more requests at this context", then > s.value(req_dp),
            f"DP {wider} exceeds the {p.tp} GPUs" if wider > p.tp else
            f"DP {wider}: {format_number(then)} requests against {format_number(s.value(req_dp))}")
    held_tp = s.evaluate(floor_of(room / (kv_tok * C)))
    s.judge(key, "TP attention would still hold twice the demand", held_tp >= 2 * p.demand,
            f"TP attention holds {format_number(held_tp)} requests, against {format_number(2 * p.demand)}")
    s.judge(key, "Under DP attention a decode step waits for its busiest attention group", True,
            "the groups meet at every MoE layer, so the step runs at the pace of the group with the most requests "
            "(or the longest ones)", fact=True)
    s.judge(key, "DP attention also splits each request's latent over the GPUs of its group", False,
            "no: within a group the latent is still copied onto each GPU; DP only stops other groups holding it",
            fact=True)


def _attention_regime(s: Sheet, req_tp, req_dp, demand, tpot_tp, tpot_dp) -> None:
    tp, dp, want = (format_number(s.value(x)) for x in (req_tp, req_dp, demand))
    speed = (f"A decode step takes {format_quantity(s.value(tpot_tp), 'ms')} under TP attention (the requests it "
             f"runs) and {format_quantity(s.value(tpot_dp), 'ms')} under DP attention (all {want}).")
    s.regime_by(demand, req_tp, tie="below", above=Side(
        "dp-attention",
        f"TP attention holds {tp} requests, fewer than the {want} you must hold: the copies of the latents are the "
        f"binding waste, and DP attention raises the node to {dp}, for the price of the replicated weights. "
        f"{speed}",
        "With fewer concurrent requests (or shorter contexts) TP attention already holds them all; DP attention "
        "would still cut each GPU's latent reads, but buys memory no one needs and idles ranks at low or "
        "uneven load."),
        below=Side(
        "tp-attention",
        f"TP attention already holds {tp} requests, enough for the {want} you must hold: the duplicated latents "
        f"waste memory, but no request waits for it. {speed}",
        f"Once you must hold more than {tp} requests at this context the copies bind: DP attention, each group "
        f"keeping only its own requests' latents, holds {dp}."))


# --- recurrent-state-inventory ---------------------------------------------------------------


def _restorable(s: Sheet, interval, block, C) -> float:
    """Tokens of a C-token context a next turn restores, with snapshots every `interval` and KV blocks of
    `block` tokens: the last position both land on."""
    R = lcm(interval, block)
    return s.evaluate(R * floor_of(C / R))


def recurrent_state_inventory(p, s: Sheet) -> None:
    M_l = s.param("L_M", "mamba_layers")
    n_h = s.param("n_h", "ssm_heads")
    d_p = s.param("d_p", "ssm_head_dim")
    d_s = s.param("d_s", "state_size")
    g = s.param("n_g", "n_groups")
    K = s.param("K", "conv_kernel")
    b_s = s.given("b_ssm", dtype_bytes(p.ssm_dtype), "B", f"bytes per SSM state element ({p.ssm_dtype})")
    b_c = s.given("b_conv", dtype_bytes("bf16"), "B", "bytes per conv buffer element (bf16)")
    ssm = s.step("ssm_layer", "SSM state per layer", "S_ssm", n_h * d_p * d_s * b_s, "MiB",
                 "one head_dim × state_size matrix per head")
    conv = s.step("conv_layer", "Conv buffer per layer", "S_conv", (K - 1) * (n_h * d_p + 2 * g * d_s) * b_c,
                  "KiB", "the last K − 1 inputs of the x, B and C channels the causal conv reads")
    state = s.step("state_per_request", "Recurrent state per request", "S", M_l * (ssm + conv), "MiB",
                   "every Mamba layer keeps its own state, whatever the context length")

    attention = Record(name="attention layers", layers=p.attn_layers, kv_heads=p.kv_heads, head_dim=p.head_dim,
                       attention="gqa")
    kv_tok = kv_bytes_per_token_given(s, attention, dtype_bytes(p.kv_dtype), p.kv_dtype)
    C = s.param("C", "context")
    kv = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "MiB",
                "the attention layers' keys and values for every token of the context")
    C_star = s.step("crossover", "Context at which KV equals the state", "C_star", state / kv_tok, "tokens",
                    "KV grows with the context, the state does not")

    k = s.param("k", "interval")
    B = s.param("B", "block_size")
    taken = s.step("snapshots_taken", "Snapshots taken over the context", "n_snap", floor_of(C / k), "",
                   "one every k tokens")
    R = s.step("restart_boundary", "Positions every layer can restore", "R", lcm(k, B), "tokens",
               "attention restores at whole blocks, the Mamba layers only at snapshots: both at lcm(k, B)")
    usable = s.step("snapshots_usable", "Snapshots at a restart point", "n_use", floor_of(C / R), "",
                    "only these can ever seed a cache hit; the rest are dropped")
    keep = s.param("n_keep", "keep")
    kept = s.step("snapshots_kept", "Snapshots the engine keeps", "n_kept", min_of(keep, usable),
                  "", "the newest usable ones, up to the per-request cap")
    s.step("snapshot_bytes", "Memory of the kept snapshots", "S_snap", kept * state, "MiB",
           "each is a full copy of the recurrent state of every Mamba layer")
    reuse = s.step("reusable", "Tokens the next turn restores from cache", "C_hit", R * usable, "tokens",
                   "the newest restart point within the context; everything after it is recomputed")

    s.assume("Layer counts and shapes from Nemotron-H-8B's config.json (the 128K reasoning release keeps them); "
             "its MLP layers hold no state.")
    s.assume("State shapes as vLLM allocates them (MambaStateShapeCalculator.mamba2_state_shape): SSM state "
             "heads × head_dim × state_size, conv buffer (kernel − 1) × (heads·head_dim + 2·groups·state_size); "
             "one GPU, no TP split.")
    s.assume("A snapshot copies the whole recurrent state (SSM and conv) of every Mamba layer; the attention "
             "KV is cached in whole blocks, so a prefix is restorable only where both line up.")
    s.assume("Retention is capped, as engines cap it: SGLang's MambaRadixCache keeps a state only where a cached "
             "prefix ends, in a pool of its own with LRU eviction; Megatron-Core keeps at most 3 intermediate "
             "states per request; vLLM sparsifies per-block snapshots with a retention interval. Here the engine "
             f"keeps the newest {format_number(p.keep)} snapshot(s) that sit on a restart point and drops the rest.")
    s.assume("Block sizes and snapshot intervals here are illustrative. vLLM sizes a hybrid model's attention "
             "block so that one layer's page holds a Mamba layer's state (for this layout with bf16 KV: 528 "
             "tokens with a bf16 SSM state, 1,040 with fp32); with prefix caching on, it rounds that up to a "
             "multiple of the Mamba chunk size and snapshots the state at every block boundary.")
    state_answers = ("state_per_request", "crossover", "snapshot_bytes")
    s.slip("x Mamba layers: one layer's state, not the model's", 1 / p.mamba_layers, on=state_answers)
    s.slip("conv buffer left out", on=state_answers,
           factor=s.value(ssm) / (s.value(ssm) + s.value(conv)))
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", on="kv_per_request",
           factor=(p.mamba_layers + p.attn_layers) / p.attn_layers)
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", on="crossover",
           factor=p.attn_layers / (p.mamba_layers + p.attn_layers))
    if s.value(kept) > 0:
        s.slip("every snapshot taken kept, unbounded", s.value(taken) / s.value(kept), on="snapshot_bytes")
    _snapshot_judgements(s, p, state, kv, taken, R, reuse, k, B, C)
    _state_regime(s, state, kv, C_star, C)


def _snapshot_judgements(s: Sheet, p, state, kv, taken, R, reuse, k, B, C) -> None:
    key, now = "snapshot_policy", s.value(reuse)
    every = s.value(taken) * s.value(state)
    costly = every > s.value(kv)
    s.judge(key, "Keeping every snapshot taken would cost more than the request's KV cache", costly,
            f"{format_number(s.value(taken))} snapshots of {format_quantity(s.value(state), 'MiB')}: "
            f"{format_quantity(every, 'MiB')} against {format_quantity(s.value(kv), 'MiB')} of KV")
    per_block = _restorable(s, B, B, C)
    s.judge(key, "Snapshots at every block boundary would restore more of the next turn", per_block > now,
            f"restart points every {format_number(p.block_size)} tokens restore {format_number(per_block)} tokens "
            f"against {format_number(now)}")
    stranded = s.value(taken) > s.evaluate(floor_of(C / R))
    s.judge(key, "Some snapshots taken can never serve as a restart point", stranded,
            f"{format_number(s.value(taken))} taken, {format_number(s.evaluate(floor_of(C / R)))} on a multiple of "
            f"lcm(k, B) = {format_number(s.value(R))}")
    s.judge(key, "Keeping more snapshots per request would restore more of the next turn", False,
            "a turn that resends the whole context resumes from the newest restart point; older snapshots only "
            "serve a branch from earlier in the conversation", fact=True)
    s.judge(key, "What the next turn restores depends only on the newest restart point within the context", True,
            "everything up to it comes from the snapshot and the KV blocks, everything after it is prefilled again",
            fact=True)


def _state_regime(s: Sheet, state, kv, C_star, C) -> None:
    live, cache = format_quantity(s.value(state), "MiB"), format_quantity(s.value(kv), "MiB")
    crossover = format_number(s.value(C_star))
    s.regime_by(C, C_star, tie="above", above=Side(
        "kv-dominated",
        f"The attention KV ({cache}) outweighs the recurrent state ({live}): past {crossover} tokens the few "
        "attention layers set the memory per request, and each kept snapshot is small next to the cache.",
        f"Below {crossover} tokens the fixed recurrent state dominates: a short request pays the full state "
        "however few tokens it has, and every snapshot kept for prefix reuse costs as much again, which is why "
        "engines keep only the ones on a restart point and cap them."),
        below=Side(
        "state-dominated",
        f"The recurrent state ({live}) outweighs the attention KV ({cache}): below {crossover} tokens the fixed "
        "state is most of what a request holds, so short requests cost far more than their token count "
        "suggests, and each snapshot kept costs as much as the live state.",
        f"Past {crossover} tokens the KV of the few attention layers grows beyond the state, and memory per "
        "request scales with context as in a transformer, only more slowly; the capped snapshots stay a "
        "fixed cost."))
