"""Mixture-of-experts questions and the MoE helper they share.

The helper counts a MoE model from its config fields (models.yaml): the routed experts' weights,
total against active parameters, and how many distinct experts a batch of tokens touches in a
layer when each token picks k of E experts, E·(1 − (1 − k/E)^B). A routed expert is a gated MLP of
three hidden × expert_ffn matrices; a model without dense_layers or shared_experts has none.
"""
from __future__ import annotations

import heapq
import math
import zlib
from dataclasses import dataclass

import numpy as np
import sympy

from solvers.conventions import scale_up_domain
from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side, ceil_of, max_of, min_of
from solvers.topics.common import dtype_bytes, hbm_bandwidth, hbm_bytes, peak_flops
from solvers.topics.training import FLOPS_PER_PARAM_TOKEN
from solvers.units import format_number, format_quantity

GATED_MATRICES = 3  # gate, up and down projections of a SwiGLU expert


def moe_layers(model: Record) -> int:
    return model.layers - model.get("dense_layers", 0)


def expert_params(model: Record) -> int:
    """Parameters of one routed (or shared) expert."""
    return GATED_MATRICES * model.hidden * model.expert_ffn


def attention_params(model: Record) -> int:
    """Attention projections of one layer. GQA: q and o of heads × head_dim, k and v of kv_heads × head_dim.
    MLA (DeepSeek): the low-rank query (q_lora_rank) and key-value (kv_lora_rank) paths, the RoPE key,
    and values of head_dim per head."""
    h, H, d = model.hidden, model.heads, model.head_dim
    if model.attention == "mla":
        c, r = model.kv_lora_rank, model.qk_rope_head_dim
        q_rank = model.get("q_lora_rank")
        query = h * H * (d + r) if q_rank is None else h * q_rank + q_rank * H * (d + r)
        return query + h * (c + r) + c * H * 2 * d + H * d * h
    return 2 * h * H * d + 2 * h * model.kv_heads * d


@dataclass(frozen=True)
class ParameterCount:
    total: float
    active: float  # what one token runs through: everything but the routed experts it does not pick
    routed: float  # all routed experts of all MoE layers


def parameter_count(model: Record) -> ParameterCount:
    """Total and active parameters from the config fields: attention, dense MLPs, shared and routed
    experts, routers and untied embedding and output tables (norms and biases left out, under 0.1%)."""
    L_moe, dense = moe_layers(model), model.get("dense_layers", 0)
    E, k, p_e = model.experts, model.experts_per_token, expert_params(model)
    routed = L_moe * E * p_e
    rest = (model.layers * attention_params(model) + dense * GATED_MATRICES * model.hidden * model.ffn
            + L_moe * (model.get("shared_experts", 0) * p_e + E * model.hidden) + 2 * model.vocab * model.hidden)
    return ParameterCount(rest + routed, rest + L_moe * k * p_e, routed)


def experts_touched(experts: float, k: float, batch: float) -> float:
    """Expected distinct experts a batch of independent tokens touches in one layer."""
    return experts * (1 - (1 - k / experts) ** batch)


def batch_for_share(experts: float, k: float, share: float) -> float:
    """The batch at which the expected touched share reaches `share`."""
    return math.log(1 - share) / math.log(1 - k / experts)


@dataclass(frozen=True)
class Experts:
    """A MoE model's routing on a sheet: experts per layer, picks per token, MoE layers, one expert's
    parameters, and the bytes of all routed experts."""

    E: sympy.Symbol
    k: sympy.Symbol
    L: sympy.Symbol
    p_e: sympy.Symbol
    X: sympy.Symbol


def routed_experts(s: Sheet, model: Record, b_w: sympy.Symbol) -> Experts:
    """Declare the routing figures and step the routed experts' bytes (what a batch may read)."""
    E = s.given("E", model.experts, "", "routed experts per MoE layer")
    k = s.given("k", model.experts_per_token, "", "routed experts each token picks")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers" + (
        f" ({model.layers} less {model.dense_layers} dense)" if model.get("dense_layers") else ""))
    h = s.given("h", model.hidden, "", "hidden size")
    f = s.given("f_x", model.expert_ffn, "", "FFN width of one expert")
    p_e = s.step("expert_params", "Parameters of one expert", "p_e", GATED_MATRICES * h * f, "",
                 "gate, up and down projections, each hidden × expert width")
    X = s.step("routed_bytes", "Bytes of all routed experts", "W_x", L * E * p_e * b_w, "GB",
               "every routed expert of every MoE layer")
    return Experts(E, k, L, p_e, X)


class miss_power(sympy.Function):
    """(1 − k/E)^B evaluated in floating point once its arguments are numbers: the exact rational power of
    a batch of thousands has tens of thousands of digits. Prints as the power it is."""

    @classmethod
    def eval(cls, base, exponent):
        if base.is_number and exponent.is_number:
            return sympy.Float(float(base) ** float(exponent), 17)
        return None

    def _sympystr(self, printer) -> str:
        return f"({printer._print(self.args[0])})**{printer._print(self.args[1])}"

    def _latex(self, printer) -> str:
        return f"\\left({printer._print(self.args[0])}\\right)^{{{printer._print(self.args[1])}}}"


def touched_share(s: Sheet, key: str, r: Experts, tokens: sympy.Expr, title: str, symbol: str,
                  why: str) -> sympy.Symbol:
    """The expected share of a layer's experts a batch of `tokens` touches (each expert missed by every
    token with probability (1 − k/E) per token)."""
    return s.step(key, title, symbol, 1 - miss_power(1 - r.k / r.E, tokens), "%", why)


# --- moe-experts-per-batch -------------------------------------------------------------------------

READ_SHARE = sympy.Rational(95, 100)  # "nearly all experts read": the touched share the boundary asks for
LEVER = sympy.Rational(5, 4)  # a change "matters" when it moves the step time by this factor or more
DENSE_GAP = 2  # a dense model "twice as fast / slow" as this step


def _expert_step(r: Experts, b, phi, tokens, BW, P) -> sympy.Expr:
    """The routed experts of a step, each on its own roofline: one read of its weights against the math
    for the tokens that picked it."""
    return r.L * r.E * phi * max_of(r.p_e * b / BW, 2 * r.p_e * tokens / P)


def _shared_step(W_s, b, B, BW, P) -> sympy.Expr:
    """Every weight outside the routed experts: one read serves all B tokens."""
    return max_of(W_s / BW, 2 * (W_s / b) * B / P)


