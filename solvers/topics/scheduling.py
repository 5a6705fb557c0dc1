"""Scheduling questions built on the shared step-time model (steptime.py): chunked prefill
against two SLOs, SLO-aware admission, CPU/GPU overlap in the decode loop, batching long
replies, and where a bare roofline estimate of a server breaks."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, max_of
from solvers.topics.common import GPU_MEMORY_UTILIZATION, hbm_bytes
from solvers.topics.steptime import (
    Engine,
    StepConstants,
    engine,
    require_fit,
    step_time,
    step_work,
)
from solvers.units import format_number, format_quantity


def _constants(p, overhead: bool = True) -> StepConstants:
    """The step-time model's constants as the question file states them."""
    return StepConstants(compute=p.compute_eff, bandwidth=p.bandwidth_eff,
                         overhead=p.overhead if overhead else None)


def _ms(s: Sheet, sym: sympy.Symbol) -> str:
    return format_quantity(s.value(sym), "ms")


def _tokens(s: Sheet, sym: sympy.Symbol) -> str:
    return format_number(s.value(sym))


def _require_tpot_room(s: Sheet, e: Engine, decode_bytes: sympy.Symbol, tpot: sympy.Symbol) -> None:
    """Reject a draw where the decode batch alone cannot step within the TPOT target."""
    if s.evaluate(e.bytes_within(tpot) - decode_bytes) <= 0:
        raise Reject("the decode batch alone misses the TPOT target")


# --- chunked-prefill-budget ---------------------------------------------------------------


def chunked_prefill_budget(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, _constants(p))
    B = s.given("B", p.batch, "requests", "running decode streams")
    S = s.given("S", p.context, "tokens", "context of each running stream")
    P_in = s.given("P_in", p.prompt, "tokens", "the long prompt")
    tau = s.given("TPOT", p.tpot, "ms", "TPOT target")
    T_f = s.given("T_f", p.ttft, "s", "TTFT target")
    require_fit(s, e, p.gpu, B * S + P_in)

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    step_time(s, e, "dec", "decode-only step", dec, key="decode_step",
              why="the streams' usual gap between tokens, for comparison")
    full = step_work(s, e, "full", "step that prefills the whole prompt", B + P_in, B * S + P_in**2 / 2, B * S)
    stall = step_time(s, e, "full", "step that prefills the whole prompt", full, key="stall",
                      why="every running stream waits this long for its next token")
    _require_tpot_room(s, e, dec.bytes, tau)

    f_last = s.step("last_chunk_token_flops", "FLOPs per token of the prompt's last chunk", "f_c",
                    2 * e.N + e.A * P_in, "TFLOP",
                    "its weights, plus attention to (nearly) the whole prompt: the dearest chunk")
    room = s.step("step_flops", "FLOPs a step can do within the TPOT target", "F_TPOT", e.flops_within(tau), "TFLOP",
                  "the target less the overhead, at the group's achievable compute")
    c_max = s.step("chunk", "Largest chunk that keeps a step within the TPOT target", "c_max",
                   sympy.floor((room - dec.flops) / f_last), "tokens",
                   "what the decode batch leaves of the step's FLOPs, in chunk tokens")
    if s.value(c_max) < 1:
        raise Reject("no prompt token fits in a step under the TPOT target")
    s.step("token_budget", "Per-step token budget", "τ_tok", B + c_max, "tokens",
           "decode tokens count against the budget too (vLLM's max_num_batched_tokens)")
    n = s.step("chunks", "Steps to prefill the prompt", "n", sympy.ceiling(P_in / c_max), "steps",
               "the prompt sliced into chunks of at most c_max tokens")
    F_p = s.step("prompt_flops", "FLOPs of the prompt itself", "F_p", 2 * e.N * P_in + e.A * P_in**2 / 2, "TFLOP",
                 "chunking does not change the prompt's own work")
    t_p = s.step("prompt_compute", "Compute time of the prompt alone", "t_p", F_p / e.flop_rate, "s",
                 "a floor under its TTFT, however the prompt is sliced")
    t_fixed = s.step("per_step_cost", "Cost each chunked step adds besides the chunk", "t_x",
                     e.t_oh + dec.flops / e.flop_rate, "ms", "the overhead plus the decode batch's math")
    ttft = s.step("ttft", "TTFT of the long prompt under the budget", "TTFT", n * t_fixed + t_p, "s",
                  "every step compute-bound: the prompt's own math plus n times the per-step cost")

    s.assume("The chunk budget is sized for the prompt's last chunk, which attends to the whole prompt, so "
             "every step stays within the TPOT target; earlier chunks finish a little sooner.")
    s.assume("During the chunked prefill every step is compute-bound (the chunk fills the step), and the "
             "chunk's reads of its own prompt's earlier KV are left out next to the decode streams' reads.")
    s.assume("Only this prompt is waiting; the decode streams keep their context over the few steps it takes.")
    s.slip("budget without the decode tokens", s.value(c_max) / (s.value(B) + s.value(c_max)))
    s.slip("stall counted as the prompt's math alone (no decode work, no overhead)", s.value(t_p) / s.value(stall))

    _chunk_regime(s, ttft, T_f, t_p, t_fixed, n, c_max, P_in)


