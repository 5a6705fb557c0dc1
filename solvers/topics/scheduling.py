"""Scheduling questions built on the shared step-time model (steptime.py): chunked prefill
against two SLOs, SLO-aware admission, CPU/GPU overlap in the decode loop, batching long
replies, and where a bare roofline estimate of a server breaks."""
from __future__ import annotations

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import crosses_domain, tp_all_reduce
from solvers.topics.common import GPU_MEMORY_UTILIZATION, hbm_bytes, model_params, require_context
from solvers.topics.steptime import (
    Engine,
    StepConstants,
    all_reduce_steps,
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


# A model this small fits one GPU in bf16 with room for its KV cache; nobody splits it more than two ways,
# and on more GPUs its per-GPU step gets so short that the all-reduces and the overhead dominate it.
SMALL_MODEL_PARAMS = 20e9
SMALL_MODEL_MAX_TP = 2


def _require_realistic_tp(model: Record, tp: int, gpu: Record) -> None:
    if model_params(model) < SMALL_MODEL_PARAMS and tp > SMALL_MODEL_MAX_TP:
        raise Reject(f"{model.name} is not served over {tp} GPUs")
    if gpu.get("vendor") == "AMD" and 1 < tp < 8:
        # An xGMI mesh gives each GPU one link to each peer: a smaller ring gets a fraction of the aggregate
        # that collective.tp_all_reduce takes as the link.
        raise Reject(f"{gpu.name} reaches half its xGMI aggregate only in a ring over all eight GPUs")


def _require_tpot_room(s: Sheet, e: Engine, decode_bytes: sympy.Symbol, tpot: sympy.Symbol) -> None:
    """Reject a draw where the decode batch alone cannot step within the TPOT target."""
    if s.evaluate(e.bytes_within(tpot) - decode_bytes) <= 0:
        raise Reject("the decode batch alone misses the TPOT target")


# --- chunked-prefill-budget ---------------------------------------------------------------


def _streams_and_targets(p, s: Sheet):
    """The engine, the running decode streams and the two SLOs: what both prefill questions start from."""
    _require_realistic_tp(p.model, p.tp, p.gpu)
    require_context(p.model, p.prompt)
    e = engine(s, p.model, p.gpu, p.tp, _constants(p), communication=p.tp > 1, kv_prerequisite=True)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    tau = s.param("TPOT", "tpot")
    T_f = s.param("T_f", "ttft")
    return e, B, S, tau, T_f


def _chunk_cap(s: Sheet, e: Engine, p, B, L_p, tau, dec, key: str, title: str):
    """The largest chunk a TPOT-long step can carry next to the decode batch, every chunk token priced
    at attention to its whole prompt. Returns (chunk, cost of a chunked step besides its chunk, the
    all-reduce terms)."""
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)
    t_x = s.step("per_step_cost", "Cost of a chunked step besides its chunk", "t_x",
                 e.t_oh + ar.fixed + ar.per_token * B + dec.flops / e.flop_rate, "ms",
                 "overhead, all-reduce latencies and the decode batch's math and all-reduce bytes: the step is "
                 "compute-bound once a chunk rides in it")
    f_c = s.step("chunk_token_flops", "FLOPs per chunk token, priced at the whole prompt", "f_c",
                 2 * e.N + e.A * L_p, "TFLOP", "its weights, plus attention to every token of its prompt: no chunk "
                 "token costs more, so no step breaks the target")
    t_c = s.step("chunk_token_time", "Time per chunk token", "t_c", f_c / e.flop_rate + ar.per_token, "us",
                 "its math at the group's achievable compute, plus its activations in the all-reduces")
    c_max = s.step(key, title, "c_max", floor_of((tau - t_x) / t_c), "tokens",
                   "what the TPOT target leaves after the fixed cost, in chunk tokens")
    if s.value(c_max) < 1:
        raise Reject("no prompt token fits in a step under the TPOT target")
    if s.evaluate(dec.bytes / e.byte_rate) > s.evaluate((dec.flops + c_max * f_c) / e.flop_rate):
        raise Reject("a step with a full chunk is still memory-bound")
    return c_max, t_x, t_c, ar


def _tp_advice(p) -> str:
    """More compute for a prompt: a wider TP group while it stays in the NVLink domain, else a prefill pool."""
    if crosses_domain(p.gpu, 2 * p.tp):
        return (f"a separate prefill pool (TP past {p.tp} would leave the {p.gpu.name} NVLink domain and put the "
                "all-reduces on the NIC)")
    return "a wider TP group or a separate prefill pool"


