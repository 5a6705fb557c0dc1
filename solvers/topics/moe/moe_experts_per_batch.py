"""Active parameters describe a token - how many experts does a batch read?."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.common import (
    given_active_params,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_matmul_peaks,
    given_model_params,
    given_usable_share,
    given_weight_bytes,
)
from solvers.formulas.kvcache import kv_bytes_per_token
from solvers.formulas.moe import GATED_MATRICES, ep_all_to_all, moe_layers, parameter_count
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import floor_of, max_of, miss_power
from solvers.units import format_number, format_quantity


@dataclass(frozen=True)
class Experts:
    """A MoE model's routing on a sheet: experts per layer, picks per token, MoE layers, one expert's
    parameters, and the bytes of all routed experts."""

    E: sympy.Symbol
    k: sympy.Symbol
    L: sympy.Symbol
    h: sympy.Symbol
    p_e: sympy.Symbol
    X: sympy.Symbol


def routed_experts(s: Sheet, model: Record, b_w: sympy.Symbol) -> Experts:
    """Declare the routing figures and step the routed experts' bytes (what a batch may read)."""
    E = given_config(s, model, "experts")
    k = given_config(s, model, "experts_per_token")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers" + (
        f" ({model.layers} less {model.dense_layers} dense)" if model.get("dense_layers") else ""))
    h = given_config(s, model, "hidden")
    f = given_config(s, model, "expert_ffn")
    p_e = s.step("expert_params", "Parameters of one expert", "p_e", GATED_MATRICES * h * f, "",
                 "gate, up and down projections, each hidden × expert width")
    X = s.step("routed_bytes", "Bytes of all routed experts", "W_x", L * E * p_e * b_w, "GB",
               "every routed expert of every MoE layer")
    return Experts(E, k, L, h, p_e, X)


def touched_share(s: Sheet, key: str, r: Experts, tokens: sympy.Expr, title: str, symbol: str,
                  why: str) -> sympy.Symbol:
    """The expected share of a layer's experts a batch of `tokens` touches (each expert missed by every
    token with probability (1 − k/E) per token)."""
    return s.step(key, title, symbol, 1 - miss_power(1 - r.k / r.E, tokens), "%", why)


MIN_POOL = 256  # a deployment sized for serving holds at least this many sequences' caches at its context
EDGE = 0.03  # draws within 3% of a regime boundary are refused: the graded batches carry 2%
DENSE_GAP = 2  # a dense model "twice as fast / slow" as this step
FP4 = "FP4 experts (W4A8: half the fp8 bytes, the same fp8 tensor peak) would cut the step time by {cut} or more"


def _expert_step(r: Experts, b, phi, tokens, BW, P) -> sympy.Expr:
    """The routed experts of a step, each on its own roofline: one read of its weights against the math
    for the tokens that picked it."""
    return r.L * r.E * phi * max_of(r.p_e * b / BW, 2 * r.p_e * tokens / P)


def _shared_step(W_s, N_emb, b, B, BW, P) -> sympy.Expr:
    """Every weight outside the routed experts: one read serves all B tokens; each multiplies them but the
    input embedding table, whose rows are looked up, not multiplied."""
    return max_of(W_s / BW, 2 * (W_s / b - N_emb) * B / P)


def _attention_pair_flops(s: Sheet, model: Record) -> sympy.Symbol:
    """The attention-flops card per query-key pair, all layers and query heads: 4·d_h for a GQA head; for
    MLA run absorbed, 2 per key dimension (latent and RoPE key) plus 2 per value dimension (the latent)."""
    L, H = given_config(s, model, "layers"), given_config(s, model, "heads")
    if model.attention == "mla":
        c, r = given_config(s, model, "kv_lora_rank"), given_config(s, model, "qk_rope_head_dim")
        return s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 2 * (c + r) * L * H
                      + 2 * c * L * H, "FLOP", "absorbed MLA: each head scores the latent and RoPE key, then sums "
                      "the latent, in every layer")
    d_h = given_config(s, model, "head_dim")
    return s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 4 * L * H * d_h, "FLOP",
                  "QKᵀ and PV, a multiply-add per head dimension each, for every query head in every layer")


