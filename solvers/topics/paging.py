"""KV-cache paging questions: block size, TP past the KV heads, sliding windows, shared blocks.

All four size the cache with the shared helpers in kvcache.py (KV bytes per token stands as the
kv-bytes-per-token result where the question requires it) and count whole blocks, the way a
paged allocator (vLLM's block manager) does. tp-past-kv-heads also prices the TP all-reduces
with collective.py, over the NIC once the group is wider than the GPU's NVLink domain.
"""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, min_of
from solvers.topics.collective import all_reduce_terms, crosses_domain, stage_send, tp_all_reduce
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    model_params,
    require_context,
)
from solvers.topics.kvcache import (
    blocks_for_tokens,
    kv_bytes_per_token_given,
    kv_bytes_per_token_per_gpu,
)
from solvers.units import format_number, format_quantity

# PagedAttention (Kwon et al., SOSP 2023) reports vLLM wasting under 4% of the KV cache: the bar
# below which fragmentation is called negligible here.
WASTE_TOLERANCE = 0.04


# --- paged-block-size --------------------------------------------------------------------------


def paged_block_size_question(p, s: Sheet) -> None:
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    B, n, L_avg, P = (s.param(sym, name) for sym, name in
                      (("B", "block_size"), ("n", "batch"), ("L_avg", "mean_length"), ("P", "prefix")))

    w_max = s.step("worst_waste", "Worst-case empty slots per sequence", "w_max", B - 1, "tokens",
                   "only the last block can be partly full, and it holds at least one token")
    w = s.step("expected_waste", "Expected empty slots per sequence", "w", w_max / 2, "tokens",
               "a length ending anywhere in its last block leaves 0 to B−1 slots empty, each equally likely")
    waste = s.step("batch_waste", "Expected empty KV across the batch", "W", n * w * kv_tok, "GiB",
                   "every sequence in flight pays its own partial last block, in every layer")
    share = s.step("waste_share", "Share of the allocated KV left empty", "f_w", w / (L_avg + w), "%",
                   "empty slots over slots allocated (tokens stored plus empty ones)")
    layers = s.given("L", p.model.layers, "", "layers")
    s.step("page_bytes", "One block in one layer (vLLM's page)", "P_pg", B * kv_tok / layers, "KiB",
           "the unit the attention kernel gathers: a block's keys and values for one layer")
    blocks = blocks_for_tokens(s, L_avg, B)
    hit = s.step("prefix_hit", "System-prompt tokens in full blocks (cache hits)", "P_hit", B * floor_of(P / B),
                 "tokens", "only full blocks are hashed, and the block where the shared prompt ends also holds "
                 "each request's own text")
    s.step("prefix_recompute", "System-prompt tokens each new request prefills again", "P_miss", P - hit, "tokens",
           "the tail of the prompt past its last full block misses the cache")
    tau = s.given("tau", WASTE_TOLERANCE, "%", "waste counted as negligible (PagedAttention: under 4%)")
    L_star = s.step("boundary_length", "Mean length at which the waste reaches the bar", "L_star",
                    w * (1 - tau) / tau, "tokens", "solve w / (L + w) = τ for L")

    s.assume("Lengths are spread widely enough that each sequence ends at a uniformly random slot of its "
             "last block, so the expected waste is (B − 1)/2 slots; the worst case is B − 1.")
    s.assume("KV bytes are those of one model replica across all layers; under tensor parallelism each GPU "
             "holds its share of the same blocks, so the shares and counts are unchanged.")
    s.assume("The system prompt is followed by text that differs per request, so its last, mixed block never "
             "matches in a prefix cache that hashes whole blocks (vLLM's rule).")
    s.slip("/n: one sequence's waste, not the batch's", 1 / p.batch, on="batch_waste")
    s.slip("x2: the worst case B − 1 instead of the expected (B − 1)/2", 2.0, on="batch_waste")
    s.slip("x2: the worst case B − 1 instead of the expected (B − 1)/2", on="waste_share",
           factor=s.evaluate(w_max / (L_avg + w_max)) / s.value(share))
    s.slip("x layers: KV of one layer counted for the whole model", 1 / p.model.layers, on="batch_waste")

    _block_choices(s, B, L_avg, P, tau, blocks)
    _block_regime(s, share, tau, L_star, L_avg, blocks, waste)