def chunked_prefill_budget(p, s: Sheet) -> None:
    e, B, S, tau, T_f = _streams_and_targets(p, s)
    P_in = s.param("P_in", "prompt")
    require_fit(s, e, p.gpu, B * S + P_in)

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    t_ar_dec = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode-only step")
    step_time(s, e, "dec", "decode-only step", dec, key="decode_step", communication=t_ar_dec,
              why="the streams' usual gap between tokens, for comparison")
    full = step_work(s, e, "full", "step that prefills the whole prompt", B + P_in, B * S + P_in**2 / 2, B * S)
    t_ar_full = tp_all_reduce(s, p.model, p.gpu, p.tp, B + P_in, tag="full", label="step that prefills the prompt")
    stall = step_time(s, e, "full", "step that prefills the whole prompt", full, key="stall",
                      communication=t_ar_full, why="every running stream waits this long for its next token")
    _require_tpot_room(s, e, dec.bytes, tau)
    if s.value(stall) <= s.value(tau):
        raise Reject("the unchunked prompt already steps within the TPOT target")

    c_max, t_x, t_c, ar = _chunk_cap(s, e, p, B, P_in, tau, dec, "chunk",
                                     "Largest chunk that keeps a step within the TPOT target")
    if s.value(c_max) >= s.value(P_in):
        raise Reject("the TPOT-capped chunk holds the whole prompt: nothing to chunk")
    s.step("token_budget", "Per-step token budget", "τ_tok", B + c_max, "tokens",
           "decode tokens count against the budget too (vLLM's max_num_batched_tokens)")
    n = s.step("chunks", "Steps to prefill the prompt", "n", ceil_of(P_in / c_max), "steps",
               "the prompt sliced into chunks of at most c_max tokens")
    F_p = s.step("prompt_flops", "FLOPs of the prompt itself", "F_p", 2 * e.N * P_in + e.A * P_in**2 / 2, "TFLOP",
                 "chunking does not change the prompt's own work: P²/2 pairs under the causal mask")
    t_p = s.step("prompt_compute", "The prompt's own time", "t_p", F_p / e.flop_rate + ar.per_token * P_in, "s",
                 "its math and its activations' all-reduce bytes: a floor under its TTFT, however it is sliced")
    ttft = s.step("ttft", "TTFT of the long prompt under the budget", "TTFT", n * t_x + t_p, "s",
                  "the prompt's own time plus, for each of its steps, the fixed cost")

    s.assume("Every chunk token is priced at attention to the whole prompt (the last chunk's cost, a little "
             "above its exact causal count), so no step breaks the TPOT target; earlier chunks finish sooner, and "
             "the TTFT counts the prompt's exact work (P²/2 pairs).")
    s.assume("During the chunked prefill every step is compute-bound (the chunk fills the step), and the "
             "chunk's reads of its own prompt's earlier KV are left out next to the decode streams' reads.")
    s.assume("Only this prompt is waiting; the decode streams keep their context over the few steps it takes.")
    s.slip("budget without the decode tokens", s.value(c_max) / (s.value(B) + s.value(c_max)), on="token_budget")
    s.slip("stall counted as the prompt's math alone (no decode work, no overhead)", on="stall",
           factor=s.evaluate(F_p / e.flop_rate) / s.value(stall))
    if p.tp > 1:
        s.slip("stall without the TP all-reduces", on="stall", factor=s.evaluate(stall - t_ar_full) / s.value(stall))
        s.slip("budget without the TP all-reduces", on="token_budget",
               factor=s.evaluate(B + floor_of((tau - e.t_oh - dec.flops / e.flop_rate) * e.flop_rate
                                                 / (2 * e.N + e.A * P_in))) / s.evaluate(B + c_max))

    solo = step_work(s, e, "solo", "prefill alone on an idle group", P_in, P_in**2 / 2, 0)
    t_ar_solo = tp_all_reduce(s, p.model, p.gpu, p.tp, P_in, tag="solo", label="prefill alone")
    t_solo = step_time(s, e, "solo", "prefill alone on an idle group", solo, key="solo_ttft",
                       communication=t_ar_solo, why="no decode batch and no TPOT cap: the whole prompt in one step, "
                       "what a prefill-only replica of the same GPUs gives it")
    s.assume("A prefill-only replica hands the prompt's KV to the decode replica; the transfer is not counted.")
    _chunk_remedies(s, ttft, T_f, t_solo, c_max)
    _chunk_regime(s, p, ttft, T_f, t_p, t_x, n, c_max, P_in)