def _advantage(s: Sheet, r: Experts, one_gpu: bool, v: dict[str, sympy.Expr]) -> None:
    """Which statements about this step hold: the right set moves with the batch (bytes against FLOPs), the
    context (the KV reads) and the spread (the all-to-all). The what-ifs are the step's formulas on other
    inputs, decided on the sheet."""
    key = "advantage"
    b, R_f, R_b, n, B = v["b"], v["R_f"], v["R_b"], v["n"], v["B"]
    t, M, W, W_a, N_emb = v["t"], v["M"], v["W"], v["W_a"], v["N_emb"]

    def weights_time(batch: sympy.Expr, expert_bytes: sympy.Expr = b) -> sympy.Expr:
        phi = 1 - miss_power(1 - r.k / r.E, batch)
        return (_shared_step(v["W_s"], N_emb, b, batch / n, R_b, R_f)
                + _expert_step(r, expert_bytes, phi, batch * r.k / (r.E * phi), R_b, R_f) / n)

    def dense(weights: sympy.Expr) -> sympy.Expr:  # a dense model of these bytes: every weight read, all multiply
        return _shared_step(weights, N_emb, b, B, R_b, R_f) / n

    def ms(x: sympy.Expr) -> str:
        return format_quantity(s.evaluate(x), "ms")

    fewer = s.param("x_fewer", "fewer_bytes")
    s.judge(key, "The step reads at least {fewer_bytes} fewer weight bytes than a dense model of the same total size",
            s.compare(M, (1 - fewer) * W) <= 0, f"{s.text(M)} of {s.text(W)}: "
            f"{format_number(100 * s.evaluate(M / W), 3)}% of the weights")
    t_w = v["t_w"]
    s.judge(key, "Reading the cached KV takes longer than the weights and experts",
            s.compare(v["t_kv"], t_w) > 0, f"{s.text(v['t_kv'])} of attention against {s.text(t_w)}")
    s.judge(key, "The all-to-all takes longer than the weights and experts", s.compare(v["t_a2a"], t_w) > 0,
            f"{ms(v['t_a2a'])} of dispatch and combine against {s.text(t_w)}"
            + (": one GPU sends no copy anywhere" if one_gpu else ""))
    dense_total = dense(W)
    total_math = s.compare(2 * (W / b - N_emb) * B / R_f, W / R_b) > 0
    s.judge(key, "A dense model of the same total size would spend at least twice as long on its weights",
            s.compare(dense_total, DENSE_GAP * t_w) >= 0, f"{ms(dense_total)} against {s.text(t_w)}: "
            + ("its FLOPs follow the total parameters" if total_math else "it waits on reading every weight"))
    dense_active = dense(W_a)
    s.judge(key, "A dense model of the active size would get through its weights at least twice as fast",
            s.compare(DENSE_GAP * dense_active, t_w) <= 0, f"{ms(dense_active)} against {s.text(t_w)}: "
            + ("at this batch both are bound by the same active FLOPs" if s.compare(B * r.k / r.E, v["t_c"]) >= 0
               else "it reads only the active weights, the MoE every expert the batch picked"))
    lighter = t - t_w + weights_time(B, b / 2)
    if not v["fp8"]:  # half of bf16 is fp8, whose peak is not bf16's: the option names FP4 under fp8 weights
        s.judge(key, FP4, None, "the weights are bf16: FP4 (W4A8) is a step from fp8 weights")
        return
    s.judge(key, FP4, s.compare(lighter, (1 - s.param("x_cut", "cut")) * t) <= 0, f"{ms(lighter)} against {s.text(t)}")


