"""From 8 to 72 GPUs per NVLink domain - what moves off the NIC, what does not, what a fault takes down."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value, scale_up_domain
from solvers.derivation import Sheet, Side
from solvers.formulas.collective import link_bandwidth
from solvers.formulas.common import given_config, given_nic
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.formulas.moe import copy_bytes
from solvers.sheetmath import max_of, min_of
from solvers.units import format_number, format_quantity


def _a2a_time(s: Sheet, tag: str, label: str, V, ep, D, bw_nvl, bw_nic, latency) -> sympy.Symbol:
    """One layer's dispatch and combine: the share of a GPU's copies bound for GPUs inside its domain
    goes over NVLink, the rest over its NIC, both at once; the slower sets the time, and each of the
    two calls adds the fixed latency of the slowest link it uses."""
    inside = min_of(ep, D) / ep
    outside = max_of(ep - D, 0) / ep
    return s.step(f"a2a_layer_{tag}", f"All-to-all per MoE layer, {label}", f"t_L_{tag}",
                  max_of(V * inside / bw_nvl, V * outside / bw_nic) + 2 * latency, "us",
                  "the copies for GPUs in the domain over NVLink, the rest over the NIC, in parallel; plus a "
                  "fixed latency for each of dispatch and combine")


def _fits(gpus, domain) -> str:
    return "fit" if gpus <= domain else "overflow"


def _crosses(s: Sheet, p, domain: int) -> None:
    """Which traffic still crosses the NIC on the racks: a group or a pair of pools crosses it exactly when it
    needs more GPUs than one rack holds (a pool that fills the rack to the last GPU fits)."""
    ep, pre = p.ep, p.prefill_gpus
    s.judge("crosses", "this decode group's EP all-to-all", ep > domain,
            f"EP {format_number(ep)} fits a {domain}-GPU rack: the decode all-to-all left the NIC, the point of "
            "the move", fact=True)
    for times, option in ((2, "the all-to-all of an EP group twice this size"),
                          (sympy.Rational(3, 2), "the all-to-all of an EP group half again this size")):
        size = float(times * ep)
        s.judge("crosses", option, size > domain,
                f"EP {format_number(float(size))} {'spans racks' if size > domain else 'fits one rack'} of {domain}")
    for times, option in ((2, "the KV handoff from a prefill pool twice this size"),
                          (sympy.Rational(1, 2), "the KV handoff from a prefill pool half this size")):
        pool = float(times * pre + ep)
        s.judge("crosses", option, pool > domain, f"{format_number(float(times * pre))} prefill + {format_number(ep)} "
                f"decode GPUs {_fits(pool, domain)} one rack of {domain}")


def _regime(s: Sheet, p, pools, D_a, D: int) -> None:
    used = format_number(p.prefill_gpus + p.ep)
    s.regime_by(pools, D_a, tie="below", below=Side(
        "handoff-on-nvlink",
        f"Prefill and decode together take {used} GPUs, within one rack: the KV handoff rides NVLink like the "
        "all-to-all, and only traffic between racks (other replicas, the front end) still needs the NIC.",
        "Once prefill and decode together need more GPUs than one rack holds, the prefill pool sits in another "
        "rack and every request's KV crosses the NIC, as it did on HGX nodes."),
        above=Side(
        "handoff-on-nic",
        f"Prefill and decode together take {used} GPUs, more than one rack holds: "
        + ("the decode group's all-to-all moved onto NVLink, but the prefill pool sits in another rack and each "
           "request's KV still crosses the decode GPU's NIC, as fast as it did on HGX nodes." if p.ep <= D
           else f"the decode group itself spans racks, so the copies bound for GPUs outside a rack's {D} cross "
           "the NIC again, and the prefill pool sits in another rack: each request's KV crosses the NIC too."),
        "A prefill pool and decode group that fit one rack together hand the KV over NVLink too."))


def solve(p, s: Sheet) -> None:
    model, hgx, rack = p.model, p.gpu, p.rack_gpu
    ep = s.param("EP", "ep")
    T_g = s.param("T_g", "tokens")
    L_moe = s.param("L_moe", "moe_layers")
    S = s.param("S", "context")
    G_pre = s.param("G_pre", "prefill_gpus")
    h = given_config(s, model, "hidden")
    k = given_config(s, model, "experts_per_token")
    d_copy, c_copy = copy_bytes(s, h)
    domain = scale_up_domain(rack)
    D_b = s.given("D_HGX", scale_up_domain(hgx), "GPUs", f"{hgx.name} NVLink domain")
    D_a = s.given("D_NVL", domain, "GPUs", f"{rack.name} NVLink domain")
    bw_hgx = link_bandwidth(s, hgx, scale_up_domain(hgx), group="HGX")
    bw_nvl = link_bandwidth(s, rack, domain, group="NVL")
    bw_nic = given_nic(s, p.nic)

    s.step("link_ratio", "NVLink inside the rack over the NIC, each direction", "ρ", bw_nvl / bw_nic, "",
                   "the factor every byte that stays in the domain gains")
    V_d = s.step("dispatch_bytes", "Dispatch bytes each GPU sends per MoE layer", "V_d", T_g * k * d_copy, "MB",
                 "a copy of every token's hidden state for each of its k experts")
    V_c = s.step("combine_bytes", "Combine bytes each GPU receives per MoE layer", "V_c", T_g * k * c_copy, "MB",
                 "each expert's output comes back in bf16")
    V = V_d + V_c
    lat_nvl = s.given("t_lat_NVL", convention_value("all-reduce-latency-nvlink") * 1e-6, "us",
                      "fixed latency of a call inside one NVLink domain (all-reduce-latency-nvlink)")
    lat_nic = s.given("t_lat_NIC", convention_value("all-reduce-latency-nic") * 1e-6, "us",
                      "fixed latency of a call that crosses the NICs (all-reduce-latency-nic)")
    t_b = _a2a_time(s, "hgx", f"on {hgx.name} nodes", V, ep, D_b, bw_hgx, bw_nic,
                    lat_nic if p.ep > scale_up_domain(hgx) else lat_nvl)
    t_a = _a2a_time(s, "nvl", "on NVL72 racks", V, ep, D_a, bw_nvl, bw_nic,
                    lat_nic if p.ep > domain else lat_nvl)
    before = s.step("a2a_step_before", "All-to-all per decode step, HGX nodes", "t_A_HGX", L_moe * t_b, "ms",
                    "every MoE layer dispatches and combines once per step")
    after = s.step("a2a_step_after", "All-to-all per decode step, NVL72 racks", "t_A_NVL", L_moe * t_a, "ms",
                   "the same bytes, the rack now holding the group" if p.ep <= domain
                   else f"the group spans racks: the copies to its GPUs outside a rack's {domain} still cross the NIC")
    s.step("", "All-to-all speed-up", "γ", before / after, "",
           "below ρ: part of the traffic stayed on NVLink before or still crosses the NIC after, and the fixed "
           "latencies do not shrink with the bytes")

    kv_tok = kv_bytes_per_token_given(s, model, 2, "bf16")
    kv_req = s.step("kv_request", "KV of one request to hand from prefill to decode", "KV_req", kv_tok * S, "GB",
                    "the latent cache of every prompt token")
    pools = s.step("pools_gpus", "GPUs the prefill pool and the decode group take together", "G_PD", G_pre + ep,
                   "GPUs", "one rack holds both only if this is at most its GPU count")
    in_rack = s.compare(pools, D_a) <= 0
    s.step("kv_before", "KV handoff, HGX nodes", "t_KV_HGX", kv_req / bw_nic, "ms",
           "prefill and decode GPUs sit in different nodes: one GPU's NIC")
    s.step("kv_after", "KV handoff, NVL72 racks", "t_KV_NVL", kv_req / (bw_nvl if in_rack else bw_nic), "ms",
           f"both pools ({format_number(p.prefill_gpus)} + {format_number(p.ep)} GPUs) fit one rack: NVLink"
           if in_rack else f"the pools ({format_number(p.prefill_gpus)} + {format_number(p.ep)} GPUs) overflow the "
           f"rack's {domain}: the handoff still crosses the NIC")

    # A fault: the failed GPU's tray is drained; the group cannot run short, so it stalls until it is whole again,
    # on a spare tray after a restart, or on the swapped tray after the repair.
    I_ref = s.param("I_ref", "ref_interruptions")
    T_ref = s.param("T_ref", "ref_days")
    G_ref = s.param("G_ref", "ref_gpus")
    W = s.param("W", "window")
    t_fix = s.param("t_tray", "tray_swap")
    t_re = s.param("t_restart", "restart")
    lam = s.step("failure_rate", "Unexpected interruptions per GPU-day", "λ", I_ref / (T_ref * G_ref),
                 "interruptions/GPU-day", "Llama 3's record, taken per GPU-day")
    faults = s.step("group_faults", "Faults among the group's GPUs in the window", "n_f", W * ep * lam, "",
                    "any of its GPUs failing stalls the all-to-all; the rack's other GPUs do not")
    s.step("down_no_spare", "Group stalled in the window, no tray held free", "D_0", faults * t_fix, "h",
           "each fault waits for its tray to be swapped: the group cannot run on one GPU fewer, and the rack's "
           "left-over trays are busy with other work")
    s.step("down_spare", "Group stalled in the window, one tray held free", "D_1", faults * t_re, "min",
           "each fault costs a restart onto the spare tray; the failed tray is swapped while the group runs")

    _crosses(s, p, domain)
    if p.ep > domain:
        s.refuse_if_asked(["a2a_step_before", "crosses", "down_no_spare", "down_spare"],
                          f"a decode group past one rack of {domain} is the push's, never the opening's: it leaves "
                          "no spare tray and no room for prefill beside it")
    s.assume("Decode with DeepEP-style low-latency all-to-all (moe-all-to-all): each GPU sends its tokens' k copies "
             "(FP8 with 1-in-128 FP32 scales) and gets the k results back in bf16; routing is uniform over the group's "
             "GPUs, so a share min(EP, D)/EP of the copies stays in the domain; dispatch and combine of one "
             "layer are not overlapped with compute; each call pays the bank's fixed latency of the links it crosses "
             "(all-reduce-latency-nvlink or -nic, taken for an all-to-all too). EP sizes that do not divide "
             "DeepSeek-V3's 256 experts (48, 144) hold redundant expert copies, as DeepSeek's EPLB does.")
    s.assume(f"Links at their datasheet rate each direction, the NVLink domain as scale-up-domain has it ({hgx.name} "
             f"and {rack.name} NVLink at half the bidirectional figure; one {p.nic.name} per GPU, as HGX H100, H200 "
             "and B200 nodes and GB200 NVL72 racks ship; ConnectX-8 comes with B300 and GB300); DeepEP measures "
             "80-90% of the NIC's rate. The HGX side is checked against DeepEP's published EP 32 and EP 64 figures; "
             "no published low-latency all-to-all measured inside a GB200 NVL72 rack at these sizes is used, so the "
             "NVL72 side rests on NVLink's datasheet rate and the bank's in-domain latency.")
    s.assume("The KV handoff moves one request's whole latent cache (bf16) from one prefill GPU to one decode GPU "
             "(data-parallel attention), over the decode GPU's own link. Engines stream it layer by layer under the "
             "prefill, so a long prompt's handoff mostly hides in TTFT; what the link sets is whether it can.")
    s.assume(f"Faults: Llama 3 405B's {format_number(p.ref_interruptions)} unexpected interruptions in "
             f"{format_quantity(p.ref_days, 'days')} on {format_number(p.ref_gpus)} GPUs, independent per GPU: an "
             "H100 fleet's record standing in for GB200 trays, for which no published per-GPU fault rate is used "
             "here (both stalls scale with the rate). A "
             "GPU fault drains its compute tray (4 GPUs); the rack's NVLink fabric and its other trays run on. The "
             "group is sized to its EP and cannot run one GPU short, so it stalls until it is whole: on a spare tray "
             "after a restart, or on the repaired tray. The GPUs the pools leave over in the rack (8 beside EP 64, "
             "more beside a smaller group) run other work, another model's replicas, so a spare is a tray held "
             "free on purpose; a reported NVL72 practice runs 64 of the 72 GPUs and holds the other two trays as "
             "hot spares. A second fault during one repair is left out (well under "
             "one in fifty at these rates).")
    if in_rack:  # the NIC's bits-for-bytes slips come with any time read off a bit rate (BIT_RATE_TIME_SLIPS)
        s.slip("NVLink's bidirectional figure taken for one direction", 1 / 2, on="kv_after")
    s.slip("combine counted at the dispatch's FP8 size", s.evaluate((V_d + V_d) / V), on="a2a_step_after")
    s.slip("every GPU of the rack counted as stalling the group", domain / p.ep, on="down_no_spare")
    _regime(s, p, pools, D_a, domain)
