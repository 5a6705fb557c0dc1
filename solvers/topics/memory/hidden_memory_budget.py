"""The memory beyond weights and KV cache, and where an OOM comes from."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.memory import profile_run_inputs
from solvers.units import format_quantity

# The three vLLM v1 start-ups the question draws from: before PR #25359 (September 2025) the first memory
# snapshot came before the NCCL communicators were set up, so their buffers showed up as non-torch growth in
# the profile and were subtracted; from that change they sit in the snapshot's baseline, which the budget never
# subtracts; from v0.21 start-up also captures the CUDA graphs in a trial and subtracts their estimate.
# v0.11 is left out: whether its first release has the change is not pinned down here.
BEFORE_25359, FROM_V021 = "v0.10", "v0.21"  # and v0.14, v0.18 between them


def _measured(release: str) -> dict[str, bool]:
    """Whether start-up subtracts the communicators and the graphs before it sizes the KV cache, in this release."""
    return {"the NCCL communicators": release == BEFORE_25359, "the CUDA graphs": release == FROM_V021}


# The levers the last ask weighs, each alone: whether the process fits under load with it follows from the
# variant's sizes (a lever that moves a consumer the budget already subtracts moves the KV cache, not the fit).
EAGER = "run eager, capturing no CUDA graphs"
EXPANDABLE = "expandable segments in the allocator, so no fragmentation builds up"
LOWER = "gpu_memory_utilization lowered by {util_step}"
RAISE = "gpu_memory_utilization raised by {util_nudge}"
MORE_GRAPHS = "twice the CUDA graph memory (more capture sizes)"


# A draw whose unbudgeted memory sits this close to the headroom is a coin toss on the day (a few hundred MiB of
# fragmentation either way), and its push a hairline: refused. One whose headroom is this many times the
# unbudgeted memory has nothing at stake, and no one consumer in range tips it: refused too.
NEAR_TIE = sympy.Rational(1, 20)
FAR_APART = 3

MIN_KV_MEMORY = 2 * 2**30  # below 2 GiB of KV cache per GPU nobody would deploy this: it holds a few contexts


def _budget_regime(s: Sheet, release: str, headroom, unbudgeted, u) -> None:
    room, need = s.text(headroom), s.text(unbudgeted)
    util = s.text(u)
    fixes = ("lower gpu_memory_utilization to the highest value that fits, capture fewer CUDA graph sizes, "
             + ("" if release == FROM_V021 else "move to v0.21's graph estimate, ")
             + "or set the KV cache size explicitly (kv_cache_memory_bytes) from a measured run")
    s.regime_by(unbudgeted, headroom, tie="below", below=Side(
        "fits",
        f"The {need} vLLM did not budget for fit in the {room} that gpu_memory_utilization = {util} leaves "
        "outside its budget: the deployment runs.",
        "Raising gpu_memory_utilization for more KV blocks, capturing more CUDA graph sizes or a fragmenting "
        "workload eats that headroom; past it the process OOMs although weights plus KV cache still fit on paper.",
        near=f"The {need} vLLM did not budget for just fit in the {room} of headroom: a few hundred MiB more "
             "graphs or fragmentation and the process OOMs under load."),
        above=Side(
        "oom",
        f"The {need} vLLM did not budget for overflow the {room} that gpu_memory_utilization = {util} leaves "
        "outside its budget: the process OOMs (at graph capture or under load) although weights plus KV cache fit.",
        f"To fit, {fixes}.",
        near=f"The {need} vLLM did not budget for overflow the {room} of headroom by a little: the OOM comes "
             f"late, under load as fragmentation grows. To fit, {fixes}."))


def _gib(s: Sheet, expr) -> str:
    return format_quantity(s.evaluate(expr), "GiB") if s.shown else ""


def _levers(s: Sheet, release: str, M, u, step, nudge, unbudgeted, headroom, G, F) -> None:
    """Which single lever leaves the process fitting under load (a tie fits), from this variant's sizes."""
    graphs_outside = not _measured(release)["the CUDA graphs"]
    cases = {
        EAGER: (unbudgeted - G if graphs_outside else unbudgeted, headroom,
                f"the {s.text(G)} of graphs " + ("leave the unbudgeted memory" if graphs_outside else
                "were subtracted up front: dropping them grows the KV cache, the unbudgeted memory stays")),
        EXPANDABLE: (unbudgeted - F, headroom, f"the {s.text(F)} of fragmentation leave the unbudgeted memory"),
        LOWER: (unbudgeted, M * (1 - u + step), "the budget gives up that share of the GPU to the headroom"),
        RAISE: (unbudgeted, M * (1 - u - nudge), "the budget takes that share of the GPU from the headroom"),
        MORE_GRAPHS: (unbudgeted + G if graphs_outside else unbudgeted, headroom,
                      f"another {s.text(G)} of graphs " + ("outside the budget" if graphs_outside else
                      "in the estimate start-up subtracts: the KV cache shrinks, the fit is unchanged")),
    }
    for option, (need_after, room_after, because) in cases.items():
        if option == RAISE and s.compare(u + nudge, 1) >= 0:
            s.judge("levers", option, None, "the whole GPU or more: no utilisation to raise to")
            continue
        fits = s.compare(need_after, room_after) <= 0
        s.judge("levers", option, fits,
                f"{because}: {_gib(s, need_after)} to fit in {_gib(s, room_after)}, "
                + ("fits" if fits else "still over"))