def _experts_regime(s: Sheet, B, B95, B_c, phi, M, W, W_a, t_e) -> None:
    """Three sides along the batch: part of the experts read (bytes below the total), every expert read
    with the GEMMs still waiting on HBM (the worst: total bytes for active FLOPs), experts compute-bound."""
    share, ratio = format_number(100 * s.value(phi), 3) + "%", format_number(s.evaluate(M / W_a), 3) + "x"
    per = format_number(s.value(t_e), 3)
    saved = format_number(100 * (1 - s.evaluate(M / W)), 3) + "%"
    if s.compare(B, B95) < 0:
        s.set_regime(
            "some-experts-read",
            f"The step reads {share} of each layer's experts: {ratio} the active parameters' bytes already, yet "
            f"only {saved} less than the whole model's; the batch, not the active count, sets the reads.",
            B95, B,
            "Past B_95 every expert is read every step: the bytes are the total model's while the FLOPs stay the "
            "active parameters', and the step waits on HBM until each expert gets enough tokens.")
    elif s.compare(B, B_c) < 0:
        s.set_regime(
            "all-experts-read",
            f"Nearly every expert is read ({share}), each for about {per} tokens: the step pays the whole "
            f"model's bytes ({ratio} the active bytes) and its GEMMs still wait on HBM. Here a MoE costs like "
            "a dense model of its total size.",
            B_c, B,
            "Past B_c every expert's GEMM is compute-bound: the step's time follows the active FLOPs, and that "
            "is where the MoE beats a dense model of its total size.")
    else:
        s.set_regime(
            "experts-compute-bound",
            f"Each expert gets about {per} tokens, past the crossover: its weight read is amortised and the step "
            "is bound by the active parameters' FLOPs, the saving a MoE was built for.",
            B_c, B,
            "Below B_c the experts wait on HBM again: the step costs the weights' bytes, and the FLOP saving "
            "buys nothing.")


