"""The upgrade that got slower - H100 SXM to an H200 part."""
from __future__ import annotations

from dataclasses import replace

import sympy

from solvers.conventions import convention_value
from solvers.data import Record
from solvers.derivation import Reject, Sheet, floor_of, max_of, min_of
from solvers.models.collective import crosses_domain, tp_all_reduce
from solvers.models.common import (
    dtype_bytes,
    given_active_params,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
    given_weight_bytes,
    hbm_bandwidth,
    peak_flops,
)
from solvers.models.deployment import CAPTURE_LIMIT, PCIE_GEN5, Knobs, bridge_ring, device_name, step_times
from solvers.models.kvcache import kv_bytes_per_token_per_gpu_given
from solvers.models.steptime import DEFAULT_CONSTANTS, STEP_OVERHEAD
from solvers.units import format_number, format_quantity

VLLM = "v0.10.1.1"  # the release the question pins: it names an H200 NVL's config files NVIDIA_H200_NVL




TOO_CLOSE = 0.02  # a ratio within 2% of that bar: "slower or not" would turn on rounding


MECHANISMS = {
    "nvl": "the NVL card's lower rated tensor peak (a 600 W PCIe board)",
    "bridge": "TP all-reduces crossing PCIe between NVLink bridge groups",
    "cap": "the power cap throttling the clocks of compute-bound work",
    "tuning": "fused-MoE kernel configs missing for this device name (default Triton configs)",
    "batch": "the bigger KV pool admitting a bigger batch, so every step reads more KV",
    "eager": "batches past the CUDA-graph capture size running eager",
    "hbm": "HBM3e bandwidth lower than the H100's HBM3",
}


def _prefill(s: Sheet, p, tag, gpu, P, BW, phi, penalty, W, TP, T, F, share, eta_c, eta_bw, t_oh, link,
             alpha=None):
    kernels = max_of(W / TP / (eta_bw * BW), F / (TP * eta_c * P * phi))
    ar = tp_all_reduce(s, p.model, gpu, p.tp, T, tag=f"pre_{tag}", label=f"prefill on {gpu.name}",
                       nic=link, latency=alpha, group=tag, where="PCIe between bridge groups")
    return s.step(f"ttft_{tag}", f"TTFT on {gpu.name}", f"TTFT_{tag}",
                  kernels * (1 + share * (penalty - 1)) + ar + t_oh, "ms",
                  "compute-bound math (the experts' share stretched by π where untuned), then all-reduces and "
                  "overhead")


def _decode(s: Sheet, p, tag, gpu, P, BW, phi, penalty, W, TP, C, KV, B, N_a, A, share, eta_c, eta_bw, t_oh, link,
            eager, alpha=None):
    moved = s.step(f"bytes_dec_{tag}", f"Bytes each GPU reads per decode step on {gpu.name}", f"M_dec_{tag}",
                   W / TP + B * C * KV, "GB", "its share of every expert and of the batch's KV")
    flops = s.step(f"flops_dec_{tag}", f"FLOPs of a decode step on {gpu.name}", f"F_dec_{tag}",
                   2 * N_a * B + A * B * C, "TFLOP", "2 per active parameter per sequence, plus each one's attention "
                   "over its context (attention-flops)")
    kernels = max_of(moved / (eta_bw * BW), flops / (TP * eta_c * P * phi))
    ar = tp_all_reduce(s, p.model, gpu, p.tp, B, tag=f"dec_{tag}", label=f"decode step on {gpu.name}",
                       nic=link, latency=alpha, group=f"{tag}d", where="PCIe between bridge groups")
    return s.step(f"tpot_{tag}", f"TPOT on {gpu.name}", f"TPOT_{tag}",
                  kernels * (1 + share * W / TP / moved * (penalty - 1)) + ar + t_oh + eager, "ms",
                  "the step's reads, the expert weights' share of them stretched where untuned, all-reduces, "
                  "overhead"
                  + (" and eager launches" if eager else ""))


