"""The MLA cache copied on every TP rank, and what DP attention buys back."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import ACTIVATION_BYTES, link_bandwidth, link_latency, tp_all_reduce
from solvers.formulas.common import (
    dtype_bytes,
    given_active_params,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_matmul_peaks,
    given_model_params,
    given_weight_bytes,
)
from solvers.formulas.kvcache import (
    kv_bytes_per_token_given,
)
from solvers.formulas.kvlayout import fp8_latent_note
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    STEP_OVERHEAD,
    given_step_bandwidth,
    given_step_overhead,
)
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of
from solvers.units import format_number, format_quantity

NEAR_TIE = 0.03  # the step times' tolerance (rel 0.03): a throughput compared inside it is refused
# A layout decided on step times closer than this is refused: the step model's own error (REALITY.md: 0.7-1.3x of
# measured decode steps) dwarfs a few percent, and the old pushes crossed at 1.04x.
CLEAR_STEP = 0.05


def _dp_requests(s: Sheet, room, A, E, kv_tok, C, n, dp: int) -> float:
    """Requests the node holds with `dp` attention groups of n/dp GPUs each (SGLang's layout)."""
    room_dp = room - (A * (dp / n - 1 / n) + E * (1 - 1 / n))
    if s.compare(room_dp, 0) <= 0:
        return 0.0
    return s.evaluate(dp * floor_of(room_dp / (kv_tok * C)))


def _attention_step_times(s: Sheet, p, weights, A, kv_tok, C, n, a, d, L, h, H, d_c, d_r, b_w, run_tp, demand,
                          busiest) -> tuple[sympy.Symbol, sympy.Symbol]:
    """TPOT of a decode step under TP and DP attention: a roofline over each GPU's reads (its weight share, the
    routed experts the batch touches, the latents it holds) and math, then the collectives and the overhead."""
    model, c = p.model, DEFAULT_CONSTANTS
    P, P_att = given_matmul_peaks(s, p.gpu, "fp8", p.kv_dtype)  # matmul-precision: fp8 GEMMs, attention at the latents'
    BW = given_hbm_bandwidth(s, p.gpu)
    eta_c, eta_att = given_compute_efficiencies(s, p.gpu, "fp8", p.kv_dtype)
    eta_bw, t_oh = given_step_bandwidth(s), given_step_overhead(s)
    N_a = given_active_params(s, model)
    E_x = given_config(s, model, "experts", "E_x")
    k_x = given_config(s, model, "experts_per_token", "k_x")
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
    s.step("flops_tp", "FLOPs each GPU does per step (TP attention)", "Fl_TP",
           (2 * N_a * run_tp + A_m * run_tp * C) / n, "TFLOP", "heads and experts split n ways")
    math_tp = (2 * N_a * run_tp / (eta_c * P) + A_m * run_tp * C / (eta_att * P_att)) / n
    t_ar = tp_all_reduce(s, model, p.gpu, p.tp, run_tp, tag="tp", label="TP-attention decode step")
    tpot_tp = s.step("tpot_tp", "Time per output token (TP attention)", "t_TP",
                     max_of(M_tp / (eta_bw * BW), math_tp) + t_ar + t_oh, "ms",
                     "the slower of reads and math, then two all-reduces per layer, plus overhead")

    phi_dp = s.step("touched_dp", "Share of routed experts a step reads (DP attention)", "φ_DP",
                    1 - (1 - k_x / E_x) ** demand, "%", "the MoE sees every group's tokens at once")
    M_dp = s.step("bytes_dp", "Bytes each GPU reads per step (DP attention)", "M_DP",
                  (weights - X + phi_dp * X) / n + A * (d - 1) / n + busiest * C * kv_tok, "GB",
                  "the same shares, a larger slice of the attention projections, and only its group's latents")
    s.step("flops_dp", "FLOPs each GPU does per step (DP attention)", "Fl_DP",
           2 * N_a * demand / n + A_m * busiest * C / a, "TFLOP",
           "the weights' math split n ways; attention for the busiest group split a ways")
    math_dp = 2 * N_a * demand / (n * eta_c * P) + A_m * busiest * C / (a * eta_att * P_att)
    comm = 2 * L * (alpha + (n - 1) / n * demand * h * b_a / bw)
    why = "an all-gather before and a reduce-scatter after each MoE block, (n − 1)/n of the tokens each"
    if p.tp // p.dp > 1:
        comm += L * (alpha + 2 * (a - 1) / a * busiest * h * b_a / bw)
        why += ", and the group's all-reduce after attention"
    t_g = s.step("gather_dp", "Collectives of the DP-attention decode step", "t_AG", comm, "ms", why)
    tpot_dp = s.step("tpot_dp", "Time per output token (DP attention)", "t_DP",
                     max_of(M_dp / (eta_bw * BW), math_dp) + t_g + t_oh, "ms",
                     "the busiest group sets the pace, then the collectives, plus overhead")
    s.assume(f"Step model as the roofline-time card with the bank's step constants: reads at "
             f"{format_quantity(c.bandwidth, '%')} of HBM bandwidth, the fp8 weights' GEMMs at "
             f"{s.text(eta_c)} of the fp8 dense peak and attention at the "
             f"{p.kv_dtype} latents' peak, at its precision's share (step-compute-fp8, step-compute, "
             f"matmul-precision), {format_quantity(STEP_OVERHEAD, 'ms')} of overhead per step; under DP "
             "attention an all-gather before and a reduce-scatter after each MoE layer take the place of TP's two "
             "all-reduces (SGLang's DP attention), plus the group's all-reduce where a group spans GPUs; a routed "
             "expert is "
             "read when any token of the step picks it (tokens pick independently and uniformly); the MoE stays "
             "tensor-parallel over the node.")
    s.slip("every routed expert read, whatever the batch", on="tpot_tp",
           factor=s.evaluate(max_of((weights / n + run_tp * C * kv_tok) / (eta_bw * BW), math_tp)
                             + t_ar + t_oh) / s.value(tpot_tp))
    return tpot_tp, tpot_dp


def _attention_judgements(s: Sheet, p, room, A, E, kv_tok, C, n, extra, req_tp) -> None:
    key = "dp_tradeoffs"
    few = s.param("k_few", "few")
    some = s.evaluate(few * kv_tok * C)
    if abs(s.value(extra) / some - 1) < NEAR_TIE:
        s.refuse_if_asked([key], "the copied weights are within 3% of the latents they are set against")
    s.judge(key, "DP attention's copied weights cost each GPU more room than the latents of {few}",
            s.compare(extra, few * kv_tok * C) > 0,
            f"{s.text(extra)} of copied weights for {format_number(p.dp)} groups against "
            f"{format_quantity(some, 'GB')} for {format_number(p.few)} requests at this context")
    # Fewer groups copy less of the projections but keep more pools' worth of latents per GPU; one group is TP
    # attention itself.
    fewer = p.dp // 2
    then = s.value(req_tp) if fewer == 1 else _dp_requests(s, room, A, E, kv_tok, C, n, fewer)
    s.judge(key, "Half as many DP groups would still hold the demand", then >= p.demand,
            f"{'TP attention' if fewer == 1 else f'DP {fewer}'} holds {format_number(then)} requests, "
            f"against the {format_number(p.demand)} to hold")
    held_tp = s.evaluate(floor_of(room / (kv_tok * C)))
    s.judge(key, "TP attention would still hold twice the demand", held_tp >= 2 * p.demand,
            f"TP attention holds {format_number(held_tp)} requests, against {format_number(2 * p.demand)}")
    s.judge(key, "Under DP attention a decode step waits for its busiest attention group", True,
            "the groups meet at every MoE layer, so the step runs at the pace of the group with the most requests "
            "(or the longest ones)", fact=True)


def _attention_regime(s: Sheet, req_tp, req_dp, demand, tpot_tp, tpot_dp) -> None:
    """TP attention where it holds the demand and steps no slower; DP attention where only it holds the demand,
    or where both hold it and DP's step is shorter (a tie: TP attention, no replicated weights)."""
    tp, dp, want = (format_number(s.value(x)) for x in (req_tp, req_dp, demand))
    t_tp, t_dp = s.text(tpot_tp), s.text(tpot_dp)
    if s.compare(demand, req_tp) > 0:  # capacity decides: only DP attention holds the demand
        s.regime_by(demand, req_tp, tie="below", above=Side(
            "dp-attention",
            f"TP attention holds {tp} requests, fewer than the {want} you must hold: the copies of the latents "
            f"bind, and DP attention raises the node to {dp}, for the price of the replicated weights.",
            f"With {tp} or fewer to hold both layouts hold them, and the step times decide: here DP attention "
            f"runs all {want} in {t_dp} a token, TP attention its {tp} in {t_tp}."),
            below=Side("tp-attention", "", ""))
        return
    # Both hold the demand: the shorter decode step decides. Steps within the answers' 3% of each other are a call
    # the candidate's own rounding could flip: such draws are refused.
    if abs(s.value(tpot_tp) / s.value(tpot_dp) - 1) < CLEAR_STEP:
        raise Reject("TP and DP attention step within 5% of each other: too close to call")
    s.regime_by(tpot_tp, tpot_dp, tie="below", above=Side(
        "dp-attention",
        f"Both layouts hold the {want} (TP attention {tp}, DP attention {dp}), and DP attention steps faster: "
        f"{t_dp} a token against {t_tp}, each GPU reading only its group's latents.",
        f"With fewer requests or shorter contexts the latents TP attention reads on every GPU shrink below "
        f"DP's copied projections and TP attention steps faster; with more than {tp} only DP attention holds them."),
        below=Side(
        "tp-attention",
        f"Both layouts hold the {want} (TP attention {tp}, DP attention {dp}), and TP attention steps no "
        f"slower: {t_tp} a token against {t_dp}; DP attention would only add copied weights to read.",
        f"With more requests or longer contexts each GPU's latent reads outgrow DP's copied projections and DP "
        f"attention steps faster; past {tp} requests only DP attention holds them."))


def solve(p, s: Sheet) -> None:
    model = p.model
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    n = s.param("n", "tp")
    # SGLang's --mem-fraction-static: the share of HBM its weights and KV pool may take, drawn (operators tune it).
    usable = s.step("usable", "Memory for weights and KV per GPU", "M_u",
                    given_hbm_bytes(s, p.gpu) * s.param("u_mem", "mem_fraction"), "GB",
                    "the HBM the device reports, times the static memory fraction")
    N = given_model_params(s, model)
    b_w = given_weight_bytes(s, "fp8")
    V = s.given("V", model.vocab, "", "vocabulary size")
    h = given_config(s, model, "hidden")
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
    H = given_config(s, model, "heads", "H")
    d_n = s.param("d_n", "qk_nope_head_dim")
    d_r = given_config(s, model, "qk_rope_head_dim")
    d_c = given_config(s, model, "kv_lora_rank")
    d_v = s.param("d_v", "v_head_dim")
    L = given_config(s, model, "layers")
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
    if s.compare(demand, req_dp) > 0:
        raise Reject("neither layout holds the demand on one node")

    # The latency side: one decode step of each layout, at the batch it runs.
    busiest = s.step("busiest_group", "Requests in the busiest attention group", "U_g", ceil_of(demand / d),
                     "requests", "the whole demand, spread as evenly as whole requests allow")
    run_tp = s.step("running_tp", "Requests TP attention runs", "U_run", min_of(demand, req_tp),
                    "requests", "the demand, or as many as fit")
    tpot_tp, tpot_dp = _attention_step_times(s, p, weights, A, kv_tok, C, n, a, d, L, h, H, d_c, d_r, b_w,
                                             run_tp, demand, busiest)

    s.assume(f"{format_number(p.mem_fraction * 100)}% of HBM for weights and KV (SGLang's --mem-fraction-static, "
             "which operators tune); activations, CUDA graphs and communication buffers live in the rest. "
             "vLLM's free memory nets them out of its own figure, so it reads lower: the counts here are what "
             "SGLang's pool holds, an upper bound for an engine that sizes its pool after profiling.")
    s.assume("Real DP-attention deployments pair it with expert parallelism (DeepEP): each GPU then holds whole "
             "experts, the all-gather and reduce-scatter become all-to-all dispatch and combine, and a GPU reads "
             "only its own experts that the step's tokens pick. The MoE stays tensor-parallel here, to weigh "
             "attention's layout alone.")
    s.assume("Weights in fp8 at one byte per parameter, except the token embedding and LM head, which the "
             "released checkpoint keeps in bf16 (block scales, norms and the multi-token-prediction module "
             "ignored).")
    fp8_latent_note(s, p.kv_dtype)
    s.assume("DP attention as SGLang lays it out (--enable-dp-attention --dp d): d attention groups of n/d GPUs, "
             "each running attention for its own requests with the projections split over its GPUs; the token "
             "embedding is copied whole onto every GPU; the MoE and dense MLP weights and the LM head stay "
             "sharded n ways (the LM head is copied too only with --enable-dp-lm-head).")
    all_shares = "all n GPUs' pools counted, not the n − 1 that repeat one"
    s.slip(all_shares, p.tp / (p.tp - 1), on="duplicate_bytes")
    whole = s.evaluate(d * floor_of((room - (A + E) * (1 - 1 / n)) / (kv_tok * C)))
    if p.dp < p.tp and whole != s.value(req_dp) and whole > 0:
        s.slip("the attention projections copied whole onto every GPU, whatever the group", on="requests_dp",
               factor=whole / s.value(req_dp))
    s.slip("/d: DP capacity of one group, not the node", 1 / p.dp, on="requests_dp")
    rate_tp = s.step("throughput_tp", "Tokens a second, TP attention", "X_TP", run_tp / tpot_tp, "tok/s",
                     "each request it holds gets a token a step")
    rate_dp = s.step("throughput_dp", "Tokens a second, DP attention", "X_DP", demand / tpot_dp, "tok/s",
                     "the whole demand, a token each a step")
    if abs(s.value(rate_dp) / s.value(rate_tp) - 1) < NEAR_TIE:
        s.refuse_if_asked(["dp_tradeoffs"], "TP and DP attention deliver tokens within 3% of each other")
    more = s.compare(rate_dp, rate_tp) > 0
    s.judge("dp_tradeoffs", "DP attention delivers more tokens a second than TP attention, each running as much "
            "of the demand as it holds", more, f"{s.text(rate_dp)} against {s.text(rate_tp)}: "
            + ("more requests, or the same ones each reading only its group's latents" if more else
               "the copied projections and the experts a larger batch touches cost more than it gains"))
    _attention_judgements(s, p, room, A, E, kv_tok, C, n, extra, req_tp)
    _attention_regime(s, req_tp, req_dp, demand, tpot_tp, tpot_dp)