def solve(p, s: Sheet) -> None:
    M_reported, u, n, A, T, w = profile_run_inputs(p, s, p.util)
    M = s.step("total_memory", "Memory the device reports", "M_dev", M_reported, "GiB",
               "the same bytes in GiB, the unit every consumer is counted in")
    C = s.param("C", "cuda_context")
    X = s.param("X", "nccl")
    G = s.param("G", "cuda_graphs")
    F = s.param("F", "fragmentation")
    measured = _measured(p.release)
    terms = {"the NCCL communicators": X, "the CUDA graphs": G}
    counted = w + A + T + sum((v for k, v in terms.items() if measured[k]), sympy.Integer(0))
    outside = C + F + sum((v for k, v in terms.items() if not measured[k]), sympy.Integer(0))
    requested = s.step("requested", "Memory vLLM lets itself use", "M_req", M * u, "GiB",
                       "total memory × gpu_memory_utilization")
    subtracted = s.step("measured", "Non-KV memory start-up subtracts", "M_meas", counted, "GiB",
                        "weights, the profile's activation peak and non-torch growth"
                        + (", and the communicators: this release sets them up after the first snapshot, so the "
                           "profile sees them as non-torch growth" if measured["the NCCL communicators"] else "")
                        + (", and the CUDA graphs' trial estimate" if measured["the CUDA graphs"] else ""))
    kv = s.step("kv_memory", "KV cache vLLM allocates per GPU", "M_KV", requested - subtracted, "GiB",
                "whatever of the requested memory the subtracted consumers leave")
    if s.value(kv) < MIN_KV_MEMORY:
        raise Reject("under 2 GiB of KV cache per GPU: too little to serve, the deployment would be resized")
    s.step("paper_share", "Weights plus KV cache, share of the GPU", "S_paper", (w + kv) / M, "%",
           "the two numbers everyone checks: on paper they fit with room to spare")
    headroom = s.step("headroom", "Memory outside vLLM's budget", "H", M - requested, "GiB",
                      "the (1 − u) share vLLM never plans for; whatever it did not subtract must fit here")
    if s.compare(C, headroom) >= 0:
        raise Reject("the runtime context alone exceeds the headroom: vLLM refuses to start")
    unbudgeted = s.step("unbudgeted", "Memory vLLM did not budget for", "U", outside, "GiB",
                        "the snapshot's baseline"
                        + (" (runtime context and communicators, set up before the snapshot since PR #25359)"
                           if not measured["the NCCL communicators"] else " (the runtime context)")
                        + ", fragmentation that builds up while serving"
                        + ("" if measured["the CUDA graphs"] else
                           ", and the graphs, captured after the cache: only v0.21 estimates them"))
    if s.compare(unbudgeted, (1 - NEAR_TIE) * headroom) > 0 and s.compare(unbudgeted, (1 + NEAR_TIE) * headroom) < 0:
        raise Reject("the unbudgeted memory is within a few percent of the headroom: a coin toss on the day")
    if s.compare(headroom, FAR_APART * unbudgeted) > 0:
        raise Reject(f"the headroom is more than {FAR_APART} times the unbudgeted memory: nothing at stake")
    s.step("peak_share", "Peak use, share of the GPU", "S_peak", (requested + unbudgeted) / M, "%",
           "the full budget in use (KV cache allocated up front) plus everything outside it")
    s.step("max_util", "Highest gpu_memory_utilization that fits", "u_max", 1 - unbudgeted / M, "%",
           "leave exactly the unbudgeted memory outside the budget")
    _levers(s, p.release, M, u, s.param("d_u", "util_step"), s.param("d_up", "util_nudge"), unbudgeted, headroom,
            G, F)

    s.assume("Total memory is what the device reports, as vLLM reads it from the driver: for most GPUs a few "
             "percent more than the datasheet label. One GPU of the TP group stands for all of them.")
    s.assume("vLLM v1 start-up: a memory snapshot, weights measured while loading, a profile run at "
             "max_num_batched_tokens for the activation peak and the non-torch growth, then the KV cache, "
             "allocated whole; CUDA graphs are captured last. PR #25359 (September 2025) moved the NCCL set-up "
             "before the snapshot; v0.21 added the graphs' trial estimate (on by default, "
             "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off) and raised the default utilisation to 0.92. "
             "The estimate is taken as equal to the graphs' real pool.")
    s.assume("Fragmentation builds up only while serving, so no start-up profile sees it; expandable segments "
             "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) are taken to remove it, an upper bound on what "
             "they save. Each lever is weighed alone, the rest of the variant as drawn.")
    s.slip("only the CUDA graphs counted as unbudgeted", s.value(G) / s.value(unbudgeted), on="unbudgeted")
    s.slip("only the CUDA graphs counted as unbudgeted", on="max_util",
           factor=s.evaluate(1 - G / M) / s.evaluate(1 - unbudgeted / M))
    kv_room = s.value(kv)
    s.slip("the activation peak and non-torch memory not subtracted", on="kv_memory",
           factor=(kv_room + p.activation_peak + p.non_torch) / kv_room)
    _budget_regime(s, p.release, headroom, unbudgeted, u)

