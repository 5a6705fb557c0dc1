"""Tensor parallelism past the KV heads - weights keep shrinking, KV does not."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.models.collective import all_reduce_terms, crosses_domain, stage_send, tp_all_reduce
from solvers.models.common import (
    dtype_bytes,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_usable_share,
)
from solvers.models.kvcache import (
    kv_bytes_per_token_given,
    kv_bytes_per_token_per_gpu,
)
from solvers.sheetmath import ceil_of, min_of
from solvers.units import format_number, format_quantity

CLOSE_STEPS = 0.03  # two decode steps this close are a draw the model cannot call


def _capped_step(s: Sheet, p, N, b, L, R, T, S, L_s, pp, BW, t_ar, wide) -> sympy.Symbol:
    """The capped layout's decode step with its communication: TP T within each of S stages of whole
    layers, decoding S micro-batches of R/S so every stage stays busy; a token passes every stage once,
    so its step is S stage times plus S − 1 sends. Past the KV heads it reads more weights per GPU and
    less KV than TP n, and its all-reduces stay on NVLink; the faster step is chosen on both."""
    if s.compare(S, 1) == 0:  # TP within the KV heads: capping changes nothing
        s.step("comm_capped", "Communication of a decode step, TP capped at the KV heads", "t_comm_cap", t_ar,
               "ms", "TP is already within the KV heads: the capped layout is this one")
        s.choose("faster_layout", "same-layout")
        return wide
    m = s.step("pp_micro", "Requests per micro-batch", "m", R / S, "requests",
               "S micro-batches in flight keep every stage busy")
    w_pp = s.step("pp_weights_gpu", "Weights per GPU of the busiest stage", "w_pp", N * b * L_s / (L * T), "GB",
                  "its layers' weights, split over the stage's TP group (all heads split: no copies)")
    terms = all_reduce_terms(s, p.model, p.gpu, int(s.value(T)), group="cap", tp_symbol=T)
    send = stage_send(s, p.model, p.gpu, int(p.tp), nic=p.nic)
    comm = s.step("comm_capped", "Communication of a decode step, TP capped at the KV heads", "t_comm_cap",
                  S * (L_s / L) * terms.of(m) + (S - 1) * m * send, "ms",
                  "a micro-batch's TP all-reduces in every stage (two per layer, on NVLink) plus its hidden states "
                  "sent across the S − 1 stage boundaries")
    reads = s.step("read_capped", "HBM reads of the capped layout's decode step", "t_rd_cap",
                   S * (w_pp + pp * m / R) / BW, "ms",
                   "each of the S stages reads its weights and the micro-batch's KV once per micro-batch")
    capped = s.step("step_capped", "Decode step, TP capped plus stages: reads plus communication", "t_cap",
                    reads + comm, "ms", "a token passes every stage once: S stage times and the sends between them")
    if abs(s.evaluate(capped / wide) - 1) < CLOSE_STEPS:
        raise Reject(f"the two layouts' decode steps are within {CLOSE_STEPS:.0%}")
    s.choose("faster_layout", "capped" if s.compare(capped, wide) < 0 else "as-drawn")
    return capped


def _tp_levers(s: Sheet, p, n, H, per_gpu, pp, dp) -> None:
    """Which changes cut the KV per GPU follows from where TP sits against the KV heads.
    dp: KV on the busiest rank under data-parallel attention (whole requests, ceil(R/TP) of them)."""
    tp, heads, kv = format_number(s.value(n)), s.text(H), s.text(per_gpu)
    splits_more = s.compare(2 * n, H) <= 0
    wider = format_number(2 * s.value(n))
    s.judge("levers", "doubling TP", splits_more,
            f"TP {wider} still splits the {heads} KV heads: each GPU holds half as many" if splits_more else
            f"TP {wider} is past the {heads} KV heads: each GPU keeps a whole head and KV per GPU stays at {kv}")
    past = s.compare(n, H) > 0
    capped = s.text(pp)
    s.judge("levers", "capping TP at the KV heads and adding pipeline stages on the same GPUs", past,
            f"TP {heads} × {format_number(s.value(n) / s.value(H))} stages stores each byte once: {capped} on the "
            f"busiest GPU instead of {kv}" if past else f"TP {tp} is already within the {heads} heads: there are no "
            "spare GPUs to turn into stages, and no copies to remove")
    dp_cuts = s.compare(dp, per_gpu) < 0
    dp_kv = format_quantity(s.evaluate(dp), "GiB")
    s.judge("levers", "data-parallel attention on the same GPUs", dp_cuts,
            f"each of the {tp} ranks holds all heads of whole requests, ceil(R/TP) of them: {dp_kv} on the busiest "
            f"rank against {kv} under TP" + ("" if dp_cuts else (
                ": requests do not split, so no thinner" if past else
                ": TP already stores each byte once")))
    fp8 = p.dtype != "fp8"
    s.judge("levers", "an fp8 KV cache", fp8,
            f"{p.dtype} KV takes {format_number(dtype_bytes(p.dtype))} bytes per element: fp8 takes 1" if fp8 else
            "the cache is already in fp8")
    s.judge("levers", "twice the GPUs as two replicas", True,
            "each replica serves half the requests at the same TP: half the KV on every GPU", fact=True)


def _tp_regime(s: Sheet, p, n, H, per_gpu, dup, t_ar, t_read, wide, capped) -> None:
    kv, extra = s.text(per_gpu), s.text(dup)
    heads, tp = s.text(H), format_number(s.value(n))
    comm, read = s.text(t_ar), s.text(t_read)
    link = (f"the group leaves the {format_number(p.gpu.nvlink_domain)}-GPU NVLink domain, so its all-reduces "
            f"run over the {p.nic.name}: {comm} per decode step against {read} of HBM reads"
            if crosses_domain(p.gpu, int(p.tp)) else
            f"its all-reduces stay on NVLink: {comm} per decode step against {read} of HBM reads")
    if s.compare(n, H) > 0:
        t_wide, t_cap = s.text(wide), s.text(capped)
        results = s.results
        cap_comm, cap_read = (format_quantity(s.number(k), "ms") for k in ("comm_capped", "read_capped"))
        layout = f"TP {heads} × {format_number(s.value(n) / s.value(H))} stages"
        link += (f". With communication counted, {layout} takes {t_cap} per decode step ({cap_read} of reads, "
                 f"{cap_comm} of all-reduces and sends) against {t_wide} at TP {tp}: "
                 + ("the capped layout is faster as well as free of copies" if results["faster_layout"] == "capped"
                    else f"TP {tp} is faster, and the copies are the price of its speed"))
    s.regime_by(n, H, tie="below", above=Side(
        "kv-replicated",
        f"TP {tp} is past the {heads} KV heads: each GPU still holds one whole head, so KV per GPU stays at {kv} "
        f"(its value at TP {heads}) while the weights keep falling (all but the K and V projections, copied with "
        f"their heads); {extra} of copies fill the group, and {link}.",
        f"At TP ≤ {heads} every doubling halves both weights and KV per GPU. To go wider without copies, keep TP "
        "at the KV head count (inside one NVLink domain) and add pipeline stages or data-parallel attention."),
        below=Side(
        "kv-split",
        f"TP {tp} is within the {heads} KV heads: each GPU holds a distinct subset, no byte is copied, and KV per "
        f"GPU ({kv}) falls with every doubling, like the weights; {link}.",
        f"Past TP {heads} a GPU cannot hold less than one head: KV per GPU (and the K and V projections) stop "
        "shrinking, the extra GPUs hold copies, and past the NVLink domain the all-reduces move to the NIC. Pipeline "
        "stages or data-parallel attention scale past that without copies."))


def solve(p, s: Sheet) -> None:
    if p.model.attention == "mla":
        raise Reject("an MLA latent has no heads to split (mla-tp-duplication)")
    model, gpu = p.model, p.gpu
    b = s.given("b", dtype_bytes(p.dtype), "B", f"bytes per weight and KV element ({p.dtype})")
    n = s.param("TP", "tp")
    C = s.param("C", "context")
    R = s.param("R", "batch")

    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.dtype), p.dtype)
    total = s.step("kv_total", "KV of the batch, one copy", "KV", kv_tok * C * R, "GiB",
                   "every request keeps its full context")
    kv_tok_gpu = kv_bytes_per_token_per_gpu(s, model, b, n)
    per_gpu = s.step("kv_per_gpu", "KV per GPU under TP", "KV_n", kv_tok_gpu * C * R, "GiB",
                     "each GPU stores its KV heads for every token of every request")
    H = given_config(s, model, "kv_heads")
    copies = s.step("copies", "Copies of each KV head", "r", n * per_gpu / total, "x",
                    "KV stored across the group over one copy")
    dup = s.step("duplicate", "KV stored beyond one copy", "D", total * (copies - 1), "GiB",
                 "every copy beyond the first")

    N = given_model_params(s, model)
    L = given_config(s, model, "layers")
    h = given_config(s, model, "hidden")
    d = given_config(s, model, "head_dim")
    W_kv = s.step("kv_proj_weights", "K and V projection weights, all layers", "W_kv", 2 * L * h * H * d * b, "GB",
                  "k_proj and v_proj map the hidden state to H_kv heads of d_h each, in every layer")
    w = s.step("weights_per_gpu", "Weights per GPU", "w", N * b / n + W_kv * (kv_tok_gpu / kv_tok - 1 / n), "GB",
               "every matrix shards evenly except k_proj and v_proj, which follow the KV heads: a GPU holds the "
               "same share of them as of the cache (vLLM's QKVParallelLinear replicates them past H_kv GPUs)")
    M = given_hbm_bytes(s, gpu)
    u = given_usable_share(s)
    held = s.step("held_per_gpu", "Weights and KV per GPU", "M_n", w + per_gpu, "GB",
                  "what each GPU must hold before activations")
    if s.compare(held, u * M) > 0:
        raise Reject(f"weights and KV cache do not fit on {gpu.name} at TP {int(p.tp)}")
    s.step("headroom", "Usable HBM left per GPU", "M_free", u * M - held, "GB",
           "the fit check: it must not go negative")

    T = s.step("tp_capped", "TP degree capped at the KV heads", "n_tp", min_of(n, H), "GPUs",
               "the widest TP that still splits heads")
    S = s.step("pp_stages", "Pipeline stages", "S", n / T, "", "the rest of the GPUs, as stages of whole layers")
    L_s = s.step("stage_layers", "Layers on the busiest stage", "L_s", ceil_of(L / S), "",
                 "stages take whole layers, so one may hold a layer more than L/S")
    pp = s.step("kv_per_gpu_pp", "KV per GPU on the busiest stage, TP capped at the KV heads", "KV_pp",
                total / T * L_s / L, "GiB",
                "TP splits the heads, the stages split the layers: every byte is stored once")

    t_ar = tp_all_reduce(s, model, gpu, int(p.tp), R, tag="dec", label="decode step", key="allreduce", nic=p.nic)
    BW = given_hbm_bandwidth(s, gpu)
    t_read = s.step("read_time", "HBM read time of one decode step", "t_rd", held / BW, "ms",
                    "each GPU streams its weights and its KV once per step (roofline-time card, at peak)")
    wide = s.step("step_tp", f"Decode step at TP {int(p.tp)}: reads plus all-reduces", "t_TP", t_read + t_ar, "ms",
                  "the reads and the all-reduces of one step, not overlapped (tp-all-reduce card)")
    capped = _capped_step(s, p, N, b, L, R, T, S, L_s, pp, BW, t_ar, wide)

    s.assume(f"Weights and KV cache both in {p.dtype}. Every weight matrix (embeddings included) shards evenly "
             "over TP except k_proj and v_proj, which go with the KV heads they produce.")
    s.assume("vLLM's rule: each GPU holds max(1, H_kv ÷ TP) KV heads, so past H_kv GPUs each head, its cache "
             "and its K and V projections are copied onto TP ÷ H_kv GPUs (TP a multiple of H_kv). Activations "
             "and buffers are left out of the fit check.")
    s.assume("The alternative keeps TP at H_kv and spends the other GPUs on pipeline stages of whole layers, "
             "or on data-parallel attention (each rank holds whole heads for its own requests): both store "
             "each byte once. The pipeline decodes S micro-batches of R/S requests so no stage idles in steady "
             "state (its fill and drain are left out); its stage-to-stage sends use the NIC once the GPUs span "
             "nodes, NVLink inside one domain. DP attention's load balance is not priced.")
    s.assume("TP all-reduces follow the tp-all-reduce card (bf16 activations, ring, not overlapped with compute); "
             "a group wider than the GPU's NVLink domain runs them over the NIC, at its per-GPU rate.")
    r = s.value(copies)
    s.slip("KV divided by TP as if heads kept splitting", 1 / r, on="kv_per_gpu")
    s.slip("all stored KV counted as beyond one copy", r / (r - 1) if r > 1 else 1, on="duplicate")
    s.slip("x layers: one layer's KV counted for the model", 1 / model.layers, on=("kv_per_gpu", "duplicate"))
    s.slip("one all-reduce per layer instead of two", 0.5, on="allreduce")
    _tp_levers(s, p, n, H, per_gpu, pp, total * ceil_of(R / n) / R)
    _tp_regime(s, p, n, H, per_gpu, dup, t_ar, t_read, wide, capped)