def _mechanisms(s: Sheet, p, knobs: Knobs, kv: float, B_o: int, tuned: bool, bridged: bool, ratios) -> None:
    """Which mechanisms explain the symptoms: each removed alone, does TTFT or TPOT improve by 5%?"""
    rings = {bridged: bridge_ring(p, bridged) for bridged in {knobs.bridged, False}}
    base = step_times(p, knobs, kv, rings)
    sxm = Record(p.part, bf16_dense_tflops=989.4, fp8_dense_tflops=1978.9)

    def gain(**change) -> tuple[float, float]:
        ttft, tpot = step_times(p, replace(knobs, **change), kv, rings)
        return base[0] / ttft, base[1] / tpot

    def judge(key: str, acts: bool, change: dict, idle: str) -> None:
        option = MECHANISMS[key]
        if not acts:
            s.judge("mechanisms", option, False, idle)
            return
        g_ttft, g_tpot = gain(**change)
        s.judge("mechanisms", option, max(g_ttft, g_tpot) >= 1 + p.slower,
                f"without it TTFT would be {format_number(g_ttft, 3)}x and TPOT {format_number(g_tpot, 3)}x faster")

    nvl = p.part.name == "H200 NVL"
    judge("nvl", nvl, {"peak": peak_flops(sxm, p.dtype)}, f"an {p.part.name} runs at the H100's tensor peak")
    judge("bridge", bridged, {"bridged": False},
          f"TP {p.tp} stays on NVLink" + (" within one bridge group" if nvl else ""))
    judge("cap", p.power_cap < 1, {"throttle": 1.0}, "the board runs at its full rated power")
    judge("tuning", not tuned, {"penalty": 1.0}, f"a config file for {device_name(p.part)} ships for this shape")
    judge("batch", knobs.batch > B_o, {"batch": B_o}, "the pool admits no more sequences than on H100")
    if knobs.batch > CAPTURE_LIMIT >= B_o or knobs.batch <= CAPTURE_LIMIT:
        judge("eager", knobs.batch > CAPTURE_LIMIT, {"graphs": True},
              f"the batch of {format_number(knobs.batch)} is within the capture size of {CAPTURE_LIMIT}")
    else:
        s.judge("mechanisms", MECHANISMS["eager"], False,
                f"the H100's batch of {format_number(B_o)} ran eager too: not what changed")
    s.judge("mechanisms", MECHANISMS["hbm"], False,
            f"{format_quantity(hbm_bandwidth(p.part), 'TB/s')} of HBM3e against the H100's "
            f"{format_quantity(hbm_bandwidth(p.old), 'TB/s')}: more, not less", fact=True)
    if not any(s.judged("mechanisms").values()):
        raise Reject(f"no mechanism slows this deployment by 5% (TTFT {ratios[0]:.3f}x, TPOT {ratios[1]:.3f}x)")