def _block_choices(s: Sheet, B, L_avg, P, tau, blocks) -> None:
    """The trade at half and twice this block size, judged on the variant's numbers."""
    def share(size):
        return (size - 1) / 2 / (L_avg + (size - 1) / 2)

    def tail(size):
        return P - size * floor_of(P / size)

    half, double = B / 2, 2 * B
    bar = format_quantity(s.value(tau), "%")
    for size, option, word in ((half, "with half the block size the empty share would be under 4%", "half"),
                               (double, "with twice the block size the empty share would still be under 4%",
                                "twice")):
        s.judge("block_choice", option, s.compare(share(size), tau) < 0,
                f"at {word} the block size, (B' − 1)/2 ÷ (L + (B' − 1)/2) = "
                f"{format_quantity(s.evaluate(share(size)), '%')} against the {bar} bar")
    now, at_half = format_number(s.value(P) - s.evaluate(B * floor_of(P / B))), format_number(s.evaluate(tail(half)))
    s.judge("block_choice", "half the block size would cache more of the system prompt",
            s.compare(tail(half), tail(B)) < 0,
            f"the uncached tail P mod B' goes from {now} to {at_half} tokens")
    full_double = s.evaluate(double * floor_of(P / double))
    s.judge("block_choice", "twice the block size would leave the whole system prompt uncached", full_double == 0,
            f"{format_number(s.evaluate(double))}-token blocks: {format_number(full_double)} of the "
            f"{format_number(s.value(P))} prompt tokens fill whole blocks")
    more = s.evaluate(ceil_of(L_avg / half))
    s.judge("block_choice", "half the block size would give the kernel more and smaller blocks to gather per sequence",
            s.compare(ceil_of(L_avg / half), blocks) > 0,
            f"⌈L/(B/2)⌉ = {format_number(more)} page-table entries per layer instead of "
            f"{format_number(s.value(blocks))}, each half the bytes: the kernel's side of the trade", fact=True)
    s.judge("block_choice", "twice the block size would leave fewer slots empty per sequence", False,
            f"the expected empty slots grow with the block, (B' − 1)/2: {format_number(s.evaluate((double - 1) / 2))} "
            f"instead of {format_number(s.evaluate((B - 1) / 2))}", fact=True)


def _block_regime(s: Sheet, share, tau, L_star, L_avg, blocks, waste) -> None:
    pct, bar = format_quantity(s.value(share), "%"), format_quantity(s.value(tau), "%")
    count, empty = format_number(s.value(blocks)), format_quantity(s.value(waste), "GiB")
    if s.compare(L_avg, L_star) > 0:
        s.set_regime(
            "waste-negligible",
            f"Sequences are long next to the block: {pct} of the cache ({empty}) sits empty, under the {bar} "
            f"bar. A bigger block would cut the {count} blocks per sequence the kernel walks and feed it larger "
            "contiguous reads; what it costs is coarser prefix matching more than memory.",
            L_star, L_avg,
            "With shorter sequences (or a bigger block) the partial last block becomes a visible share of the "
            "cache and costs concurrency: smaller blocks win back memory at the price of more, smaller gathers.")
    else:
        s.set_regime(
            "waste-material",
            f"Sequences are short next to the block: {pct} of the cache ({empty}) sits empty, above the {bar} "
            "bar. A smaller block returns that memory as extra concurrency and matches prefixes more finely, "
            f"at the price of more than the {count} blocks per sequence the kernel walks now.",
            L_star, L_avg,
            "With longer sequences (or a smaller block) the partial last block is a rounding error, and the "
            "block size is chosen for kernel efficiency: fewer page-table entries and longer contiguous reads.")


# --- tp-past-kv-heads --------------------------------------------------------------------------


