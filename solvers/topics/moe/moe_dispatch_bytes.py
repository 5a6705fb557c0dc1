"""Dispatch and combine - a MoE's all-to-all bytes, NIC against NVLink."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value, scale_up_domain
from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.common import dtype_bytes, given_config, given_nic, given_nvlink
from solvers.formulas.moe import SCALE_BLOCK, SCALE_BYTES, a2a_call_latency, copy_bytes, moe_layers
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number, format_quantity


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


def _dispatch_levers(s: Sheet, p, *, sym: dict[str, sympy.Expr]) -> None:
    """Which levers cut the step's all-to-all by the stated share: each lever's time is the comm_step formula
    on changed inputs, decided against the step's on the sheet."""
    key, v = "levers", sym
    base = v["comm"]
    cut = s.param("x_cut", "cut")

    def comm(remote=v["remote"], nvl=v["nvl"], per=v["per"], b_nic=v["B_nic"], b_nvl=v["B_nvl"],
             alpha=v["alpha"]) -> sympy.Expr:
        return v["L"] * (max_of(v["T"] * remote * per / b_nic, v["T"] * nvl * per / b_nvl) + 2 * alpha)

    def say(option: str, after: sympy.Expr, why: str) -> None:
        s.judge(key, option, s.compare(after, (1 - cut) * base) <= 0,
                f"{format_quantity(s.evaluate(after), 'ms')} against {s.text(base)}: {why}")

    def n(x: sympy.Expr) -> str:
        return format_number(s.evaluate(x), 3)

    nic_bound = s.compare(v["t_nic"], v["t_nvl"]) >= 0
    calls = " (the calls' latency stays)"
    say("NICs of twice the bandwidth", comm(b_nic=2 * v["B_nic"]),
        "the NIC's share halves" + ("" if nic_bound else ", but NVLink's forwarding binds") + calls)
    say("NVLink of twice the bandwidth", comm(b_nvl=2 * v["B_nvl"]),
        "the forwarded copies move twice as fast" + (", but the NIC binds" if nic_bound else "") + calls)
    say("Kernels with half the fixed latency per call", comm(alpha=v["alpha"] / 2),
        f"{format_quantity(s.evaluate(v['alpha'] / 2), 'us')} of each call's {s.text(v['alpha'])} saved, the bytes "
        "unchanged")
    h = v["h"]
    fp8_per = h + h / SCALE_BLOCK * SCALE_BYTES + v["c"]
    say("FP8 dispatch (with its scales) in place of this one's dtype", comm(per=fp8_per),
        f"{format_quantity(s.evaluate(fp8_per), 'B')} a copy out and back against "
        f"{format_quantity(s.evaluate(v['per']), 'B')}"
        + (": it is FP8 already" if p.dispatch_dtype == "fp8" else ""))
    # Node-limited routing as DeepSeek-V3's: a token's experts on at most node_limit nodes, each node one group.
    D, limit = v["D"], s.param("n_lim", "node_limit")
    limited = min_of(v["remote"], (D - 1) * min_of(limit, D) / D)
    say("Node-limited routing: each token's experts on at most {node_limit} nodes", comm(remote=limited),
        f"{n(limited)} remote nodes a token against {s.text(v['remote'], 3)}"
        + ("" if s.compare(limited, v["remote"]) < 0 else ": the limit binds nothing here"))
    # Domains twice as large: half the nodes (whole ones), each reached as _remote_nodes counts.
    half, U = floor_of(D / 2), v["U"]
    fewer = (half - 1) * (1 - sympy.binomial(U - floor_of(U / half), v["m"]) / sympy.binomial(U, v["m"]))
    wider = 2 * v["g"]
    one_domain = s.compare(half, 1) == 0
    # A group inside one domain makes no call across nodes: its calls pay NVLink's latency, not the NIC's.
    alpha = (s.given("α_NVL", convention_value("all-reduce-latency-nvlink") * 1e-6, "us",
                     "fixed latency of a call inside one NVLink domain (all-reduce-latency-nvlink)")
             if one_domain else v["alpha"])
    say("NVLink domains twice as large (half as many nodes)",
        comm(remote=fewer, nvl=v["k"] * (wider - 1) / wider, alpha=alpha),
        f"{n(fewer)} remote nodes a token against {s.text(v['remote'], 3)}"
        + (": the group would sit in one domain, its calls at NVLink's latency" if one_domain else ""))


EDGE = 0.03  # a draw within 3% of a regime's edge is refused: the graded times carry 3%


