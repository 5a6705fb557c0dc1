"""Dispatch and combine - a MoE's all-to-all bytes under the kernel the batch runs."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value, scale_up_domain
from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.common import dtype_bytes, given_config, given_nic, given_nvlink
from solvers.formulas.moe import SCALE_BLOCK, SCALE_BYTES, a2a_call_latency, copy_bytes, moe_layers
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number, format_quantity


def _remote_nodes(s: Sheet, model: Record, D, nodes: int) -> sympy.Symbol:
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
    return s.step("nic_copies_aware", "Remote nodes a token reaches (node-aware dispatch)", "c_aware",
                  (D - 1) * (1 - sympy.binomial(U - U / D, m) / sympy.binomial(U, m)), "",
                  f"each other node is missed when all m picked {unit} lie elsewhere; one copy per node reached")


LOW_LATENCY, NORMAL = "low-latency-direct", "normal-node-aware"

HALF_THE_NODES = "Had the model been trained to keep a token's experts on half the group's nodes"


def _dispatch_levers(s: Sheet, p, *, sym: dict[str, sympy.Expr], direct_kernel: bool) -> None:
    """Which levers cut the step's all-to-all by the stated share: each lever's time is the comm_step formula
    on changed inputs (under the kernel this batch runs), decided against the step's on the sheet."""
    key, v = "levers", sym
    base = v["comm"]
    cut = s.param("x_cut", "cut")

    def comm(remote=v["remote"], nvl=v["nvl"], per=v["per"], b_nic=v["B_nic"], alpha=v["alpha"]) -> sympy.Expr:
        return v["L"] * (max_of(v["T"] * remote * per / b_nic, v["T"] * nvl * per / v["B_nvl"]) + 2 * alpha)

    def say(option: str, after: sympy.Expr, why: str) -> None:
        s.judge(key, option, s.compare(after, (1 - cut) * base) <= 0,
                f"{format_quantity(s.evaluate(after), 'ms')} against {s.text(base)}: {why}")

    def n(x: sympy.Expr) -> str:
        return format_number(s.evaluate(x), 3)

    calls = " (the calls' latency stays)"
    say("NICs of twice the bandwidth (ConnectX-8)", comm(b_nic=2 * v["B_nic"]), "the NIC's share halves" + calls)
    say("Kernels with half the fixed latency per call", comm(alpha=v["alpha"] / 2),
        f"{format_quantity(s.evaluate(v['alpha'] / 2), 'us')} of each call's {s.text(v['alpha'])} saved, the bytes "
        "unchanged")
    h = v["h"]
    scaled = h + h / SCALE_BLOCK * SCALE_BYTES  # an FP8 copy with its FP32 scales
    both = v["d"] + scaled
    say("Combine in FP8 (with its scales)", comm(per=both),
        f"{format_quantity(s.evaluate(both), 'B')} a copy out and back against "
        f"{format_quantity(s.evaluate(v['per']), 'B')}")
    # Node-limited routing as DeepSeek-V3's, at its ratio (4 of 8 nodes): a token's experts on at most half the
    # group's nodes, a limit that binds at every group size drawn (a fixed 4 bound nothing on 2 or 4 nodes). Only a
    # kernel that sends once per node gains from it: the direct kernel sends every copy, however few nodes they span.
    D = v["D"]
    trained_so = bool(p.model.get("expert_groups")) and s.compare(p.model.groups_per_token, D / 2) <= 0
    already = f"; {p.model.name}'s routing above keeps a token on so few already" if trained_so else ""
    if s.compare(D, 2) <= 0:
        s.judge(key, HALF_THE_NODES, None, "on two nodes half is one: every token's experts on one node is a split of "
                "the experts, not a routing limit (and its cut sits on the 20% line wherever NVLink then binds)")
    elif s.compare(D / 2, v["k"]) >= 0:
        s.judge(key, HALF_THE_NODES, None, f"a token's {n(v['k'])} experts span at most {n(v['k'])} nodes: a limit "
                f"of {n(D / 2)} binds nothing")
    elif direct_kernel:
        say(HALF_THE_NODES, base, "the low-latency kernel sends each copy to its expert, so fewer nodes save no copy"
            + already)
    else:
        # D/2 nodes of the D, the token's own among them half the time: (D/2)·(D − 1)/D = (D − 1)/2 remote ones.
        limited = min_of(v["remote"], (D - 1) / 2)
        say(HALF_THE_NODES, comm(remote=limited), f"{n(limited)} remote nodes a token against "
            f"{s.text(v['remote'], 3)}" + ("" if s.compare(limited, v["remote"]) < 0 else already))
    # Domains twice as large: half the nodes (whole ones), each reached as this kernel counts them.
    half, U, g2 = floor_of(D / 2), v["U"], 2 * v["g"]
    if direct_kernel:
        fewer, nvl2 = v["k"] * (half - 1) / half, v["k"] * (g2 - 1) / v["G"]
    else:
        fewer = (half - 1) * (1 - sympy.binomial(U - floor_of(U / half), v["m"]) / sympy.binomial(U, v["m"]))
        nvl2 = v["k"] * (g2 - 1) / g2
    one_domain = s.compare(half, 1) == 0
    # A group inside one domain makes no call across nodes: its calls pay NVLink's latency, not the NIC's.
    alpha = (s.given("α_NVL", convention_value("all-reduce-latency-nvlink") * 1e-6, "us",
                     "fixed latency of a call inside one NVLink domain (all-reduce-latency-nvlink)")
             if one_domain else v["alpha"])
    say("NVLink domains twice as large (half as many nodes)", comm(remote=fewer, nvl=nvl2, alpha=alpha),
        f"{n(fewer)} NIC copies a token against {s.text(v['remote'], 3)}"
        + (": the group would sit in one domain, its calls at NVLink's latency" if one_domain else ""))