def moe_experts_per_batch(p, s: Sheet) -> None:
    """How many experts a step of B tokens reads, its bytes against the active parameters', and the batch at
    which an expert's GEMM turns compute-bound: where a MoE's saving over a dense model comes from."""
    model = p.model
    N = s.given("N", model.params_b * 1e9, "", f"{model.name} total parameters")
    b = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    B = s.param("B", "batch")
    n = s.param("n", "gpus")
    P = s.given("P", peak_flops(p.gpu, p.weight_dtype), "TFLOP/s", f"{p.gpu.name} dense {p.weight_dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")
    r = routed_experts(s, model, b)
    W = s.step("weights", "Bytes of all weights", "W", N * b, "GB", "the total parameter count, each stored once")
    if s.compare(W, r.X) <= 0:
        raise Reject(f"{model.name}'s total is no larger than its routed experts")
    W_s = s.step("shared_bytes", "Bytes outside the routed experts", "W_s", W - r.X, "GB",
                 "attention, " + ("dense MLPs, shared experts, " if model.get("dense_layers") else "")
                 + "routers and embeddings: every token uses them")
    count = parameter_count(model)
    N_a = s.given("N_act", model.active_params_b * 1e9, "", f"{model.name} active parameters (the catalogue's count)")
    W_a = s.step("active_bytes", "Bytes of one token's active parameters", "W_act", N_a * b, "GB",
                 f"what 'active parameters' predicts a token reads (the config's shapes give "
                 f"{format_number(count.active / 1e9, 3)}B: the shared weights plus k of E experts per layer)")
    phi = touched_share(s, "touched_share", r, B, "Share of a layer's experts the step reads", "φ",
                        "an expert is skipped only if all B tokens pick elsewhere: (1 − k/E)^B")
    s.step("touched", "Experts read per MoE layer", "E_read", r.E * phi, "experts",
           f"{format_number(p.batch)} tokens pick {format_number(p.batch * model.experts_per_token)} slots, "
           "but many land on the same expert")
    q = s.given("q", READ_SHARE, "%", "touched share taken as 'nearly all experts read'")
    B95 = s.step("batch_95", "Batch at which 95% of the experts are read", "B_95",
                 sympy.log(1 - q) / sympy.log(1 - r.k / r.E), "tokens", "solve 1 − (1 − k/E)^B = 95% for B")
    M = s.step("step_bytes", "Weight bytes the step reads", "M", W_s + phi * r.X, "GB",
               "the shared weights once, plus every expert some token picked")
    s.step("bytes_ratio", "Step bytes against the active parameters' bytes", "R", M / W_a, "x",
           "what 'active parameters' would predict for the reads, against what the batch pulls in")
    t_e = s.step("tokens_per_expert", "Mean tokens per expert read", "t_e", B * r.k / (r.E * phi), "tokens",
                 "B·k picks spread over the experts read")
    t_star = s.step("expert_crossover", "Tokens per expert at which its GEMM turns compute-bound", "t_c",
                    b * P / (2 * BW), "tokens", "2·t FLOPs per weight against b bytes per weight: 2t/b = P/BW")
    B_c = s.step("batch_compute", "Batch at which experts turn compute-bound", "B_c", t_star * r.E / r.k, "tokens",
                 "B·k/E tokens per expert on average reach the crossover")
    shared_t = _shared_step(W_s, b, B, BW, P)
    t_x = _expert_step(r, b, phi, t_e, BW, P)
    t = s.step("step_time", "Time of the step", "t", (shared_t + t_x) / n, "ms",
               f"shared weights and experts, each on its roofline, spread over {format_number(p.gpus)} GPUs")
    s.step("per_user", "Tokens per second per decoding sequence", "X_user", 1 / t, "tokens/s",
           "one token per sequence per step")
    s.step("throughput", "Tokens per second", "X", B / t, "tokens/s", "B tokens per step")
    _advantage(s, model, p, {name: s.value(sym) for name, sym in
                             (("b", b), ("P", P), ("BW", BW), ("p_e", r.p_e), ("W_s", W_s), ("W", W), ("W_a", W_a),
                              ("M", M), ("t", t), ("t_c", t_star))})
    _experts_regime(s, B, B95, B_c, phi, M, W, W_a, t_e)

    s.assume("Tokens pick their experts independently and uniformly (a balanced router): the expected count "
             "E·(1 − (1 − k/E)^B); a skewed router reads fewer distinct experts but loads the hot ones more "
             "(ep-load-skew).")
    s.assume("Weight reads only: the KV cache and attention over the context are left out; every weight outside "
             "the routed experts (the embedding table included) is read once per step.")
    s.assume("Roofline at datasheet peaks (dense-peaks, roofline-time), applied to the shared weights and to each "
             "expert separately: one expert's idle tensor cores do not serve another expert's tokens. The "
             f"{format_number(p.gpus)} GPUs share the reads and the math evenly; "
             "communication is left out (moe-dispatch-bytes).")
    s.slip("experts counted as B·k, as if no two tokens shared one", s.evaluate(min_of(B * r.k, r.E) / (r.E * phi)),
           on="touched")
    s.slip("every expert read, whatever the batch", 1 / s.value(phi), on="touched")
    s.slip("only the active parameters read", s.evaluate(W_a / M), on="step_bytes")
    s.slip("bytes of every parameter", s.evaluate(W / M), on="step_bytes")
    s.slip("tokens per expert as B·k/E over all experts", s.value(phi), on="tokens_per_expert")


def _advantage(s: Sheet, model: Record, p, values: dict[str, float]) -> None:
    """Which statements about this step hold: the right set moves with the batch, from bytes (small batch)
    to FLOPs (past the crossover). The what-ifs are the step model again on other inputs, in plain numbers."""
    key, v = "advantage", values
    E, k, n, B = model.experts, model.experts_per_token, p.gpus, p.batch
    b, P, BW, p_e, L = v["b"], v["P"], v["BW"], v["p_e"], moe_layers(model)

    def step(batch: float, expert_bytes: float = b) -> float:
        phi = 1 - (1 - k / E) ** batch
        tokens = batch * k / (E * phi)
        shared = max(v["W_s"] / BW, 2 * v["W_s"] / b * batch / P)
        return (shared + L * E * phi * max(p_e * expert_bytes / BW, 2 * p_e * tokens / P)) / n

    def ms(seconds: float) -> str:
        return format_quantity(seconds, "ms")

    t, M, W, W_a = v["t"], v["M"], v["W"], v["W_a"]
    s.judge(key, "The step reads at least 25% fewer weight bytes than a dense model of the same total size",
            M <= 0.75 * W, f"{format_quantity(M, 'GB')} of {format_quantity(W, 'GB')}: "
            f"{format_number(100 * M / W, 3)}% of the weights")
    bound = B * k / E >= v["t_c"]
    s.judge(key, "An expert's GEMM is compute-bound at this batch", bound,
            f"B·k/E = {format_number(B * k / E, 3)} tokens per expert against the crossover of "
            f"{format_number(v['t_c'], 3)}")
    dense_total = max(W / BW, 2 * W / b * B / P) / n
    s.judge(key, "A dense model of the same total size would take at least twice as long for this step",
            dense_total >= DENSE_GAP * t, f"{ms(dense_total)} against {ms(t)}: "
            + ("its FLOPs follow the total parameters" if 2 * W / b * B / P > W / BW else
               "it waits on reading every weight"))
    dense_active = max(W_a / BW, 2 * W_a / b * B / P) / n
    s.judge(key, "A dense model of the active size would run this step at least twice as fast",
            DENSE_GAP * dense_active <= t, f"{ms(dense_active)} against {ms(t)}: "
            + ("at this batch both are bound by the same active FLOPs" if bound else
               "it reads only the active weights, the MoE every expert the batch picked"))
    lighter = step(B, b / 2)
    s.judge(key, "Experts stored at half the bytes (same tensor peak) would cut the step time by 20% or more",
            t >= float(LEVER) * lighter, f"{ms(lighter)} against {ms(t)}")
    doubled = step(2 * B)
    s.judge(key, "Twice the batch would cost less than 25% more step time", doubled < float(LEVER) * t,
            f"{ms(doubled)} against {ms(t)}: {format_number(doubled / t, 3)}x for twice the tokens")


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