def _chunk_regime(s: Sheet, ttft, T_f, t_p, t_fixed, n, c_max, P_in) -> None:
    budget, steps = _tokens(s, c_max), _tokens(s, n)
    took, target = format_quantity(s.value(ttft), "s"), format_quantity(s.value(T_f), "s")
    if s.value(ttft) <= s.value(T_f):
        s.set_regime(
            "set-by-TPOT",
            f"At the TPOT-capped chunk of {budget} tokens the prompt takes {steps} steps and its first token "
            f"comes after {took}, inside the {target} TTFT target: the TPOT target sets the budget and the "
            "TTFT target has slack.",
            T_f, ttft,
            "A longer prompt, a tighter TTFT target or a busier decode batch pushes the TTFT past its target: "
            "then the budget needed for TTFT exceeds what TPOT allows, and one of the two SLOs must give "
            "(or the prompt goes to a separate prefill pool).")
        return
    rest = s.value(T_f) - s.value(t_p)
    if rest < s.value(t_fixed):
        single = format_quantity(s.evaluate(t_p + t_fixed), "s")
        summary = (f"Even unchunked, the prompt's first token needs {single} (its own math plus one step's "
                   f"overhead and decode work), past the {target} TTFT target: no budget meets both SLOs, and the "
                   "prompt needs more compute (a larger TP group or a separate prefill pool).")
    else:
        n_max = s.step("ttft_steps", "Most steps the TTFT target allows", "n_max",
                       sympy.floor((T_f - t_p) / t_fixed), "steps", "what the target leaves after the prompt's math")
        c_min = s.step("ttft_chunk", "Smallest chunk that meets the TTFT target", "c_min",
                       sympy.ceiling(P_in / n_max), "tokens", "the prompt in at most n_max chunks")
        summary = (f"At the TPOT-capped chunk of {budget} tokens the first token comes after {took}, past the "
                   f"{target} TTFT target: meeting it takes chunks of {_tokens(s, c_min)} tokens, so the TTFT "
                   "target would set the budget and the running streams' TPOT would break while this prompt "
                   "is prefilled.")
    s.set_regime(
        "set-by-TTFT", summary, T_f, ttft,
        "A shorter prompt, a looser TTFT target or more compute per step (more GPUs, a lighter decode batch) "
        "brings the TTFT under its target at the TPOT-capped chunk; then TPOT alone sets the budget.")


# --- coupled-slo-admission ----------------------------------------------------------------