EDGE = 0.03  # a draw within 3% of a regime's edge is refused: the graded times carry 3%


def _dispatch_regime(s: Sheet, t_nic, t_nvl, t_calls) -> None:
    """Two sides: the two calls' fixed latency against the NIC's bytes (NVLink, with a ConnectX-7 a GPU, never the
    slower leg: refused where it would be, as no draw here makes it)."""
    if s.compare(t_nvl, t_nic) > 0:
        raise Reject("NVLink's forwarding outlasts the NIC: no ConnectX-7 draw here makes it")
    if abs(s.evaluate(t_nic / t_calls) - 1) < EDGE:
        raise Reject("the draw sits on a regime boundary")
    nic, nvl, calls = (s.text(x) for x in (t_nic, t_nvl, t_calls))
    if s.compare(t_calls, t_nic) > 0:
        s.set_regime(
            "latency-bound",
            f"The two calls' fixed latency, {calls} a layer, outlasts the NIC's bytes ({nic}; NVLink {nvl}): too "
            "few tokens a GPU to fill a message, so faster NICs or fewer copies barely pay; lower-latency kernels, "
            "more tokens a step or overlapping the calls with compute do.",
            t_calls, t_nic,
            "With more tokens a GPU the NIC's bytes outgrow the two calls' latency, and NIC bandwidth sets the pace.")
    else:
        s.set_regime(
            "nic-bound",
            f"The remote copies take {nic} a layer on the NIC, past the two calls' {calls} of latency (NVLink's "
            f"share, {nvl}, runs beside them): fewer NIC copies a token or a faster NIC pay, NVLink speed does not.",
            t_nic, t_calls,
            "With fewer tokens a GPU the NIC's bytes fall under the two calls' fixed latency, and only a "
            "lower-latency kernel (or overlap) pays.")


