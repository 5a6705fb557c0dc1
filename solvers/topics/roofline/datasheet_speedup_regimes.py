"""One GPU generation to the next - which workload gains most?."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet
from solvers.formulas.collective import all_reduce_terms, link_latency
from solvers.formulas.common import (
    dtype_bytes,
    given_compute_efficiencies,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_model_params,
    given_peak_flops,
    given_usable_share,
    hbm_bandwidth,
    hbm_bytes,
    peak_flops,
    require_context,
)
from solvers.formulas.kvcache import kv_bytes_per_token
from solvers.formulas.roofline import require_full_xgmi_ring
from solvers.formulas.steptime import given_step_bandwidth, given_step_overhead
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_number


class _Gpu:
    """One GPU type's datasheet givens on the sheet, tagged so two types can share it; reach and stream are what
    the bank's step model says its kernels get of the peak and of the bandwidth (the same shares on both)."""

    def __init__(self, s: Sheet, gpu, tag: str, eta_c, eta_bw):
        self.gpu, self.tag = gpu, tag
        self.P = given_peak_flops(s, gpu, "bf16", f"P_{tag}")
        self.BW = given_hbm_bandwidth(s, gpu, f"BW_{tag}")
        self.M = given_hbm_bytes(s, gpu, f"M_{tag}")
        self.reach, self.stream = eta_c * self.P, eta_bw * self.BW


def _step(s: Sheet, key: str, title: str, symbol: str, g: _Gpu, n, moved, flops, comm, why: str) -> sympy.Symbol:
    """One pass split over n GPUs in the bank's step model: the slower of its reads and its math at what the
    kernels reach, then its all-reduces (comm, the overhead included)."""
    return s.step(key, title, symbol, max_of(moved / (n * g.stream), flops / (n * g.reach)) + comm, "ms", why)


TIE = 0.03  # speedups closer than this give no clear winner (the answers are graded to 2-3%)


# What each side's text says about the workloads that lost, and what would flip it.
_OTHER_SIDE = {
    "compute": "Where the new GPU adds memory faster than FLOP/s (H100 to H200: the same die, 76% more HBM), the "
               "larger batch times the faster reads beats the peak ratio, and capacity wins.",
    "capacity": "Where the new GPU adds FLOP/s faster than memory (H200 to B200: 2.3x the peak, 1.3x the HBM), the "
                "larger batch no longer makes up for it and prefill gains most; where max_num_seqs caps the batch on "
                "both GPUs the extra HBM buys nothing. One 'x faster' figure for all workloads is wrong both ways.",
}


# The select on the vendor's one figure, asked before any arithmetic: which workloads gain more than the ratio of
# HBM bandwidths. Its reasons are said without the speedups the later stages ask (r7 finding 2).
_OVER = {
    "compute": "a long prompt's prefill",
    "bandwidth": "decode at the small batch",
    "capacity": "decode at the largest batch",
}


def _judge_over_bandwidth(s: Sheet, speedups: dict[str, sympy.Symbol], r_bw: sympy.Symbol, r_peak: float,
                          r_mem: float, capped: bool) -> None:
    """Each workload's speedup against the ratio of HBM bandwidths. A draw where one lands within the answers'
    tolerance of it is refused: every option is listed in every draw."""
    near = [name for name in ("compute", "capacity") if abs(s.value(speedups[name]) / s.value(r_bw) - 1) < TIE]
    if near:  # refused where it is asked: a push that does not ask the select keeps the draw
        s.refuse_if_asked(["over_bandwidth"], f"{_OVER[near[0]]} gains within 3% of the bandwidth ratio: too close "
                          "to call")
    peak, mem = format_number(r_peak, 3), format_number(r_mem, 3)
    beats = {name: s.compare(speedups[name], r_bw) > 0 for name in _OVER}
    # "decode at the largest batch that keeps today's TPOT" is no option: over 200 draws it beats the ratio exactly
    # where the largest batch does (r7's suggestion); it is asked as a number instead (speedup_iso).
    s.judge("over_bandwidth", _OVER["compute"], beats["compute"],
            f"a long prompt waits on the math: it follows the peak ratio, {peak}x, less what the all-reduces and "
            "the overhead hold back" + ("; that is past the bandwidth ratio" if beats["compute"] else
                                        "; that is short of the bandwidth ratio"))
    # The same bytes read faster while the all-reduces' latency and the step's overhead do not shrink: never above.
    s.judge("over_bandwidth", _OVER["bandwidth"], beats["bandwidth"],
            "the same bytes read faster, but the all-reduces' latency, paid twice a layer, and the step's overhead "
            "do not shrink: always a little short of the bandwidth ratio", fact=True)
    grows = ("max_num_seqs holds the batch, so only the faster reads help" if capped else
             f"{mem}x the HBM, the weights a fixed cost, so the batch grows faster than the memory")
    s.judge("over_bandwidth", _OVER["capacity"], beats["capacity"],
            f"{grows}; each step at that batch reads about all of usable HBM"
            + ("; together past the bandwidth ratio" if beats["capacity"] else "; together short of it"))