def coupled_slo_admission(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, _constants(p))
    B = s.given("B", p.batch, "requests", "running decode streams")
    S = s.given("S", p.context, "tokens", "context of each running stream")
    tau = s.given("TPOT", p.tpot, "ms", "TPOT target")
    T_f = s.given("T_f", p.ttft, "s", "TTFT target")
    L_p = s.given("L_p", p.prompt, "tokens", "prompt length of each request")
    q = s.given("q", p.queued, "requests", "requests already waiting for prefill")
    require_fit(s, e, p.gpu, B * S)

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    _require_tpot_room(s, e, dec.bytes, tau)
    f_p = s.step("prompt_token_flops", "FLOPs per prompt token", "f_p", 2 * e.N + e.A * L_p / 2, "TFLOP",
                 "its weights, plus attention to half its prompt on average (causal mask)")
    room = s.step("step_flops", "FLOPs a step can do within the TPOT target", "F_TPOT", e.flops_within(tau), "TFLOP",
                  "the target less the overhead, at the group's achievable compute")
    c_max = s.step("chunk", "TPOT caps the prefill chunk", "c_max", sympy.floor((room - dec.flops) / f_p), "tokens",
                   "what the decode batch leaves of a TPOT-long step, in prompt tokens")
    if s.value(c_max) < 1:
        raise Reject("no prompt token fits in a step under the TPOT target")
    mixed = step_work(s, e, "mix", "step with a full chunk", B + c_max, B * S + c_max * L_p / 2, B * S)
    t_mix = step_time(s, e, "mix", "step with a full chunk", mixed, key="step_time",
                      why="at most the TPOT target, by construction")
    X_p = s.step("prefill_rate", "The chunk caps prefill throughput", "X_p", c_max / t_mix, "tokens/s",
                 "one chunk of prompt tokens per step")
    Q_max = s.step("backlog_limit", "Largest prompt backlog that meets the TTFT target", "Q_max", X_p * T_f, "tokens",
                   "the prompt tokens the prefill rate clears within the TTFT target")
    Q = s.step("backlog", "Prompt backlog with the new request", "Q", (q + 1) * L_p, "tokens",
               "the waiting prompts plus the new one, served in arrival order")
    ttft = s.step("ttft", "TTFT of the new request if admitted", "TTFT", Q / X_p, "s",
                  "its prompt finishes once everything ahead of it and its own tokens are prefilled")

    s.assume("TPOT is the step time: every running stream gets one token per step; the chunk is sized so "
             "that a step with a full chunk takes at most the TPOT target.")
    s.assume("Prompt tokens attend on average to half their own prompt (causal mask); the chunk's reads of "
             "earlier KV of its prompt are left out next to the decode streams' reads.")
    s.assume("Prefill in arrival order (FCFS); the running batch and its context stay as they are while the "
             "backlog drains, and the first token comes out with the request's last chunk.")
    s.slip("chunk taken as the whole TPOT step (decode batch's share forgotten)",
           s.evaluate(room / f_p) / s.value(c_max))
    s.slip("backlog limit from the TPOT target instead of the TTFT target", s.value(tau) / s.value(T_f))

    _admission_regime(s, Q, Q_max, L_p, ttft, T_f, c_max, t_mix)