def _chunk_remedies(s: Sheet, ttft, T_f, t_solo, c_max) -> None:
    """Which ways of serving the long prompt meet both targets."""
    took, target, alone = (format_quantity(s.value(x), "s") for x in (ttft, T_f, t_solo))
    key = "remedies"
    s.judge(key, "keep the TPOT-capped budget: the prompt still makes its TTFT", s.compare(ttft, T_f) <= 0,
            f"under it the first token comes after {took}, against {target}")
    s.judge(key, "raise the budget for this prompt's steps until it makes its TTFT", False,
            f"any chunk past {_tokens(s, c_max)} tokens breaks every running stream's TPOT while the prompt runs",
            fact=True)
    fits_alone = s.compare(t_solo, T_f) <= 0
    s.judge(key, "prefill it on a prefill-only replica of the same GPUs and hand its KV over", fits_alone,
            f"alone on the group, in one step, its prefill takes {alone}, against {target}")
    s.judge(key, "none on a group like this: it needs a looser TTFT target or more compute", not fits_alone,
            f"even alone on the group its prefill takes {alone}, against {target}")


def _chunk_regime(s: Sheet, p, ttft, T_f, t_p, t_x, n, c_max, P_in) -> None:
    budget, steps = _tokens(s, c_max), _tokens(s, n)
    took, target = format_quantity(s.value(ttft), "s"), format_quantity(s.value(T_f), "s")
    by_tpot = Side(
        "set-by-TPOT",
        f"At the TPOT-capped chunk of {budget} tokens the prompt takes {steps} steps and its first token comes "
        f"after {took}, inside the {target} TTFT target: the TPOT target sets the budget and the TTFT target has "
        "slack.",
        "A longer prompt, a tighter TTFT target or a busier decode batch pushes the TTFT past its target: then the "
        "budget needed for TTFT exceeds what TPOT allows, and one of the two SLOs must give (or the prompt goes "
        "to a separate prefill pool).")
    if s.compare(ttft, T_f) <= 0:
        by_ttft_summary = ""
    elif s.compare(T_f - t_p, t_x) < 0:
        single = format_quantity(s.evaluate(t_p + t_x), "s")
        by_ttft_summary = (f"Even unchunked, the prompt's first token needs {single} (its own time plus one "
                           f"step's fixed cost), past the {target} TTFT target: no budget meets both SLOs here, "
                           f"and the prompt needs more compute: {_tp_advice(p)}.")
    else:
        n_max = s.step("ttft_steps", "Most steps the TTFT target allows", "n_max",
                       floor_of((T_f - t_p) / t_x), "steps", "what the target leaves after the prompt's own time")
        c_min = s.step("ttft_chunk", "Smallest chunk that meets the TTFT target", "c_min",
                       ceil_of(P_in / n_max), "tokens", "the prompt in at most n_max chunks")
        by_ttft_summary = (f"At the TPOT-capped chunk of {budget} tokens the first token comes after {took}, past "
                           f"the {target} TTFT target: meeting it takes chunks of {_tokens(s, c_min)} tokens, so "
                           "the TTFT target would set the budget and the running streams' TPOT would break while "
                           "this prompt is prefilled.")
    by_ttft = Side(
        "set-by-TTFT", by_ttft_summary,
        "A shorter prompt, a looser TTFT target or more compute per step (a lighter decode batch, "
        f"{_tp_advice(p)}) brings the TTFT under its target at the TPOT-capped chunk; then TPOT alone sets the "
        "budget.")
    s.regime_by(ttft, T_f, tie="below", above=by_ttft, below=by_tpot)


# --- coupled-slo-admission ----------------------------------------------------------------


