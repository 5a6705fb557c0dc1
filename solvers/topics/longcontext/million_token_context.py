"""A million tokens of context - the cache, the prefill, and the change that breaks the plan."""
from __future__ import annotations

from dataclasses import replace

import sympy

from solvers.conventions import convention_value
from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, crosses_domain, tp_all_reduce
from solvers.formulas.common import (
    given_config,
    given_hbm_bytes,
    given_nic,
    given_usable_share,
)
from solvers.formulas.moe import GATED_MATRICES, attention_params
from solvers.formulas.steptime import engine
from solvers.sheetmath import ceil_of, max_of
from solvers.units import count_text, format_number, format_quantity

VOCAB = "a vocabulary twice as large"
TTFT_MARGIN = 0.05  # a TTFT on the nodes that hold it within 5% (its tolerance) of the target: refused


# The released checkpoints serve 128K; the question runs each model as a named 1M-token stretch, and no
# further: (longest context, the stretch). Only models with a real 1M-token run are drawn (Qwen2.5-72B has none:
# the Qwen2.5-1M recipe was released for the 7B and 14B only).
LONG_VARIANT = {
    "Llama-3.1-70B": (1_048_576, "the Llama-3-70B shape as Gradient's Llama-3-70B-Instruct-Gradient-1048k, a "
                      "RoPE-theta and fine-tuning stretch of Llama-3-70B to 1,048K tokens"),
    "Llama-3.1-405B": (1_048_576, "Llama-3.1-405B run at 1M tokens as Yang et al. (arXiv:2411.01783) timed it, a "
                       "performance setting past the 128K the checkpoint was trained for"),
}

WIDEST_CP = 64  # an MHA request past 64 times the plan's nodes is no plan at all: such draws are refused


def added_params(model: Record, **change: int) -> int:
    """Parameters a change of attention heads adds to the model: its attention projections, every layer."""
    return model.layers * (attention_params(Record({**model, **change})) - attention_params(model))


def _breaks(s: Sheet, p, *, room, kv, w, nodes, per_param, added: dict[str, int]) -> None:
    """Which single change to the model would need more nodes than the plan has: its KV multiplier and the
    weights it adds per GPU (`added` parameters at `per_param` bytes a GPU), against the same usable HBM;
    decided on the sheet: ⌈f·KV_gpu / room left⌉ > c exactly when f·KV_gpu > c · room left."""
    def grown(extra: int) -> str:
        return f"+{format_quantity(s.evaluate(extra * per_param), 'GB')} of weights a GPU"

    changes = (
        ("twice the KV heads", 2, added["kv"] * per_param, f"2x the KV per GPU, {grown(added['kv'])}"),
        ("four times the KV heads", 4, added["kv4"] * per_param, f"4x the KV per GPU, {grown(added['kv4'])}"),
        ("twice the layers at the same width", 2, w, "2x the KV and 2x the weights per GPU"),
        ("an MLP twice as wide", 1, added["mlp"] * per_param,
         f"the KV unchanged, the gate, up and down projections twice as wide: {grown(added['mlp'])}"),
        ("twice the query heads", 1, added["q"] * per_param,
         f"the KV unchanged (the same KV heads), the q and o projections twice as wide: {grown(added['q'])}"),
        (VOCAB, 1, added["vocab"] * per_param,
         f"the KV unchanged, the embedding and output tables twice as long: {grown(added['vocab'])}"),
    )
    now = f"{format_number(s.value(nodes))} that {'holds' if s.value(nodes) == 1 else 'hold'} it now"
    for option, kv_factor, extra, what in changes:
        left = room - extra
        fills = s.compare(left, 0) <= 0
        more = fills or s.compare(kv_factor * kv, nodes * left) > 0
        s.judge("breaks", option, more, f"{what}: the weights alone fill the GPUs, the plan breaks" if fills else
                f"{what}: {count_text(s.evaluate(ceil_of(kv_factor * kv / left)), 'node')} against the {now}",
                fact=option == VOCAB)
        # A longer vocabulary adds no KV and under a GB of weights a GPU (these models' tables, split by TP 8):
        # the anchor of a change that grows only the weights. Every other growth breaks 405B's tight plan, so
        # without it those draws would list no false option (and be refused).