def _admission_regime(s: Sheet, Q, Q_max, L_p, ttft, T_f, c_max, t_mix) -> None:
    holds = "≤" if s.value(Q) <= s.value(Q_max) else ">"
    rule = (f"admit while (q + 1)·L_p ≤ c_max·T_f / t_step; here {_tokens(s, Q)} {holds} {_tokens(s, Q_max)} tokens "
            f"(c_max = {_tokens(s, c_max)} tokens per {_ms(s, t_mix)} step)")
    late = format_quantity(s.value(ttft), "s")
    target = format_quantity(s.value(T_f), "s")
    if s.value(L_p) > s.value(Q_max):
        s.set_regime(
            "reject",
            f"The prompt alone ({_tokens(s, L_p)} tokens) exceeds the {_tokens(s, Q_max)} tokens this replica can "
            f"prefill within {target}: even on an empty queue it misses its TTFT. Reject it early (or send it "
            f"to a replica with more prefill capacity) rather than let it hold the queue. Rule: {rule}.",
            Q_max, L_p,
            "A prompt shorter than the backlog limit can meet its TTFT once the queue ahead of it drains; "
            "raising the limit takes a looser TPOT target (bigger chunks) or more compute per step.")
    elif s.value(Q) > s.value(Q_max):
        s.set_regime(
            "queue",
            f"Behind the current backlog its first token would come after {late}, past the {target} target, "
            f"although on an empty queue it would make it. Hold it outside the engine (or route it to a less "
            f"loaded replica) so its tokens do not push every later arrival past the target too. Rule: {rule}.",
            Q_max, Q,
            "Once the backlog drains below the limit less this prompt, the same request is admitted; a prompt "
            "longer than the limit itself is rejected, since no wait helps it.")
    else:
        s.set_regime(
            "admit",
            f"The backlog with this prompt clears within {late}, inside the {target} TTFT target, while every "
            f"step stays within the TPOT target. Rule: {rule}.",
            Q_max, Q,
            "A longer queue or a longer prompt pushes the backlog past the limit: the request then waits outside "
            "the engine, or is rejected if its prompt alone exceeds the limit.")


# --- decode-loop-overlap ------------------------------------------------------------------


def decode_loop_overlap(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, _constants(p, overhead=False))
    B = s.given("B", p.batch, "requests", "decode batch")
    S = s.given("S", p.context, "tokens", "context per request")
    c_0 = s.given("c_0", p.cpu_step, "ms", "CPU time per step: scheduling and input preparation")
    c_r = s.given("c_r", p.cpu_request, "us", "CPU time per request per step: output processing")
    L_out = s.given("L_out", p.reply, "tokens", "mean reply length")
    require_fit(s, e, p.gpu, B * S)

    work = step_work(s, e, "gpu", "decode step on the GPU", B, B * S, B * S)
    t_gpu = step_time(s, e, "gpu", "decode step on the GPU", work, key="gpu_time",
                      why="the GPU's kernels for one token of every request")
    t_cpu = s.step("cpu_time", "CPU time per step", "t_cpu", c_0 + B * c_r, "ms",
                   "plan the batch and prepare inputs, then append, detokenize and stop-check every request")
    t_seq = s.step("serial_step", "Step without overlap", "t_serial", t_gpu + t_cpu, "ms",
                   "the GPU waits while the CPU processes its output and plans the next step")
    s.step("idle", "GPU idle fraction without overlap", "idle", t_cpu / t_seq, "%", "the CPU's share of each step")
    X_seq = s.step("throughput_serial", "Throughput without overlap", "X_serial", B / t_seq, "tokens/s",
                   "one token per request per step")
    t_ovl = s.step("overlap_step", "Step with the overlap scheduler", "t_overlap", max_of(t_gpu, t_cpu), "ms",
                   "step n+1 is launched before step n's tokens are processed: the slower side sets the pace")
    s.step("waste", "Placeholder share of the slots", "w", 1 / (L_out + 1), "%",
           "a request that stops has already been scheduled for one more step: one token per request is "
           "computed and thrown away")
    X_ovl = s.step("throughput_overlap", "Useful throughput with overlap", "X_overlap",
                   B / t_ovl * L_out / (L_out + 1), "tokens/s", "tokens per step, less the discarded placeholders")
    s.step("gain", "Gain from overlap", "G", X_ovl / X_seq, "x", "sum of the two sides over the larger one")

    s.assume("CPU time per step = a fixed part (scheduling, input preparation) plus a part per request "
             "(appending the token, detokenizing, checking stop strings); it runs on one thread.")
    s.assume("With overlap the CPU work of step n runs while the GPU runs step n+1, which has been scheduled "
             "with a placeholder for each request's unknown token; a request that stops (EOS or a stop string) "
             "is found one step late, and the token it got in that step is discarded.")
    s.assume("Requests that need their previous token on the CPU before the next step (grammar-constrained "
             "output, some logits processors) cannot overlap and pay the serial step.")
    s.slip("overlap throughput taken as the serial one", s.value(X_seq) / s.value(X_ovl))
    s.slip("idle fraction taken as CPU time over GPU time", s.evaluate(t_cpu / t_gpu) / s.evaluate(t_cpu / t_seq))

    gpu, cpu = _ms(s, t_gpu), _ms(s, t_cpu)
    if s.value(t_cpu) > s.value(t_gpu):
        s.set_regime(
            "CPU-bound",
            f"The CPU needs {cpu} per step against the GPU's {gpu}: even with overlap the GPU waits for the "
            "CPU every step, and overlap hides only the GPU's share.",
            t_gpu, t_cpu,
            "With less CPU work per request (a faster output path, fewer requests per engine process) or a "
            "heavier GPU step (longer contexts, a bigger model), the GPU becomes the pace-setter and overlap "
            "hides the CPU entirely.")
    else:
        s.set_regime(
            "GPU-bound",
            f"The GPU's {gpu} per step covers the CPU's {cpu}: with overlap the CPU work disappears behind the "
            "GPU, and the loop runs at the GPU's pace.",
            t_gpu, t_cpu,
            "With a larger batch of cheap steps (a small model, short contexts) the CPU's per-request work "
            "outgrows the GPU step, and then the CPU sets the pace even with overlap.")