def coupled_slo_admission(p, s: Sheet) -> None:
    e, B, S, tau, T_f = _streams_and_targets(p, s)
    L_p = s.param("L_p", "prompt")
    q = s.param("q", "queued")
    require_fit(s, e, p.gpu, B * S + L_p)

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    _require_tpot_room(s, e, dec.bytes, tau)
    c_max, t_x, t_c, ar = _chunk_cap(s, e, p, B, L_p, tau, dec, "chunk", "TPOT caps the prefill chunk")
    mixed = step_work(s, e, "mix", "mean step with a full chunk", B + c_max, B * S + c_max * L_p / 2, B * S)
    t_ar_mix = tp_all_reduce(s, p.model, p.gpu, p.tp, B + c_max, tag="mix", label="mean step")
    t_mix = step_time(s, e, "mix", "mean step with a full chunk", mixed, key="step_time", communication=t_ar_mix,
                      why="a prompt token attends on average to half its prompt: the mean step, under the TPOT target")
    X_p = s.step("prefill_rate", "The chunk caps prefill throughput", "X_p", c_max / t_mix, "tokens/s",
                 "one chunk of prompt tokens per mean step")
    n_max = s.step("ttft_steps", "Whole steps within the TTFT target", "n_T", floor_of(T_f / t_mix), "steps",
                   "the first token comes out at the end of a step")
    Q_max = s.step("backlog_limit", "Largest prompt backlog that meets the TTFT target", "Q_max", n_max * c_max,
                   "tokens", "one full chunk of waiting prompt tokens per step")
    Q = s.step("backlog", "Prompt backlog with the new request", "Q", (q + 1) * L_p, "tokens",
               "the waiting prompts plus the new one, served in arrival order")
    n = s.step("backlog_steps", "Steps to clear the backlog", "n", ceil_of(Q / c_max), "steps",
               "full chunks (one may hold the end of one prompt and the start of the next); the last may be partial")
    ttft = s.step("ttft", "TTFT of the new request if admitted", "TTFT", n * t_mix, "s",
                  "its first token comes out with the step that finishes its prompt")
    delay = s.step("added_delay", "What admitting it costs every later arrival", "Δ", L_p / X_p, "s",
                   "its prompt occupies the chunks of the steps it takes, ahead of anyone who arrives after it")
    solo = step_work(s, e, "solo", "prefill alone on an idle group", L_p, L_p**2 / 2, 0)
    t_ar_solo = tp_all_reduce(s, p.model, p.gpu, p.tp, L_p, tag="solo", label="prefill alone")
    t_solo = step_time(s, e, "solo", "prefill alone on an idle group", solo, key="solo_ttft",
                       communication=t_ar_solo, why="no decode batch and no TPOT cap: the whole prompt in one step, "
                       "what a prefill-only replica of the same GPUs gives it")

    s.assume("TPOT is the step time: every running stream gets one token per step. Every chunk token is priced "
             "at attention to its whole prompt (the last chunk's cost), so no step breaks the TPOT target; "
             "throughput and TTFT use the mean step, where a prompt token attends to half its prompt.")
    s.assume("The chunk's reads of earlier KV of its prompt are left out next to the decode streams' reads.")
    s.assume("Prefill in arrival order (FCFS), one full chunk of waiting prompt tokens per step; the running "
             "batch and its context stay as they are while the backlog drains, and the first token comes out "
             "with the step that holds the request's last prompt token. The TTFT clock starts at arrival, "
             "wherever the request waits.")
    c_mean = s.evaluate(floor_of((tau - t_x) / ((2 * e.N + e.A * L_p / 2) / e.flop_rate + ar.per_token)))
    s.slip("chunk sized for the mean prompt token (late chunks then break the TPOT target)", on="chunk",
           factor=c_mean / s.value(c_max))
    s.slip("chunk taken as the whole TPOT step (decode batch's share forgotten)", on="chunk",
           factor=s.evaluate(floor_of((tau - e.t_oh) / t_c)) / s.value(c_max))
    s.slip("TTFT as backlog over prefill rate (whole steps not counted)", on="ttft",
           factor=s.evaluate(Q / X_p) / s.value(ttft))
    s.slip("backlog limit from the TPOT target instead of the TTFT target", on="backlog_limit",
           factor=s.evaluate(floor_of(tau / t_mix)) / s.value(n_max))

    _admission_remedies(s, Q, Q_max, L_p, ttft, T_f, t_solo, delay)
    _admission_regime(s, p, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay)


def _admission_remedies(s: Sheet, Q, Q_max, L_p, ttft, T_f, t_solo, delay) -> None:
    """Which ways of serving the new request get its first token within the target, and who pays."""
    late, target, cost = (format_quantity(s.value(x), "s") for x in (ttft, T_f, delay))
    alone = format_quantity(s.value(t_solo), "s")
    own = s.compare(L_p, Q_max) <= 0
    key = "remedies"
    s.judge(key, "admit it here now, behind the waiting prompts", s.compare(Q, Q_max) <= 0,
            f"behind the backlog its first token comes after {late}, against {target}")
    s.judge(key, "hold it outside the engine until the backlog drains", False,
            f"its TTFT clock runs while it waits: it sees at least the {late} it sees admitted now, and every later "
            "arrival still waits behind it", fact=True)
    s.judge(key, "let it overtake the waiting prompts", own,
            f"its prompt alone {'fits' if own else 'exceeds'} the {_tokens(s, Q_max)} tokens this replica prefills "
            f"within {target}; the prompts it overtakes each pay its {cost}")
    s.judge(key, "send it to an idle replica of the same kind (same decode batch, empty queue)", own,
            f"with no queue ahead its prompt of {_tokens(s, L_p)} tokens against the {_tokens(s, Q_max)}-token "
            "limit decides")
    fits_alone = s.compare(t_solo, T_f) <= 0
    s.judge(key, "send it to a prefill-only replica of the same GPUs (no decode batch, one step)", fits_alone,
            f"alone on the group its prefill takes {alone}, against {target}")
    s.judge(key, "none of these: it needs more compute than a group of these GPUs gives", not fits_alone,
            f"even alone on the group its prefill takes {alone}, against {target}")


