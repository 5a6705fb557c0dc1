"""Tensor parallelism past the KV heads - weights keep shrinking, KV does not."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, stage_send
from solvers.formulas.common import (
    dtype_bytes,
    fabric_name,
    given_active_params,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
)
from solvers.formulas.kvcache import (
    kv_bytes_per_token_given,
    kv_bytes_per_token_per_gpu,
)
from solvers.formulas.moe import GATED_MATRICES, moe_layers
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import ceil_of, max_of, min_of
from solvers.units import figures_against, format_number, format_quantity

CLOSE_STEPS = 0.03  # two decode steps this close are a draw the model cannot call
CLOSE_FIT = sympy.Rational(3, 100)  # weights and KV this close to the usable HBM: activations would decide the fit
CLOSE_SHARE = sympy.Rational(2, 100)  # a lever within two points of the share asked: the model cannot call it


def _capped_step(s: Sheet, p, N, b, L, R, T, S, L_s, pp, rate, t_mm, t_oh, t_ar, wide, routed) -> None:
    """The capped layout's decode step with its communication: TP T within each of S stages of whole
    layers, decoding S micro-batches of R/S so every stage stays busy; a token passes every stage once,
    so its step is S stage times plus S − 1 sends. Past the KV heads it reads more weights per GPU and
    less KV than TP n, and its all-reduces stay inside the scale-up domain; the faster step is chosen on both."""
    if s.compare(S, 1) == 0:  # TP within the KV heads: capping changes nothing
        s.step("comm_capped", "Communication of a decode step, TP capped at the KV heads", "t_comm_cap", t_ar,
               "ms", "TP is already within the KV heads: the capped layout is this one")
        s.choose("faster_layout", "the same layout",
                 f"TP {format_number(p.tp)} is within the KV heads: capping it changes nothing, no GPU is spare")
        return
    if int(s.value(R)) % int(s.value(S)):  # the batch's step of 4 keeps requests whole: never met in a draw
        raise Reject("the requests do not split into whole micro-batches, one per stage")
    m = s.step("pp_micro", "Requests per micro-batch", "m", R / S, "requests",
               "S micro-batches in flight keep every stage busy")
    w_pp = s.step("pp_weights_gpu", "Weights per GPU of the busiest stage", "w_pp", N * b * L_s / (L * T), "GB",
                  "its layers' weights, split over the stage's TP group (all heads split: no copies)")
    if routed is not None:  # a micro-batch of m requests reads only the routed experts its tokens pick
        X, E_x, k_x = routed
        phi_m = s.step("touched_pp", "Share of routed experts a micro-batch reads", "φ_m", 1 - (1 - k_x / E_x) ** m,
                       "%", "each of its m tokens picks k of E experts in every MoE layer")
        w_pp = s.step("pp_weights_read", "Weights a stage's GPU reads per micro-batch", "w_pp_rd",
                      w_pp - X * L_s / (L * T) * (1 - phi_m), "GB",
                      "its share of the weights less the routed experts no token of the micro-batch picks")
    # Inside one domain the stages' narrower groups share the link and latency of TP n (a mesh names its own).
    terms = all_reduce_terms(s, p.model, p.gpu, int(s.value(T)), tp_symbol=T)
    send = stage_send(s, p.model, p.gpu, int(p.tp))
    comm = s.step("comm_capped", "Communication of a decode step, TP capped at the KV heads", "t_comm_cap",
                  S * (L_s / L) * terms.of(m) + (S - 1) * m * send, "ms",
                  "a micro-batch's TP all-reduces in every stage (two per layer, inside the domain) plus its hidden "
                  "states sent across the S − 1 stage boundaries")
    reads = s.step("read_capped", "HBM reads of the capped layout's decode step", "t_rd_cap",
                   S * (w_pp + pp * m / R) / rate, "ms",
                   "each of the S stages reads its weights and the micro-batch's KV once per micro-batch")
    capped = s.step("step_capped", "Decode step, TP capped plus stages: reads, communication and overhead",
                    "t_cap", max_of(reads, t_mm) + comm + t_oh, "ms",
                    "a token passes every stage once: S stage times (the same math as TP n, spread over the stages) "
                    "and the sends between them, and the step's overhead once")
    if abs(s.evaluate(capped / wide) - 1) < CLOSE_STEPS:
        raise Reject(f"the two layouts' decode steps are within {CLOSE_STEPS:.0%}")
    faster = s.compare(capped, wide) < 0
    stages = f"TP {format_number(s.value(T))} × {format_number(s.value(S))} stages"
    s.choose("faster_layout", "TP at the heads plus stages" if faster else "TP as drawn",
             f"{stages} takes {s.text(capped)} a step ({s.text(reads)} of reads, {s.text(comm)} of all-reduces and "
             f"sends, {s.text(t_oh)} of overhead) against {s.text(wide)} at TP {format_number(p.tp)}: "
             + ("the KV copies cost TP " + format_number(p.tp) + " more reads than the stages' weights read once per "
                "micro-batch: the capped layout is faster as well as free of copies" if faster else
                f"TP {format_number(p.tp)} is faster: each stage reads its weights once per micro-batch, "
                f"{format_number(s.value(S))} times a step, which costs more than the KV copies"))


def _step_levers(s: Sheet, R, w, w_half, per_gpu, rate, t_mm, t_oh, terms, t_ar, wide) -> None:
    """Which changes shorten TP n's decode step by the share asked: each re-priced on the same step, its
    weight and KV reads (floored at the math) plus its all-reduces and the overhead. An option about what the
    variant has already is not listed, nor one within CLOSE_SHARE of the line (inside the model's error)."""
    t_w, t_kv = w / rate, per_gpu / rate  # w: the weights a step reads (a MoE's touched experts only)
    options = (  # (option, the step after it): quantising halves bytes from either drawn dtype (fp8 to 4-bit)
        ("the KV cache quantised to half its bytes", max_of(t_w + t_kv / 2, t_mm) + t_ar + t_oh),
        ("the weights quantised to half their bytes", max_of(t_w / 2 + t_kv, t_mm) + t_ar + t_oh),
        ("half the requests in flight", max_of(w_half / rate + t_kv / 2, t_mm / 2) + terms.of(R / 2) + t_oh),
        ("the all-reduces fully overlapped with the reads", wide - t_ar),
    )
    shorter = s.param("s_L", "shorter")
    now = s.text(wide)
    for option, step in options:
        saved = 1 - s.evaluate(step / wide)
        if s.compare(abs(1 - step / wide - shorter), CLOSE_SHARE) < 0:  # inside the model's error: not graded
            s.judge("levers", option, None, f"saves {format_quantity(saved, '%')}, within 2 points of the share "
                                            "asked: too close to call")
            continue
        sig = figures_against(saved, s.value(shorter), sig=4)  # 19.996% must not read as the 20% it misses
        s.judge("levers", option, s.compare(step, (1 - shorter) * wide) <= 0,
                f"{format_quantity(s.evaluate(step), 'ms')} against {now}: {format_quantity(saved, '%', sig)} shorter")


def _tp_regime(s: Sheet, p, n, H, per_gpu, t_ar, t_read) -> None:
    """Split or copied heads. The summary is the key of the opening, so it says only what the opening asks;
    the copies, the all-reduces and the capped layout are later stages' keys."""
    kv, heads, tp = s.text(per_gpu), s.text(H), format_number(s.value(n))
    fabric = fabric_name(p.gpu)
    # The realism rule keeps TP inside one scale-up domain: the copies, not a NIC, are what is weighed.
    link = f"The all-reduces stay on {fabric} ({s.text(t_ar)} a step against {s.text(t_read)} of HBM reads)"
    s.regime_by(n, H, tie="below", above=Side(
        "kv-replicated",
        f"TP {tp} is past the {heads} KV heads: a GPU cannot hold less than one whole head, so each holds one "
        f"({kv} of KV) and the rest of the group holds copies of it, while the weights keep falling (all but the K "
        "and V projections, copied with their heads).",
        f"At TP ≤ {heads} every doubling halves both weights and KV per GPU. To go wider without copies, keep TP "
        f"at the KV head count and add pipeline stages or data-parallel attention. {link}."),
        below=Side(
        "kv-split",
        f"TP {tp} is within the {heads} KV heads: each GPU holds a distinct subset, no byte is copied, and KV per "
        f"GPU ({kv}) falls with every doubling, like the weights.",
        f"Past TP {heads} a GPU cannot hold less than one head: KV per GPU (and the K and V projections) stop "
        "shrinking and the extra GPUs hold copies. "
        f"Pipeline stages or data-parallel attention scale past that without copies. {link}.",
        near=f"TP {tp} equals the {heads} KV heads: one whole head a GPU ({kv} of KV), nothing copied yet; one more "
             "doubling and every head is copied."))


def solve(p, s: Sheet) -> None:
    if p.model.attention == "mla":
        raise Reject("an MLA latent has no heads to split (mla-tp-duplication)")
    model, gpu = p.model, p.gpu
    b = s.given("b", dtype_bytes(p.dtype), "B", f"bytes per weight and KV element ({p.dtype})")
    n = s.param("TP", "tp")
    C = s.param("C", "context")
    R = s.param("R", "batch")

    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.dtype), p.dtype)
    total = s.step("kv_total", "KV of the batch, one copy", "KV", kv_tok * C * R, "GB",
                   "every request keeps its full context")
    kv_tok_gpu = kv_bytes_per_token_per_gpu(s, model, b, n)
    per_gpu = s.step("kv_per_gpu", "KV per GPU under TP", "KV_n", kv_tok_gpu * C * R, "GB",
                     "each GPU stores its KV heads for every token of every request")
    H = given_config(s, model, "kv_heads")
    copies = s.step("copies", "Copies of each KV head", "r", n * per_gpu / total, "x",
                    "KV stored across the group over one copy")
    s.step("duplicate", "KV stored beyond one copy", "D", total * (copies - 1), "GB", "every copy beyond the first")

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
    room = s.step("headroom", "Usable HBM left per GPU", "M_free", u * M - held, "GB",
                  "the fit check: it must not go negative")
    fits = s.compare(held, u * M) <= 0
    if s.compare(abs(room), CLOSE_FIT * u * M) < 0:  # a knife edge: activations alone would decide it
        s.refuse_if_asked(("fits",), f"weights and KV within {float(CLOSE_FIT):.0%} of the usable HBM")
    s.choose("fits", "fits" if fits else "does not fit",
             f"{s.text(held)} of weights and KV per GPU against {format_quantity(s.evaluate(u * M), 'GB')} usable on "
             f"{gpu.name}: "
             + (f"{s.text(room)} to spare" if fits
                else f"{format_quantity(-s.evaluate(room), 'GB')} short, before activations"))
    # The drawn layout sits at or past the heads and fits (the stages after the opening price its step);
    # a push may land below the heads or short of HBM: whether it still fits is what it asks.
    if not fits:
        s.refuse_if_asked(("allreduce", "levers", "kv_per_gpu_pp", "faster_layout"),
                          f"weights and KV cache do not fit on {gpu.name} at TP {int(p.tp)}")
    if s.compare(n, given_config(s, model, "kv_heads")) < 0:
        s.refuse_if_asked(("allreduce", "levers", "kv_per_gpu_pp", "faster_layout"),
                          "TP below the KV heads is only a push's")

    T = s.step("tp_capped", "TP degree capped at the KV heads", "n_tp", min_of(n, H), "GPUs",
               "the widest TP that still splits heads")
    S = s.step("pp_stages", "Pipeline stages", "S", n / T, "", "the rest of the GPUs, as stages of whole layers")
    L_s = s.step("stage_layers", "Layers on the busiest stage", "L_s", ceil_of(L / S), "",
                 "stages take whole layers, so one may hold a layer more than L/S")
    pp = s.step("kv_per_gpu_pp", "KV per GPU on the busiest stage, TP capped at the KV heads", "KV_pp",
                total / T * L_s / L, "GB",
                "TP splits the heads, the stages split the layers: every byte is stored once")

    terms = all_reduce_terms(s, model, gpu, int(p.tp), tp_symbol=n)
    where = fabric_name(gpu)
    t_ar = s.step("allreduce", "TP all-reduces of the decode step", "t_AR_dec", terms.of(R), "ms",
                  f"two per layer, each a latency plus 2(TP−1)/TP of the step's activations over {where}")
    BW = given_hbm_bandwidth(s, gpu)
    rate = BW * given_step_bandwidth(s)
    t_oh = given_step_overhead(s)
    routed = None
    w_read, w_half = w, w
    if model.get("experts"):  # a MoE step reads only the routed experts its tokens pick
        E_x = given_config(s, model, "experts", "E_x")
        k_x = given_config(s, model, "experts_per_token", "k_x")
        f_x = given_config(s, model, "expert_ffn")
        L_m = s.given("L_moe", moe_layers(model), "", "MoE layers")
        X = s.step("expert_weights", "Routed-expert weights, all layers", "X", L_m * E_x * GATED_MATRICES * h * f_x * b,
                   "GB", "gate, up and down projections of every routed expert: most of a MoE's weights")
        phi = s.step("touched", "Share of routed experts a decode step reads", "φ", 1 - (1 - k_x / E_x) ** R, "%",
                     "each of the R tokens picks k of E experts in every MoE layer, independently")
        w_read = s.step("weights_read", "Weights each GPU reads per decode step", "w_rd", w - X / n * (1 - phi), "GB",
                        "its share of the weights less the routed experts no token of the step picks (vLLM shards "
                        "every expert over TP)")
        w_half = w - X / n * (1 - (1 - (1 - k_x / E_x) ** (R / 2)))
        routed = (X, E_x, k_x)
    t_read = s.step("read_time", "HBM read time of one decode step", "t_rd", (w_read + per_gpu) / rate, "ms",
                    "each GPU streams the weights the step touches and its KV once per step, at the share of HBM "
                    "bandwidth a decode step reaches")
    P = given_peak_flops(s, gpu, p.dtype)
    eta_c, _ = given_compute_efficiencies(s, gpu, p.dtype, p.dtype)
    N_act = given_active_params(s, model) if model.get("active_params_b") else N
    t_mm = s.step("math_time", "Matmul time of one decode step", "t_mm", 2 * N_act * R / (n * eta_c * P), "ms",
                  "two FLOPs per active parameter per request, split over the group, at the achievable share of "
                  "the peak: under the reads at these batches")
    wide = s.step("step_tp", f"Decode step at TP {int(p.tp)}: reads, all-reduces and overhead", "t_TP",
                  max_of(t_read, t_mm) + t_ar + t_oh, "ms",
                  "the reads (or the math, were it longer), the all-reduces (not overlapped: tp-all-reduce card) "
                  "and the step's fixed overhead")
    if fits:
        s.step("tokens_per_gpu", f"Decode tokens per second per GPU at TP {int(p.tp)}", "X_gpu", R / (wide * n),
               "tok/s", "every request in flight gains a token each step, shared over the group's GPUs")
    else:
        s.step("tokens_per_gpu", f"Decode tokens per second per GPU at TP {int(p.tp)}", "X_gpu", 0 * R / n,
               "tok/s", "the weights and KV do not fit: nothing decodes at this TP")
    _capped_step(s, p, N, b, L, R, T, S, L_s, pp, rate, t_mm, t_oh, t_ar, wide, routed)

    s.assume(f"Weights and KV cache both in {p.dtype}. Every weight matrix (embeddings included) shards evenly "
             "over TP except k_proj and v_proj, which go with the KV heads they produce.")
    s.assume("vLLM's rule: each GPU holds max(1, H_kv ÷ TP) KV heads, so past H_kv GPUs each head, its cache "
             "and its K and V projections are copied onto TP ÷ H_kv GPUs (TP a multiple of H_kv). Activations "
             "and buffers are left out of the fit check.")
    s.assume("The alternative keeps TP at H_kv and spends the other GPUs on pipeline stages of whole layers, "
             "or on data-parallel attention (each rank holds whole heads for its own requests): both store "
             "each byte once. The pipeline decodes S micro-batches of R/S requests so no stage idles in steady "
             "state (its fill and drain are left out); its stage-to-stage sends stay on the scale-up fabric, "
             "as every drawn group fits one domain. DP attention's load balance is not priced. Two "
             "replicas at TP H_kv would hold the same figures per GPU; they halve the batch each serves.")
    s.assume("A decode step is the bank's step model: the reads at the achievable share of HBM bandwidth or the "
             "math at the achievable share of peak, whichever is longer (at most 128 requests the reads), plus the "
             "all-reduces and the fixed overhead per step, paid once per token's step in either layout (a lever "
             "that halves the reads is floored at the math).")
    s.assume("TP all-reduces follow the tp-all-reduce card (bf16 activations, ring, not overlapped with compute); "
             "every drawn TP group fits one scale-up domain (NVL72 for TP 16 and 32), so no all-reduce crosses a NIC "
             "and the layouts differ by their reads. A MoE step reads only the routed experts its tokens pick, each "
             "token k of E independently and uniformly (real routing is skewed, which touches fewer); a pipeline "
             "micro-batch of R/S requests touches fewer than the whole batch, which favours the stages.")
    r = s.value(copies)
    s.slip("KV divided by TP as if heads kept splitting", 1 / r, on="kv_per_gpu")
    s.slip("x layers: one layer's KV counted for the model", 1 / model.layers,
           on="kv_per_gpu")
    s.slip("one all-reduce per layer instead of two", 0.5, on="allreduce")
    _step_levers(s, R, w_read, w_half, per_gpu, rate, t_mm, t_oh, terms, t_ar, wide)
    _tp_regime(s, p, n, H, per_gpu, t_ar, t_read)

