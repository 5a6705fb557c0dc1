"""Admitting a request under coupled TTFT and TPOT targets."""
from __future__ import annotations

from solvers.derivation import Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.scheduling import chunk_cap, require_tpot_room, solo_prefill, streams_and_targets, tokens_text
from solvers.formulas.steptime import (
    require_fit,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_quantity


def _admission_remedies(s: Sheet, Q, Q_max, Q_more, Q_half, L_p, T_f, t_held, t_queue_solo) -> None:
    """Where the new request makes its first token in time, and how much room this replica has left. Whether it
    makes it here now is the verdict itself, graded as the regime, so it is no option."""
    target = s.text(T_f)
    key = "remedies"
    # The replica's room: asked only where it can go either way (admitted: it may or may not have room to lose).
    admitted = s.compare(Q, Q_max) <= 0
    s.judge(key, "one more prompt waiting ahead of it would make it miss here",
            s.compare(Q_more, Q_max) > 0 if admitted else None,
            f"one more waiting prompt makes the backlog {s.text(Q_more)}, against the {s.text(Q_max)} this "
            f"replica prefills within {target}" if admitted else "it misses here already: no room to lose")
    s.judge(key, "under half the TTFT target it would still make it here",
            s.compare(Q, Q_half) <= 0 if admitted else None,
            f"half the target holds {s.text(Q_half)} of backlog, against its {s.text(Q)}" if admitted else
            "it misses the whole target here already")
    held = s.compare(t_held, T_f) <= 0
    s.judge(key, "held outside the engine until the backlog drains, it makes it", held,
            f"its TTFT clock runs while it waits: the waiting prompts drain, then its own chunks run, "
            f"{s.text(t_held)} in all, {'within' if held else 'past'} {target}")
    s.judge(key, "on an idle peer (same decode batch, empty queue) it makes it", s.compare(L_p, Q_max) <= 0,
            f"with no queue ahead its prompt of {s.text(L_p)} against the {tokens_text(s, Q_max)}-token "
            "limit decides")
    solo = s.compare(t_queue_solo, T_f) <= 0
    s.judge(key, "on a prefill-only replica of the same GPUs, behind as many waiting prompts, it makes it", solo,
            f"each prompt there is one step with no decode batch beside it: the waiting ones and its own take "
            f"{s.text(t_queue_solo)}, {'within' if solo else 'past'} {target}")


def _admission_regime(s: Sheet, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay) -> None:
    holds = "≤" if s.compare(Q, Q_max) <= 0 else ">"
    rule = (f"admit while (q + 1)·L_p ≤ c_max·floor(T_f / t_step); here {tokens_text(s, Q)} {holds} "
            f"{s.text(Q_max)} (c_max = {s.text(c_max)} per {s.text(t_mix)} step, "
            f"{s.text(n_max)})")
    late, target = s.text(ttft), s.text(T_f)
    cost, alone = s.text(delay), format_quantity(s.value(t_solo), "s")
    if s.compare(L_p, Q_max) > 0:
        where = (f"Its prompt alone ({s.text(L_p)}) exceeds the {s.text(Q_max)} a replica like this prefills "
                 f"within {target}, so no peer makes it either: send it to a prefill-only replica ({alone} alone "
                 f"on the group), or fail it fast rather than let it take {cost} of chunks from everyone behind it.")
    else:
        where = (f"On the idle peer it would make it: route it to the least-loaded peer whose backlog passes the "
                 f"rule. Admitted here it misses, and every request queued behind it pays {cost} more; letting it "
                 f"overtake the waiting prompts would move that {cost} onto each of them.")
    route = Side(
        "route-elsewhere",
        f"Behind this backlog its first token would come after {late}, past the {target} target, and holding it "
        f"outside the engine saves nothing: its clock is already running. {where} Rule: {rule}.",
        "Once the backlog drains below the limit less this prompt, the same request is admitted here; a prompt "
        "longer than the limit itself needs a prefill-only replica, a looser TPOT target (bigger chunks) or more "
        "compute per step.")
    admit = Side(
        "admit",
        f"The backlog with this prompt clears within {late}, inside the {target} TTFT target, while every "
        f"step stays within the TPOT target; every request queued behind it waits {cost} more for it. Rule: {rule}.",
        "A longer queue or a longer prompt pushes the backlog past the limit: the request then goes to a less "
        "loaded peer, or to a prefill-only replica if its prompt alone exceeds the limit.")
    s.regime_by(Q, Q_max, tie="below", above=route, below=admit)


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
    delay = s.step("added_delay", "What admitting it costs each request queued behind it", "Δ", L_p / X_p, "s",
                   "its prompt occupies the chunks of the steps it takes, ahead of every request queued behind it "
                   "(one that arrives after the backlog drains pays nothing)")
    t_solo = solo_prefill(s, e, p, L_p, T_f)
    t_queue_solo = s.step("ttft_prefill_only", "TTFT on a prefill-only replica behind as many waiting prompts",
                          "TTFT_p", (q + 1) * t_solo, "s",
                          "one whole-prompt step for each waiting prompt, then its own")
    Q_more = s.step("backlog_more", "Backlog behind one more waiting prompt", "Q_+", Q + L_p, "tokens",
                    "the room this replica has left: one more prompt ahead of the new one")

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
    s.assume("The server's peers are replicas like it (the same decode batch), one of them with an empty queue and "
             "the others as loaded as this one: a peer helps only a prompt within "
             "the backlog limit; past it, routing elsewhere means a prefill-only pool. A prefill-only replica "
             "prefills each waiting prompt whole, one per step, in arrival order (batching prompts saves little: "
             "prefill is compute-bound).")
    s.assume("The TTFT target is one the group can meet with the prompt alone, timed by this step model (not at "
             "datasheet peak): a target no deployment of these GPUs meets is not a serving target.")
    c_mean = s.evaluate(floor_of((tau - t_x) / ((2 * e.N + e.A * L_p / 2) / e.flop_rate + ar.per_token)))
    s.slip("chunk sized for the mean prompt token (late chunks then break the TPOT target)", on="chunk",
           factor=c_mean / s.value(c_max))
    s.slip("chunk taken as the whole TPOT step (decode batch's share forgotten)", on="chunk",
           factor=s.evaluate(floor_of((tau - e.t_oh) / t_c)) / s.value(c_max))
    s.slip("TTFT as backlog over prefill rate (whole steps not counted)", on="ttft",
           factor=s.evaluate(Q / X_p) / s.value(ttft))
    s.slip("backlog limit from the TPOT target instead of the TTFT target", on="backlog_limit",
           factor=s.evaluate(floor_of(tau / t_mix)) / s.value(n_max))

    Q_half = s.step("backlog_limit_half", "Largest backlog within half the TTFT target", "Q_½",
                    floor_of(T_f / 2 / t_mix) * c_max, "tokens", "the same rule at half the target: the room it has")
    _admission_remedies(s, Q, Q_max, Q_more, Q_half, L_p, T_f, t_held, t_queue_solo)
    _admission_regime(s, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay)