def _admission_regime(s: Sheet, p, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay) -> None:
    holds = "≤" if s.value(Q) <= s.value(Q_max) else ">"
    rule = (f"admit while (q + 1)·L_p ≤ c_max·floor(T_f / t_step); here {_tokens(s, Q)} {holds} {_tokens(s, Q_max)} "
            f"tokens (c_max = {_tokens(s, c_max)} tokens per {_ms(s, t_mix)} step, {_tokens(s, n_max)} steps)")
    late, target = format_quantity(s.value(ttft), "s"), format_quantity(s.value(T_f), "s")
    cost, alone = format_quantity(s.value(delay), "s"), format_quantity(s.value(t_solo), "s")
    if s.compare(L_p, Q_max) > 0:
        alone_fits = s.compare(t_solo, T_f) <= 0
        pool = (f"a prefill-only replica ({alone} alone on the group) could still make it" if alone_fits
                else f"even alone on the group its prefill takes {alone}: it needs a looser target or "
                     f"{_tp_advice(p)}")
        s.set_regime(
            "reject",
            f"The prompt alone ({_tokens(s, L_p)} tokens) exceeds the {_tokens(s, Q_max)} tokens a replica like this "
            f"prefills within {target}: on any queue it misses its TTFT. Fail it fast rather than let it take "
            f"{cost} of chunks from everyone behind it; {pool}. Rule: {rule}.",
            Q_max, L_p,
            "A prompt shorter than the backlog limit can meet its TTFT on a replica with a short enough queue; "
            "raising the limit takes a looser TPOT target (bigger chunks) or more compute per step.")
    elif s.compare(Q, Q_max) > 0:
        s.set_regime(
            "route-elsewhere",
            f"Behind this backlog its first token would come after {late}, past the {target} target, and holding "
            "it outside the engine saves nothing: its clock is already running. Admitted here it pays that miss "
            f"itself and every later arrival pays {cost} more; on an idle replica of the same kind it would make "
            f"it. Route it to the least-loaded replica whose backlog passes the rule, or fail it fast. Rule: {rule}.",
            Q_max, Q,
            "Once the backlog drains below the limit less this prompt, the same request is admitted here; a prompt "
            "longer than the limit itself is rejected, since no replica like this can make its target.")
    else:
        s.set_regime(
            "admit",
            f"The backlog with this prompt clears within {late}, inside the {target} TTFT target, while every "
            f"step stays within the TPOT target; every later arrival waits {cost} more for it. Rule: {rule}.",
            Q_max, Q,
            "A longer queue or a longer prompt pushes the backlog past the limit: the request then goes to a less "
            "loaded replica, or is rejected if its prompt alone exceeds the limit.")


# --- decode-loop-overlap ------------------------------------------------------------------


# Where step n's token of the request in question sits while step n+1 runs, by the kind of request:
# a free-text request rides the overlap; a grammar-constrained one needs its token on the CPU first.
_PLACEHOLDERS = {
    "on the GPU, feeding its step n+1 input without a round trip": {"free-text"},
    "on the CPU as a placeholder, filled in when step n's output is processed": {"free-text"},
    "on the CPU, before its step n+1 is scheduled: its next mask is built from it": {"grammar-constrained"},
    "in the KV cache, as a dummy token's KV rewritten once the real token is known": set(),
    "on the CPU as detokenized text, before step n+1 is planned for anyone": set(),
}
_PLACEHOLDER_WHY = {
    "free-text": "a free-text request needs nothing from its token on the CPU: the overlap scheduler keeps the "
                 "sampled ids on the device and counts a placeholder for each (vLLM's num_output_placeholders)",
    "grammar-constrained": "a grammar-constrained request's next token mask is computed on the CPU from its last "
                           "token: it cannot be scheduled until that token has arrived",
    "in the KV cache, as a dummy token's KV rewritten once the real token is known":
        "step n+1 writes the KV of the real token from its real id on the GPU: nothing is rewritten",
    "on the CPU as detokenized text, before step n+1 is planned for anyone":
        "that is the serial loop: the whole batch would wait for the CPU's output processing",
}


