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


# The levers each side's push weighs, each alone: whether the process fits under load with it follows from the
# variant's sizes (a lever that moves a consumer the budget already subtracts moves the KV cache, not the fit).
# Where the push lands in an OOM, the fixes; where it lands fitting, what would tip it back (r7: one select for
# both sides had every helpful lever true in a fitting draw and every harmful one false in an OOM).
EAGER = "run eager, capturing no CUDA graphs"
HALF_GRAPHS = "capture half the CUDA graph sizes, halving the graphs' memory"
EXPANDABLE = "expandable segments in the allocator, if they give back all the reserved-but-unused growth"
HALF_NCCL = "half the NCCL buffer memory (a smaller NCCL_BUFFSIZE)"
MORE_GRAPHS = "twice the CUDA graph memory (more capture sizes)"
MORE_GROWTH = "twice the allocator's reserved-but-unused growth (burstier, longer contexts)"
MORE_NCCL = "twice the NCCL buffer memory (a larger NCCL_BUFFSIZE)"
# The trap each side's push hint names (read10): a consumer the budget already counts moves the KV cache, never the
# fit, in every release: declared facts, one a select.
SMALLER_BATCH = "half the max_num_batched_tokens, halving the profile run's activation peak"
LARGER_BATCH = "twice the max_num_batched_tokens, doubling the profile run's activation peak"


# A draw whose unbudgeted memory sits this close to the headroom is a coin toss on the day (a few hundred MiB of
# fragmentation either way), and its push a hairline: refused. One whose headroom is this many times the
# unbudgeted memory has nothing at stake, and no one consumer in range tips it: refused too.
NEAR_TIE = sympy.Rational(1, 20)
FAR_APART = 3

# How the process ends (read11: dying while capturing the graphs and an OOM under load are different incidents; a
# start-up check that refuses to start is a third, refused as a draw).
RUNS, AT_CAPTURE, UNDER_LOAD = "runs", "dies at start-up, capturing the CUDA graphs", "OOMs later, under load"

MIN_KV_MEMORY = 2 * 2**30  # below 2 GiB of KV cache per GPU nobody would deploy this: it holds a few contexts


def _budget_regime(s: Sheet, release: str, headroom, unbudgeted, at_start, u) -> None:
    """Fits or OOM; an OOM says when it comes (read10 @58: 'late, under load' where the graphs alone overflowed):
    at start-up, capturing the CUDA graphs, where what start-up allocates outside the budget already overflows the
    headroom; else under live traffic, as the allocator's reserved memory grows."""
    room, need = s.text(headroom), s.text(unbudgeted)
    util = s.text(u)
    fixes = ("lower gpu_memory_utilization to the highest value that fits, capture fewer CUDA graph sizes, "
             + ("" if release == FROM_V021 else "move to v0.21's graph estimate, ")
             + "or set the KV cache size explicitly (kv_cache_memory_bytes) from a measured run")
    early = ", ".join(["the runtime context", *(name for name, up_front in _measured(release).items() if not up_front)])
    if s.compare(at_start, headroom) > 0:
        when = (f"It dies at start-up, capturing the CUDA graphs: the {_gib(s, at_start)} allocated outside the "
                f"budget before serving ({early}) already overflow the headroom.")
    else:
        when = (f"It starts: the {_gib(s, at_start)} allocated outside the budget before serving ({early}) fit. "
                "The OOM comes later, under load, as the allocator's reserved-but-unused memory grows.")
    if s.compare(unbudgeted, headroom) <= 0:
        s.choose("failure", RUNS, f"all {need} it did not budget for fit in the {room} outside the budget")
    elif s.compare(at_start, headroom) > 0:
        s.choose("failure", AT_CAPTURE, f"the {_gib(s, at_start)} allocated before serving ({early}) overflow the "
                 f"{room} outside the budget")
    else:
        s.choose("failure", UNDER_LOAD, f"the {_gib(s, at_start)} allocated before serving ({early}) fit in the "
                 f"{room}; the growth under load takes it to {need}")
    s.regime_by(unbudgeted, headroom, tie="below", below=Side(
        "fits",
        f"The {need} vLLM did not budget for fit in the {room} that gpu_memory_utilization = {util} leaves "
        "outside its budget: the deployment runs.",
        "Raising gpu_memory_utilization for more KV blocks, capturing more CUDA graph sizes or a burstier "
        "workload eats that headroom; past it the process OOMs although weights plus KV cache still fit on paper.",
        near=f"The {need} vLLM did not budget for just fit in the {room} of headroom: a few hundred MiB more "
             "graphs or allocator growth and the process OOMs under load."),
        above=Side(
        "oom",
        f"The {need} vLLM did not budget for overflow the {room} that gpu_memory_utilization = {util} leaves "
        f"outside its budget, although weights plus KV cache fit. {when}",
        f"To fit, {fixes}.",
        near=f"The {need} vLLM did not budget for overflow the {room} of headroom by a little. {when} "
             f"To fit, {fixes}."))