FLOOR = "one-node"  # one node holds the KV and meets the target: the deployment's floor, nothing binds


def _regime(s: Sheet, t_pre, target, *, nodes: float, plan: float) -> None:
    """Three sides: the target sets the nodes (the nodes that hold the KV prefill too slowly), memory does (two
    or more nodes hold the KV and meet the target), or neither (one node does both: the floor of any plan)."""
    held = count_text(nodes, 'node') + (" that holds" if nodes == 1 else " that hold")
    if nodes == 1:  # no cache to shrink, nothing split: memory does not bind, the unit you deploy in does
        below = Side(FLOOR, "One node holds the request's KV (in part of its room) and prefills it within the "
                     "target: neither memory nor the target binds; a single TP 8 node is the whole plan, the floor "
                     "of any deployment, with no context parallelism.",
                     "Past the target the prefill's math sets the nodes: context parallelism then buys latency, "
                     "each node added cutting the math, while the ring's KV passing stays overlapped with it.")
        enough = "Within the target the one node that holds the KV is enough: the floor of one node is the plan."
    else:
        below = Side("memory", f"The {held} the request's KV already prefill it within the target: memory sets "
                     "the nodes, and a smaller cache (fp8 KV, a latent) is what would take nodes away.",
                     "Past the target the prefill's math, not the cache, sets the nodes: context parallelism then "
                     "buys latency, each node added cutting the math, while the ring's KV passing stays overlapped "
                     "with it.")
        enough = "Within the target the nodes that hold the KV are enough: memory sets the plan."
    above = Side(
        "ttft-target",
        f"The {held} the KV prefill{'s' if nodes == 1 else ''} it too slowly for the target: the math sets the nodes, "
        f"{format_number(plan)} of them, context parallelism spreading it (ring attention), each node a TP 8 "
        "group with the whole weights.", enough)
    # Near the boundary the key says the same: a margin named here would announce the push that follows.
    s.regime_by(t_pre, target, tie="below", boundary_label="the TTFT target",
                below=replace(below, near=below.summary), above=replace(above, near=above.summary))