# --- long-reply-batching ------------------------------------------------------------------


def long_reply_batching(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, _constants(p))
    P_in = s.given("P_in", p.prompt, "tokens", "prompt length")
    L_out = s.given("L_out", p.reply, "tokens", "reply length")
    v = s.given("v", p.speed, "tokens/s", "per-user speed target")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "%", "usable fraction of HBM (vLLM's gpu_memory_utilization)")
    BW_h = s.given("BW_host", p.host_link, "GB/s", "host link per GPU (PCIe), each direction")

    pool = s.step("pool_bytes", "KV pool per GPU", "M_KV", M * u - e.W / e.TP, "GB",
                  "usable HBM less this GPU's share of the weights")
    if s.value(pool) <= 0:
        raise Reject("the weights do not fit")
    K = s.step("pool_tokens", "Tokens the pool holds", "K", sympy.floor(pool / e.KV), "tokens",
               "pool bytes over one token's KV on this GPU")
    S_avg = s.step("mean_footprint", "Mean footprint of a request", "S_avg", P_in + L_out / 2, "tokens",
                   "a request grows one token per step from P_in to P_in + L_out; staggered requests hold the "
                   "midpoint on average")
    B_pool = s.step("pool_batch", "Batch the pool sustains", "B_pool", sympy.floor(K / S_avg), "requests",
                    "the pool over the mean footprint: admitting more means preempting as they grow")
    if s.value(B_pool) < 1:
        raise Reject("not one request fits the pool")
    work = step_work(s, e, "batch", "decode step at that batch", B_pool, B_pool * S_avg, B_pool * S_avg)
    t_pool = step_time(s, e, "batch", "decode step at that batch", work, key="step_time",
                       why="one token for every request in the batch")
    speed = s.step("per_user_speed", "Per-user speed at that batch", "v_pool", 1 / t_pool, "tokens/s",
                   "each user gets one token per step")
    s.step("throughput", "Aggregate throughput at that batch", "X", B_pool / t_pool, "tokens/s",
           "what a throughput dashboard shows")
    s.step("reply_time", "Time to stream one reply at that speed", "t_reply", L_out / speed, "min",
           "what the user actually waits")

    budget = s.step("slo_step", "Step time the speed target allows", "t_SLO", 1 / v, "ms", "one token per step")
    if s.evaluate(e.bytes_within(budget) - e.W / e.TP) <= 0:
        raise Reject("even a batch of one misses the speed target")
    b_mem = s.step("slo_batch_memory", "Batch at the speed target, by bandwidth", "B_mem",
                   (e.bytes_within(budget) - e.W / e.TP) / (e.KV * S_avg), "requests",
                   "the bytes a step may read after the weights, in mean KV footprints")
    b_cmp = s.step("slo_batch_compute", "Batch at the speed target, by compute", "B_cmp",
                   e.flops_within(budget) / (2 * e.N + e.A * S_avg), "requests",
                   "the FLOPs a step may do, in one decode token at the mean footprint each")
    B_slo = s.step("slo_batch", "Largest batch that meets the speed target", "B_SLO",
                   sympy.floor(sympy.Min(b_mem, b_cmp, evaluate=False)), "requests",
                   "the step must fit the target on both counts")
    if s.value(B_slo) < 1:
        raise Reject("even a batch of one misses the speed target")

    # The victim sits halfway through its reply: its context is the mean footprint.
    redo = step_work(s, e, "redo", "recompute prefill of the victim", S_avg, S_avg**2 / 2, 0)
    t_redo = step_time(s, e, "redo", "recompute prefill of the victim", redo, key="recompute_time",
                       why="rebuild its KV from its tokens: a prefill of its whole context")
    t_swap = s.step("swap_time", "Swap the victim out and back in", "t_swap", 2 * S_avg * e.KV / BW_h, "ms",
                    "its KV crosses each GPU's host link twice, every GPU moving its own share")
    s.step("recompute_over_swap", "Recompute over swap", "R_pre", t_redo / t_swap, "x",
           "compute per token (2N plus attention) against KV bytes per token over PCIe")

    s.assume("Requests are admitted continuously and their ages are spread evenly, so the pool holds the "
             "mean footprint per request; the victim of a preemption is a request halfway through its reply.")
    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM is usable; activations, CUDA graphs and "
             "NCCL buffers are ignored. Recompute runs as one prefill step; swap moves the victim's KV over "
             "PCIe out and back, without overlap with other work.")
    s.slip("batch sized by the prompt alone (the footprint at admission)",
           s.evaluate(sympy.floor(K / P_in)) / s.value(B_pool))
    s.slip("batch sized at the final footprint", s.evaluate(sympy.floor(K / (P_in + L_out))) / s.value(B_pool))

    _reply_regime(s, B_pool, B_slo, speed, v)