def solve(p, s: Sheet) -> None:
    """How many experts a decode step of B sequences reads, its bytes against the active parameters', the batch
    at which an expert's GEMM turns compute-bound against the batch the HBM holds at the context, and the step
    on the bank's step model (weights, experts, KV, all-to-all, overhead): where a MoE's saving comes from."""
    model = p.model
    N = given_model_params(s, model)
    b = given_weight_bytes(s, p.weight_dtype)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    n = s.param("n", "gpus")
    P, P_att = given_matmul_peaks(s, p.gpu, p.weight_dtype, "bf16")
    BW = given_hbm_bandwidth(s, p.gpu)
    eta_c, eta_att = given_compute_efficiencies(s, p.gpu, p.weight_dtype, "bf16")
    eta_bw = given_step_bandwidth(s)
    t_oh = given_step_overhead(s)
    R_f, R_b = eta_c * P, eta_bw * BW
    r = routed_experts(s, model, b)
    W = s.step("weights", "Bytes of all weights", "W", N * b, "GB", "the total parameter count, each stored once")
    if s.compare(W, r.X) <= 0:
        raise Reject(f"{model.name}'s total is no larger than its routed experts")
    W_s = s.step("shared_bytes", "Bytes outside the routed experts", "W_s", W - r.X, "GB",
                 "attention, " + ("dense MLPs, shared experts, " if model.get("dense_layers") else "")
                 + "routers and embeddings: every token uses them")
    N_emb = s.step("embedding_params", "Parameters of the input embedding table", "N_emb",
                   s.given("V", model.vocab, "", "vocabulary size") * r.h, "",
                   "a row looked up per token, not multiplied: read with the shared weights, no math")
    count = parameter_count(model)
    N_a = given_active_params(s, model)
    W_a = s.step("active_bytes", "Bytes of one token's active parameters", "W_act", N_a * b, "GB",
                 f"what 'active parameters' predicts a token reads (the config's shapes give "
                 f"{format_number(count.active / 1e9, 3)}B: the shared weights plus k of E experts per layer)")
    # The opening's count is asked at its own small batch: at a serving batch of hundreds or thousands it is the
    # expert count, a parameter, not a question.
    B_0 = s.param("B_0", "first_batch")
    phi_0 = touched_share(s, "touched_share_first", r, B_0, "Share of a layer's experts the opening's step reads",
                          "φ_0", "an expert is skipped only if all B_0 tokens pick elsewhere: (1 − k/E)^B_0")
    s.step("touched", "Experts read per MoE layer", "E_read", r.E * phi_0, "experts",
           f"{format_number(p.first_batch)} tokens, one a sequence, pick "
           f"{format_number(p.first_batch * model.experts_per_token)} slots, but many land on the same expert")
    phi = touched_share(s, "touched_share", r, B, "Share of a layer's experts the serving step reads", "φ",
                        "an expert is skipped only if all B tokens pick elsewhere: (1 − k/E)^B")
    q = s.param("q", "read_share")
    share = format_quantity(p.read_share, "%")
    B95 = s.step("batch_95", f"Batch at which {share} of the experts are read", "B_95",
                 sympy.log(1 - q) / sympy.log(1 - r.k / r.E), "sequences", f"solve 1 − (1 − k/E)^B = {share} for B")
    M = s.step("step_bytes", "Weight bytes the step reads", "M", W_s + phi * r.X, "GB",
               "the shared weights once, plus every expert some token picked")
    s.step("bytes_ratio", "Step bytes against the active parameters' bytes", "R", M / W_a, "x",
           "what 'active parameters' would predict for the reads, against what the batch pulls in")
    t_e = s.step("tokens_per_expert", "Mean tokens per expert read", "t_e", B * r.k / (r.E * phi), "tokens",
                 "B·k picks spread over the experts read")
    t_star = s.step("expert_crossover", "Tokens per expert at which its GEMM turns compute-bound", "t_c",
                    b * R_f / (2 * R_b), "tokens", "2·t FLOPs per weight against b bytes per weight, at the "
                    "achievable rates: 2t/b = η_c·P/(η_bw·BW)")
    B_c = s.step("batch_compute", "Batch at which experts turn compute-bound", "B_c", t_star * r.E / r.k, "sequences",
                 "B·k/E tokens per expert on average reach the crossover")
    KV = kv_bytes_per_token(s, model, s.given("b_kv", 2, "B", "bytes per KV value (bf16)"), unit="KiB")
    room = s.step("kv_room", "HBM left for the KV cache", "M_KV",
                  n * given_hbm_bytes(s, p.gpu, "M_HBM") * given_usable_share(s, "u_HBM") - n * W_s - r.X, "GB",
                  "the usable HBM of every GPU less a copy of the shared weights on each (data-parallel attention) "
                  "and one copy of the routed experts, split by EP")
    B_fit = s.step("batch_fit", "Sequences the KV room holds at this context", "B_fit", floor_of(room / (S * KV)),
                   "sequences", "the room over one sequence's cache, in whole sequences")
    if s.compare(B, B_fit) > 0:
        raise Reject("the batch's KV caches do not fit beside the weights")
    if s.compare(B_fit, MIN_POOL) < 0:  # weights all but filling the HBM: no room to take more traffic
        raise Reject(f"the KV room holds fewer than {MIN_POOL} sequences at this context")
    for edge in (B95, B_c):  # a batch this close to a regime's edge is a coin toss under any tolerance
        if abs(s.evaluate(B / edge) - 1) < EDGE:
            raise Reject("the batch sits on a regime boundary")
    t_w = s.step("weights_time", "Weights and experts per step", "t_W",
                 _shared_step(W_s, N_emb, b, B / n, R_b, R_f) + _expert_step(r, b, phi, t_e, R_b, R_f) / n, "ms",
                 "every GPU reads its own copy of the shared weights for its B/n sequences; the experts read, each "
                 f"on its roofline, split over {format_number(p.gpus)} GPUs")
    A = _attention_pair_flops(s, model)
    t_kv = s.step("attention_time", "Attention per step", "t_KV",
                  max_of(B * S * KV / R_b, B * S * A / (eta_att * P_att)) / n, "ms",
                  "every sequence reads its whole cache once, or its query-key math, whichever is longer")
    t_a2a = ep_all_to_all(s, model, p.gpu, p.nic, n, int(p.gpus), B / n, r.L)
    parts = [f"weights and experts {s.text(t_w)}", f"attention {s.text(t_kv)}"]
    parts += [f"the all-to-all {s.text(t_a2a)}"] if p.gpus > 1 else []
    t = s.step("step_time", "Time of the step", "t", t_w + t_kv + t_a2a + t_oh, "ms",
               # each part named with its own figure: the sum prints its terms in sympy's order, not this one
               ", ".join(parts) + f", then the overhead {s.text(t_oh)}")
    X_user = s.step("per_user", "Tokens per second per decoding sequence", "X_user", 1 / t, "tokens/s",
                    "one token per sequence per step")
    if s.compare(X_user, s.param("X_min", "min_speed")) < 0:  # an operating point no chat service runs
        raise Reject("each user would decode below the service's slowest speed")
    s.step("throughput", "Tokens per second", "X", B / t, "tokens/s", "B tokens per step")
    s.step("gpu_throughput", "Tokens per second per GPU", "X_GPU", B / (n * t), "tokens/s",
           "B tokens a step over the GPUs: what the fleet earns for each GPU it pays for")
    _advantage(s, r, p.gpus == 1, {"b": b, "R_f": R_f, "R_b": R_b, "n": n, "B": B, "W_s": W_s, "W": W, "W_a": W_a,
                      "N_emb": N_emb, "M": M, "t": t, "t_w": t_w, "t_kv": t_kv, "t_a2a": t_a2a, "t_c": t_star,
                                       "fp8": p.weight_dtype == "fp8"})
    _experts_regime(s, B, B95, B_c, phi, M, W, W_a, t_e)

    s.assume("Tokens pick their experts independently and uniformly (a balanced router): the expected count "
             "E·(1 − (1 − k/E)^B); a skewed router reads fewer distinct experts but loads the hot ones more "
             "(ep-load-skew).")
    s.assume("Every weight outside the routed experts (the embedding table included) is read once per step, and "
             "every one but the input embedding table (a lookup) does 2 FLOPs a token. Each sequence holds the "
             "whole context in a bf16 cache and reads it once a step; attention runs at the bf16 peak.")
    s.assume("The bank's step model (step-compute and step-compute-fp8 by each matmul's precision, step-bandwidth, "
             "step-overhead): each piece on its own roofline "
             "at the achievable rates, the shared weights, each expert and attention separately (one expert's idle "
             f"tensor cores do not serve another's tokens), summed. The layout is DeepSeek's and SGLang's for a "
             f"MoE: data-parallel attention with expert parallelism. Each of the {format_number(p.gpus)} GPUs holds "
             "and reads every step its own copy of the weights outside the routed experts (attention, dense layers, "
             "shared experts, embeddings) and runs B/n of the sequences, each sequence's cache on one GPU; the "
             "routed experts are split over the GPUs, each read once. (Tensor-parallel attention would split those "
             "weights but, for MLA, hold every sequence's latent cache on every rank.) The all-to-all and the "
             "overhead come on top, not overlapped; the all-to-all runs DeepEP's low-latency (decode) kernels, "
             "every copy sent on its own (moe-dispatch-bytes's direct count).")
    s.assume(f"An operating point a chat service runs: contexts of 1K tokens or more, each user decoding at "
             f"{format_quantity(p.min_speed, 'tokens/s')} or faster (draws slower than that are refused), and a "
             "deployment spread past two nodes busy enough to need them. Compute-bound experts above that speed "
             "need wide expert parallelism (DeepSeek's EP 144): many tokens per expert, few sequences per GPU.")
    if s.compare(B_0 * r.k, r.E) < 0:  # past E picks this slip is 'every expert read', the next one: said once
        s.slip("experts counted as B·k, as if no two tokens shared one", s.evaluate(B_0 * r.k / (r.E * phi_0)),
               on="touched")
    s.slip("every expert read, whatever the batch", 1 / s.value(phi_0), on="touched")
    s.slip("only the active parameters read", s.evaluate(W_a / M), on="bytes_ratio")
    s.slip("bytes of every parameter", s.evaluate(W / M), on="bytes_ratio")
    s.slip("the crossover at datasheet peaks, without the step model's efficiencies",
           s.evaluate(eta_bw / eta_c), on="batch_compute")
    s.slip("the KV cache left out of the step", s.evaluate((t - t_kv) / t), on="step_time")