def solve(p, s: Sheet) -> None:
    """Dispatch and combine bytes per token for a MoE model's expert parallelism under the kernel the batch runs
    (DeepEP's low-latency kernels at decode batches, its node-aware normal kernels at prefill batches), split
    between the NIC and NVLink, with the calls' fixed latency."""
    model, gpu, nic = p.model, p.gpu, p.nic
    domain, ep = scale_up_domain(gpu), int(p.ep)
    # The question's constraint keeps the group wider than one domain: within one, no copy meets a NIC.
    per_domain = domain
    if ep % per_domain:
        raise Reject(f"EP {ep} does not fill whole {domain}-GPU NVLink domains")
    nodes = ep // per_domain
    h = given_config(s, model, "hidden")
    k = given_config(s, model, "experts_per_token")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers")
    G = s.param("G", "ep")
    T = s.param("T", "tokens")
    T_ll = s.param("T_LL", "ll_max")
    g = s.given("g", per_domain, "", f"EP GPUs per NVLink domain ({format_number(domain)} GPUs on {gpu.name})")
    D = s.step("nodes", "NVLink domains (nodes) the EP group spans", "D", G / g, "", "the EP group in whole domains")
    direct_kernel = s.compare(T, T_ll) <= 0
    s.choose("kernel", LOW_LATENCY if direct_kernel else NORMAL,
                 f"{format_number(p.tokens)} tokens a GPU is "
                 + ("a decode batch: the low-latency kernels (CUDA-graph friendly, no CPU sync for the receive counts) "
                    "send each copy straight to its expert, over RDMA to other nodes and NVLink inside its own"
                    if direct_kernel else
                    "a prefill batch: the normal kernels send a token once per remote node and forward it over "
                    "NVLink, the bytes that matter at this size"))
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
    aware = _remote_nodes(s, model, D, nodes)
    s.step("saving", "NIC bytes node-aware dispatch saves against direct sends", "S", direct / aware, "x",
           "k copies per remote expert against one per remote node")
    if direct_kernel:
        remote = s.step("nic_copies", "Copies per token over the NIC (low-latency kernel)", "c_NIC", direct, "",
                        "the low-latency kernel sends each copy straight to its expert's GPU")
        nvl = s.step("nvlink_copies", "Copies per token over NVLink (low-latency kernel)", "c_NVL", k * (g - 1) / G,
                     "", "the copies for the other GPUs of its own node; its own GPU's stay put")
    else:
        remote = s.step("nic_copies", "Copies per token over the NIC (node-aware kernel)", "c_NIC", aware, "",
                        "one copy per remote node reached")
        nvl = s.step("nvlink_copies", "Copies per token over NVLink (node-aware kernel)", "c_NVL", k * (g - 1) / g,
                     "", "on each node reached, the copy lands on one GPU and is forwarded to the other experts' GPUs")
    B_nic = given_nic(s, nic)
    B_nvl = given_nvlink(s, gpu)
    per = d_copy + c_copy
    t_nic = s.step("nic_time", "NIC time per MoE layer (dispatch and combine)", "t_NIC", T * remote * per / B_nic,
                   "us", "remote copies of the GPU's tokens, out and back, over its own NIC")
    t_nvl = s.step("nvlink_time", "NVLink time per MoE layer (dispatch and combine)", "t_NVL",
                   T * nvl * per / B_nvl, "us", "the copies NVLink carries, out and back")
    alpha = a2a_call_latency(s, True)
    calls = s.step("call_latency", "Fixed latency per MoE layer (dispatch and combine)", "t_α", 2 * alpha, "us",
                   "each of the two calls pays it however few bytes it carries")
    link = s.step("link_time", "Bytes time per MoE layer", "t_link", max_of(t_nic, t_nvl), "us",
                  "NIC and NVLink run at once, so the slower leg sets the pace")
    layer = s.step("layer_time", "All-to-all per MoE layer (dispatch and combine, with their calls)", "t_layer",
                   link + calls, "us", "its bytes on the slower leg, then the two calls' latency: what DeepEP's "
                   "benchmark times for a dispatch and a combine")
    comm = s.step("comm_step", "All-to-all time per step, all MoE layers", "t_A2A", L * layer, "ms",
                  "every MoE layer's dispatch and combine, one after another")
    _dispatch_levers(s, p, direct_kernel=direct_kernel,
                     sym={"T": T, "k": k, "L": L, "h": h, "g": g, "G": G, "D": D, "U": s.symbol("U"),
                          "m": s.symbol("m"), "remote": remote, "nvl": nvl, "per": per, "d": d_copy, "c": c_copy,
                          "B_nic": B_nic, "B_nvl": B_nvl, "comm": comm, "alpha": alpha})
    _dispatch_regime(s, t_nic, t_nvl, calls)

    s.assume("A balanced router: a token's experts (or, node-limited, its groups) fall uniformly over the nodes, "
             "each picked group getting at least one of its experts (so the nodes reached are an upper bound); "
             "the NICs and NVLink run at their datasheet rates per direction (decimal-units); each of dispatch and "
             "combine pays the bank's fixed latency of a call across nodes (all-reduce-latency-nic, as "
             "nvl72-boundary and moe-experts-per-batch take it), whichever kernel, not overlapped with compute; "
             "dispatch and combine move the same copies, one way each.")
    s.assume("The kernel follows the batch, as SGLang's DeepEP 'auto' mode picks it: at decode batches (up to "
             f"{format_number(p.ll_max)} tokens a GPU) DeepEP's low-latency kernels send each copy straight to its "
             "expert over RDMA (k·(D − 1)/D NIC copies a token): they skip the CPU sync of the normal kernels and run "
             "inside CUDA graphs, which decode needs more than it needs the bytes. At prefill batches (from four "
             "times that) the normal kernels cross the NIC once per remote node, to the GPU of the same rank there, "
             "and NVLink forwards to the experts' GPUs; combine reverses the path. Batches between the two are "
             "not drawn. The bank's model charges both kernels the same call latency: what the low-latency kernel "
             "buys (graph capture, overlap hooks) is not in this time.")
    if fp8:
        s.slip("FP8 scales left out", s.evaluate(h * dtype_bytes("fp8") / d_copy), on="dispatch_copy")
    s.slip("one direction only (dispatch without combine)", s.evaluate(d_copy / per), on="token_bytes")
    s.slip("one MoE layer only", s.evaluate(1 / L), on="token_bytes")
    # The other kernel's copy count is graded on nic_copies; on the layer it would sit beside the latency slip.
    if direct_kernel:
        s.slip("node-aware copies at a decode batch", s.evaluate(aware / direct), on="nic_copies")
    else:
        s.slip("every copy over the NIC (the direct count)", s.evaluate(direct / aware), on="nic_copies")
    s.slip("the calls' fixed latency left out", s.evaluate(link / layer), on="layer_time")
    s.slip("the calls' fixed latency left out", s.evaluate(link / layer), on="comm_step")