def _dispatch_regime(s: Sheet, t_nic, t_nvl, t_link, t_calls) -> None:
    """Three sides: the calls' fixed latency over the longer link leg, else the NIC against NVLink."""
    nic, nvl, calls = (s.text(x) for x in (t_nic, t_nvl, t_calls))
    for a, b in ((t_link, t_calls), (t_nic, t_nvl)):
        if abs(s.evaluate(a / b) - 1) < EDGE:
            raise Reject("the draw sits on a regime boundary")
    if s.compare(t_calls, t_link) > 0:
        s.set_regime(
            "latency-bound",
            f"The two calls' fixed latency, {calls} a layer, outlasts the bytes on either link (NIC {nic}, NVLink "
            f"{nvl}): too few tokens a GPU to fill a message, so neither faster links nor fewer copies pay; "
            "lower-latency kernels, more tokens a step or overlapping the calls with compute do.",
            t_calls, t_link,
            "With more tokens a GPU the bytes outgrow the calls' latency, and the slower link sets the pace.")
    elif s.compare(t_nic, t_nvl) >= 0:
        s.set_regime(
            "nic-bound",
            f"The remote copies take {nic} per layer on the NIC against {nvl} of forwarding on NVLink and "
            f"{calls} of call latency: the NIC sets the pace, so fewer nodes per token or faster NICs pay, "
            "NVLink speed does not.",
            t_nvl, t_nic,
            "With fewer remote copies per token (fewer nodes, tighter node limits) or faster NICs, the NVLink "
            "forwarding becomes the slower leg.")
    else:
        s.set_regime(
            "nvlink-bound",
            f"Few copies cross the NIC ({nic} per layer) against {nvl} of NVLink forwarding, beyond {calls} of "
            "call latency: the forwarding inside each node binds, so a faster NIC buys nothing.",
            t_nic, t_nvl,
            "Spread over more nodes, or with a slower NIC, the remote copies take longer than the forwarding and "
            "the NIC binds.")


def solve(p, s: Sheet) -> None:
    """Dispatch and combine bytes per token for a MoE model's expert parallelism, split between the NIC and
    NVLink, with and without node-aware dispatch under node-limited routing."""
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
    B_nic = given_nic(s, nic)
    B_nvl = given_nvlink(s, gpu)
    per = d_copy + c_copy
    t_nic = s.step("nic_time", "NIC time per MoE layer (dispatch and combine)", "t_NIC", T * remote * per / B_nic,
                   "us", "remote copies of the GPU's tokens, out and back, over its own NIC")
    t_nvl = s.step("nvlink_time", "NVLink time per MoE layer (dispatch and combine)", "t_NVL",
                   T * nvl * per / B_nvl, "us", "the forwarded copies, out and back, over NVLink")
    alpha = a2a_call_latency(s, True)
    calls = s.step("call_latency", "Fixed latency per MoE layer (dispatch and combine)", "t_α", 2 * alpha, "us",
                   "each of the two calls pays it however few bytes it carries")
    link = s.step("link_time", "Bytes time per MoE layer", "t_link", max_of(t_nic, t_nvl), "us",
                  "NIC and NVLink run at once, so the slower leg sets the pace")
    comm = s.step("comm_step", "All-to-all time per step, all MoE layers", "t_A2A", L * (link + calls), "ms",
                  "every MoE layer: its bytes on the slower leg, then the two calls' latency")
    s.step("saving", "NIC bytes saved by node-aware dispatch", "S", direct / remote, "x",
           "k copies per remote expert against one per remote node")
    _dispatch_levers(s, p, sym={"T": T, "k": k, "L": L, "h": h, "g": g, "D": D, "U": s.symbol("U"),
                                "m": s.symbol("m"), "remote": remote, "nvl": nvl, "per": per, "c": c_copy,
                                "B_nic": B_nic, "B_nvl": B_nvl, "comm": comm, "t_nic": t_nic, "t_nvl": t_nvl,
                                "alpha": alpha})
    _dispatch_regime(s, t_nic, t_nvl, link, calls)

    s.assume("A balanced router: a token's experts (or, node-limited, its groups) fall uniformly over the nodes, "
             "each picked group getting at least one of its experts (so the nodes reached are an upper bound); "
             "the NICs and NVLink run at their datasheet rates per direction (decimal-units); each of dispatch and "
             "combine pays the bank's fixed latency of a call across nodes (all-reduce-latency-nic, as "
             "nvl72-boundary and moe-experts-per-batch take it), not overlapped with compute; dispatch and combine "
             "move the same copies, one way each.")
    s.assume("Node-aware dispatch (DeepEP's normal kernels): a token crosses the NIC once per remote node, to the GPU "
             "of the same rank there, then NVLink forwards it to the experts' GPUs; combine reverses the path. "
             "Sending each copy straight to its expert (DeepEP's low-latency kernels) puts k·(D − 1)/D copies on "
             "the NIC.")
    if fp8:
        s.slip("FP8 scales left out", s.evaluate(h * dtype_bytes("fp8") / d_copy), on="dispatch_copy")
    s.slip("one direction only (dispatch without combine)", s.evaluate(d_copy / per), on="token_bytes")
    s.slip("one MoE layer only", s.evaluate(1 / L), on="token_bytes")
    s.slip("every copy over the NIC", s.evaluate(k / remote), on="nic_time")
    s.slip("the calls' fixed latency left out", s.evaluate(link / (link + calls)), on="comm_step")