def _reply_regime(s: Sheet, B_pool, B_slo, speed, v) -> None:
    fits, allowed = _tokens(s, B_pool), _tokens(s, B_slo)
    got = format_quantity(s.value(speed), "tokens/s")
    target = format_quantity(s.value(v), "tokens/s")
    if s.value(B_pool) <= s.value(B_slo):
        s.set_regime(
            "pool-limited",
            f"The pool sustains {fits} requests, fewer than the {allowed} the speed target would allow: each "
            f"user gets {got} against a target of {target}, and memory caps the batch.",
            B_slo, B_pool,
            "With shorter replies (smaller footprints), more HBM, fp8 KV or more GPUs, the pool holds more "
            "requests than the speed target allows; then cap the batch (max_num_seqs) and leave KV memory idle "
            "rather than let every user's stream slow down.")
    else:
        s.set_regime(
            "SLO-limited",
            f"The pool would hold {fits} requests, but at that batch each user gets only {got}, under the "
            f"{target} target: cap the batch at {allowed} and leave part of the pool idle.",
            B_slo, B_pool,
            "With longer replies the footprints grow until the pool holds fewer requests than the speed target "
            "allows; memory then caps the batch and every user runs above the target.")


# --- roofline-model-breaks ----------------------------------------------------------------

REACH = 2  # a bare estimate within 2x of the corrected one counts as within reach
_CORRECTIONS = ("bandwidth", "all-reduce", "overhead")