def decode_loop_overlap(p, s: Sheet) -> None:
    _require_realistic_tp(p.model, p.tp, p.gpu)
    e = engine(s, p.model, p.gpu, p.tp, _constants(p, overhead=False), communication=p.tp > 1,
               kv_prerequisite=True)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    c_0 = s.param("c_0", "cpu_step")
    c_r = s.param("c_r", "cpu_request")
    L_out = s.param("L_out", "reply")
    require_fit(s, e, p.gpu, B * S)

    work = step_work(s, e, "gpu", "decode step on the GPU", B, B * S, B * S)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="gpu", label="decode step")
    t_gpu = step_time(s, e, "gpu", "decode step on the GPU", work, key="gpu_time", communication=t_ar,
                      why="the GPU's kernels for one token of every request" + (", all-reduces included"
                                                                                 if p.tp > 1 else ""))
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
    s.assume("With overlap the CPU work of step n runs while the GPU runs step n+1, whose inputs are step n's "
             "sampled ids, still on the GPU; a request that stops (EOS or a stop string) is found one step late, "
             "and the token it got in that step is discarded.")
    s.slip("overlap throughput taken as the serial one", s.value(X_seq) / s.value(X_ovl), on="throughput_overlap")
    s.slip("idle fraction taken as CPU time over GPU time", on="idle",
           factor=s.evaluate(t_cpu / t_gpu) / s.evaluate(t_cpu / t_seq))

    gpu, cpu = _ms(s, t_gpu), _ms(s, t_cpu)
    cpu_bound = s.compare(t_cpu, t_gpu) > 0
    kind = p.request
    for option, kinds in _PLACEHOLDERS.items():  # the two places no request's token is are facts of the loop
        s.judge("placeholders", option, kind in kinds, _PLACEHOLDER_WHY.get(option, _PLACEHOLDER_WHY[kind]),
                fact=not kinds)
    _judge_payers(s, kind, cpu_bound, gpu, cpu, L_out, t_seq, t_ovl)
    s.regime_by(t_cpu, t_gpu, tie="below", above=Side(
        "CPU-bound",
        f"The CPU needs {cpu} per step against the GPU's {gpu}: even with overlap the GPU waits for the CPU every "
        "step, and overlap hides only the GPU's share.",
        "With less CPU work per request (a faster output path, fewer requests per engine process) or a heavier "
        "GPU step (longer contexts, a bigger model), the GPU becomes the pace-setter and overlap hides the CPU "
        "entirely."), below=Side(
        "GPU-bound",
        f"The GPU's {gpu} per step covers the CPU's {cpu}: with overlap the CPU work disappears behind the GPU, "
        "and the loop runs at the GPU's pace.",
        "With a larger batch of cheap steps (a small model, short contexts) the CPU's per-request work outgrows "
        "the GPU step, and then the CPU sets the pace even with overlap."))


def _judge_payers(s: Sheet, kind: str, cpu_bound: bool, gpu: str, cpu: str, L_out, t_seq, t_ovl) -> None:
    """What running step n+1 before step n's tokens are known costs, and whom, in this variant."""
    wasted = format_quantity(s.evaluate(1 / (L_out + 1)), "%", 2)
    free = kind == "free-text"
    key = "pays"
    s.judge(key, "it gets one more step at its end, computed and thrown away", free,
            f"its stop is seen a step late ({wasted} of the slots at {_tokens(s, L_out)}-token replies)" if free
            else "its token reaches the CPU before its next step is planned: its stop is seen in time")
    s.judge(key, "it waits out the CPU's work on each of its tokens (the serial step)", not free,
            f"the serial step, {_ms(s, t_seq)} per token, instead of {_ms(s, t_ovl)}" if not free
            else "its step n+1 is launched on a placeholder before step n is processed")
    s.judge(key, "every token reaches its user one step later", False,
            "step n's tokens are processed and streamed while step n+1 runs, as soon as in the serial loop",
            fact=True)
    s.judge(key, "the GPU still waits for the CPU every step", cpu_bound,
            f"the CPU's {cpu} per step against the GPU's {gpu}")
    s.judge(key, "the CPU now waits for the GPU every step", not cpu_bound,
            f"the GPU's {gpu} per step against the CPU's {cpu}")


# --- long-reply-batching ------------------------------------------------------------------


MIN_POOL_BATCH = 8  # a pool for fewer requests calls for more GPUs, not for tuning preemption


