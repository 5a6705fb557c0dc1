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


def _admission_remedies(s: Sheet, Q, Q_max, Q_more, Q_less, Q_half, Q_twice, q, ttft, T_f, t_held) -> None:
    """How near the line the verdict is, and what holding the request would do. Whether it makes it here (and on
    the idle peer) is the verdict itself, graded as the regime, so no option restates it: each option reads the
    side the verdict fell on (one prompt more when admitted, fewer when routed; the target halved when admitted,
    doubled when routed) and is listed in every draw. The two never hold together (a verdict within one prompt
    of the line is not robust to halving or doubling the target), and the one declared fact always holds, so a
    listing always has an option that holds and one that fails."""
    key = "remedies"
    admitted = s.compare(Q, Q_max) <= 0
    limit = f"the {s.text(Q_max)} this replica prefills within {s.text(T_f)}"
    later = s.compare(t_held, ttft) > 0
    s.judge(key, "held outside the engine until the backlog drains, its first token comes no sooner",
            s.compare(t_held, ttft) >= 0,
            f"its TTFT clock runs from arrival wherever it waits: the drain, then its own chunks, take "
            f"{s.text(t_held)}, " + ("a step later than admitted now: held, it cannot share a step with the "
                                     "backlog's last prompt" if later else "the same whole steps as admitted now"),
            fact=True)
    if admitted:
        flips = s.compare(Q_more, Q_max) > 0
        near = (f"admitted with {s.text(Q)} of backlog: one more waiting prompt makes {s.text(Q_more)}, "
                f"{'past' if flips else 'within'} {limit}")
        stands = s.compare(Q, Q_half) <= 0
        robust = (f"a longer target cannot turn a make into a miss; half the target holds {s.text(Q_half)} of "
                  f"backlog, against its {s.text(Q)}")
    elif s.compare(q, 1) >= 0:
        flips = s.compare(Q_less, Q_max) <= 0
        near = (f"routed with {s.text(Q)} of backlog: one fewer waiting prompt leaves {s.text(Q_less)}, "
                f"{'within' if flips else 'past'} {limit}")
    else:
        flips = False
        near = f"nothing waits ahead of it, and its own prompt of {s.text(Q)} is past {limit}"
    if not admitted:
        stands = s.compare(Q, Q_twice) > 0
        robust = (f"a shorter target cannot turn a miss into a make; twice the target holds {s.text(Q_twice)} of "
                  f"backlog, against its {s.text(Q)}")
    s.judge(key, "the verdict is one waiting prompt from flipping (one more ahead, or one fewer)", flips, near)
    s.judge(key, "the verdict would stand with the TTFT target halved, and with it doubled", stands, robust)


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
                    floor_of(T_f / 2 / t_mix) * c_max, "tokens", "the same rule at half the target")
    Q_twice = s.step("backlog_limit_twice", "Largest backlog within twice the TTFT target", "Q_2",
                     floor_of(2 * T_f / t_mix) * c_max, "tokens", "the same rule at twice the target")
    Q_less = s.step("backlog_less", "Backlog behind one fewer waiting prompt", "Q_-", Q - L_p, "tokens",
                    "one prompt fewer ahead of the new one")
    _admission_remedies(s, Q, Q_max, Q_more, Q_less, Q_half, Q_twice, q, ttft, T_f, t_held)
    _admission_regime(s, Q, Q_max, L_p, ttft, T_f, c_max, t_mix, n_max, t_solo, delay)