def _tpot_direction(s: Sheet, cap_o, cap_n, S_k, S_iso) -> None:
    """read12 (rf-ft) #1: "the speedup at today's TPOT" equalled the largest-batch speedup in over half the draws
    (the new GPU's largest-batch step already shorter), a number that restated a key. What it turns on is asked
    instead: at its largest batch, does each user wait longer or shorter per token than today? Exact; a step
    within the TPOT's 3% tolerance of today's is refused where it is asked."""
    if abs(s.value(cap_n) / s.value(cap_o) - 1) < TIE:
        s.refuse_if_asked(["tpot_at_largest"], "the new GPU's largest-batch step is within 3% of today's TPOT")
    longer = s.compare(cap_n, cap_o) > 0
    gain, iso = format_number(s.value(S_k), 4), format_number(s.value(S_iso), 4)
    s.choose("tpot_at_largest", "longer" if longer else "shorter",
             f"{s.text(cap_n)} against today's {s.text(cap_o)}: "
             + (f"the extra HBM buys batch faster than bandwidth reads it; held at today's TPOT the gain is "
                f"{iso}x, not {gain}x" if longer else
                f"the faster reads more than pay for any growth in the batch: the {gain}x costs no user any "
                "speed"))


def _speedup_regime(s: Sheet, speedups: dict[str, sympy.Symbol], batch_o, batch_n, ratio, cap_o, cap_n,
                    capped: bool) -> None:
    """The workload that gains most is the regime; the runner-up's speedup is its boundary."""
    value = {name: s.value(sym) for name, sym in speedups.items()}
    ranked = sorted(value, key=value.__getitem__, reverse=True)
    best, second = ranked[0], ranked[1]
    if value[second] >= value[best] * (1 - TIE):
        # Within the answers' tolerance a candidate could not tell which workload wins.
        raise Reject("two workloads gain within 3%: no clear winner")
    if best == "bandwidth":
        # Only where max_num_seqs caps both batches (about 4% of draws): too rare to be a choice worth offering.
        raise Reject("small-batch decode gains most: max_num_seqs caps both batches")
    shown = {name: format_number(v, 3) for name, v in value.items()}
    fit = (f"max_num_seqs holds both at {format_number(s.value(batch_o))} requests" if capped
           else f"{s.text(batch_n)} fit instead of {format_number(s.value(batch_o))} "
                f"({format_number(s.value(ratio), 3)}x, the weights being a fixed cost)")
    tpot = (f"the step at that batch takes {s.text(cap_n)} instead of "
            f"{s.text(cap_o)}, so each user "
            + ("waits longer per token" if s.compare(cap_n, cap_o) > 0 else "also gets tokens sooner"))
    summary = {
        "capacity": f"Decode at the largest batch gains most ({shown['capacity']}x): {fit}, and {tpot}. Small-batch "
                    f"decode gains {shown['bandwidth']}x and prefill {shown['compute']}x.",
        "compute": f"Prefill gains most ({shown['compute']}x, near the peak ratio): decode gains {shown['bandwidth']}x "
                   f"at a small batch and {shown['capacity']}x at the largest batch ({fit}; {tpot}).",
    }[best]
    s.set_regime(best, summary, speedups[second], speedups[best], _OTHER_SIDE[best])