def long_reply_batching(p, s: Sheet) -> None:
    _require_realistic_tp(p.model, p.tp, p.gpu)
    require_context(p.model, p.prompt + p.reply)
    e = engine(s, p.model, p.gpu, p.tp, _constants(p), communication=p.tp > 1, kv_prerequisite=True)
    P_in = s.param("P_in", "prompt")
    L_out = s.param("L_out", "reply")
    v = s.param("v", "speed")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "%", "usable fraction of HBM (the card's usable-hbm)")
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
    if s.value(B_slo) < 1:
        raise Reject("even a batch of one misses the speed target")
    s.step("batch", "Batch to run (max_num_seqs)", "B_run", min_of(B_pool, B_slo), "requests",
           "the smaller cap binds")

    # The victim sits halfway through its reply: its context is the mean footprint.
    redo = step_work(s, e, "redo", "recompute prefill of the victim", S_avg, S_avg**2 / 2, 0)
    t_ar_redo = tp_all_reduce(s, p.model, p.gpu, p.tp, S_avg, tag="redo", label="recompute prefill")
    t_redo = step_time(s, e, "redo", "recompute prefill of the victim", redo, key="recompute_time",
                       communication=t_ar_redo, why="rebuild its KV from its tokens: a prefill of its whole context")
    t_swap = s.step("swap_time", "Swap the victim out and back in", "t_swap", 2 * S_avg * e.KV / BW_h, "ms",
                    "its KV crosses each GPU's host link twice, every GPU moving its own share")
    R = s.step("recompute_over_swap", "Recompute over swap", "R_pre", t_redo / t_swap, "x",
               "compute per token (2N plus attention) against KV bytes per token over PCIe")

    s.assume("Requests are admitted continuously and their ages are spread evenly, so the pool holds the "
             "mean footprint per request; the victim of a preemption is a request halfway through its reply.")
    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM is usable; activations, CUDA graphs and "
             "NCCL buffers are ignored. Recompute runs as one prefill step; swap moves the victim's KV over "
             "PCIe out and back, without overlap with other work.")
    s.assume(f"Timed as single operations, recompute costs {format_quantity(s.value(R), 'x', 3)} the swap; vLLM V1 "
             "recomputes anyway (its docs: lower overhead in V1), having no swap preemption: the recompute "
             "re-enters as chunked prefill on decode steps that are mostly memory-bound, using compute that would "
             "otherwise idle, where a swap would stall on PCIe.")
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


def _reply_regime(s: Sheet, e: Engine, work, B_pool, B_slo, speed, full, v, usable) -> None:
    fits, allowed = _tokens(s, B_pool), _tokens(s, B_slo)
    got, target = format_quantity(s.value(speed), "tokens/s"), format_quantity(s.value(v), "tokens/s")
    ceiling = format_quantity(s.value(full), "tokens/s")
    read = format_quantity(s.evaluate(work.bytes / usable), "%", 3)
    if s.evaluate(work.flops / e.flop_rate) > s.evaluate(work.bytes / e.byte_rate):
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


# --- roofline-model-breaks ----------------------------------------------------------------

REACH = 2  # a bare estimate within 2x of the corrected one counts as within reach
_CORRECTIONS = ("bandwidth", "all-reduce", "overhead")
# Choices are graded without tolerance: a draw this close to the 2x line, or with its two largest
# corrections this close, would turn on rounding rather than on understanding.
TOO_CLOSE = 0.05
MATTERS = 0.1  # a correction that adds more than this share of the corrected step belongs in the plan
# vLLM captures CUDA graphs for decode batches of 1, 2, 4 and then every multiple of 8 (up to 512 by default);
# a batch between two sizes runs padded to the next one.
CAPTURE_STEP = 8

_BREAKS = {
    "bandwidth": "kernels reaching only part of the datasheet bandwidth and peak",
    "all-reduce": "the TP all-reduces, two per layer",
    "overhead": "the per-step overhead (scheduling, sampling, launch gaps)",
}
_CATCH = {
    "bandwidth": "a streaming-copy kernel for achieved HBM bandwidth, and the decode GEMVs timed in a profiler",
    "all-reduce": "nccl-tests all_reduce_perf (or the engine's custom all-reduce) at the decode message size",
    "overhead": "an Nsight Systems trace of one decode step, reading the gaps between kernels",
}
_PADDING = "CUDA-graph padding of the batch to the next captured size"
_EXPERTS = "expert load imbalance"
_BIG_MESSAGES = "nccl-tests at gigabyte messages, for the ring's bus bandwidth"
_ROUTER = "a histogram of the router's tokens per expert"


