"""Where a roofline estimate of a server breaks."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.scheduling import require_realistic_tp, step_constants
from solvers.formulas.steptime import (
    all_reduce_steps,
    engine,
    require_fit,
    step_work,
)
from solvers.sheetmath import max_of
from solvers.units import format_number, format_quantity

_CORRECTIONS = ("bandwidth", "all-reduce", "overhead")


# Choices are graded without tolerance: a draw within the numbers' 3% of the 2x line, or with its two largest
# corrections this close, would turn on rounding rather than on understanding.
TOO_CLOSE = 0.03


# The breaks select's options, by the correction each names: at decode sizes the all-reduces' latency, not
# their bytes, is what a plan misses, so that option is judged on the latencies alone.
_BREAKS = {
    "bandwidth": "kernels reaching only part of the datasheet bandwidth and peak",
    "latency": "the all-reduces' fixed latency, two calls per layer",
    "bytes": "the all-reduces' bytes over the link",
    "overhead": "the per-step overhead (scheduling, sampling, launch gaps)",
}


# How each is caught before a capacity plan rests on it: the recall stage asks for it, each break's key says it.
_CATCH = {
    "bandwidth": "a streaming-copy kernel for achieved HBM bandwidth, and the decode GEMVs timed in a profiler",
    "latency": "all_reduce_perf (or the engine's custom all-reduce) at the decode message size, not at gigabytes",
    "bytes": "all_reduce_perf at the decode message size, read for its bus bandwidth",
    "overhead": "an Nsight Systems trace of one decode step, reading the gaps between kernels",
}



def _require_clear_call(ratio: float, ranked_costs: list[float], reach: float) -> None:
    if abs(ratio / reach - 1) < TOO_CLOSE:
        raise Reject("the corrected step sits on the 2x line")
    if ranked_costs[-2] > ranked_costs[-1] * (1 - TOO_CLOSE):
        raise Reject("the two largest corrections are too close to call")


def _judge_breaks(s: Sheet, parts: dict[str, sympy.Expr], step: sympy.Expr, matters: sympy.Expr) -> None:
    """Which corrections matter for this variant, each against its share of the corrected step on the sheet's
    exact values, with the measurement that catches it. One within the numbers' tolerance of the line is not
    listed: it would turn on rounding."""
    for name, cost in parts.items():
        share = format_quantity(s.evaluate(cost / step), "%", 2)
        counts = s.compare(cost, matters * step) > 0
        on_line = abs(s.evaluate(cost / step) / s.evaluate(matters) - 1) < TOO_CLOSE
        rule = ("; a decode all-reduce carries B·h·2 bytes, kilobytes to a few MB: its latency, not its bytes, is "
                "what a plan misses (the bytes pass a tenth of the step only at batches in the hundreds)"
                if name == "bytes" else "")
        if name == "bytes" and counts:  # the select's one declared fact: where a batch in the hundreds breaks it,
            on_line = True              # the option is not listed
        s.judge("breaks", _BREAKS[name], None if on_line else counts,
                f"{format_quantity(s.evaluate(cost), 'ms')}, {share} of the corrected step"
                + (": not asked here" if on_line else f": catch it with {_CATCH[name]}" if counts else "")
                + rule, fact=name == "bytes")


def _roofline_regime(s: Sheet, ratio, reach, costs: dict[str, float], dominant: str) -> None:
    off = format_number(s.value(ratio), 3)
    parts = ", ".join(f"{name} +{format_quantity(cost, 'ms')}" for name, cost in costs.items())
    summary = f"The corrected step is {off}x the bare roofline ({parts}); the {dominant} correction dominates."
    within = Side(
        "within-reach", summary,
        "The fixed costs (all-reduce latencies, per-step overhead) are weighed against the roofline step, "
        "which at decode is mostly each GPU's share of the weights: a smaller batch barely shrinks it, but a "
        "smaller model, a higher TP degree or faster HBM does, and a slower engine loop or slower all-reduces "
        "grow the fixed costs; past 2x the bare estimate is off by a factor.")
    off_by = Side(
        "off-by-a-factor", summary,
        "More bytes per GPU per step (a larger model per GPU, a lower TP degree, a large batch at long "
        "contexts) or smaller fixed costs (CUDA graphs, an overlapped scheduler, fast all-reduce kernels) "
        "shrink the corrections relative to the step: the bare estimate comes within reach, short mostly by "
        "the efficiency factor.")
    s.regime_by(ratio, reach, tie="below", above=off_by, below=within)


def solve(p, s: Sheet) -> None:
    require_realistic_tp(p.model, p.tp, p.gpu)
    e = engine(s, p.model, p.gpu, p.tp, step_constants(p), communication=True, kv_prerequisite=True)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    alpha = s.param("α", "allreduce_latency")
    require_fit(s, e, p.gpu, B * S)

    work = step_work(s, e, "dec", "decode step", B, B * S, B * S)
    t_0 = s.step("bare_time", "Bare roofline step", "t_bare",
                 max_of(work.bytes / e.BW, work.flops / (e.TP * e.P)), "ms",
                 "datasheet bandwidth and FLOP/s, nothing else")
    s.step("bare_throughput", "Bare roofline throughput", "X_bare", B / t_0, "tokens/s",
           "one token per request per step")
    t_1 = s.step("efficient_time", "Step at achievable bandwidth and compute", "t_1",
                 max_of(work.bytes / e.byte_rate, work.flops / e.flop_rate), "ms",
                 "kernels reach only part of the datasheet figures")
    d_bw = s.step("bandwidth_cost", "Correction 1: achievable bandwidth and compute", "Δ_bw", t_1 - t_0, "ms",
                  "what the efficiency factors add")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp, latency=alpha)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step", key="allreduce_time",
                         latency=alpha)
    ar_bytes = s.step("allreduce_bytes_time", "All-reduce bytes per step", "t_ARB", ar.per_token * B, "ms",
                      "the batch's activations over the link: the all-reduces' time less their latencies")
    t = s.step("corrected_time", "Corrected step", "t", t_1 + t_ar + e.t_oh, "ms",
               "the efficient step, then the all-reduces and the per-step overhead on top (correction 3)")
    X = s.step("corrected_throughput", "Corrected throughput", "X", B / t, "tokens/s",
               "one token per request per step")
    ratio = s.step("ratio", "Corrected over bare", "r", t / t_0, "x", "how far the bare estimate is off")
    reach = s.param("r_reach", "reach")

    s.assume("All-reduces are not overlapped with compute and use a ring: 2(TP-1)/TP of the message crosses "
             "each GPU's link in each direction, plus a fixed latency per call, which outweighs the bytes at small "
             "batches.")
    s.assume("Corrections add: efficiency stretches the roofline step, then communication and the per-step "
             "overhead (scheduling, sampling, launch gaps) come on top of it.")
    s.assume(f"A correction matters when it adds more than {format_quantity(p.matters, '%')} of the corrected step: "
             "below that it is inside the error of the estimate itself.")
    s.assume("Left out of the model, for the load test to find: attention kernels slower than their roofline at "
             "long context, prefill chunks sharing the step, queueing, sampling and detokenisation beyond the "
             "overhead.")
    s.slip("one all-reduce per layer instead of two", 0.5, on="allreduce_time")
    s.slip("one all-reduce per layer instead of two", on="corrected_throughput",
           factor=s.evaluate(B / (t_1 + t_ar / 2 + e.t_oh)) / s.value(X))
    s.slip("all-reduces of one layer only", 1 / p.model.layers, on="allreduce_time")
    s.slip("all-reduces of one layer only", on="corrected_throughput",
           factor=s.evaluate(B / (t_1 + t_ar / p.model.layers + e.t_oh)) / s.value(X))

    costs = {"bandwidth": s.value(d_bw), "all-reduce": s.value(t_ar), "overhead": s.value(e.t_oh)}
    parts = {"bandwidth": d_bw, "latency": ar.fixed, "bytes": ar_bytes, "overhead": e.t_oh}
    _require_clear_call(s.value(ratio), sorted(costs.values()), p.reach)
    dominant = max(_CORRECTIONS, key=costs.__getitem__)
    s.choose("dominant", dominant, f"{format_quantity(costs[dominant], 'ms')} of the "
             f"{format_quantity(s.value(t), 'ms')} step, ahead of "
             + " and ".join(f"{name} {format_quantity(cost, 'ms')}" for name, cost in costs.items()
                            if name != dominant))
    _judge_breaks(s, parts, t, exact(p.matters))
    _roofline_regime(s, ratio, reach, costs, dominant)