# --- moe-dispatch-bytes ----------------------------------------------------------------------------

SCALE_BLOCK = 128  # FP8 dispatch carries one FP32 scale per 128 values (DeepEP, DeepSeek-V3 sec. 3.3)
SCALE_BYTES = 4
COMBINE_BYTES = 2  # combine returns bf16 outputs
LINK_LEVER = sympy.Rational(4, 5)  # a change "cuts" the all-to-all when it leaves 80% of the time or less
NODE_LIMIT = 4  # DeepSeek-V3's node-limited routing: a token's experts on at most 4 nodes


def copy_bytes(s: Sheet, h: sympy.Symbol, dispatch_dtype: str = "fp8") -> tuple[sympy.Symbol, sympy.Symbol]:
    """Bytes of one token's copy each way of an expert-parallel all-to-all, as DeepEP moves them: the hidden
    vector out in the dispatch dtype (FP8 with one FP32 scale per 128 values), the expert's output back in bf16."""
    b_d = s.given("b_d", dtype_bytes(dispatch_dtype), "B", f"bytes per dispatched value ({dispatch_dtype})")
    if dispatch_dtype == "fp8":
        blk = s.given("n_blk", SCALE_BLOCK, "", "values per FP8 scale")
        b_s = s.given("b_s", SCALE_BYTES, "B", "bytes per scale (FP32)")
        d_copy = s.step("dispatch_copy", "Bytes of one dispatched copy", "d", h * b_d + h / blk * b_s, "B",
                        "the token's hidden vector in FP8 plus one FP32 scale per 128 values")
    else:
        d_copy = s.step("dispatch_copy", "Bytes of one dispatched copy", "d", h * b_d, "B",
                        "the token's hidden vector in bf16, no scales")
    b_c = s.given("b_c", COMBINE_BYTES, "B", "bytes per combined value (bf16)")
    c_copy = s.step("combine_copy", "Bytes of one combined copy", "c", h * b_c, "B",
                    "each expert's output comes back in bf16 to be weighted and summed")
    return d_copy, c_copy