def _captured(batch: int) -> int:
    """The CUDA-graph batch size a decode batch runs padded to."""
    return next(size for size in (1, 2, 4) if batch <= size) if batch <= 4 else -(-batch // CAPTURE_STEP) * CAPTURE_STEP


def roofline_model_breaks(p, s: Sheet) -> None:
    _require_realistic_tp(p.model, p.tp, p.gpu)
    e = engine(s, p.model, p.gpu, p.tp, _constants(p), communication=True, kv_prerequisite=True)
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
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step", key="allreduce_time",
                         latency=alpha)
    t = s.step("corrected_time", "Corrected step", "t", t_1 + t_ar + e.t_oh, "ms",
               "the efficient step, then the all-reduces and the per-step overhead on top (correction 3)")
    X = s.step("corrected_throughput", "Corrected throughput", "X", B / t, "tokens/s",
               "one token per request per step")
    ratio = s.step("ratio", "Corrected over bare", "r", t / t_0, "x", "how far the bare estimate is off")
    reach = s.given("r_reach", REACH, "x", "within reach: off by at most this factor")
    padding = _padding_cost(s, p, e, work, all_reduce_steps(s, p.model, p.gpu, p.tp, latency=alpha))

    s.assume("All-reduces are not overlapped with compute and use a ring: 2(TP-1)/TP of the message crosses "
             "each GPU's link in each direction, plus a fixed latency per call, which outweighs the bytes at small "
             "batches.")
    s.assume("Corrections add: efficiency stretches the roofline step, then communication and the per-step "
             "overhead (scheduling, sampling, launch gaps) come on top of it.")
    s.assume(f"A correction matters when it adds more than {format_quantity(MATTERS, '%')} of the corrected step: "
             "below that it is inside the error of the estimate itself.")
    s.slip("one all-reduce per layer instead of two", 0.5, on="allreduce_time")
    s.slip("one all-reduce per layer instead of two", on="corrected_throughput",
           factor=s.evaluate(B / (t_1 + t_ar / 2 + e.t_oh)) / s.value(X))
    s.slip("all-reduces of one layer only", 1 / p.model.layers, on="allreduce_time")
    s.slip("all-reduces of one layer only", on="corrected_throughput",
           factor=s.evaluate(B / (t_1 + t_ar / p.model.layers + e.t_oh)) / s.value(X))

    costs = {"bandwidth": s.value(d_bw), "all-reduce": s.value(t_ar), "overhead": s.value(e.t_oh)}
    _require_clear_call(s.value(ratio), sorted(costs.values()), [c / s.value(t) for c in costs.values()])
    dominant = max(_CORRECTIONS, key=costs.__getitem__)
    s.choose("dominant", dominant)
    _judge_breaks(s, costs, s.value(t), padding)
    _roofline_regime(s, ratio, reach, costs, dominant)


def _padding_cost(s: Sheet, p, e: Engine, work, ar) -> float:
    """What running the batch padded to its CUDA-graph size adds: the dummy slots carry no KV, only math
    and activations."""
    extra = _captured(p.batch) - p.batch
    reads = work.bytes / e.byte_rate
    slower = max_of(reads, (work.flops + 2 * e.N * extra) / e.flop_rate) - max_of(reads, work.flops / e.flop_rate)
    return s.evaluate(slower + ar.per_token * extra)


def _require_clear_call(ratio: float, ranked_costs: list[float], shares: list[float]) -> None:
    if abs(ratio / REACH - 1) < TOO_CLOSE:
        raise Reject("the corrected step sits on the 2x line")
    if ranked_costs[-2] > ranked_costs[-1] * (1 - TOO_CLOSE):
        raise Reject("the two largest corrections are too close to call")
    if any(abs(share / MATTERS - 1) < TOO_CLOSE for share in shares):
        raise Reject("a correction sits on the 10% line")
    if max(shares) <= MATTERS:
        raise Reject("every correction is inside 10%: nothing for the plan to catch")


def _judge_breaks(s: Sheet, costs: dict[str, float], step: float, padding: float) -> None:
    """Which corrections matter for this variant, and which measurements would catch them."""
    for name, cost in costs.items():
        share = format_quantity(cost / step, "%", 2)
        matters = cost > MATTERS * step
        s.judge("breaks", _BREAKS[name], matters, f"{format_quantity(cost, 'ms')}, {share} of the corrected step")
        s.judge("catch", _CATCH[name], matters, f"it measures the {name} correction, {share} of the step here")
    # Facts of these dense decode steps: padding adds math, never reads, and a read-bound step hides it.
    s.judge("breaks", _PADDING, padding > MATTERS * step,
            f"the dummy slots carry no KV, only math and activations: {format_quantity(padding, 'ms')} here, "
            f"{format_quantity(padding / step, '%', 2)} of the step", fact=True)
    s.judge("breaks", _EXPERTS, False, "a dense model: every token goes through every weight", fact=True)
    s.judge("catch", _BIG_MESSAGES, False,
            "a decode all-reduce carries kilobytes to a few MB, where latency rules: GB-size bus bandwidth "
            "says nothing about it", fact=True)
    s.judge("catch", _ROUTER, False, "a dense model has no router", fact=True)


def _roofline_regime(s: Sheet, ratio, reach, costs: dict[str, float], dominant: str) -> None:
    off = format_number(s.value(ratio), 3)
    parts = ", ".join(f"{name} +{format_quantity(cost, 'ms')}" for name, cost in costs.items())
    summary = (f"The corrected step is {off}x the bare roofline ({parts}); the {dominant} correction dominates: "
               f"catch it with {_CATCH[dominant]}.")
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