def solve(p, s: Sheet) -> None:
    old, new, m = p.old, p.part, p.model
    n_tp = p.tp
    N = given_model_params(s, m)
    N_a = given_active_params(s, m)
    L = s.given("L", m.layers, "", "layers")
    E = s.given("E", m.experts, "", "experts per MoE layer")
    k = s.given("k", m.experts_per_token, "", "experts per token")
    h = s.given("h", m.hidden, "", "hidden size")
    f = s.given("f", m.ffn, "", "expert FFN size")
    b_w = given_weight_bytes(s, p.dtype)
    TP = s.param("TP", "tp")
    C, T = s.param("C", "context"), s.param("T", "prompt")
    B_max = s.param("B_max", "max_num_seqs")
    pi = s.param("π", "default_penalty")
    e_l = s.param("t_e", "eager_per_layer")
    cap = s.param("c", "power_cap")
    eta_c = s.given("η_c", DEFAULT_CONSTANTS.compute, "%", "achievable fraction of peak compute")
    eta_bw = s.given("η_bw", DEFAULT_CONSTANTS.bandwidth, "%", "achievable fraction of HBM bandwidth")
    t_oh = s.given("t_oh", STEP_OVERHEAD, "ms", "fixed overhead per step")
    u = given_usable_share(s)
    H_q, d_h = s.given("H_q", m.heads, "", "query heads"), s.given("d_h", m.head_dim, "", "head dim")
    A = s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 4 * L * H_q * d_h, "FLOP",
               "QKᵀ and PV, a multiply-add per head dimension each, per query head and layer")

    W = s.step("weights", "Weight bytes", "W", N * b_w, "GB", "every expert is stored, active or not")
    share_dec = s.step("moe_bytes_share", "Experts' share of the weight bytes", "s_dec", 3 * L * E * h * f / N, "%",
                       "3·L·E·h·f expert weights: what a decode step at this batch reads, every expert touched")
    share_pre = s.step("moe_flops_share", "Experts' share of a token's FLOPs", "s_pre", 3 * L * k * h * f / N_a, "%",
                       "the k active experts' 3·h·f per layer over the active parameters: prefill's share")
    KV = kv_bytes_per_token_per_gpu_given(s, m, dtype_bytes("bf16"), "bf16", TP)

    sides = {}
    for tag, gpu in (("o", old), ("n", new)):
        P = given_peak_flops(s, gpu, p.dtype, f"P_{tag}")
        BW = given_hbm_bandwidth(s, gpu, f"BW_{tag}")
        M = given_hbm_bytes(s, gpu, f"M_{tag}")
        pool = s.step(f"pool_{tag}", f"KV pool per GPU on {gpu.name}", f"F_{tag}", M * u - W / TP, "GB",
                      "usable HBM less this GPU's share of the weights")
        batch = s.step(f"batch_{tag}", f"Decode batch on {gpu.name}", f"B_{tag}",
                       min_of(B_max, floor_of(pool / (C * KV))), "sequences",
                       "as many sequences of the context as the pool holds, up to max_num_seqs")
        sides[tag] = (gpu, P, BW, batch)
    B_o, B_n = (s.value(sides[t][3]) for t in ("o", "n"))
    if B_o < 1:
        raise Reject("no sequence of this context fits beside the weights on H100")

    names = [name.strip() for name in p.tuned_for.split(",")]
    tuned = device_name(new) in names
    bridged = crosses_domain(new, n_tp)
    phi = s.step("throttle", "Compute throughput left under the power cap", "φ", cap ** sympy.Rational(1, 3), "%",
                 "the power-cap-clocks card: dynamic power ∝ f·V² with V ∝ f, so the clock falls as the cube root "
                 "of the power allowed")
    # Times on the H100 (tuned, uncapped, NVLink), then on the H200 part with every mechanism acting.
    gpu_o, P_o, BW_o, Bo = sides["o"]
    gpu_n, P_n, BW_n, Bn = sides["n"]
    one = sympy.Integer(1)
    F = s.step("flops_pre", "FLOPs of the prefill", "F_pre", 2 * N_a * T + A * T**2 / 2, "TFLOP",
               "2 per active parameter per token, plus the causal attention: the same on both GPUs")
    ttft_o = _prefill(s, p, "o", gpu_o, P_o, BW_o, one, one, W, TP, T, F, share_pre, eta_c, eta_bw, t_oh, None)
    eager_o = L * e_l if B_o > CAPTURE_LIMIT else 0
    tpot_o = _decode(s, p, "o", gpu_o, P_o, BW_o, one, one, W, TP, C, KV, Bo, N_a, A, share_dec, eta_c, eta_bw,
                     t_oh, None, eager_o)
    penalty_n = one if tuned else pi
    eager_n = L * e_l if B_n > CAPTURE_LIMIT else 0
    link_n = PCIE_GEN5 if bridged else None
    alpha_n = None if not bridged else s.given(
        "α_PCIe", convention_value("all-reduce-latency-nic") * 1e-6, "us",
        "latency of one all-reduce across PCIe between bridge groups (nvl-bridge-groups)")
    ttft_n = _prefill(s, p, "n", gpu_n, P_n, BW_n, phi, penalty_n, W, TP, T, F, share_pre, eta_c, eta_bw, t_oh,
                      link_n, alpha_n)
    tpot_n = _decode(s, p, "n", gpu_n, P_n, BW_n, phi, penalty_n, W, TP, C, KV, Bn, N_a, A, share_dec, eta_c, eta_bw,
                     t_oh, link_n, eager_n, alpha_n)
    r_ttft = s.step("ttft_ratio", "TTFT on the H200 part / on H100", "R_TTFT", ttft_n / ttft_o, "x",
                    "5% or more above 1: users see the first token later")
    r_tpot = s.step("tpot_ratio", "TPOT on the H200 part / on H100", "R_TPOT", tpot_n / tpot_o, "x",
                    "5% or more above 1: each user's tokens come slower")
    s.step("throughput_ratio", "Decode tokens/s on the H200 part / on H100", "R_X", (Bn / tpot_n) / (Bo / tpot_o),
           "x", "the batch ratio over the TPOT ratio: the fleet can gain while each user loses")
    ratios = s.value(r_ttft), s.value(r_tpot)
    if any(abs(r / (1 + p.slower) - 1) < TOO_CLOSE for r in ratios):
        raise Reject("TTFT or TPOT within 2% of 5% slower: too close to call")
    worse = (ratios[0] >= 1 + p.slower, ratios[1] >= 1 + p.slower)
    s.choose("regressed", {(True, True): "ttft-and-tpot", (True, False): "ttft-only", (False, True): "tpot-only",
                           (False, False): "neither"}[worse])

    knobs = Knobs(peak=peak_flops(new, p.dtype), bridged=bridged, throttle=s.value(phi),
                  penalty=1.0 if tuned else p.default_penalty,
                  batch=int(B_n), graphs=False)
    _mechanisms(s, p, knobs, s.value(KV), int(B_o), tuned, bridged, ratios)
    s.assume("Times by the step-time model's constants (step-compute, step-bandwidth, step-overhead) on both GPUs: "
             "a step is the slower of its reads over η_bw·HBM and its FLOPs over TP·η_c·peak, plus the TP "
             "all-reduces (tp-all-reduce) and the fixed overhead. FLOPs count the active parameters, 2 per token, "
             "plus attention (attention-flops); a decode step at these batches reads every expert.")
    s.assume(f"vLLM {VLLM} on both GPUs: it looks a fused-MoE config up by the device name with spaces as "
             "underscores, so an H200 NVL wants NVIDIA_H200_NVL files; from PR #23642 (later releases) every H200 "
             "reads the NVIDIA_H200 ones.")
    s.assume("TTFT is one prompt prefilled alone; TPOT is a decode step at the batch the KV pool admits, every "
             "sequence at the given context, KV in bf16. The H100 runs with tuned MoE configs, no power cap, "
             "NVLink; either GPU runs eager where its batch passes the capture size.")
    s.assume("Default fused-MoE configs stretch the expert kernels' time by the drawn factor π (vLLM logs 'Using "
             "default MoE config. Performance might be sub-optimal!'); the experts' share of a step is their "
             "share of its FLOPs in prefill and of its bytes in decode (expert weights over weights plus KV).")
    s.assume(f"An eager step (batch above vLLM's capture size of {CAPTURE_LIMIT}) pays t_e of CPU launch time per "
             "layer on top of its kernels; a captured step does not.")
    s.assume("Power cap: a compute-bound phase's clock falls as the cube root of the power allowed (dynamic power "
             "∝ f·V², V ∝ f; static power ignored): it slows the math, so a memory-bound decode step keeps its "
             "speed (power-cap-clocks). Bridged H200 NVL cards reach each other at the datasheet's 900 GB/s (an "
             "upper bound on a 4-way bridge); past a bridge group the ring runs over PCIe (nvl-bridge-groups).")
    s.slip("the batch ratio taken as the per-user change", on="tpot_ratio", factor=(B_n / B_o) / ratios[1])

