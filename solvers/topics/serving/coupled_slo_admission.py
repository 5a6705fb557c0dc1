"""Admitting a request under coupled TTFT and TPOT targets."""
from __future__ import annotations

from solvers.derivation import Sheet
from solvers.models.collective import tp_all_reduce
from solvers.models.scheduling import chunk_cap, require_tpot_room, streams_and_targets, tokens_text, tp_advice
from solvers.models.steptime import (
    require_fit,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_quantity


def _admission_remedies(s: Sheet, Q, Q_max, L_p, ttft, T_f, t_solo, t_held, delay) -> None:
    """Which ways of serving the new request get its first token within the target, and who pays."""
    late, target, cost = (s.text(x) for x in (ttft, T_f, delay))
    alone = format_quantity(s.value(t_solo), "s")
    own = s.compare(L_p, Q_max) <= 0
    key = "remedies"
    s.judge(key, "admit it here now, behind the waiting prompts", s.compare(Q, Q_max) <= 0,
            f"behind the backlog its first token comes after {late}, against {target}")
    held = s.compare(t_held, T_f) <= 0
    s.judge(key, "hold it outside the engine until the backlog drains", held,
            f"its TTFT clock runs while it waits: the waiting prompts drain, then its own chunks run, "
            f"{s.text(t_held)} in all, {'within' if held else 'past'} {target}")
    s.judge(key, "let it overtake the waiting prompts", own,
            f"its prompt alone {'fits' if own else 'exceeds'} the {s.text(Q_max)} this replica prefills "
            f"within {target}; the prompts it overtakes each pay its {cost}")
    s.judge(key, "send it to an idle replica of the same kind (same decode batch, empty queue)", own,
            f"with no queue ahead its prompt of {s.text(L_p)} against the {tokens_text(s, Q_max)}-token "
            "limit decides")
    fits_alone = s.compare(t_solo, T_f) <= 0
    s.judge(key, "send it to a prefill-only replica of the same GPUs (no decode batch, one step)", fits_alone,
            f"alone on the group its prefill takes {alone}, against {target}")
    s.judge(key, "none of these: it needs more compute than a group of these GPUs gives", not fits_alone,
            f"even alone on the group its prefill takes {alone}, against {target}")


def _admission_regime(s: Sheet, p, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay) -> None:
    holds = "≤" if s.compare(Q, Q_max) <= 0 else ">"
    rule = (f"admit while (q + 1)·L_p ≤ c_max·floor(T_f / t_step); here {tokens_text(s, Q)} {holds} "
            f"{s.text(Q_max)} (c_max = {s.text(c_max)} per {s.text(t_mix)} step, "
            f"{s.text(n_max)})")
    late, target = s.text(ttft), s.text(T_f)
    cost, alone = s.text(delay), format_quantity(s.value(t_solo), "s")
    if s.compare(L_p, Q_max) > 0:
        alone_fits = s.compare(t_solo, T_f) <= 0
        pool = (f"a prefill-only replica ({alone} alone on the group) could still make it" if alone_fits
                else f"even alone on the group its prefill takes {alone}: it needs a looser target or "
                     f"{tp_advice(p)}")
        s.set_regime(
            "reject",
            f"The prompt alone ({s.text(L_p)}) exceeds the {s.text(Q_max)} a replica "
            f"like this "
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


def solve(p, s: Sheet) -> None:
    e, B, S, tau, T_f = streams_and_targets(p, s)
    L_p = s.param("L_p", "prompt")
    q = s.param("q", "queued")
    require_fit(s, e, p.gpu, B * S + (q + 1) * L_p)  # the backlog's KV joins the batch's as it is prefilled

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    require_tpot_room(s, e, dec.bytes, tau)
    c_max, t_x, t_c, ar = chunk_cap(s, e, p, B, L_p, tau, dec, "chunk", "TPOT caps the prefill chunk")
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
    n_q = s.step("drain_steps", "Steps to drain the waiting prompts", "n_q", ceil_of(q * L_p / c_max), "steps",
                 "the backlog without the new request, in full chunks")
    t_held = s.step("ttft_held", "TTFT if held outside until the backlog drains", "TTFT_h",
                    (n_q + ceil_of(L_p / c_max)) * t_mix, "s",
                    "the drain, then its own chunks: no step shares the end of the backlog with its start")
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
    s.assume("The delay a later arrival pays is the mean: the new prompt over the prefill rate. In whole steps it "
             "is the floor or the ceiling of prompt ÷ chunk steps, as the later prompt falls in a chunk.")
    s.assume("The server's peers are replicas like it (the same decode batch): routing elsewhere helps only a "
             "prompt within the backlog limit; a prefill-only pool is a remedy to weigh, not a peer.")
    c_mean = s.evaluate(floor_of((tau - t_x) / ((2 * e.N + e.A * L_p / 2) / e.flop_rate + ar.per_token)))
    s.slip("chunk sized for the mean prompt token (late chunks then break the TPOT target)", on="chunk",
           factor=c_mean / s.value(c_max))
    s.slip("chunk taken as the whole TPOT step (decode batch's share forgotten)", on="chunk",
           factor=s.evaluate(floor_of((tau - e.t_oh) / t_c)) / s.value(c_max))
    s.slip("TTFT as backlog over prefill rate (whole steps not counted)", on="ttft",
           factor=s.evaluate(Q / X_p) / s.value(ttft))
    s.slip("backlog limit from the TPOT target instead of the TTFT target", on="backlog_limit",
           factor=s.evaluate(floor_of(tau / t_mix)) / s.value(n_max))

    _admission_remedies(s, Q, Q_max, L_p, ttft, T_f, t_solo, t_held, delay)
    _admission_regime(s, p, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay)

