"""Draft tokens in the step budget - accounting, rollback, break-even."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import given_hbm_bytes, given_usable_share
from solvers.formulas.speculation import DRAFT_LAUNCHES, speculative_round, tokens_per_round
from solvers.formulas.steptime import DecodeCosts, Engine, decode_costs, engine
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_number, format_quantity

EVEN_TIE = 0.03  # the break-even answer's tolerance: a batch this close to it has no verdict to grade
ROOF_TIE = 0.03  # a pass within 3% of its roofline's ridge: a candidate's rounding would flip the verdict


def _even_regions(E, gamma, c, t_W, t_KV, t_F, t_ar, t_AR0, t_oh):
    """Break-even batch E·t_plain(B) = t_round(B) in each region of the two rooflines, as
    (plain compute-bound?, verify compute-bound?, expression): the step model is linear in B
    inside each, so each region has its own root."""
    f = t_AR0 + t_oh
    return (
        (False, True,
         (E * (t_W + f) - f - gamma * c * (t_W + t_AR0))
         / ((gamma + 1) * (t_F + t_ar) + gamma * c * (t_KV + t_ar) - E * (t_KV + t_ar))),
        (False, False,
         ((E - 1) * (t_W + f) - gamma * c * (t_W + t_AR0))
         / (t_KV + (gamma + 1) * t_ar + gamma * c * (t_KV + t_ar) - E * (t_KV + t_ar))),
        (True, True,
         ((E - 1) * f - gamma * c * t_AR0) / ((gamma + 1 - E + gamma * c) * (t_F + t_ar))),
    )


def _break_even(s: Sheet, e: Engine, costs: DecodeCosts, E, gamma, c) -> sympy.Symbol:
    """The batch where the round costs exactly E plain steps, in the region of the rooflines where
    that root lies (each region's equation is linear in B). The regions are searched on floats; only
    the root found goes on the sheet."""
    terms = (E, gamma, c, costs.weights, costs.kv, costs.math, costs.comm.per_token, costs.comm.fixed, e.t_oh)
    values = [s.evaluate(x) for x in terms]
    _, g, _, t_W, t_KV, t_F = values[:6]
    roots = [_region_root(values, k) for k in range(3)]
    for (plain_compute, verify_compute, expr), root in zip(_even_regions(*terms), roots):
        if root is None or root <= 0:
            continue  # no root in this region
        plain_is = root * t_F > t_W + root * t_KV
        verify_is = root * (g + 1) * t_F > t_W + root * t_KV
        if (plain_is, verify_is) == (plain_compute, verify_compute):
            return s.step("break_even", "Batch where speculation starts losing", "B_even", expr, "sequences",
                          f"E·t_plain(B) = t_round(B) with the plain step {'compute' if plain_compute else 'memory'}"
                          f"-bound and the verify pass {'compute' if verify_compute else 'memory'}-bound, where the "
                          "root lies: linear in B there")
    raise Reject("speculation pays at every batch")


def _region_root(values: list[float], k: int) -> float | None:
    """Region k's root on floats; None where its denominator is zero (no root there)."""
    try:
        return _even_regions(*values)[k][2]
    except ZeroDivisionError:
        return None


def _accounting_holds(s: Sheet, p, costs: DecodeCosts, *, B, E, n_dec, tau, steps, B_c) -> None:
    """The statements judged on the sheet's exact values: step counts, the verify tokens against half the
    budget, each pass against its roofline, and the discarded share."""
    key, gamma = "holds", int(p.gamma)
    plain_left, spec_left = p.budget - p.batch, p.budget - p.batch * (gamma + 1)
    n_p, n_s = steps
    s.judge(key, "speculating at least doubles the steps the waiting prompt's prefill takes",
            s.compare(n_s, 2 * n_p) >= 0, f"{format_number(s.value(n_s))} steps instead of "
            f"{format_number(s.value(n_p))}: {format_number(spec_left)} prefill tokens per step instead of "
            f"{format_number(plain_left)}")
    s.judge(key, "the whole batch could speculate inside half the budget", s.compare(2 * n_dec, tau) <= 0,
            f"{s.text(n_dec)} scored for the verify pass against half of {s.text(tau)}")
    weights, kv, math_ = (s.value(x) for x in (costs.weights, costs.kv, costs.math))
    reads = format_quantity(weights + p.batch * kv, "ms")
    if (abs(2 * p.batch * math_ / (weights + p.batch * kv) - 1) < ROOF_TIE
            or abs(p.batch * math_ / (weights + p.batch * kv) - 1) < ROOF_TIE):
        raise Reject("a pass sits within 3% of its roofline's ridge: its bound is a coin toss")
    # Where a push lands, the verify pass at γ is compute-bound in every draw (break-even lies well past B_c):
    # asked is whether the shortest draft would bring it back under its reads.
    s.judge(key, "the verify pass would be compute-bound even with a single draft token",
            s.compare(2 * B * costs.math, costs.weights + B * costs.kv) > 0,
            f"one draft token: {format_number(2 * p.batch)} verify tokens take "
            f"{format_quantity(2 * p.batch * math_, 'ms')} of math against {reads} of reads (at γ = {gamma} the "
            f"pass turns compute-bound past {format_number(s.value(B_c), 3)} sequences)")
    s.judge(key, "the plain decode step at this batch is compute-bound",
            s.compare(B * costs.math, costs.weights + B * costs.kv) > 0,
            f"{format_quantity(p.batch * math_, 'ms')} of math against {reads} of reads")
    s.judge(key, "over a third of the verify tokens are thrown away", s.compare(3 * (gamma + 1 - E), gamma + 1) > 0,
            f"{format_number(s.evaluate(gamma + 1 - E), 3)} of {gamma + 1} positions per sequence")
    if len(set(s.judged(key).values())) == 1:
        raise Reject("all of these hold or none")


def _accounting_regime(s: Sheet, p, B, even, S_B) -> None:
    at = format_number(s.value(S_B), 3)
    where = format_number(s.value(even), 3)
    s.regime_by(B, even, tie="above", below=Side(
        "helps",
        f"At batch {format_number(p.batch)} speculation still pays ({at}x with no prompt waiting): the round "
        f"costs less than the E plain steps it replaces. It starts losing at about {where} sequences.",
        "Past break-even each round costs more than the tokens it yields: with the verify pass compute-bound, "
        "every rejected position is paid-for math, and speculation must shrink its draft or switch off."),
        above=Side(
        "hurts",
        f"At batch {format_number(p.batch)} speculation loses ({at}x): past {where} sequences the verify pass's "
        "extra tokens cost more, in math and all-reduce bytes, than the accepted ones save.",
        "Below break-even the verify pass's extra tokens ride on reads the step makes anyway: speculation pays, "
        "and the rejected positions cost next to nothing."))


def solve(p, s: Sheet) -> None:
    """Speculation inside a chunked-prefill engine: the verify tokens count against the step's token
    budget, rejected drafts are rolled back by a pointer, and past a batch the round costs more than
    the tokens it yields."""
    e = engine(s, p.model, p.gpu, p.tp, communication=p.tp > 1, kv_prerequisite=True)
    S = s.param("S", "context")
    costs = decode_costs(s, e, p.model, p.gpu, p.tp, S)
    alpha = s.param("α_acc", "alpha")  # α is the all-reduce latency on this sheet
    gamma = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    B = s.param("B", "batch")
    tau = s.param("τ", "budget")
    P_in = s.param("P_in", "prompt")
    E = tokens_per_round(s, alpha, gamma)

    # The step's token budget.
    n_dec = s.step("decode_tokens", "Decode tokens in a step, speculating", "n_dec", B * (gamma + 1), "tokens",
                   "each sequence's γ drafts and one more are scored in the verify pass: every one counts against "
                   "max_num_batched_tokens like a prompt token")
    B_tau = s.step("max_spec_batch", "Largest batch that can speculate inside the budget", "B_τ",
                   floor_of(tau / (gamma + 1)), "sequences", "a batch this size fills the budget with verify tokens")
    left = s.step("prefill_left", "Prefill tokens left per step, speculating", "c_s", tau - n_dec, "tokens",
                  "what the budget leaves a waiting prompt's chunk")
    steps_p = s.step("prefill_steps_plain", "Steps to prefill the waiting prompt, no speculation", "n_p",
                     ceil_of(P_in / (tau - B)), "steps", "one decode token per sequence leaves τ − B")
    steps_s = s.step("prefill_steps_spec", "Steps to prefill the waiting prompt, speculating", "n_s",
                     ceil_of(P_in / left), "steps", "the verify tokens leave less room for its chunks")
    if s.compare(steps_s, steps_p) == 0:
        raise Reject("speculating costs the waiting prompt no step: the cost the question is about does not show")
    # Rollback.
    s.step("discarded", "KV entries written and discarded per step", "n_rb", B * (gamma + 1 - E), "tokens",
                   "the verify pass writes KV for all γ+1 positions; the rejected tail is rolled back by moving the "
                   "sequence's length back, and the next step overwrites those slots: nothing is copied")
    s.step("discarded_share", "Share of the verify tokens thrown away", "r_rb", (gamma + 1 - E) / (gamma + 1), "%",
           "γ+1 positions scored, E of them kept")
    # The decode-only step: no prompt waiting.
    t_p = s.step("plain_step", "Plain decode step at this batch", "t_p", costs.kernels(B) + e.t_oh, "ms",
                 "the step-time model's terms with B sequences")
    T = s.step("round_time", "Round at this batch (decode only)", "T_r", speculative_round(e, costs, B, gamma, c, t_p),
               "ms",
               "the verify pass of B·(γ+1) tokens, the overhead once, γ drafts at c of the plain step's kernels")
    S_B = s.step("speedup", "Speedup at this batch", "S_B", E * t_p / T, "x", "E tokens per round against one per step")
    s.step("per_user", "Tokens/s per user, speculating", "X_s", E / T, "tokens/s", "E tokens per round")
    s.step("per_user_budget_batch", "Tokens/s per user at the largest batch that fits the budget", "X_τ",
           E / speculative_round(e, costs, B_tau, gamma, c, costs.kernels(B_tau) + e.t_oh), "tokens/s",
           "the same round with B_τ sequences, no prompt waiting")
    B_c = s.step("compute_batch", "Batch where the verify pass turns compute-bound", "B_c",
                 costs.weights / ((gamma + 1) * costs.math - costs.kv), "sequences",
                 "B·(γ+1)·t_F = t_W + B·t_KV: each sequence adds γ+1 tokens of math but one KV read")
    if s.compare((gamma + 1) * costs.math, costs.kv) <= 0:
        raise Reject("the verify pass never turns compute-bound at this context")
    even = _break_even(s, e, costs, E, gamma, c)
    room = s.step("kv_room", "Sequences whose KV fits", "B_kv",
                  floor_of((given_usable_share(s)
                               * given_hbm_bytes(s, p.gpu) - e.W / e.TP)
                              / (e.KV * (S + gamma + 1))), "sequences",
                  "usable HBM less the weights, over each sequence's KV with room for its γ+1 lookahead slots")
    if s.compare(even, room) > 0 or s.compare(B, room) > 0:
        raise Reject("the batch or the break-even batch does not fit in memory")
    if s.compare(even, B_tau) > 0:  # no engine with this budget reaches the batch where it would start losing
        raise Reject("the break-even batch is past the largest batch that can speculate inside the budget")
    if abs(s.value(B) / s.value(even) - 1) < EVEN_TIE:
        raise Reject("the batch sits within the break-even answer's tolerance of it")

    s.assume("Chunked prefill with a token budget per step (vLLM's max_num_batched_tokens): a prompt waits, and "
             "every step fills the budget with its chunk after the decode tokens. The verify pass's γ+1 tokens per "
             "sequence are scheduled tokens (vLLM V1 counts them in num_scheduled_tokens).")
    s.assume("Step-time model (steptime.py, the card's step constants, attention by attention-flops) for the "
             "decode-only step" + (", TP all-reduces by tp-all-reduce at the all-reduce-latency-nvlink latency"
                                   if p.tp > 1 else "") + "; a round is one engine step: the "
             "overhead once, the verify pass, γ draft passes at c of the plain step's kernels each.")
    s.assume(DRAFT_LAUNCHES)
    s.assume("Rejection costs no copy: the paged KV of the rejected positions is left in place and overwritten "
             "(vLLM rolls back the sequence's computed-token count; blocks allocated for the lookahead stay with "
             "the sequence). Each draft token is accepted with probability α, independently.")
    s.slip("budget counted as one token per sequence (drafts forgotten)", on="prefill_left",
           factor=s.evaluate(tau - B) / s.value(left))
    _accounting_holds(s, p, costs, B=B, E=E, n_dec=n_dec, tau=tau, steps=(steps_p, steps_s), B_c=B_c)
    _accounting_regime(s, p, B, even, S_B)