def _gib(s: Sheet, expr) -> str:
    return format_quantity(s.evaluate(expr), "GiB") if s.shown else ""


def _outside(s: Sheet, release: str, name: str, value, delta, unbudgeted) -> tuple[object, str]:
    """The unbudgeted memory after one consumer changes by `delta`, and why: a consumer start-up subtracted moves
    the KV cache instead."""
    counted = _measured(release).get(name, False)
    if counted:
        return unbudgeted, (f"{name}, {s.text(value)}, counted up front in this release: the change moves the KV "
                            "cache, the unbudgeted memory stays")
    return unbudgeted + delta, f"{name}, {s.text(value)}, outside the budget"


def _levers(s: Sheet, release: str, unbudgeted, headroom, G, X, F) -> None:
    """Each lever alone, from this variant's sizes. An OOM is asked which fixes get it running (`fixes`), a fitting
    process which risks tip it over (`risks`): one direction a stage (read10: the other direction's options were
    false by the regime alone). The other select is judged too, for the script and the what-if."""
    half = sympy.Rational(1, 2)
    graphs, nccl, growth = "the CUDA graphs", "the NCCL communicators", "the reserved-but-unused growth"
    fixes = {
        EAGER: _outside(s, release, graphs, G, -G, unbudgeted),
        HALF_GRAPHS: _outside(s, release, graphs, G, -half * G, unbudgeted),
        EXPANDABLE: _outside(s, release, growth, F, -F, unbudgeted),
        HALF_NCCL: _outside(s, release, nccl, X, -half * X, unbudgeted),
    }
    risks = {
        MORE_GRAPHS: _outside(s, release, graphs, G, G, unbudgeted),
        MORE_GROWTH: _outside(s, release, growth, F, F, unbudgeted),
        MORE_NCCL: _outside(s, release, nccl, X, X, unbudgeted),
    }
    for option, (need_after, because) in fixes.items():
        fits = s.compare(need_after, headroom) <= 0
        cost = (" (at a price: every decode step launches its kernels one by one, a slower TPOT, worst at small "
                "batches)" if option == EAGER and fits else "")
        s.judge("fixes", option, fits, f"{because}: {_gib(s, need_after)} to fit in {_gib(s, headroom)}, "
                + ("fits" if fits else "over") + cost)
    s.judge("fixes", SMALLER_BATCH, False, "the activation peak is measured in the profile run and subtracted: a "
            "smaller one gives the KV cache more, the memory outside the budget stays what it was", fact=True)
    for option, (need_after, because) in risks.items():
        fits = s.compare(need_after, headroom) <= 0
        s.judge("risks", option, not fits, f"{because}: {_gib(s, need_after)} to fit in {_gib(s, headroom)}, "
                + ("fits" if fits else "over"))
    s.judge("risks", LARGER_BATCH, False, "the activation peak is measured in the profile run and subtracted: a "
            "larger one takes it from the KV cache, never from the memory outside the budget", fact=True)


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
    baseline = C + (0 if measured["the NCCL communicators"] else X)
    if s.compare(baseline, headroom) >= 0:
        # vLLM's start-up check ("Free memory on device ... is less than desired GPU memory utilization") raises
        # before any KV cache: a refusal to start, not the OOM this question asks about (read10).
        raise Reject("the snapshot's baseline (context and communicators) exceeds the headroom: vLLM's start-up "
                     "check refuses to start, a different failure")
    unbudgeted = s.step("unbudgeted", "Memory vLLM did not budget for", "U", outside, "GiB",
                        "the snapshot's baseline"
                        + (" (runtime context and communicators, set up before the snapshot since PR #25359)"
                           if not measured["the NCCL communicators"] else " (the runtime context)")
                        + ", the allocator's reserved-but-unused growth under load"
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
    at_start = baseline + (0 if measured["the CUDA graphs"] else G)
    _levers(s, p.release, unbudgeted, headroom, G, X, F)

    s.assume("Total memory is what the device reports, as vLLM reads it from the driver: for most GPUs a few "
             "percent more than the datasheet label. One GPU of the TP group stands for all of them.")
    s.assume("vLLM v1 start-up: a memory snapshot, weights measured while loading, a profile run at "
             "max_num_batched_tokens for the activation peak and the non-torch growth, then the KV cache, "
             "allocated whole; CUDA graphs are captured last. PR #25359 (September 2025) moved the NCCL set-up "
             "before the snapshot; v0.21 added the graphs' trial estimate (on by default, "
             "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off) and raised the default utilisation to 0.92. "
             "The estimate is taken as equal to the graphs' real pool; in practice it errs high (vLLM issue "
             "#45178, PR #45197: 3.1 times less KV cache on a B200 with the default-on estimate), which "
             "costs KV cache, never the fit.")
    s.assume("CUDA graph memory: public vLLM logs print 0.2-0.6 GiB for the default piecewise capture (0.62 GB "
             "for a 70B AWQ model at TP 8, PR #5515). The draws reach 3 GiB: FULL graphs (FULL_AND_PIECEWISE, the "
             "v1 default since v0.11) over many capture sizes, a large max_num_seqs or an MoE model, each graph "
             "keeping its own attention metadata and buffers. NCCL buffers grow with the group: about 1.8 GiB "
             "more non-torch memory from TP 1 to TP 2 on an 8B model (PR #10511), about 4.5 GiB at TP 8 on H100 "
             "(PR #25359); the draw scales with TP.")
    s.assume("The total is what nvidia-smi reports (81,559 MiB = 79.65 GiB on an H100); vLLM's log prints "
             "cudaMemGetInfo's total, 79.1-79.3 GiB on the same card (REALITY row 17). On the real card the "
             "budget, and with it the KV cache, comes out about u × 0.45 GiB smaller than the key; the headroom "
             "moves by (1 − u) of it, under 0.05 GiB at these utilisations, so the fit stands.")
    s.assume("The allocator's reserved-but-unused growth is what a load test sees past the pool the profile run "
             "left: steady serving reuses most of that pool and the CUDA graphs keep a private one, so only the "
             "growth beyond it is drawn. Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) "
             "give back most of it, not always all: the fix is weighed as if they gave back all, an upper bound, "
             "and says so. Each lever is weighed alone, the rest of the variant as drawn.")
    if p.weight_dtype == "fp8":
        s.assume("fp8 weights are taken at 1 byte per parameter, an FP8-dynamic checkpoint of every layer; Meta's own "
                 "FP8 Llama-3.1-405B keeps the embeddings, the LM head and attention in bf16, a few GB more over "
                 "the group (about 0.5 GiB a GPU at TP 8 for the embeddings alone).")
    s.slip("only the CUDA graphs counted as unbudgeted", s.value(G) / s.value(unbudgeted), on="unbudgeted")
    s.slip("only the CUDA graphs counted as unbudgeted", on="max_util",
           factor=s.evaluate(1 - G / M) / s.evaluate(1 - unbudgeted / M))
    kv_room = s.value(kv)
    s.slip("the activation peak and non-torch memory not subtracted", on="kv_memory",
           factor=(kv_room + p.activation_peak + p.non_torch) / kv_room)
    _budget_regime(s, p.release, headroom, unbudgeted, at_start, u)

