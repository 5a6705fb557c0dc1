"""One long prompt against everyone's TPOT (chunked prefill)."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.models.collective import tp_all_reduce
from solvers.models.scheduling import chunk_cap, require_tpot_room, streams_and_targets, tokens_text, tp_advice
from solvers.models.steptime import (
    growing_steps_time,
    require_fit,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_quantity


def _chunk_remedies(s: Sheet, ttft, T_f, t_solo, c_max) -> None:
    """Which ways of serving the long prompt meet both targets."""
    took, target, alone = (format_quantity(s.value(x), "s") for x in (ttft, T_f, t_solo))
    key = "remedies"
    s.judge(key, "keep the TPOT-capped budget: the prompt still makes its TTFT", s.compare(ttft, T_f) <= 0,
            f"under it the first token comes after {took}, against {target}")
    s.judge(key, "raise the budget for this prompt's steps until it makes its TTFT", False,
            f"any chunk past {s.text(c_max)} breaks every running stream's TPOT while the prompt runs",
            fact=True)
    fits_alone = s.compare(t_solo, T_f) <= 0
    s.judge(key, "prefill it on a prefill-only replica of the same GPUs and hand its KV over", fits_alone,
            f"alone on the group, in one step, its prefill takes {alone}, against {target}")
    s.judge(key, "none on a group like this: it needs a looser TTFT target or more compute", not fits_alone,
            f"even alone on the group its prefill takes {alone}, against {target}")


def _chunk_regime(s: Sheet, p, ttft, T_f, t_p, t_x, n, c_max, P_in) -> None:
    budget, steps = tokens_text(s, c_max), tokens_text(s, n)
    took, target = s.text(ttft), s.text(T_f)
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
                           f"and the prompt needs more compute: {tp_advice(p)}.")
    else:
        n_max = s.step("ttft_steps", "Most steps the TTFT target allows", "n_max",
                       floor_of((T_f - t_p) / t_x), "steps", "what the target leaves after the prompt's own time")
        c_min = s.step("ttft_chunk", "Smallest chunk that meets the TTFT target", "c_min",
                       ceil_of(P_in / n_max), "tokens", "the prompt in at most n_max chunks")
        by_ttft_summary = (f"At the TPOT-capped chunk of {budget} tokens the first token comes after {took}, past "
                           f"the {target} TTFT target: meeting it takes chunks of {s.text(c_min)}, so "
                           "the TTFT target would set the budget and the running streams' TPOT would break while "
                           "this prompt is prefilled.")
    by_ttft = Side(
        "set-by-TTFT", by_ttft_summary,
        "A shorter prompt, a looser TTFT target or more compute per step (a lighter decode batch, "
        f"{tp_advice(p)}) brings the TTFT under its target at the TPOT-capped chunk; then TPOT alone sets the "
        "budget.")
    s.regime_by(ttft, T_f, tie="below", above=by_ttft, below=by_tpot)


def solve(p, s: Sheet) -> None:
    e, B, S, tau, T_f = streams_and_targets(p, s)
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
    require_tpot_room(s, e, dec.bytes, tau)
    if s.compare(stall, tau) <= 0:
        raise Reject("the unchunked prompt already steps within the TPOT target")

    c_max, t_x, t_c, ar = chunk_cap(s, e, p, B, P_in, tau, dec, "chunk",
                                     "Largest chunk that keeps a step within the TPOT target")
    if s.compare(c_max, P_in) >= 0:
        raise Reject("the TPOT-capped chunk holds the whole prompt: nothing to chunk")
    s.step("token_budget", "Per-step token budget", "τ_tok", B + c_max, "tokens",
           "decode tokens count against the budget too (vLLM's max_num_batched_tokens)")
    n = s.step("chunks", "Steps to prefill the prompt", "n", ceil_of(P_in / c_max), "steps",
               "the prompt sliced into chunks of at most c_max tokens")
    F_p = s.step("prompt_flops", "FLOPs of the prompt itself", "F_p", 2 * e.N * P_in + e.A * P_in**2 / 2, "TFLOP",
                 "chunking does not change the prompt's own work: P²/2 pairs under the causal mask")
    t_p = s.step("prompt_compute", "The prompt's own time", "t_p", F_p / e.flop_rate + ar.per_token * P_in, "s",
                 "its math and its activations' all-reduce bytes: a floor under its TTFT, however it is sliced")
    m = n - 1  # full chunks before the last
    first = step_work(s, e, "first", "step of the first chunk", B + c_max, B * S + c_max**2 / 2, B * S)
    t_full = growing_steps_time(s, e, "full_chunks", "steps of the full chunks", m, first, e.A * c_max**2,
                                communication=ar.of(B + c_max))
    r = s.step("last_chunk", "Tokens of the last chunk", "c_last", P_in - m * c_max, "tokens",
               "what the full chunks leave of the prompt")
    last = step_work(s, e, "last", "step of the last chunk", B + r, B * S + m * c_max * r + r**2 / 2, B * S)
    t_last = step_time(s, e, "last", "step of the last chunk", last, communication=ar.of(B + r),
                       why="the slower of the reads and the math: a short last chunk still reads every weight and "
                       "the streams' KV")
    ttft = s.step("ttft", "TTFT of the long prompt under the budget", "TTFT", t_full + t_last, "s",
                  "its chunks' steps one after another")

    s.assume("Every chunk token is priced at attention to the whole prompt (the last chunk's cost, a little "
             "above its exact causal count), so no step breaks the TPOT target; earlier chunks finish sooner, and "
             "the TTFT counts the prompt's exact work (P²/2 pairs).")
    s.assume("Each chunk's step is priced on both sides of the roofline: a chunk whose math is shorter than the "
             "step's reads (the weights and the streams' KV) waits on them. The chunk's reads of its own "
             "prompt's earlier KV are left out next to the decode streams' reads.")
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

