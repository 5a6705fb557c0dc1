"""From 8 to 72 GPUs per NVLink domain - what moves off the NIC, what does not, what a fault takes down."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value, scale_up_domain
from solvers.derivation import Sheet, Side
from solvers.formulas.collective import link_bandwidth
from solvers.formulas.common import given_config, given_nic
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.formulas.moe import copy_bytes
from solvers.sheetmath import ceil_of, max_of, min_of
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


def _crosses(s: Sheet, p, in_rack: bool) -> None:
    domain = scale_up_domain(p.rack_gpu)
    s.judge("crosses", "this decode group's EP all-to-all", p.ep > domain,
            f"EP {format_number(p.ep)} {'spans' if p.ep > domain else 'fits'} a {domain}-GPU domain")
    s.judge("crosses", "the KV handoff from its prefill pool", not in_rack,
            f"{format_number(p.prefill_gpus)} prefill + {format_number(p.ep)} decode GPUs "
            f"{'fit' if in_rack else 'overflow'} one rack of {domain}")
    s.judge("crosses", "the all-to-all of an EP group twice this size", 2 * p.ep > domain,
            f"EP {format_number(2 * p.ep)} {'spans' if 2 * p.ep > domain else 'fits'} the domain")
    s.judge("crosses", "the TP all-reduces of a TP-8 attention group", False,
            "eight GPUs never leave a 72-GPU domain", fact=True)
    for times, option in ((2, "the KV handoff from a prefill pool twice this size"),
                          (sympy.Rational(1, 2), "the KV handoff from a prefill pool half this size")):
        pool = times * p.prefill_gpus + p.ep
        s.judge("crosses", option, pool > domain, f"{format_number(times * p.prefill_gpus)} prefill + "
                f"{format_number(p.ep)} decode GPUs {'overflow' if pool > domain else 'fit'} one rack of {domain}")
    s.judge("crosses", "the all-to-all of an EP group half this size", p.ep / 2 > domain,
            f"EP {format_number(p.ep / 2)} {'spans' if p.ep / 2 > domain else 'fits'} the domain")


def _regime(s: Sheet, p, ep, D_a, ratio) -> None:
    r = s.text(ratio, 3)
    s.regime_by(ep, D_a, tie="below", below=Side(
        "inside-domain",
        f"EP {format_number(p.ep)} fits one NVL72 rack: every dispatch and combine stays on NVLink, {r}x the NIC's "
        "bandwidth each way, where on HGX nodes all but a node's share crossed the NIC. The price is the blast "
        "radius: one GPU fault now stalls all 72 GPUs of the rack, the group and whatever shares it.",
        "Past 72 GPUs the group spans racks: the copies bound for other racks cross the NIC again, and the "
        "speed-up shrinks towards what one rack's share of the group saves."),
        above=Side(
        "outside-domain",
        f"EP {format_number(p.ep)} spans racks: the share of copies bound for other racks still crosses the NIC, so "
        f"the all-to-all gains far less than NVLink's {r}x; every rack the group touches stalls it on a fault.",
        "At 72 GPUs or fewer the whole group sits in one NVLink domain and its all-to-all never touches the NIC."))


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
    D_b = s.given("D_HGX", scale_up_domain(hgx), "GPUs", f"{hgx.name} NVLink domain")
    D_a = s.given("D_NVL", scale_up_domain(rack), "GPUs", f"{rack.name} NVLink domain")
    bw_hgx = link_bandwidth(s, hgx, scale_up_domain(hgx), group="HGX")
    bw_nvl = link_bandwidth(s, rack, scale_up_domain(rack), group="NVL")
    bw_nic = given_nic(s, p.nic)

    ratio = s.step("link_ratio", "NVLink inside the rack over the NIC, each direction", "ρ", bw_nvl / bw_nic, "",
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
                    lat_nic if p.ep > scale_up_domain(rack) else lat_nvl)
    before = s.step("a2a_step_before", "All-to-all per decode step, HGX nodes", "t_A_HGX", L_moe * t_b, "ms",
                    "every MoE layer dispatches and combines once per step")
    after = s.step("a2a_step_after", "All-to-all per decode step, NVL72 racks", "t_A_NVL", L_moe * t_a, "ms",
                   "the same bytes, the domain now holding the group" if p.ep <= scale_up_domain(rack)
                   else "the group spans racks: the copies to other racks still cross the NIC")
    s.step("", "All-to-all speed-up", "γ", before / after, "",
           "below ρ: part of the traffic stayed on NVLink before or still crosses the NIC after, and the fixed "
           "latencies do not shrink with the bytes")

    kv_tok = kv_bytes_per_token_given(s, model, 2, "bf16")
    kv_req = s.step("kv_request", "KV of one request to hand from prefill to decode", "KV_req", kv_tok * S, "GB",
                    "the latent cache of every prompt token")
    in_rack = s.compare(G_pre + ep, D_a) <= 0
    s.step("kv_before", "KV handoff, HGX nodes", "t_KV_HGX", kv_req / bw_nic, "ms",
           "prefill and decode GPUs sit in different nodes: one GPU's NIC")
    s.step("kv_after", "KV handoff, NVL72 racks", "t_KV_NVL", kv_req / (bw_nvl if in_rack else bw_nic), "ms",
           f"both pools ({format_number(p.prefill_gpus)} + {format_number(p.ep)} GPUs) fit one rack: NVLink"
           if in_rack else f"the pools ({format_number(p.prefill_gpus)} + {format_number(p.ep)} GPUs) overflow the "
           "rack's 72: the handoff still crosses the NIC")

    # The failure mode: a fault stalls every GPU of the NVLink domain, not just the group's.
    I_ref = s.param("I_ref", "ref_interruptions")
    T_ref = s.param("T_ref", "ref_days")
    G_ref = s.param("G_ref", "ref_gpus")
    lam = s.step("failure_rate", "Unexpected interruptions per GPU-day", "λ", I_ref / (T_ref * G_ref),
                 "interruptions/GPU-day", "Llama 3's record, taken per GPU-day")
    s.step("mtbf_before", "Time between stalls of the EP group, HGX nodes", "MTBF_HGX", 1 / (ep * lam), "days",
           "any of its GPUs failing stalls the all-to-all; nodes outside the group run on")
    blast = s.step("blast_after", "GPUs of the racks the group touches, NVL72", "B_NVL", ceil_of(ep / D_a) * D_a,
                   "GPUs", "the group fills ⌈EP/72⌉ racks, and a fault anywhere in one of them stalls the group")
    s.step("mtbf_after", "Time between stalls of the EP group, NVL72 racks", "MTBF_NVL", 1 / (blast * lam), "days",
           "a fault in any GPU of those racks")

    _crosses(s, p, in_rack)
    s.assume("Decode with DeepEP-style low-latency all-to-all (moe-all-to-all): each GPU sends its tokens' k copies "
             "(FP8 with 1-in-128 FP32 scales) and gets the k results back in bf16; routing is uniform over the group's "
             "GPUs, so a share min(EP, D)/EP of the copies stays in the domain; dispatch and combine of one "
             "layer are not overlapped with compute; each call pays the bank's fixed latency of the links it crosses "
             "(all-reduce-latency-nvlink or -nic, taken for an all-to-all too).")
    s.assume(f"Links at their datasheet rate each direction, the NVLink domain as scale-up-domain has it ({hgx.name} "
             f"and {rack.name} NVLink at half the "
             f"bidirectional figure; one {p.nic.name} per GPU); DeepEP measures 80-90% of the NIC's rate.")
    s.assume("The KV handoff moves one request's whole latent cache (bf16) from one prefill GPU to one decode GPU "
             "(data-parallel attention), over the decode GPU's own link.")
    s.assume(f"Failure rate: Llama 3 405B's {format_number(p.ref_interruptions)} unexpected interruptions in "
             f"{format_quantity(p.ref_days, 'days')} on {format_number(p.ref_gpus)} GPUs, taken as independent per "
             "GPU; on NVL72 a GPU or NVLink fault stalls its whole domain until the rack's fabric is back. That is "
             "the bank's simplification, the worst case: NVLink partitions or an in-rack spare would shrink it "
             "towards the group's own GPUs.")
    if in_rack:  # the NIC's bits-for-bytes slips come with any time read off a bit rate (BIT_RATE_TIME_SLIPS)
        s.slip("NVLink's bidirectional figure taken for one direction", 1 / 2, on="kv_after")
    s.slip("combine counted at the dispatch's FP8 size", s.evaluate((V_d + V_d) / V), on="a2a_step_after")
    _regime(s, p, ep, D_a, ratio)