def solve(p, s: Sheet) -> None:
    if crosses_domain(p.gpu, p.tp):
        raise Reject("TP must stay inside the node")
    if p.model.name not in LONG_VARIANT:
        raise Reject("no 1M-token run of this model")
    longest, stretch = LONG_VARIANT[p.model.name]
    if p.context > longest:
        raise Reject("a context past the model's long-context stretch")
    e = engine(s, p.model, p.gpu, p.tp, dtype=p.weight_dtype, kv_dtype=p.kv_dtype, communication=True,
               kv_prerequisite=True)
    T = s.param("T", "context")
    KV_tok = sympy.Symbol("KV_tok")  # kv-bytes-per-token's figure, stated by the engine above
    M = given_hbm_bytes(s, p.gpu)
    u = given_usable_share(s)
    H = sympy.Symbol("H_q")
    H_kv = given_config(s, p.model, "kv_heads")

    kv_req = s.step("kv_request", "KV cache of one request", "KV_req", KV_tok * T, "GiB",
                    "every token keeps its key and value in every layer")
    w_gpu = s.step("weights_per_gpu", "Weights on each GPU", "W_gpu", e.W / e.TP, "GB", "TP splits every matrix")
    kv_gpu = s.step("kv_per_gpu", "KV of the request on each GPU of one node", "KV_gpu_req", e.KV * T, "GB",
                    "each GPU keeps its own KV heads' share of every token")
    room = s.step("kv_room", "KV room on each GPU", "R", u * M - w_gpu, "GB",
                  "usable HBM less this GPU's weights")
    if s.value(room) <= 0:
        raise Reject("the weights alone fill the node")
    s.step("longest_context", "Longest context one node holds", "T_max", room / e.KV, "tokens",
                   "the KV room over one token's KV on a GPU")
    c = s.step("nodes", "Nodes that hold the request (TP 8 each, context parallel across them)", "c",
               ceil_of(kv_gpu / room), "nodes",
               "each node keeps the whole weights and 1/c of the tokens' KV")
    n_c = s.value(c)
    if n_c > 16:
        raise Reject("more than 16 nodes for one request")

    # Prefill: the weights' FLOPs grow with T, causal attention's with T²/2.
    F_w = s.step("prefill_weight_flops", "Prefill FLOPs in the weights", "F_w", 2 * e.N * T, "PFLOP",
                 "2 FLOPs per parameter per prompt token (flops-per-token)")
    F_a = s.step("prefill_attention_flops", "Prefill FLOPs in attention", "F_a", e.A * T**2 / 2, "PFLOP",
                 "A per query-key pair, T²/2 pairs under the causal mask (attention-flops): 2·L·d·T²")
    share = s.step("attention_share", "Attention's share of the prefill FLOPs", "φ", F_a / (F_w + F_a), "%",
                   "2·L·d·T² / (2·N·T + 2·L·d·T²): the T² term wins once T passes N/(L·d)")
    s.step("", "Prompt length where attention and weights cost the same", "T_eq", 2 * e.N * 2 / e.A,
                    "tokens", "2·N·T = 2·L·d·T² at T = N/(L·d)")
    ar = tp_all_reduce(s, p.model, p.gpu, p.tp, T / c, tag="pre", label="prefill's share of each node")
    nic = given_nic(s, p.nic, "BW_nic")
    t_math = s.step("", "Prefill math, spread over every node", "t_F", e.math_time(F_w, F_a) / c, "s",
                    "the step model's compute across c·TP GPUs, attention at its cache's dtype (zig-zag ring "
                    "attention balances the causal work)")
    t_ring = s.step("ring_pass", "KV passed around the ring between nodes", "t_ring",
                    (c - 1) / c * kv_req / (e.TP * nic), "s",
                    "each node receives every other node's KV shard over its TP NICs, each GPU's NIC carrying its "
                    "own KV heads at line rate (one NIC per GPU, not one transfer striped over all of them; "
                    "0 on one node)")
    t_read = s.step("prefill_read", "Prefill reads on each GPU, at least", "t_M", (w_gpu + kv_gpu / c) / e.byte_rate,
                    "s", "its weights once and its node's shard of the KV once (the step model's bytes side)")
    t_pre = s.step("prefill_time", "Prefill time (time to first token)", "t_pre",
                   max_of(t_math, t_ring, t_read) + ar + e.t_oh, "s",
                   "the slowest of the math, the ring's KV passing (overlapped with it) and the GPU's reads; the "
                   "node's all-reduces come on top")
    # The TTFT target: the math and the all-reduces' bytes split over the nodes, their latencies and the
    # step's overhead do not.
    target = s.param("τ_TTFT", "ttft_target")
    terms = all_reduce_terms(s, p.model, p.gpu, p.tp)
    work = s.step("", "Prefill math and all-reduce bytes on one node", "t_1",
                  e.math_time(F_w, F_a) + terms.per_token * T, "s",
                  "what context parallelism divides: each node does 1/c of both")
    if s.compare(target, terms.fixed + e.t_oh) <= 0:
        raise Reject("the target is inside the prefill's fixed costs")
    t_pre_c = s.value(t_pre)
    if abs(t_pre_c / s.value(target) - 1) < TTFT_MARGIN:
        raise Reject("the TTFT on the nodes that hold it is within 5% of the target")
    c_ttft = s.step("nodes_ttft", "Fewest nodes that meet the TTFT target", "c_τ",
                    ceil_of(work / (target - terms.fixed - e.t_oh)), "nodes",
                    "the one-node math and all-reduce bytes over what the target leaves after the all-reduces' "
                    "latencies and the overhead")
    plan = s.step("nodes_plan", "Nodes the plan deploys", "c_plan", max_of(c, c_ttft), "nodes",
                  "enough to hold the KV and to meet the TTFT target")
    n_plan = s.value(plan)
    if n_plan > 16:
        raise Reject("more than 16 nodes for the TTFT target")
    t_math_p = s.evaluate(e.math_time(F_w, F_a)) / n_plan
    if t_math_p < s.evaluate((n_plan - 1) / n_plan * kv_req / (e.TP * nic)) or t_math_p < s.evaluate(
            (w_gpu + kv_gpu / n_plan) / e.byte_rate):
        raise Reject("the ring or the reads, not the math, would set the TTFT at the target's nodes")
    s.step("prefill_plan", "TTFT on the plan's nodes", "t_plan", terms.fixed + e.t_oh + work / plan, "s",
           "the all-reduces' latencies and the overhead, and 1/c of the math and all-reduce bytes (the ring's KV "
           "passing overlapped with the math)")

    merge: sympy.Expr = sympy.Integer(0)
    if s.compare(plan, 1) > 0:  # across nodes
        L, d_h = given_config(s, p.model, "layers"), given_config(s, p.model, "head_dim")
        alpha = s.given("α_x", convention_value("all-reduce-latency-nic") * 1e-6, "us",
                        "latency of one call across nodes")
        b_acc = s.given("b_acc", 4, "B", "bytes per partial-attention value (fp32 output and LSE)")
        merge = s.step("decode_merge", "Merging the nodes' partial attention, every layer", "t_merge",
                       L * (alpha + 2 * (plan - 1) / plan * H / e.TP * (d_h + 1) * b_acc / nic), "ms",
                       "each node attends over its own tokens; every layer an all-reduce across the plan's nodes "
                       "combines each GPU's heads' partial outputs and LSEs: its latency, and a few KB over the NIC")
    ar_dec = tp_all_reduce(s, p.model, p.gpu, p.tp, 1, tag="dec", label="decode step")
    t_dec = s.step("decode_step", "Decode step at this context", "t_dec",
                   max_of((w_gpu + kv_gpu / plan) / e.byte_rate, e.math_time(2 * e.N, e.A * T) / plan)
                   + ar_dec + merge + e.t_oh,
                   "ms", "on the plan's nodes, every GPU reads its weights and its 1/c of the KV for one token; "
                   "across nodes the partial attention is merged every layer")
    x_plan = s.step("per_user", "Decode speed of the request", "X_user", 1 / t_dec, "tokens/s", "one token per step")
    if s.compare(plan, c) > 0:
        # read12 (rf-m): what a strong interviewer asks next, in the worked solution only (the push that relaxes the
        # target asks this figure): after the prefill, do the extra nodes earn their keep in decode?
        merge_c: sympy.Expr = sympy.Integer(0)
        if s.compare(c, 1) > 0:
            merge_c = L * (alpha + 2 * (c - 1) / c * H / e.TP * (d_h + 1) * b_acc / nic)
        t_dec_c = s.step("decode_step_held", "Decode step on the nodes that hold the KV alone", "t_dec_c",
                         max_of((w_gpu + kv_gpu / c) / e.byte_rate, e.math_time(2 * e.N, e.A * T) / c)
                         + ar_dec + merge_c + e.t_oh, "ms",
                         "the same step on the c nodes memory needs: each GPU's weights, now c_plan/c times its KV")
        x_c = s.step("per_user_held", "Decode speed on those nodes alone", "X_c", 1 / t_dec_c, "tokens/s",
                     "one token per step")
        s.assume(f"After the prefill the request decodes at {s.text(x_plan)} on the plan's "
                 f"{format_number(s.value(plan))} nodes and at {s.text(x_c)} on the {format_number(s.value(c))} that "
                 "hold its KV: each GPU's weights, read every step whatever the node count, set most of the step, so "
                 "the extra nodes buy the TTFT, not decode speed; a deployment that prefills wide and hands the KV "
                 "to a narrower decode group (disaggregation) frees them for the next prompt.")

    # The model changes: MHA multiplies the KV by H_q/H_kv, and what would hold that instead.
    s.step("kv_request_mha", "KV of the request if the model were MHA", "KV_MHA", kv_req * H / H_kv,
                    "GiB", "one KV head per query head: H_q/H_kv times the GQA cache")
    model = p.model
    dN = s.given("ΔN_MHA", added_params(model, kv_heads=model.heads), "",
                 "parameters MHA adds: K and V projections of H_q heads instead of H_kv, every layer")
    room_mha = s.step("kv_room_mha", "KV room on each GPU, were it MHA", "R_MHA", room - dN * e.W / (e.N * e.TP), "GB",
                      "the larger K and V projections, at the weights' bytes per parameter, split by TP")
    if s.value(room_mha) <= 0:
        raise Reject("the MHA model's weights alone fill the node")
    c_mha = s.step("nodes_mha", "Nodes that hold the MHA request", "c_MHA", ceil_of(kv_gpu * H / H_kv / room_mha),
                   "nodes", "H_q/H_kv times the KV per GPU, in the MHA model's room")
    if s.value(c_mha) > WIDEST_CP * n_c:
        raise Reject("were it MHA, more than 64 times this plan's nodes")
    _breaks(s, p, room=room, kv=kv_gpu, w=w_gpu, nodes=c, per_param=e.W / (e.N * e.TP), added={
        "kv": added_params(model, kv_heads=2 * model.kv_heads),
        "kv4": added_params(model, kv_heads=4 * model.kv_heads),
        "q": added_params(model, heads=2 * model.heads),
        "vocab": 2 * model.vocab * model.hidden,  # untied input and output tables
        "mlp": GATED_MATRICES * model.hidden * model.ffn * model.layers})
    latent = s.step("kv_mla_gpu", "An MLA latent's cache on each GPU of one node", "KV_MLA",
                    given_config(s, p.model, "layers") * s.param("d_lat", "mla_latent") * sympy.Symbol("b_kv") * T,
                    "GB", "one latent per layer per token, no heads for TP to split: every GPU keeps all of it")
    sharded = count_text(s.evaluate(ceil_of(latent / e.TP / room)), 'node')
    c_mla = s.step("nodes_mla", "Nodes that hold the request with an MLA latent in place of K and V", "c_MLA",
           ceil_of(latent / room), "nodes",
           "attention TP over heads, so the latent on every GPU of a node, in the model's own room (its down- and "
           "up-projections about the size of the GQA K and V projections they replace); an engine that shards the "
           f"latent by tokens over the node's GPUs instead (in-node context parallelism) needs {sharded}")

    s.assume(f"The checkpoint serves {format_number(p.model.get('max_context', 0))} tokens; this is {stretch}, "
             f"here at {format_number(p.context)} tokens: the weights and KV layout are unchanged. A model change "
             "counts its own weights: more heads mean larger attention projections (q and o for query heads, k and "
             "v for KV heads), at the same bytes per parameter.")
    s.assume("One request at a time; each node is one TP group of its GPUs; across nodes the sequence is split "
             "(context parallelism): prefill passes KV shards around a ring (pass-KV ring attention) and decode "
             "merges each node's partial attention every layer, one all-reduce across the nodes at the NIC's "
             "latency.")
    s.assume("Activations and the attention kernel's workspace are left out of the memory; prefill is chunked "
             "so that its activations stay small beside the cache.")
    s.assume("The prefill's reads are counted at their least, the weights and the KV shard once each (the step "
             "model's bytes side, kept in its max): a chunked prefill re-reads them chunk by chunk, but at these "
             "lengths its math runs for seconds or more, its reads for milliseconds, so the math sets the TTFT.")
    s.slip("causal mask left out (T² pairs instead of T²/2)",
           s.evaluate(2 * F_a / (F_w + 2 * F_a)) / s.value(share), on="attention_share")
    s.slip("KV in GB counted as GiB", 1e9 / 2**30, on="kv_request")
    s.slip("MHA's wider K and V projections left out of the room", s.evaluate(ceil_of(kv_gpu * H / H_kv / room))
           / s.value(c_mha), on="nodes_mha")
    s.slip("the latent split over TP 8 as if it had heads", s.evaluate(ceil_of(latent / e.TP / room)) / s.value(c_mla),
           on="nodes_mla")
    _regime(s, t_pre, target, nodes=n_c, plan=n_plan)