def remote_nodes(model: Record, nodes: int) -> float:
    """Expected remote nodes a token reaches (once each) over `nodes` nodes: see _remote_nodes."""
    units, picks = ((model.expert_groups, model.groups_per_token) if model.get("expert_groups")
                    else (model.experts, model.experts_per_token))
    return (nodes - 1) * (1 - math.comb(units - units // nodes, picks) / math.comb(units, picks))


def _remote_nodes(s: Sheet, model: Record, D, nodes: int) -> tuple[sympy.Symbol, str]:
    """Expected remote nodes a token reaches when each node receives it once. With node-limited routing
    (DeepSeek-V3) the token picks groups_per_token of expert_groups groups, each node holding the same number
    of groups; without it, k of E experts. A given other node is missed with C(U − U/D, m)/C(U, m)."""
    if model.get("expert_groups"):
        if nodes > model.expert_groups or model.expert_groups % nodes:
            raise Reject(f"{nodes} nodes do not hold whole expert groups of {model.name}")
        U = s.given("U", model.expert_groups, "", "expert groups (node-limited routing)")
        m = s.given("m", model.groups_per_token, "", "groups each token may use: at most that many nodes")
        unit = "groups"
    else:
        if model.experts % nodes:
            raise Reject(f"{nodes} nodes do not hold equal shares of {model.name}'s experts")
        U = s.given("U", model.experts, "", "routed experts per layer (no node limit)")
        m = s.given("m", model.experts_per_token, "", "experts each token picks")
        unit = "experts"
    r = s.step("nic_copies", "Remote nodes a token reaches (node-aware dispatch)", "c_NIC",
               (D - 1) * (1 - sympy.binomial(U - U / D, m) / sympy.binomial(U, m)), "",
               f"each other node is missed when all m picked {unit} lie elsewhere; one copy per node reached")
    return r, unit


def moe_dispatch_bytes(p, s: Sheet) -> None:
    """Dispatch and combine bytes per token for a MoE model's expert parallelism, split between the NIC and
    NVLink, with and without node-aware dispatch under node-limited routing."""
    model, gpu, nic = p.model, p.gpu, p.nic
    domain, ep = scale_up_domain(gpu), int(p.ep)
    # The question's constraint keeps the group wider than one domain: within one, no copy meets a NIC.
    per_domain = domain
    if ep % per_domain:
        raise Reject(f"EP {ep} does not fill whole {domain}-GPU NVLink domains")
    nodes = ep // per_domain
    h = s.given("h", model.hidden, "", "hidden size")
    k = s.given("k", model.experts_per_token, "", "routed experts each token picks")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers")
    G = s.param("G", "ep")
    T = s.param("T", "tokens")
    g = s.given("g", per_domain, "", f"EP GPUs per NVLink domain ({format_number(domain)} GPUs on {gpu.name})")
    D = s.step("nodes", "NVLink domains (nodes) the EP group spans", "D", G / g, "", "the EP group in whole domains")
    fp8 = p.dispatch_dtype == "fp8"
    d_copy, c_copy = copy_bytes(s, h, p.dispatch_dtype)
    s.step("token_bytes", "Dispatch and combine bytes per token, all MoE layers", "V_tok", L * k * (d_copy + c_copy),
           "MB", "k copies out and k back in every MoE layer")
    s.step("rank_dispatch", "Dispatch bytes a GPU sends per MoE layer", "V_d", T * k * d_copy, "MB",
           "its T tokens, k copies each (what DeepEP's low-latency kernels count per rank)")
    s.step("rank_combine", "Combine bytes a GPU receives per MoE layer", "V_c", T * k * c_copy, "MB",
           "the same copies coming back in bf16")
    direct = s.step("nic_copies_direct", "Copies per token over the NIC, each sent straight to its expert",
                    "c_dir", k * (D - 1) / D, "", "an expert sits off the token's node with probability (D − 1)/D")
    remote, _ = _remote_nodes(s, model, D, nodes)
    nvl = s.step("nvlink_copies", "Copies per token over NVLink (node-aware dispatch)", "c_NVL", k * (g - 1) / g, "",
                 "on each node reached, the copy lands on one GPU and is forwarded to the other experts' GPUs")
    B_nic = s.given("BW_NIC", nic.gbit_s * 1e9 / 8, "GB/s", f"{nic.name} per GPU, each direction")
    B_nvl = s.given("BW_NVL", gpu.nvlink_gb_s * 1e9 / 2, "GB/s", f"{gpu.name} NVLink per GPU, each direction")
    per = d_copy + c_copy
    t_nic = s.step("nic_time", "NIC time per MoE layer (dispatch and combine)", "t_NIC", T * remote * per / B_nic,
                   "us", "remote copies of the GPU's tokens, out and back, over its own NIC")
    t_nvl = s.step("nvlink_time", "NVLink time per MoE layer (dispatch and combine)", "t_NVL",
                   T * nvl * per / B_nvl, "us", "the forwarded copies, out and back, over NVLink")
    comm = s.step("comm_step", "All-to-all time per step, all MoE layers", "t_A2A", L * max_of(t_nic, t_nvl), "ms",
                  "NIC and NVLink run at once, so the slower sets each layer's pace")
    s.step("saving", "NIC bytes saved by node-aware dispatch", "S", direct / remote, "x",
           "k copies per remote expert against one per remote node")
    _dispatch_levers(s, p, nodes, per_domain, {n: s.evaluate(x) for n, x in (
        ("T", T), ("k", k), ("remote", remote), ("nvl", nvl), ("per", per), ("B_nic", B_nic), ("B_nvl", B_nvl),
        ("c", c_copy), ("comm", comm))})
    _dispatch_regime(s, t_nic, t_nvl)

    s.assume("A balanced router: a token's experts (or, node-limited, its groups) fall uniformly over the nodes, "
             "each picked group getting at least one of its experts (so the nodes reached are an upper bound); "
             "the NICs and NVLink run at their datasheet rates per direction (decimal-units) with no latency per "
             "call; dispatch and combine move the same copies, one way each.")
    s.assume("Node-aware dispatch (DeepEP's normal kernels): a token crosses the NIC once per remote node, to the GPU "
             "of the same rank there, then NVLink forwards it to the experts' GPUs; combine reverses the path. "
             "Sending each copy straight to its expert (DeepEP's low-latency kernels) puts k·(D − 1)/D copies on "
             "the NIC.")
    if fp8:
        s.slip("FP8 scales left out", s.evaluate(h * dtype_bytes("fp8") / d_copy), on="dispatch_copy")
    s.slip("one direction only (dispatch without combine)", s.evaluate(d_copy / per), on="token_bytes")
    s.slip("one MoE layer only", s.evaluate(1 / L), on="token_bytes")
    s.slip("every copy over the NIC", s.evaluate(k / remote), on="nic_time")


def _dispatch_levers(s: Sheet, p, nodes: int, per_domain: int, v: dict[str, float]) -> None:
    key, L, base = "levers", moe_layers(p.model), v["comm"]

    def comm(remote=v["remote"], nvl=v["nvl"], per=v["per"], b_nic=v["B_nic"], b_nvl=v["B_nvl"]) -> float:
        return L * max(v["T"] * remote * per / b_nic, v["T"] * nvl * per / b_nvl)

    def say(option: str, after: float, why: str) -> None:
        s.judge(key, option, after <= float(LINK_LEVER) * base,
                f"{format_quantity(after, 'ms')} against {format_quantity(base, 'ms')}: {why}")

    nic_bound = v["remote"] / v["B_nic"] >= v["nvl"] / v["B_nvl"]
    say("NICs of twice the bandwidth", comm(b_nic=2 * v["B_nic"]),
        "the NIC's share halves" + ("" if nic_bound else ", but NVLink's forwarding binds"))
    say("NVLink of twice the bandwidth", comm(b_nvl=2 * v["B_nvl"]),
        "the forwarded copies move twice as fast" + (", but the NIC binds" if nic_bound else ""))
    h = p.model.hidden
    fp8_per = h + h / SCALE_BLOCK * SCALE_BYTES + v["c"]
    say("FP8 dispatch (with its scales) in place of this one's dtype", comm(per=fp8_per),
        f"{format_quantity(fp8_per, 'B')} a copy out and back against {format_quantity(v['per'], 'B')}"
        + (": it is FP8 already" if p.dispatch_dtype == "fp8" else ""))
    # Node-limited routing as DeepSeek-V3's: a token's experts on at most NODE_LIMIT nodes, each node one group.
    limited = min(v["remote"], (nodes - 1) * min(NODE_LIMIT, nodes) / nodes)
    say(f"Node-limited routing: each token's experts on at most {NODE_LIMIT} nodes", comm(remote=limited),
        f"{format_number(limited, 3)} remote nodes a token against {format_number(v['remote'], 3)}"
        + ("" if limited < v["remote"] else ": the limit binds nothing here"))
    wider = per_domain * 2
    fewer = remote_nodes(p.model, nodes // 2)
    say("NVLink domains twice as large (half as many nodes)", comm(remote=fewer, nvl=v["k"] * (wider - 1) / wider),
        f"{format_number(fewer, 3)} remote nodes a token against {format_number(v['remote'], 3)}"
        + (": the group would sit in one domain" if nodes == 2 else ""))


def _dispatch_regime(s: Sheet, t_nic, t_nvl) -> None:
    nic, nvl = (format_quantity(s.value(x), "us") for x in (t_nic, t_nvl))
    s.regime_by(t_nic, t_nvl, tie="above", above=Side(
        "nic-bound",
        f"The remote copies take {nic} per layer on the NIC against {nvl} of forwarding on NVLink: the NIC sets "
        "the pace, so fewer nodes per token or faster NICs pay, NVLink speed does not.",
        "With fewer remote copies per token (fewer nodes, tighter node limits) or faster NICs, the NVLink "
        "forwarding becomes the slower leg."),
        below=Side(
        "nvlink-bound",
        f"Few copies cross the NIC ({nic} per layer) against {nvl} of NVLink forwarding: the forwarding inside "
        "each node binds, so a faster NIC buys nothing.",
        "Spread over more nodes, or with a slower NIC, the remote copies take longer than the forwarding and "
        "the NIC binds."))


# --- ep-load-skew ----------------------------------------------------------------------------------

SKEW_COST = sympy.Rational(5, 4)  # a GPU "within 25%" of the balanced step


@dataclass(frozen=True)
class SkewSimulation:
    """One seeded replay of a step's router: per-GPU times under three placements, in seconds."""

    naive: float  # experts in id order, E/G per GPU
    fit_today: float  # one redundant slot per GPU, replicas and packing fit to today's loads
    fit_yesterday: float  # the same, fit to yesterday's loads, run on today's
    sigma: float  # spread of log-popularity that gives the hottest expert m times the mean


def popularity(rng: np.random.Generator, experts: int, hot: float,
               correlation: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Today's and yesterday's share of the routed tokens per expert: log-normal popularity scaled so the
    hottest expert gets `hot` times the mean today, yesterday's log-popularity correlated `correlation` with it."""
    z_today, noise = rng.standard_normal(experts), rng.standard_normal(experts)
    z_yesterday = correlation * z_today + math.sqrt(1 - correlation**2) * noise

    def peak(sigma: float) -> float:  # max / mean of exp(sigma z): rises with sigma
        w = np.exp(sigma * (z_today - z_today.max()))
        return 1 / w.mean()

    low, high = 0.0, 8.0
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if peak(mid) < hot else (low, mid)
    sigma = (low + high) / 2
    today, yesterday = np.exp(sigma * z_today), np.exp(sigma * z_yesterday)
    return today / today.sum(), yesterday / yesterday.sum(), sigma


def _busiest(gpu_of: np.ndarray, expert_of: np.ndarray, counts: np.ndarray, tokens: np.ndarray, gpus: int,
             t_read: float, t_tok: float) -> float:
    """The busiest GPU: the sum over the expert copies it holds of max(weight read, its tokens' math)."""
    per_copy = np.maximum(t_read, tokens[expert_of] / counts[expert_of] * t_tok)
    return float(np.bincount(gpu_of, weights=per_copy, minlength=gpus).max())


def _rebalanced(loads: np.ndarray, gpus: int, t_read: float,
                t_tok: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """EPLB-style: one redundant slot per GPU goes to the expert whose copies are heaviest (again and again),
    then balanced packing: copies heaviest first, one per GPU per round, the least-loaded GPU taking the heaviest
    (every GPU ends with E/G + 1 copies). Returns each copy's GPU and expert, and the copies per expert."""
    experts = len(loads)
    counts = np.ones(experts, dtype=int)
    heaviest = [(-load, e) for e, load in enumerate(loads.tolist())]
    heapq.heapify(heaviest)
    for _ in range(gpus):
        _, e = heapq.heappop(heaviest)
        counts[e] += 1
        heapq.heappush(heaviest, (-loads[e] / counts[e], e))
    expert_of = np.repeat(np.arange(experts), counts)
    times = np.maximum(t_read, loads[expert_of] / counts[expert_of] * t_tok)
    order = np.argsort(-times, kind="stable").reshape(-1, gpus)  # E + G copies: E/G + 1 rounds of G
    busy = np.zeros(gpus)
    gpu_of = np.empty(len(expert_of), dtype=int)
    for round_copies in order:
        lightest = np.argsort(busy, kind="stable")
        gpu_of[round_copies] = lightest
        busy[lightest] += times[round_copies]
    _separate_copies(gpu_of, expert_of, counts, order)
    return gpu_of, expert_of, counts


def _separate_copies(gpu_of: np.ndarray, expert_of: np.ndarray, counts: np.ndarray, order: np.ndarray) -> None:
    """Two copies of one expert on one GPU (they straddled a round) swap GPUs with a neighbour in the round."""
    if len(np.unique(gpu_of * len(counts) + expert_of)) == len(gpu_of):
        return
    for e in np.flatnonzero(counts > 1):
        copies = np.flatnonzero(expert_of == e)
        for i in copies[1:]:
            if gpu_of[i] in set(gpu_of[copies[copies != i]]):
                row = order[np.flatnonzero((order == i).any(axis=1))[0]]
                for j in row:
                    if expert_of[j] != e and gpu_of[j] not in set(gpu_of[copies]):
                        gpu_of[i], gpu_of[j] = gpu_of[j], gpu_of[i]
                        break


REPLAYS = 3  # router replays averaged per variant: one replay's hot set is noisy


def simulate_skew(seed: int, experts: int, gpus: int, picks: float, hot: float, correlation: float,
                  t_read: float, t_tok: float) -> SkewSimulation:
    """Expected per-expert token counts (picks × share) under today's popularity, timed on three placements;
    the mean of REPLAYS replays of the router."""
    rng = np.random.default_rng(seed)
    ids = np.arange(experts)
    runs = []
    for _ in range(REPLAYS):
        today, yesterday, sigma = popularity(rng, experts, hot, correlation)
        tokens = picks * today
        naive = _busiest(ids // (experts // gpus), ids, np.ones(experts), tokens, gpus, t_read, t_tok)
        fit_today = _busiest(*_rebalanced(tokens, gpus, t_read, t_tok), tokens, gpus, t_read, t_tok)
        fit_yesterday = _busiest(*_rebalanced(picks * yesterday, gpus, t_read, t_tok), tokens, gpus, t_read, t_tok)
        runs.append((naive, fit_today, fit_yesterday, sigma))
    return SkewSimulation(*(float(np.mean(column)) for column in zip(*runs)))


def _variant_seed(p) -> int:
    """The simulation's seed, from the variant's own figures: the same variant replays the same router."""
    figures = "|".join(f"{float(x):.6g}" for x in (p.ep, p.batch, p.hot, p.correlation))  # as printed or typed
    text = "|".join((p.model.name, p.gpu.name, p.weight_dtype, figures))
    return zlib.crc32(text.encode())


def ep_load_skew(p, s: Sheet) -> None:
    """Expert parallelism runs at the pace of its busiest GPU: each GPU's time is the sum over its experts of
    max(weight read, tokens × time per token), so skew is free until the hottest expert crosses the ridge."""
    model, gpu = p.model, p.gpu
    if model.experts % int(p.ep):
        raise Reject(f"{model.experts} experts do not split evenly over {p.ep} GPUs")
    b = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    P = s.given("P", peak_flops(gpu, p.weight_dtype), "TFLOP/s", f"{gpu.name} dense {p.weight_dtype} peak")
    BW = s.given("BW", hbm_bandwidth(gpu), "TB/s", f"{gpu.name} HBM bandwidth")
    E = s.given("E", model.experts, "", "routed experts per MoE layer")
    k = s.given("k", model.experts_per_token, "", "routed experts each token picks")
    h = s.given("h", model.hidden, "", "hidden size")
    f = s.given("f_x", model.expert_ffn, "", "FFN width of one expert")
    G = s.param("G", "ep")
    B = s.param("B", "batch")
    m = s.param("m", "hot")
    p_e = s.step("expert_params", "Parameters of one expert", "p_e", GATED_MATRICES * h * f, "",
                 "gate, up and down projections")
    t_r = s.step("read_time", "Weight-read time of one expert", "t_r", p_e * b / BW, "us",
                 "its weights from HBM, however many tokens it serves")
    t_tok = s.step("token_time", "Math per token through one expert", "t_tok", 2 * p_e / P, "ns",
                   "2 FLOPs per weight at the dense peak")
    t_c = s.step("expert_crossover", "Tokens at which an expert's math outlasts its read", "t_c", t_r / t_tok,
                 "tokens", "the ridge in tokens: b·peak/(2·bandwidth)")
    n_g = s.step("experts_per_gpu", "Experts per GPU", "n_g", E / G, "experts", "E split evenly, no replicas")
    n_bar = s.step("mean_tokens", "Mean tokens per expert", "n̄", B * k / E, "tokens", "B·k picks over E experts")
    n_hot = s.step("hot_tokens", "Tokens on the hottest expert", "n_hot", m * n_bar, "tokens",
                   "m times the mean")
    n_c = s.step("other_tokens", "Tokens on each other expert", "n_o", n_bar * (E - m) / (E - 1), "tokens",
                 "the rest of the picks, shared evenly by the other E − 1")
    B_star = s.step("batch_star", "Batch at which skew starts to cost compute", "B*", t_c * E / (k * m), "tokens",
                    "the hottest expert reaches the crossover: m·B·k/E = t_c")
    T_bal = s.step("balanced_time", "GPU time, perfectly balanced", "T_bal", n_g * max_of(t_r, n_bar * t_tok), "us",
                   "every expert at the mean")
    t_hot, t_rest = max_of(t_r, n_hot * t_tok), (n_g - 1) * max_of(t_r, n_c * t_tok)
    T_hot = s.step("hot_gpu_time", "Time of the GPU holding the hottest expert", "T_hot", t_hot + t_rest, "us",
                   "the sum over its experts of max(read, tokens × math per token)")
    s.step("skew_cost", "Busiest GPU against the balanced step", "S_skew", T_hot / T_bal, "x",
           "EP waits for the busiest GPU at every MoE layer")
    r = s.step("replicas", "Copies of the hottest expert to bring each to the mean", "r", ceil_of(m), "",
               "the original among them, each on its own GPU: each copy takes 1/r of its tokens")
    T_rep = s.step("replicated_time", "Busiest GPU with the hottest expert replicated", "T_rep",
                   n_g * max_of(t_r, n_c * t_tok) + max_of(t_r, n_hot * t_tok / r), "us",
                   "a GPU that hosts a copy beside its own experts: one more weight read, a share of the hot tokens")
    sim = simulate_skew(_variant_seed(p), model.experts, int(p.ep), p.batch * model.experts_per_token, p.hot,
                        p.correlation, s.value(t_r), s.value(t_tok))
    source = (f"seeded simulation of the router, mean of {REPLAYS} replays: {model.experts} log-normal popularities "
              f"(σ ≈ {format_number(sim.sigma, 2)}, hottest at m × the mean), seed from the variant")
    S_n = s.given("T_naive", sim.naive, "us", f"busiest GPU, experts in id order ({source})")
    S_t = s.given("T_today", sim.fit_today, "us", "busiest GPU, one redundant expert per GPU fit to today's loads "
                  "(same simulation)")
    S_y = s.given("T_yday", sim.fit_yesterday, "us", "busiest GPU, the placement fit to yesterday's loads "
                  f"(log-popularity correlated {format_number(p.correlation)} with today's; same simulation)")
    s.step("recovered", "Share of the naive placement's excess that today's fit removes", "R_today",
           (S_n - S_t) / (S_n - T_bal) if sim.naive > s.value(T_bal) * (1 + 1e-12) else sympy.Integer(0),
           "%", "against the balanced step; 0 where there is no excess to remove")
    kept = s.step("kept", "Share of that gain a placement fit to yesterday keeps", "K_yday",
                  (S_n - S_y) / (S_n - S_t) if sim.naive > sim.fit_today * (1 + 1e-12) else sympy.Integer(0), "%",
                  "0 where today's fit gains nothing")
    _placement_judgements(s, p, T_hot, T_bal, T_rep, t_hot, t_rest, (n_hot, t_tok, t_r), kept)
    _skew_regime(s, B, B_star, T_hot, T_bal, n_hot, t_c)

    s.assume("A GPU's time for one MoE layer is the sum over the experts it holds of max(weight read, tokens × math "
             "per token) at datasheet peaks (dense-peaks): its grouped GEMM runs one expert after another; "
             "dispatch and the shared weights are left out (moe-dispatch-bytes).")
    s.assume("The hand model takes the hottest expert at m × the mean and the others at an even share of the rest; "
             "the simulation draws all E popularities (log-normal, scaled to the same hottest expert) and uses each "
             "expert's expected tokens, picks × share.")
    s.assume("Rebalancing as DeepSeek's EPLB does: one redundant expert per GPU for the heaviest experts (their "
             "tokens split evenly over the copies), copies packed heaviest first onto the least-loaded GPU.")
    s.slip("the mean tokens used for the hottest expert", s.evaluate(1 / m), on="hot_tokens")
    s.slip("k left out of the tokens per expert", s.evaluate(k), on="batch_star")
    s.slip("skew read as free (the balanced time)", s.evaluate(T_bal / T_hot), on="hot_gpu_time")


STALE_FIT = 0.95  # the correlation from which yesterday's hot set still holds most of today's (test: seeded means)
# The option states STALE_FIT: the log-normal spread behind it is the simulation's, which no candidate sees.
YESTERDAY_FIT = ("A placement fit to yesterday's loads would keep most of today's fit's gain (hot sets hold from a "
                 f"correlation of {STALE_FIT})")


def _placement_judgements(s: Sheet, p, T_hot, T_bal, T_rep, t_hot, t_rest, ridge, kept) -> None:
    key, (n_hot, t_tok, t_r) = "placement", ridge
    hot, bal, rep = (s.value(x) for x in (T_hot, T_bal, T_rep))
    us = lambda x: format_quantity(x, "us")  # noqa: E731
    s.judge(key, "The GPU holding the hottest expert stays within 25% of a balanced one",
            s.compare(T_hot, SKEW_COST * T_bal) <= 0, f"{us(hot)} against {us(bal)} balanced")
    pays = s.compare(T_rep, T_hot) < 0
    s.judge(key, "Replicating the hottest expert shortens the step", pays,
            f"{us(rep)} with {format_number(math.ceil(p.hot))} copies against {us(hot)}: "
            + ("the copies split compute that was binding" if rep < hot else
               "its GPU was waiting on weight reads, and a copy only adds one more"))
    # The hot GPU runs over the balanced step exactly when its hottest expert passes the ridge; comparing the two
    # times themselves would compare n·t_r with itself below it, which floats may not see as a tie.
    excess = s.compare(n_hot * t_tok, t_r) > 0
    s.judge(key, "Replicating the hottest expert removes at least half of its GPU's excess over a balanced one",
            excess and s.compare(2 * (T_hot - T_rep), T_hot - T_bal) >= 0,
            f"{us(hot - rep)} saved of {us(hot - bal)} excess" if excess else
            "there is no excess: every expert waits on its weight read")
    s.judge(key, "The hottest expert alone takes longer than the other experts on its GPU together",
            s.compare(t_hot, t_rest) > 0, f"{us(s.evaluate(t_hot))} against {us(s.evaluate(t_rest))}")
    fresh = p.correlation >= STALE_FIT
    s.judge(key, YESTERDAY_FIT, fresh and pays,
            f"at correlation {format_number(p.correlation)} yesterday's hot experts "
            + ("are mostly today's" if fresh else "have largely moved")
            + f" (this variant's seeded replay keeps {format_number(100 * s.value(kept), 3)}%; the key follows the "
            "expected share over router draws, which crosses half between 0.7 and 0.95)" if pays else
            "a spare does not pay at this batch (above), so there is no gain to keep")
    s.judge(key, "The skew costs nothing at this batch: the busiest GPU takes the balanced time", not excess,
            "every expert, the hottest included, waits on its weight read" if not excess else
            f"{us(hot - bal)} over the balanced {us(bal)}")
    hot_tokens, crossover = s.number("hot_tokens"), s.number("expert_crossover")
    s.judge(key, "Twice the batch would leave the busiest GPU's time unchanged",
            s.compare(2 * hot_tokens, crossover) <= 0,
            "the hottest expert would still sit below the crossover" if 2 * hot_tokens <= crossover
            else "the hottest expert's math would outlast its read, and grow with the batch")


def _skew_regime(s: Sheet, B, B_star, T_hot, T_bal, n_hot, t_c) -> None:
    cost = format_number(s.evaluate(T_hot / T_bal), 3) + "x"
    s.regime_by(B, B_star, tie="above", above=Side(
        "skew-costs-compute",
        f"The hottest expert gets {format_number(s.value(n_hot), 3)} tokens, past the crossover of "
        f"{format_number(s.value(t_c), 3)}: its math outlasts its read, and its GPU runs {cost} the balanced step. "
        "Replication and placement now pay.",
        "Below B* every expert waits on its own weight read, so the busiest GPU reads what every GPU reads: "
        "skew costs nothing, and redundant experts only add reads."),
        below=Side(
        "skew-hidden",
        f"Even the hottest expert ({format_number(s.value(n_hot), 3)} tokens) sits below the crossover of "
        f"{format_number(s.value(t_c), 3)}: every GPU reads the same weights and takes the same time, so the skew "
        "is free; replicas would only add reads.",
        "Past B* the hottest expert's math outlasts its read: its GPU falls behind, and every MoE layer waits "
        "for it."))


# --- moe-1t-training-layout ------------------------------------------------------------------------

STATE_BYTES = 16  # mixed-precision Adam: bf16 weights and grads (2 + 2), fp32 master and two moments (12)
SHARDED_BYTES = 12  # the fp32 part, sharded over every GPU by ZeRO-1
A2A_PASSES = 4  # forward dispatch and combine, and both again in the backward pass
IMBALANCE = sympy.Rational(23, 20)  # router imbalance "matters" from a 15% stretch of the MoE layer
LOWEST_FOLD = 20  # counting compute by the total "overstates it more than 20-fold"


def _ep_in_domain(model: Record, domain: int, gpus: int) -> int:
    """The widest EP group inside one NVLink domain: a power of two that divides the experts and the job."""
    ep = 1
    while ep * 2 <= domain and model.experts % (ep * 2) == 0 and gpus % (ep * 2) == 0:
        ep *= 2
    return ep


def moe_1t_training_layout(p, s: Sheet) -> None:
    """Total against active for a large MoE: the training state follows the total, the FLOPs the active
    parameters; the pipeline depth the state forces with EP inside NVLink, what the all-to-all costs inside
    the domain and across two, and the failure modes a dense plan does not have."""
    model, gpu = p.model, p.gpu
    count = parameter_count(model)
    domain, G_n = scale_up_domain(gpu), int(p.gpus)
    ep = _ep_in_domain(model, domain, G_n)
    N = s.given("N", model.params_b * 1e9, "", f"{model.name} total parameters")
    N_a = s.given("N_act", model.active_params_b * 1e9, "", f"{model.name} active parameters")
    D = s.param("D", "tokens")
    G = s.param("G", "gpus")
    P = s.given("P", peak_flops(gpu, "bf16"), "TFLOP/s", f"{gpu.name} dense bf16 peak")
    mfu = s.param("MFU", "mfu")
    M = s.given("M", hbm_bytes(gpu), "GB", f"{gpu.name} HBM")
    u = s.param("u", "usable")
    b = s.given("b_st", STATE_BYTES, "B", "training state per parameter (mixed-precision Adam)")
    b_z = s.given("b_z", SHARDED_BYTES, "B", "of it, fp32 master and moments (sharded over all GPUs)")
    S = s.step("total_state", "Training state of the whole model", "S", N * b, "TB",
               "every parameter, active for a token or not, keeps weights, gradients and Adam state")
    s.step("state_gpus", "GPUs just to hold the state", "G_min", ceil_of(S / (u * M)), "GPUs",
           "the state over each GPU's share of HBM for it, rounded up: storage follows the total")
    F = s.prerequisite("training-compute-budget", "F", FLOPS_PER_PARAM_TOKEN * s.value(N_a) * s.value(D), "FLOP",
                       "training FLOPs, 6·N·D with N the active parameters")
    s.step("compute_days", "Compute days", "T_c", F / (G * P * mfu), "days", "the FLOPs at the run's MFU")
    E_p = s.given("EP", ep, "GPUs", f"EP group inside one {format_number(domain)}-GPU NVLink domain")
    W_x = s.given("N_x", count.routed, "", "routed-expert parameters (from the config)")
    N_s = s.given("N_s", count.total - count.routed, "", "parameters outside the routed experts (from the config)")
    room = s.step("room", "HBM per GPU for bf16 weights and grads", "R", u * M - b_z * N / G, "GB",
                  "the share of HBM for state, less this GPU's slice of the fp32 state (ZeRO-1 over all GPUs)")
    if s.value(room) <= 0:
        raise Reject("the fp32 optimizer state alone overflows the GPUs")
    need = s.step("pp_need", "Pipeline stages the state needs", "PP_min", (b - b_z) * (W_x / E_p + N_s) / room, "",
                  "each stage holds its layers' experts split EP ways and its share of the rest, in bf16 weights "
                  "and grads")
    # G and EP are powers of two, so the stage counts that divide the G/EP GPUs per EP rank are too.
    doublings = next(j for j in range(64) if s.compare(2**j, need) >= 0)
    j = s.given("j", doublings, "", "doublings: the least j with 2^j ≥ PP_min")
    PP = s.step("pipeline_stages", "Pipeline stages", "PP", 2**j, "",
                f"the fewest at least PP_min that divide the {format_number(G_n // ep)} GPUs per EP rank: "
                "a power of two")
    if s.value(PP) > model.layers // 2:
        raise Reject("the state needs more pipeline stages than the layers allow")
    s.step("state_per_gpu", "State per GPU at that depth", "S_gpu", (b - b_z) * (W_x / E_p + N_s) / PP + b_z * N / G,
           "GB", "bf16 weights and grads of its stage's slice, plus its ZeRO-1 slice of the fp32 state")
    _training_a2a(s, p, model, G, N_a, P, mfu, E_p, ep)

    s.assume("Mixed-precision Adam (16 B per parameter: ZeRO's 2 + 2 + 12; Kimi K2 trained with MuonClip, one "
             "moment instead of two); ZeRO-1 shards the fp32 master and "
             "moments over every GPU; the expert weights and grads split over the EP group and the pipeline "
             "stages, the rest over the stages only (replicated across the EP group, as attention is).")
    s.assume("All-to-all in bf16 both ways, four passes per MoE layer (dispatch and combine, forward and backward); "
             "a copy crosses a link when its expert sits on another GPU; no overlap with compute (Megatron's "
             "default; DualPipe-style overlap hides up to the compute time). Links at datasheet rate per direction.")
    s.slip("FLOPs counted with the total parameters", s.evaluate(N / N_a), on="compute_days")
    s.slip("state counted with the active parameters", s.evaluate(N_a / N), on="total_state")


def _training_a2a(s: Sheet, p, model: Record, G, N_a, P, mfu, E_p, ep: int) -> None:
    """All-to-all against compute per step, EP inside NVLink and spread over two domains, and the router's
    hottest expert against its GPU's share."""
    h = s.given("h", model.hidden, "", "hidden size")
    k = s.given("k", model.experts_per_token, "", "routed experts each token picks")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers")
    B = s.param("B", "batch")
    b_a = s.given("b_a", COMBINE_BYTES, "B", "bytes per activation (bf16)")
    n_pass = s.given("n_pass", A2A_PASSES, "", "all-to-all passes per MoE layer (dispatch, combine, forward, backward)")
    V = s.step("a2a_bytes", "All-to-all bytes per token", "V_tok", L * n_pass * k * h * b_a, "MB",
               "k copies of the hidden vector, four passes, every MoE layer")
    T_g = s.step("tokens_per_gpu", "Tokens per GPU per step", "T_g", B / G, "tokens",
                 "every GPU of a stage's EP group takes 1/G of the batch through the stage's MoE layers")
    t_c = s.step("compute_step", "Compute per step", "t_comp", FLOPS_PER_PARAM_TOKEN * N_a * B / (G * P * mfu), "s",
                 "6·N_act FLOPs per token, shared by every GPU at the MFU")
    B_nvl = s.given("BW_NVL", p.gpu.nvlink_gb_s * 1e9 / 2, "GB/s", f"{p.gpu.name} NVLink per GPU, each direction")
    B_nic = s.given("BW_NIC", p.nic.gbit_s * 1e9 / 8, "GB/s", f"{p.nic.name} per GPU, each direction")
    a_in = s.step("a2a_nvlink", "All-to-all per step, EP inside NVLink", "t_NVL", T_g * V * (E_p - 1) / E_p / B_nvl,
                  "s", "copies for the other EP − 1 GPUs of the domain, over NVLink")
    a_out = s.step("a2a_nic", "All-to-all per step, the same EP group over two domains", "t_NIC",
                   T_g * V / 2 / B_nic, "s",
                   "half the copies now sit in the other domain and cross the NIC, which binds: NVLink carries the "
                   "rest far faster")
    s.step("nvlink_share", "Share of the step in the all-to-all, EP inside NVLink", "f_NVL", a_in / (t_c + a_in),
           "%", "all-to-all on top of the compute")
    s.step("nic_share", "Share of the step in the all-to-all, EP over two domains", "f_NIC", a_out / (t_c + a_out),
           "%", "the same, over the NIC")
    m = s.param("m", "hot")
    n_g = s.step("experts_per_gpu", "Routed experts per GPU in each MoE layer", "n_g", model.experts / E_p, "experts",
                 "E over the EP group")
    E = s.given("E", model.experts, "", "routed experts per MoE layer")
    stretch = s.step("hot_stretch", "MoE layer stretched by the hottest expert", "S_hot",
                     (m + (n_g - 1) * (E - m) / (E - 1)) / n_g, "x",
                     "training GEMMs are compute-bound, so a GPU's time follows its tokens: the hot expert at m times "
                     "the mean, its other experts at an even share of the rest (as in ep-load-skew)")
    _failure_modes(s, model, int(p.gpus), stretch, a_in, a_out, t_c)
    _layout_regime(s, a_out, t_c, a_in, ep)


STATE_GPU_SHARE = sympy.Rational(1, 50)  # the state "takes" a job's GPUs at 2% of them or more
DEEP_PIPELINE = 4  # a pipeline this deep pays a bubble a dense plan of the active size never needs
A2A_SHARE = sympy.Rational(3, 40)  # the all-to-all "costs" the step past 7.5% of it


def _failure_modes(s: Sheet, model: Record, gpus: int, stretch, a_in, a_out, t_c) -> None:
    key = "failure_modes"
    hot = s.value(stretch)
    s.judge(key, "Router imbalance stretches each MoE layer by 15% or more", s.compare(stretch, IMBALANCE) >= 0,
            f"the hottest expert's GPU runs {format_number(hot, 3)}x the mean"
            + ("" if hot >= IMBALANCE else ": its load is diluted over many experts per GPU"))
    sec = lambda x: format_quantity(s.value(x), "s")  # noqa: E731
    s.judge(key, "Spread over two NVLink domains, the all-to-all would take a third of the compute time or more",
            s.compare(3 * a_out, t_c) >= 0, f"{sec(a_out)} over the NIC against {sec(t_c)} of compute per step: "
            + ("more than overlap can hide" if s.value(a_out) > s.value(t_c) else
               "an overlapped schedule must hide it" if 3 * s.value(a_out) >= s.value(t_c) else "a small share"))
    share = s.number("nvlink_share")
    s.judge(key, "Even with EP inside NVLink, the all-to-all takes more than 7.5% of the step", share > A2A_SHARE,
            f"{sec(a_in)} against {sec(t_c)} of compute: {format_number(100 * share, 3)}% of the step")
    fold = model.params_b / model.active_params_b
    s.judge(key, "Counting compute by the total parameters would overstate it more than 20-fold", fold > LOWEST_FOLD,
            f"total / active = {format_number(fold, 3)}")
    held = s.number("state_gpus")
    s.judge(key, "Holding the training state alone takes at least 2% of the job's GPUs",
            held >= STATE_GPU_SHARE * gpus, f"{format_number(held)} of {format_number(gpus)} GPUs, for the "
            f"{format_number(model.params_b)}B total (a dense model of the active size: "
            f"1/{format_number(fold, 3)} of it)")
    stages = s.number("pipeline_stages")
    s.judge(key, "The state forces a pipeline of 4 stages or more", stages >= DEEP_PIPELINE,
            f"{format_number(stages)} stages with EP inside NVLink: the experts' bf16 weights and grads split only "
            "EP ways")


def _layout_regime(s: Sheet, a_out, t_c, a_in, ep: int) -> None:
    nic, comp, nvl = (format_quantity(s.value(x), "s") for x in (a_out, t_c, a_in))
    s.regime_by(a_out, t_c, tie="above", above=Side(
        "ep-stays-in-nvlink",
        f"Spread over two domains, the all-to-all would take {nic} a step over the NIC, more than the {comp} of "
        f"compute: at these bytes not even a perfect overlap would hide it. Inside NVLink it takes {nvl}: EP {ep} "
        "stays in the domain and the pipeline crosses the nodes. Real runs that crossed (DeepSeek-V3: EP 64 over 8 "
        "nodes; Kimi K2: EP 16 over two) first cut the bytes: node-limited routing, FP8 dispatch, and schedules "
        "that overlap it (DualPipe, interleaved 1F1B).",
        "With a faster NIC, or slower compute per token, the NIC all-to-all would fit under the compute and a "
        "DualPipe-style overlap could hide an EP group spread over nodes."),
        below=Side(
        "ep-could-cross-nodes",
        f"Over two domains the all-to-all would take {nic}, under the {comp} of compute: a schedule that "
        f"overlaps them (DualPipe) could hide it, though run back to back it still costs more than the {nvl} "
        "inside NVLink.",
        "With faster GPUs or a higher MFU the compute shrinks below the NIC all-to-all, and EP has to stay "
        "inside NVLink."))