def tp_past_kv_heads_question(p, s: Sheet) -> None:
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
    H = s.given("H_kv", model.kv_heads, "", "KV heads")
    copies = s.step("copies", "Copies of each KV head", "r", n * per_gpu / total, "x",
                    "KV stored across the group over one copy")
    dup = s.step("duplicate", "KV stored beyond one copy", "D", total * (copies - 1), "GiB",
                 "every copy beyond the first")

    N = s.given("N", model_params(model), "", "parameters")
    L = s.given("L", model.layers, "", "layers")
    h = s.given("h", model.hidden, "", "hidden size")
    d = s.given("d_h", model.head_dim, "", "head dim")
    W_kv = s.step("kv_proj_weights", "K and V projection weights, all layers", "W_kv", 2 * L * h * H * d * b, "GB",
                  "k_proj and v_proj map the hidden state to H_kv heads of d_h each, in every layer")
    w = s.step("weights_per_gpu", "Weights per GPU", "w", N * b / n + W_kv * (kv_tok_gpu / kv_tok - 1 / n), "GB",
               "every matrix shards evenly except k_proj and v_proj, which follow the KV heads: a GPU holds the "
               "same share of them as of the cache (vLLM's QKVParallelLinear replicates them past H_kv GPUs)")
    M = s.given("M", hbm_bytes(gpu), "GB", f"{gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "%", "usable share of HBM (usable-hbm card)")
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
    BW = s.given("BW", hbm_bandwidth(gpu), "TB/s", f"{gpu.name} HBM bandwidth")
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
    tp, heads, kv = format_number(s.value(n)), format_number(s.value(H)), format_quantity(s.value(per_gpu), "GiB")
    splits_more = s.compare(2 * n, H) <= 0
    wider = format_number(2 * s.value(n))
    s.judge("levers", "doubling TP", splits_more,
            f"TP {wider} still splits the {heads} KV heads: each GPU holds half as many" if splits_more else
            f"TP {wider} is past the {heads} KV heads: each GPU keeps a whole head and KV per GPU stays at {kv}")
    past = s.compare(n, H) > 0
    capped = format_quantity(s.value(pp), "GiB")
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
    kv, extra = format_quantity(s.value(per_gpu), "GiB"), format_quantity(s.value(dup), "GiB")
    heads, tp = format_number(s.value(H)), format_number(s.value(n))
    comm, read = format_quantity(s.value(t_ar), "ms"), format_quantity(s.value(t_read), "ms")
    link = (f"the group leaves the {format_number(p.gpu.nvlink_domain)}-GPU NVLink domain, so its all-reduces "
            f"run over the {p.nic.name}: {comm} per decode step against {read} of HBM reads"
            if crosses_domain(p.gpu, int(p.tp)) else
            f"its all-reduces stay on NVLink: {comm} per decode step against {read} of HBM reads")
    if s.compare(n, H) > 0:
        t_wide, t_cap = format_quantity(s.value(wide), "ms"), format_quantity(s.value(capped), "ms")
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


# --- sliding-window-savings --------------------------------------------------------------------


def sliding_window_savings_question(p, s: Sheet) -> None:
    model = p.model
    require_context(model, p.context)
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    L = s.given("L", model.layers, "", "layers")
    L_w = s.given("L_w", model.sliding_window_layers, "", "layers with a sliding window")
    W = s.given("W", model.sliding_window, "tokens", "sliding window")
    C = s.param("C", "context")
    B = s.param("B", "block_size")

    full = s.step("kv_full", "KV per request, every layer at full context", "KV_full", kv_tok * C, "GiB",
                  "what the request would hold if no layer were windowed")
    f = s.step("windowed_share", "Share of layers windowed", "f", L_w / L, "%", "windowed layers over all layers")
    W_eff = s.step("window_tokens", "Tokens a windowed layer keeps", "W_eff", min_of(W, C), "tokens",
                   "the last W tokens, or the whole context if it is shorter")
    saving = s.step("saving", "KV saved by the windows", "S", f * (1 - W_eff / C), "%",
                    "the windowed share of layers, times the part of the context they drop")
    kv_win = s.step("kv_windowed", "KV per request with windowed layers freed", "KV_win", full * (1 - saving),
                    "GiB", "full layers keep the whole context, windowed layers only their window")
    full_blocks = blocks_for_tokens(s, C, B, key="full_layer_blocks")
    n_win = s.step("window_blocks", "Blocks a windowed layer holds per request while decoding", "n_win",
                   min_of(ceil_of(W_eff / B) + 1, full_blocks), "blocks",
                   "vLLM's bound at one token per step: the window may start mid-block, so one block more than "
                   "W/B; blocks that slide out are freed (a prefill chunk of T tokens needs up to "
                   "⌈(W − 1 + T)/B⌉ + 1)")
    kept_full = s.step("full_layers_keep", "Share of the full cache the full-context layers keep", "K_f", 1 - f, "%",
                       "they hold every token of the context")
    kept_win = s.step("windowed_layers_keep", "Share of the full cache the windowed layers keep", "K_w",
                      f * W_eff / C, "%", "their window out of the whole context")
    C_star = s.step("boundary_context", "Context at which both kinds of layer keep equal KV", "C_star",
                    f * W / (1 - f), "tokens", "solve (1 − f) = f·W/C for C")

    s.assume("All layers cache the same KV heads and head dim, windowed or not (true of gpt-oss and Gemma 2/3), "
             "so the saving depends on layer counts alone; KV dtype and block size do not change it.")
    s.assume("The saving needs an allocator that gives the windowed layers their own block tables and frees "
             "their blocks as they slide out of the window (vLLM's hybrid KV cache manager, one KV cache group "
             "per layer type). One block table for all layers keeps the full context in every layer: a saving "
             "of zero.")
    s.assume("Per request at its full context; the saving in tokens ignores the up-to-one extra block "
             "each windowed layer holds.")
    s.slip("saving counted as if every layer were windowed", 1 / s.value(f), on="saving")
    s.slip("saving counted as if every layer were windowed", on="kv_windowed",
           factor=s.evaluate(full * W_eff / C) / s.value(kv_win))
    _window_allocator(s, saving, n_win, full_blocks, W, C)
    _window_regime(s, f, saving, kept_full, kept_win, C_star, C)


def _window_allocator(s: Sheet, saving, n_win, full_blocks, W, C) -> None:
    """What the allocator must do follows from whether this request's context outgrows the window."""
    window, context = format_number(s.value(W)), format_number(s.value(C))
    saves = s.value(saving) > 0
    frees = s.compare(n_win, full_blocks) < 0
    held, whole = format_number(s.value(n_win)), format_number(s.value(full_blocks))
    s.judge("allocator", "keep the windowed layers in block tables of their own (a KV cache group)", saves,
            f"the {context}-token context outgrows the {window}-token window: one table shared with the full "
            "layers would keep the whole context in every layer" if saves else
            f"the {context}-token context fits in the {window}-token window: no layer drops anything")
    s.judge("allocator", "free a windowed layer's blocks once they fall wholly behind the window", frees,
            f"a windowed layer needs {held} of the {whole} blocks the context fills: the rest must go back to the "
            "pool" if frees else f"a windowed layer still needs all {whole} blocks the context fills")
    s.judge("allocator", "nothing: at this context every layer keeps the whole request anyway", not saves,
            "the window is shorter than the context, so the saving must be made" if saves else
            f"the {window}-token window covers all {context} tokens: the saving is zero whatever the allocator")
    s.judge("allocator", "use a block size that divides the window", False,
            "the window still starts mid-block as it slides: ⌈W/B⌉ + 1 blocks whatever B divides", fact=True)
    s.judge("allocator", "store the KV cache in fp8", False,
            "fp8 halves the bytes of every layer alike: it makes the windows save nothing they did not already",
            fact=True)


def _window_regime(s: Sheet, f, saving, kept_full, kept_win, C_star, C) -> None:
    cap, got = format_quantity(s.value(f), "%"), format_quantity(s.value(saving), "%")
    full, win = format_quantity(s.value(kept_full), "%"), format_quantity(s.value(kept_win), "%")
    if s.compare(C, C_star) > 0:
        s.set_regime(
            "layer-ratio",
            f"The full-context layers keep {full} of the full cache, the windowed ones only {win}: the saving "
            f"({got}) is capped by the windowed share of layers ({cap}), and even a zero-length window would add "
            f"no more than {win}. More windowed layers, not a shorter window, is the bigger lever.",
            C_star, C,
            "Below the boundary context the windowed layers keep more KV than the full ones: the window length, "
            "not the layer ratio, decides the saving, and at or below the window it is zero.")
    else:
        detail = (f"the window covers the whole context, so the saving is zero of a possible {cap}"
                  if s.value(saving) == 0 else
                  f"the window length decides the saving, {got} of a possible {cap}, and a shorter window "
                  "could win back at least half of what is left")
        s.set_regime(
            "window",
            f"The windowed layers keep {win} of the full cache, at least the {full} the full-context layers keep: "
            f"{detail}.",
            C_star, C,
            "At longer contexts the windows drop most of the context and the saving approaches the windowed "
            "share of layers: then the layer ratio, not the window, sets it.")


# --- cow-block-sharing -------------------------------------------------------------------------


def cow_block_sharing_question(p, s: Sheet) -> None:
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    k, P, G, B = (s.param(sym, name) for sym, name in
                  (("k", "samples"), ("P", "prompt"), ("G", "output"), ("B", "block_size")))
    v0 = p.engine == "vllm-v0"

    T = s.step("sample_tokens", "Tokens per sample", "T", P + G, "tokens", "the prompt plus its own output")
    per_sample = blocks_for_tokens(s, T, B)
    alone = s.step("blocks_without", "Blocks without sharing", "N_0", k * per_sample, "blocks",
                   "every sample holds its own copy of the prompt")
    if v0:
        shared = s.step("shared_blocks", "Full prompt blocks shared by all samples", "n_s", floor_of(P / B),
                        "blocks", "full blocks of prompt are never written again: one copy, reference-counted")
    else:
        shared = s.step("shared_blocks", "Prompt blocks the prefix cache shares", "n_s", floor_of((P - 1) / B),
                        "blocks", "whole blocks only, and at most P − 1 tokens: the last prompt token is always "
                        "recomputed for its logits")
    own = s.step("own_blocks", "Blocks each sample holds alone", "n_own", per_sample - shared, "blocks",
                 "the block the prompt ends in and the output's blocks")
    together = s.step("blocks_with", "Blocks with sharing", "N_1", shared + k * own, "blocks",
                      "the shared blocks once, plus every sample's own")
    saving = s.step("saving", "Blocks saved", "S", 1 - together / alone, "%", "blocks with sharing over blocks without")
    ceiling = s.step("saving_ceiling", "Saving if the samples held only the prompt", "S_max", (k - 1) / k, "%",
                     "one prompt copy instead of k; outputs pull the saving down as P/(P + G)")
    s.step("saved_bytes", "KV memory saved", "M_S", (alone - together) * B * kv_tok, "GiB",
           "each block holds B tokens in every layer")
    nothing = sympy.Mul(k - 1, 0, evaluate=False)  # shown as (k − 1)·0: the later samples pay nothing here
    if v0:
        misaligned = s.step("partial_prompt_block", "Prompt ends inside a block", "m",
                            ceil_of(P / B) - floor_of(P / B), "", "1 if P is not a multiple of B")
        copies = s.step("copies", "Copy-on-write copies", "N_cow", (k - 1) * misaligned, "blocks",
                        "each sample's first token lands in the shared partial block: all but the last writer "
                        "copy it")
        redone = s.step("recomputed", "Prompt tokens prefilled again", "P_re", nothing, "tokens",
                        "the prompt is prefilled once; the samples share its KV")
    else:
        copies = s.step("copies", "Copy-on-write copies", "N_cow", nothing, "blocks",
                        "no copy-on-write: each sample computes its own copy of the block the prompt ends in")
        tail = s.step("tail_tokens", "Prompt tokens past the shared blocks", "P_t", P - B * shared, "tokens",
                      "what the prefix cache cannot hand a later sample")
        redone = s.step("recomputed", "Prompt tokens prefilled again", "P_re", (k - 1) * tail, "tokens",
                        "every sample after the first prefills them again")
    s.choose("tail_cost", "a-copy-at-the-first-decode-step" if s.value(copies) else
             "a-recompute-at-prefill" if s.value(redone) else "nothing-extra")

    if v0:
        s.assume("vLLM v0 parallel sampling: the prompt is prefilled once and every sample points at its blocks; "
                 "a block is copied when a sample writes into it while another still holds it (copy-on-write, "
                 "PagedAttention §4.4).")
    else:
        s.assume("vLLM v1 parallel sampling: the request fans out as k requests of one sample; the first prefills "
                 "the prompt and the others hit its full blocks in the prefix cache within the same batch, up to "
                 "P − 1 tokens in whole blocks (the last token is recomputed for its logits). No copy-on-write.")
    s.assume("Every sample runs to the same output length; KV bytes are those of one model replica, all layers.")
    s.slip("/k: blocks of one sample", 1 / p.samples, on="blocks_without")
    half = s.step("saving_half_ceiling", "Half the ceiling", "S_half", ceiling / 2, "%",
                  "the saving falls through it about where the outputs grow as long as the prompt")
    _cow_regime(s, G, P, saving, ceiling, half)


def _cow_regime(s: Sheet, G, P, saving, ceiling, half) -> None:
    out, prompt = format_number(s.value(G)), format_number(s.value(P))
    got, cap = format_quantity(s.value(saving), "%"), format_quantity(s.value(ceiling), "%")
    s.regime_by(saving, half, tie="below", above=Side(
        "large-saving",
        f"The saving ({got}) is more than half its {cap} ceiling: outputs ({out} tokens) are short next to the "
        f"prompt ({prompt}), so the shared prompt blocks are most of what each sample holds.",
        "Once outputs outgrow the prompt the private output blocks dominate and the saving falls as P/(P + G): "
        "long reasoning traces or RL rollouts keep little of it.",
        near=f"The saving ({got}) is just over half its {cap} ceiling: outputs ({out} tokens) are nearly as long as "
             f"the prompt ({prompt}), and somewhat longer ones would make the private blocks the larger part."),
        below=Side(
        "vanishing-saving",
        f"The saving ({got}) is under half its {cap} ceiling: outputs ({out} tokens) are long next to the prompt "
        f"({prompt}), private output blocks dominate, and it keeps falling as P/(P + G).",
        "With outputs shorter than the prompt (short answers to long contexts, best-of-n on a long document) the "
        "shared blocks dominate and the saving nears its ceiling.",
        near=f"The saving ({got}) has just fallen under half its {cap} ceiling: outputs ({out} tokens) are about as "
             f"long as the prompt ({prompt}), and every further output token pulls it lower."))
