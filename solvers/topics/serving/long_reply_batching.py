"""Batching long replies from a growing KV pool."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.common import GPU_MEMORY_UTILIZATION, given_hbm_bytes, given_usable_share, require_context
from solvers.formulas.scheduling import require_realistic_tp, step_constants, tokens_text
from solvers.formulas.steptime import (
    Engine,
    all_reduce_steps,
    engine,
    step_time,
    step_work,
)
from solvers.sheetmath import floor_of, min_of
from solvers.units import format_number, format_quantity

MIN_SLO_BATCH = 8  # a target fewer requests meet leaves the weights' read most of the step: a GPU question
MIN_POOL_BATCH = 2 * MIN_SLO_BATCH  # a smaller pool calls for more GPUs; and a tighter target can still cross it


def _reply_regime(s: Sheet, e: Engine, work, B_pool, B_slo, speed, full, v, usable) -> None:
    fits, allowed = tokens_text(s, B_pool), tokens_text(s, B_slo)
    got, target = s.text(speed), s.text(v)
    ceiling = s.text(full)
    read = format_quantity(s.evaluate(work.bytes / usable), "%", 3)
    if s.compare(work.flops / e.flop_rate, work.bytes / e.byte_rate) > 0:
        step = (f"a step at that batch is compute-bound (its decode math outlasts the read of {read} of each "
                "GPU's usable HBM)")
        levers = ("Here the pool's batch is so large that its math sets the step; longer footprints mean fewer "
                  f"requests and less math, down to a step that only reads the pool ({ceiling}). ")
    else:
        step = f"a step at that batch reads {read} of each GPU's usable HBM"
        levers = ("A step at the pool's batch reads nearly all usable HBM, so its speed is set by the GPU's "
                  "bandwidth over its HBM size, the overhead and the all-reduce latencies: TP, fp8 KV and the "
                  "reply length change how many requests fit, not how fast each one goes. ")
    pool_limited = Side(
        "pool-limited",
        f"The pool sustains {fits} requests, within the {allowed} the speed target allows: {step}, and each "
        f"user gets {got} against a target of {target}. Memory binds: any max_num_seqs from {fits} to "
        f"{allowed} runs the same batch.",
        levers + f"A target above {got} makes the batch SLO-limited: then cap max_num_seqs below the pool's "
        "batch and leave KV memory idle rather than let every user's stream slow down.")
    slo_limited = Side(
        "SLO-limited",
        f"The pool would hold {fits} requests, but {step}, so each user would get only {got}, under the "
        f"{target} target: the speed target binds; cap max_num_seqs at {allowed} and leave part of the pool idle.",
        levers + f"Only a target of at most {got} on this GPU, or a GPU with more bandwidth per byte of HBM, "
        "lets a full pool meet it; then memory caps the batch.")
    s.regime_by(B_pool, B_slo, tie="below", above=slo_limited, below=pool_limited)


def solve(p, s: Sheet) -> None:
    require_realistic_tp(p.model, p.tp, p.gpu)
    require_context(p.model, p.prompt + p.reply)
    e = engine(s, p.model, p.gpu, p.tp, step_constants(p), communication=p.tp > 1, kv_prerequisite=True)
    P_in = s.param("P_in", "prompt")
    L_out = s.param("L_out", "reply")
    v = s.param("v", "speed")
    M = given_hbm_bytes(s, p.gpu)
    u = given_usable_share(s)
    BW_h = s.param("BW_host", "host_link")

    pool = s.step("pool_bytes", "KV pool per GPU", "M_KV", M * u - e.W / e.TP, "GB",
                  "usable HBM less this GPU's share of the weights")
    if s.value(pool) <= 0:
        raise Reject("the weights do not fit")
    K = s.step("pool_tokens", "Tokens the pool holds", "K", floor_of(pool / e.KV), "tokens",
               "pool bytes over one token's KV on this GPU")
    S_avg = s.step("mean_footprint", "Mean footprint of a request", "S_avg", P_in + L_out / 2, "tokens",
                   "a request grows one token per step from P_in to P_in + L_out; staggered requests hold the "
                   "midpoint on average")
    B_pool = s.step("pool_batch", "Batch the pool sustains (the memory cap)", "B_pool", floor_of(K / S_avg),
                    "requests", "the pool over the mean footprint: admitting more means preempting as they grow")
    if s.value(B_pool) < MIN_POOL_BATCH:
        raise Reject("the pool holds too few requests to batch")
    work = step_work(s, e, "batch", "decode step at that batch", B_pool, B_pool * S_avg, B_pool * S_avg)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B_pool, tag="batch", label="decode step at that batch")
    t_pool = step_time(s, e, "batch", "decode step at that batch", work, key="step_time", communication=t_ar,
                       why="one token for every request in the batch")
    speed = s.step("per_user_speed", "Per-user speed at that batch", "v_pool", 1 / t_pool, "tokens/s",
                   "each user gets one token per step")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)
    full = s.step("full_read_speed", "Speed of a step that reads all usable HBM", "v_full",
                  1 / (u * M / e.byte_rate + ar.fixed + e.t_oh), "tokens/s",
                  "a full pool plus the weights is nearly all usable HBM: whatever the reply length, this is the "
                  "per-user speed at the pool's batch (less its all-reduce bytes), unless its math is slower still")
    s.step("throughput", "Aggregate throughput at that batch", "X", B_pool / t_pool, "tokens/s",
           "what a throughput dashboard shows")
    s.step("reply_time", "Time to stream one reply at that speed", "t_reply", L_out / speed, "min",
           "what the user actually waits")

    budget = s.step("slo_step", "Step time the speed target allows", "t_SLO", 1 / v, "ms", "one token per step")
    assert e.t_oh is not None  # this question's engine charges the card's step overhead
    room = s.step("slo_room", "Time the step's kernels and all-reduce bytes may take", "t_room",
                  budget - e.t_oh - ar.fixed, "ms", "the target less the overhead and the all-reduce latencies")
    if s.evaluate(room * e.byte_rate - e.W / e.TP) <= 0:
        raise Reject("even a batch of one misses the speed target")
    b_mem = s.step("slo_batch_memory", "Batch at the speed target, by bandwidth", "B_mem",
                   (room - e.W / (e.TP * e.byte_rate)) / (e.KV * S_avg / e.byte_rate + ar.per_token), "requests",
                   "the time left after the weights' read, in one mean KV footprint's read (and its all-reduce "
                   "bytes) each")
    b_cmp = s.step("slo_batch_compute", "Batch at the speed target, by compute", "B_cmp",
                   room / ((2 * e.N + e.A * S_avg) / e.flop_rate + ar.per_token), "requests",
                   "the time left, in one decode token's math at the mean footprint (and its all-reduce bytes) each")
    B_slo = s.step("slo_batch", "Largest batch that meets the speed target (the speed cap)", "B_SLO",
                   floor_of(min_of(b_mem, b_cmp)), "requests",
                   "the step must fit the target on both counts")
    if s.value(B_slo) < MIN_SLO_BATCH:
        raise Reject("the speed target leaves room for only a handful of requests")
    s.step("batch", "Batch to run (max_num_seqs)", "B_run", min_of(B_pool, B_slo), "requests",
           "the smaller cap binds")

    # The victim sits halfway through its reply: its context is the mean footprint.
    redo = step_work(s, e, "redo", "recompute prefill of the victim", S_avg, S_avg**2 / 2, 0)
    t_ar_redo = tp_all_reduce(s, p.model, p.gpu, p.tp, S_avg, tag="redo", label="recompute prefill")
    t_redo = step_time(s, e, "redo", "recompute prefill of the victim", redo, key="recompute_time",
                       communication=t_ar_redo, why="rebuild its KV from its tokens: a prefill of its whole context")
    t_swap = s.step("swap_time", "Swap the victim's KV out to host memory", "t_swap", S_avg * e.KV / BW_h, "ms",
                    "its KV crosses each GPU's host link once, every GPU moving its own share")
    s.step("swap_over_step", "Swap-out over one decode step at the pool's batch", "r_hide", t_swap / t_pool, "x",
           "a swap-out that fits in one step can run on a side stream (the copy engines) while the batch decodes")
    hides = s.compare(t_swap, t_pool) <= 0
    s.choose("swap_hides", "fits-in-a-step" if hides else "outlasts-a-step",
             "the copy out is no longer than one step of the full pool, so it can run behind the batch"
             if hides else "the copy out outlasts one step of the full pool: the batch would wait on it")
    idle = s.step("idle_compute", "Compute a decode step at the pool's batch leaves idle", "t_idle",
                  work.bytes / e.byte_rate - work.math, "ms",
                  "the step lasts as long as its reads; its math takes less, and the rest of the time the tensor "
                  "cores wait")
    if s.compare(idle, 0) <= 0:
        s.refuse_if_asked(["absorb_steps"], "a decode step at the pool's batch is compute-bound: no idle compute to "
                          "absorb a re-prefill")
    s.step("absorb_steps", "Decode steps whose idle compute absorbs the re-prefill", "N_absorb", redo.math / idle,
           "steps", "chunked prefill spreads the victim's re-prefill over decode steps that wait on memory: its "
           "math fits in their idle compute without lengthening them, which is why vLLM V1 recomputes")
    R = s.step("recompute_over_swap", "Recompute over swap-out", "R_pre", t_redo / t_swap, "x",
               "compute per token (2N plus attention) against KV bytes per token over PCIe")

    s.assume("Requests are admitted continuously and their ages are spread evenly, so the pool holds the "
             "mean footprint per request; the victim of a preemption is a request halfway through its reply.")
    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM is usable; activations, CUDA graphs and "
             "NCCL buffers are ignored. Recompute is timed as one prefill step; the swap-out moves the victim's KV "
             "over PCIe once, on a side stream (the copy engines) that can overlap the decode; swapping back in "
             "later costs as much again. vLLM V0 issued its swaps before the step and waited on them.")
    s.assume(f"Timed as single operations, recompute costs {s.text(R, 3)} the swap-out; vLLM V1 "
             "recomputes anyway (its docs: lower overhead in V1), having no swap preemption: the recompute "
             "re-enters as chunked prefill on decode steps that are memory-bound, in compute that would "
             "otherwise idle, where a swap holds host memory and a PCIe copy each way. The idle compute ignores the "
             "re-prefill's own attention reads and the chunk's extra all-reduce bytes.")
    s.slip("batch sized by the prompt alone (the footprint at admission)", on="pool_batch",
           factor=s.evaluate(floor_of(K / P_in)) / s.value(B_pool))
    s.slip("batch sized at the final footprint", on="pool_batch",
           factor=s.evaluate(floor_of(K / (P_in + L_out))) / s.value(B_pool))
    s.slip("speed cap taken as the smaller of the two caps", on="slo_batch",
           factor=s.evaluate(min_of(B_pool, B_slo)) / s.value(B_slo))
    if p.tp > 1:
        s.slip("speed at that batch without the all-reduces", on="per_user_speed",
               factor=s.evaluate(1 / (t_pool - t_ar)) / s.value(speed))

    _reply_regime(s, e, work, B_pool, B_slo, speed, full, v, u * M)