def solve(p, s: Sheet) -> None:
    old, new = p.old_gpu, p.new_gpu
    require_context(p.model, p.context)
    for gpu in (old, new):
        require_full_xgmi_ring(gpu, p.gpus)
    if old.id == new.id:
        raise Reject("same GPU twice")
    if peak_flops(new, "bf16") < peak_flops(old, "bf16") or hbm_bandwidth(new) < hbm_bandwidth(old):
        raise Reject("not an upgrade: the new GPU is slower in peak or bandwidth")

    N = given_model_params(s, p.model)
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per value (bf16 weights and KV cache)")
    n = s.param("n", "gpus")
    u = given_usable_share(s)
    C = s.param("C", "context")
    B_s = s.param("B_s", "small_batch")
    eta_c, _ = given_compute_efficiencies(s, old, "bf16", "bf16")
    eta_bw = given_step_bandwidth(s)
    t_oh = given_step_overhead(s)
    o, w = _Gpu(s, old, "old", eta_c, eta_bw), _Gpu(s, new, "new", eta_c, eta_bw)
    alpha = link_latency(s, old, p.gpus)  # the card's latency per call, the same on both
    ar_old = all_reduce_terms(s, p.model, old, p.gpus, group="old", tp_symbol=n, latency=alpha)
    ar_new = all_reduce_terms(s, p.model, new, p.gpus, group="new", tp_symbol=n, latency=alpha)

    W = s.step("weights", "Weight bytes", "W", N * b, "GB", "one copy of the weights, split across the replica's GPUs")
    kv_tok = kv_bytes_per_token(s, p.model, b)
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GB",
                    "every token of the context keeps its keys and values")
    a_o = s.step("", f"All-reduce time per token of a pass on {old.name}", "a_old",
                 ar_old.per_token, "us",
                 "2 per layer, each sending 2(n−1)/n of a token's hidden vector over NVLink (tp-all-reduce)")
    a_n = s.step("", f"All-reduce time per token of a pass on {new.name}", "a_new",
                 ar_new.per_token, "us", "the same message over the new GPU's NVLink")
    fixed = ar_old.fixed + t_oh  # the all-reduces' latency and the step's overhead: the same on both GPUs

    # Compute-bound workload: a prompt's tokens all share one read of the weights.
    pre_o = _step(s, "prefill_old", f"Prefill time on {old.name}", "t_pre_old", o, n, W, 2 * N * C,
                  fixed + a_o * C, "thousands of tokens per weight read: the math dominates, then the all-reduces")
    pre_n = _step(s, "prefill_new", f"Prefill time on {new.name}", "t_pre_new", w, n, W, 2 * N * C,
                  fixed + a_n * C, "same bytes and FLOPs on the new GPU")
    S_c = s.step("speedup_compute", "Speedup, compute-bound (prefill)", "S_compute", pre_o / pre_n, "x",
                 "the ratio of peak FLOP/s, diluted by the all-reduces where NVLink did not speed up as much")

    # Bandwidth-bound workload: a small batch cannot amortise the weight read.
    small = W + B_s * kv_req
    dec_o = _step(s, "small_decode_old", f"Decode step at the small batch on {old.name}", "t_bw_old", o, n,
                  small, 2 * N * B_s, fixed + a_o * B_s,
                  "weights plus the batch's KV read every step; a few tokens per weight read sit far below the ridge")
    dec_n = _step(s, "small_decode_new", f"Decode step at the small batch on {new.name}", "t_bw_new", w, n,
                  small, 2 * N * B_s, fixed + a_n * B_s, "the same bytes, read faster")
    S_b = s.step("speedup_bandwidth", "Speedup, bandwidth-bound (small-batch decode)", "S_bandwidth",
                 dec_o / dec_n, "x", "both steps read the same bytes: close to the ratio of HBM bandwidths")

    # Capacity-bound workload: the batch is whatever fits next to the weights.
    cap = s.param("B_max", "max_num_seqs")
    batch_o = s.step("batch_old", f"Largest batch on {old.name}", "B_old",
                     min_of(cap, floor_of((n * o.M * u - W) / kv_req)), "requests",
                     "usable HBM of the replica minus the weights, in whole requests' KV caches, up to max_num_seqs")
    batch_n = s.step("batch_new", f"Largest batch on {new.name}", "B_new",
                     min_of(cap, floor_of((n * w.M * u - W) / kv_req)), "requests",
                     "the weights cost the same, so every extra byte of HBM goes to KV cache, up to max_num_seqs")
    if s.value(batch_o) < p.small_batch:
        raise Reject("the small batch does not fit on the current GPUs")
    ratio = s.step("batch_ratio", "Batch ratio", "R_B", batch_n / batch_o, "x",
                   "grows faster than the memory ratio, because the weights are a fixed cost")
    cap_o = _step(s, "capacity_decode_old", f"Decode step (TPOT) at the largest batch on {old.name}", "t_cap_old",
                  o, n, W + batch_o * kv_req, 2 * N * batch_o, fixed + a_o * batch_o,
                  "the step reads nearly all of usable HBM: about u·M/BW whatever the model")
    cap_n = _step(s, "capacity_decode_new", f"Decode step (TPOT) at the largest batch on {new.name}", "t_cap_new",
                  w, n, W + batch_n * kv_req, 2 * N * batch_n, fixed + a_n * batch_n,
                  "more bytes per step, read faster: the per-user speed follows HBM capacity over bandwidth")
    X_o = s.step("throughput_old", f"Decode throughput on {old.name}", "X_old", batch_o / cap_o, "tokens/s",
                 "one token per request per step")
    X_n = s.step("throughput_new", f"Decode throughput on {new.name}", "X_new", batch_n / cap_n, "tokens/s",
                 "one token per request per step")
    S_k = s.step("speedup_capacity", "Speedup, capacity-bound (decode at the largest batch)", "S_capacity",
                 X_n / X_o, "x", "batch ratio × bandwidth ratio ÷ ratio of bytes per step, when both read-bound")
    # The same per-user speed: the largest batch whose step on the new GPU is no longer than the old TPOT.
    room_mem = (cap_o - fixed - W / (n * w.stream)) / (kv_req / (n * w.stream) + a_n)
    room_math = (cap_o - fixed) / (2 * N / (n * w.reach) + a_n)
    B_iso = s.step("batch_iso", f"Largest batch on {new.name} at the {old.name} TPOT", "B_iso",
                   min_of(batch_n, floor_of(room_mem), floor_of(room_math)), "requests",
                   "solve the new step time = the old TPOT for the batch (reads and math alike), capped by memory")
    t_iso = _step(s, "", f"Decode step at that batch on {new.name}", "t_iso", w, n, W + B_iso * kv_req,
                  2 * N * B_iso, fixed + a_n * B_iso, "no longer than the old TPOT")
    S_iso = s.step("speedup_iso", "Speedup at the same per-user speed", "S_iso", (B_iso / t_iso) / X_o, "x",
                   "what the upgrade buys without slowing any user down")
    _tpot_direction(s, cap_o, cap_n, S_k, S_iso)

    s.assume("Usable HBM (usable-hbm) holds weights plus KV cache; activations and CUDA graphs are ignored.")
    s.assume("The bank's step model (step-compute, step-bandwidth, step-overhead) on both GPUs: the matmuls at 60% of "
             "the dense bf16 peak, the reads at 80% of HBM bandwidth, 2 ms a step. The shares cancel in a ratio "
             "where one side binds on both GPUs; the overhead and the all-reduces' latency do not shrink with a "
             "faster GPU, so they pull every speedup toward 1.")
    s.assume("FLOPs from the weight matmuls only (flops-per-token); attention FLOPs over the context would add to "
             "prefill and leave decode just as memory-bound.")
    s.assume("Tensor parallelism splits weights, KV heads and FLOPs evenly; its all-reduces follow the tp-all-reduce "
             "card over each GPU's NVLink, not overlapped. At TP 8 a long prefill's all-reduces are a third of it, and "
             "NVLink does not speed up from H100 to H200: that holds prefill near 1x there. An engine that overlaps "
             "them with the GEMMs moves prefill closer to the peak ratio. In the capacity case every request holds "
             "its full context.")
    s.slip("memory ratio taken as the capacity speedup", on="speedup_capacity",
           factor=(hbm_bytes(new) / hbm_bytes(old)) / s.value(S_k))
    s.slip("batch ratio taken as the capacity speedup (the longer step forgotten)", on="speedup_capacity",
           factor=s.value(ratio) / s.value(S_k))
    r_bw = s.step("bandwidth_ratio", "Ratio of HBM bandwidths", "r_BW", w.BW / o.BW, "x",
                  "the one 'x faster' a datasheet comparison quotes")
    capped = s.compare(batch_o, cap) == 0
    _judge_over_bandwidth(s, {"compute": S_c, "bandwidth": S_b, "capacity": S_k}, r_bw,
                          peak_flops(new, "bf16") / peak_flops(old, "bf16"), hbm_bytes(new) / hbm_bytes(old),
                          s.compare(batch_n, cap) == 0 and capped)
    _speedup_regime(s, {"compute": S_c, "bandwidth": S_b, "capacity": S_k}, batch_o, batch_n, ratio, cap_o, cap_n,
                    capped)