def roofline_model_breaks(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, _constants(p))
    B = s.given("B", p.batch, "requests", "decode batch")
    S = s.given("S", p.context, "tokens", "context per request")
    alpha = s.given("α", p.allreduce_latency, "us", "latency of one small all-reduce")
    BW_link = s.given("BW_link", p.gpu.nvlink_gb_s * 1e9 / 2, "GB/s", f"{p.gpu.name} GPU-to-GPU link, each direction")
    L = s.given("L", p.model.layers, "", "layers")
    h = s.given("h", p.model.hidden, "", "hidden size")
    b_a = s.given("b_a", 2, "B", "bytes per activation (bf16)")
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
    t_ar = s.step("allreduce_time", "Correction 2: TP all-reduces", "t_AR",
                  2 * L * (alpha + (e.TP - 1) / e.TP * 2 * B * h * b_a / BW_link), "ms",
                  "two all-reduces per layer (after attention and after the MLP), each a latency plus a ring's "
                  "2(TP-1)/TP of the batch's activations")
    t = s.step("corrected_time", "Corrected step", "t", t_1 + t_ar + e.t_oh, "ms",
               "the efficient step, then the all-reduces and the per-step overhead on top (correction 3)")
    s.step("corrected_throughput", "Corrected throughput", "X", B / t, "tokens/s", "one token per request per step")
    ratio = s.step("ratio", "Corrected over bare", "r", t / t_0, "x", "how far the bare estimate is off")
    reach = s.given("r_reach", REACH, "x", "within reach: off by at most this factor")

    s.assume("All-reduces are not overlapped with compute and use a ring: 2(TP-1)/TP of the message crosses "
             "each GPU's link in each direction, plus a fixed latency per call that dominates at decode sizes.")
    s.assume("Corrections add: efficiency stretches the roofline step, then communication and the per-step "
             "overhead (scheduling, sampling, launch gaps) come on top of it.")
    s.slip("one all-reduce per layer instead of two", 0.5)
    s.slip("all-reduces of one layer only", 1 / p.model.layers)

    costs = {"bandwidth": s.value(d_bw), "all-reduce": s.value(t_ar), "overhead": s.value(e.t_oh)}
    dominant = max(_CORRECTIONS, key=costs.get)
    s.choose("dominant", dominant)
    _roofline_regime(s, ratio, reach, costs, dominant)


def _roofline_regime(s: Sheet, ratio, reach, costs: dict[str, float], dominant: str) -> None:
    off = format_number(s.value(ratio), 3)
    parts = ", ".join(f"{name} +{format_quantity(cost, 'ms')}" for name, cost in costs.items())
    catch = {
        "bandwidth": "measure achieved HBM bandwidth with a streaming-copy kernel and the decode GEMVs in a profiler",
        "all-reduce": "run nccl-tests (or the engine's custom all-reduce) at the decode message size, not at GBs",
        "overhead": "read the gaps between kernels in an Nsight Systems trace of one decode step",
    }[dominant]
    summary = f"The corrected step is {off}x the bare roofline ({parts}); the {dominant} correction dominates: {catch}."
    if s.value(ratio) <= s.value(reach):
        s.set_regime(
            "within-reach", summary, reach, ratio,
            "At a small batch, short contexts or a high TP degree the roofline step shrinks while the all-reduce "
            "latencies and the per-step overhead do not: the fixed costs then dominate and the bare estimate "
            "is off by a factor.")
    else:
        s.set_regime(
            "off-by-a-factor", summary, reach, ratio,
            "With a larger batch or longer contexts the step reads more KV and the roofline term grows, while "
            "the fixed costs stay put: the bare estimate comes within reach, short only by the efficiency factor.")
