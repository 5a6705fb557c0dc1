"""Speculative decoding against the batch - free, dearer, then a loss."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.common import (
    given_hbm_bandwidth,
    given_model_params,
    given_peak_flops,
    given_weight_bytes,
)
from solvers.formulas.speculation import tokens_per_round
from solvers.sheetmath import floor_of, max_of
from solvers.units import figures_against, format_number, format_quantity


def batch1_speedup_step(s: Sheet, E: sympy.Symbol, gamma: sympy.Expr, c: sympy.Symbol,
                        key: str = "speedup_batch1") -> sympy.Symbol:
    return s.step(key, "Wall-time speedup at batch 1", "S_1", E / (gamma * c + 1), "x",
                  "the verify pass costs one target pass however many tokens it scores; the γ draft passes cost "
                  "c of one each (Leviathan et al.)")


WORTH_SPECULATING = 1.1  # a draw whose batch-1 speedup is below this has nothing to lose




LEVER_TIE = 0.02  # a lever within 2% of that line is redrawn: no side to grade
EVEN_TIE = 0.03  # the break-even answer's tolerance: a batch this close to it has no verdict to grade


def _roofline(weights, flops, BW, P):
    """One pass on one GPU at datasheet peaks: the slower of reading the weights and the math."""
    return max_of(weights / BW, flops / P)


def _ceiling_levers(s: Sheet, p, S_B, *, alpha, gamma, c, N, W, B, BW, P) -> None:
    """Which single change lifts this batch's speedup by the parameter `raise_by`: below the ceiling the drafts and
    acceptance decide it, above it the verify pass's math does. Each changed speedup is the sheet's, an expression
    of its symbols, judged exactly against 1 + raise_by."""
    target = 1 + exact(p.raise_by)

    def speedup(a=alpha, g=gamma, cost=c, peak=P) -> sympy.Expr:
        plain = _roofline(W, 2 * N * B, BW, peak)
        return (1 - a ** (g + 1)) / (1 - a) * plain / (_roofline(W, 2 * N * B * (g + 1), BW, peak) + g * cost * plain)

    def say(option: str, why: str, *, fact: bool = False, **change) -> None:
        ratio = speedup(**change) / S_B
        shown = s.evaluate(ratio)
        if abs(shown / (1 + p.raise_by) - 1) < LEVER_TIE:
            raise Reject(f"{option}: within 2% of the {format_quantity(p.raise_by, '%')} line")
        s.judge("levers", option, s.compare(ratio, target) >= 0,
                f"{why}: {format_number(shown, figures_against(shown, 1 + p.raise_by))}x the speedup", fact=fact)

    drafts = int(p.gamma)
    half = max(1, drafts // 2)
    say("half the draft length (rounded down)",
        f"γ = {half}: fewer tokens scored per sequence, fewer expected per round", g=half)
    # Past the ceiling (every draw is) each extra draft token is paid math while its chance of landing falls.
    say("twice the draft length", f"γ = {2 * drafts}: twice the verify tokens, paid in math past the ceiling, "
        "for drafts less and less likely to land", g=2 * gamma, fact=True)
    say("a drafter half as costly", f"γ·c falls from {format_number(p.gamma * p.draft_cost, 3)} to "
        f"{format_number(p.gamma * p.draft_cost / 2, 3)} plain steps", cost=c / 2)
    higher = (1 + alpha) / 2  # halfway to a perfect drafter: never past α = 1
    say("acceptance halfway to 1", f"α = {format_number(s.evaluate(higher), 3)}", a=higher)
    say("a GPU with twice the tensor peak", "the ceiling doubles; the verify pass's math halves", peak=2 * P)
    if not any(s.judged("levers").values()):
        raise Reject(f"no single change gains {format_quantity(p.raise_by, '%')}: nothing to choose between")


def _ceiling_regime(s: Sheet, p, B, even, ceiling, S_B, S1) -> None:
    at, cap, flat = (format_number(s.value(x), 3) for x in (S_B, ceiling, S1))
    where = (f"at batch {format_number(p.batch)}, within the ceiling of {cap}, the verify pass still costs one "
             f"weight read and the speedup is the batch-1 figure of {flat}x"
             if s.compare(B, ceiling) <= 0 else
             f"at batch {format_number(p.batch)}, past the ceiling of {cap}, the verify pass pays for its extra "
             f"tokens in math and the speedup falls from {flat}x to {at}x")
    s.regime_by(B, even, tie="above", below=Side(
        "helps",
        f"Speculation pays: {where}; it stops paying at about {s.text(even, 3)}.",
        "Past break-even the round costs more plain steps than it yields tokens: speculation slows every user "
        "and cuts throughput, so it must shrink its draft or switch off as the batch grows."),
        above=Side(
        "hurts",
        f"Speculation loses: {where}, below 1 because the batch ({format_number(p.batch)}) is past break-even at "
        f"about {s.text(even, 3)}.",
        "Below break-even the weight read has idle bandwidth to spare and the drafts turn it into tokens: at small "
        "batch the speedup returns to the batch-1 figure."))


def solve(p, s: Sheet) -> None:
    """Speculation against the batch on one GPU's roofline: free while the verify pass stays
    memory-bound, dearer past the ceiling, a loss past break-even."""
    alpha = s.param("α", "alpha")
    gamma = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    B = s.param("B", "batch")
    N = given_model_params(s, p.model)
    b_w = given_weight_bytes(s, p.dtype)
    P = given_peak_flops(s, p.gpu, p.dtype)
    BW = given_hbm_bandwidth(s, p.gpu)

    E = tokens_per_round(s, alpha, gamma)
    S1 = batch1_speedup_step(s, E, gamma, c)
    if s.value(S1) < WORTH_SPECULATING:
        raise Reject("speculation barely pays even at batch 1")
    ridge = s.step("ridge", "Ridge point of the GPU", "I_ridge", P / BW, "FLOP/B",
                   f"{p.dtype} peak over HBM bandwidth: below it a pass waits on memory")
    s.step("verify_intensity", "Intensity of the verify pass at this batch", "I_v", 2 * B * (gamma + 1) / b_w,
           "FLOP/B", "B·(γ+1) tokens share one read of every weight")
    ceiling = s.step("ceiling", "Largest batch whose verify pass stays memory-bound", "B_v",
                     floor_of(b_w * ridge / (2 * (gamma + 1))), "sequences",
                     "solve 2·B·(γ+1)/b_w ≤ ridge for B: the γ extra tokens per sequence ride free up to here")
    W = s.step("weights", "Weight bytes", "W", N * b_w, "GB", "read once per pass, whatever it carries")
    t_p = s.step("plain_step", "Plain decode step at this batch", "t_p", _roofline(W, 2 * N * B, BW, P), "ms",
                 "one token per sequence")
    t_v = s.step("verify_step", "Verify pass at this batch", "t_v", _roofline(W, 2 * N * B * (gamma + 1), BW, P),
                 "ms", "γ+1 tokens per sequence through the same weights")
    s.step("verify_cost", "Verify pass over a plain step", "r_v", t_v / t_p, "x",
           "1 while both wait on the weight read; above the ceiling the extra tokens cost math")
    T = s.step("round_time", "Time of one round", "T_r", t_v + gamma * c * t_p, "ms",
               "the verify pass plus γ draft passes at c of a plain step each")
    S_B = s.step("speedup", "Speedup at this batch", "S_B", E * t_p / T, "x",
                 "tokens per round over the round's time, against one token per plain step")
    s.step("per_user_plain", "Tokens per second per user, no speculation", "X_p", 1 / t_p, "tokens/s",
           "one token per step")
    s.step("per_user", "Tokens per second per user, speculating", "X_s", E / T, "tokens/s",
           "E tokens per round")
    t_vc = s.step("", "Round time at the ceiling", "T_v", _roofline(W, 2 * N * ceiling * (gamma + 1), BW, P)
                  + gamma * c * _roofline(W, 2 * N * ceiling, BW, P), "ms",
                  "still one weight read for the verify pass, plus the drafts")
    s.step("per_user_ceiling", "Tokens per second per user at the ceiling", "X_v", E / t_vc, "tokens/s",
           "the largest batch that still gets the batch-1 speedup, and its users' speed")
    B_r = s.step("", "Batch where plain decode turns compute-bound", "B_r", b_w * P / (2 * BW), "sequences",
                 "2B/b_w = ridge: the ceiling times γ+1")
    even = s.step("break_even", "Batch where speculation stops paying", "B_even", B_r * (E - gamma * c) / (gamma + 1),
                  "sequences", "past the ceiling the round costs B·(γ+1)/B_r + γ·c plain steps; set it equal to E")

    if s.compare(B, ceiling) <= 0:  # the stage-3 speedup and speed would be the batch-1 ones again
        raise Reject("the batch is within the verify pass's ceiling")
    if abs(s.value(B) / s.value(even) - 1) < EVEN_TIE:
        raise Reject("the batch sits within the break-even answer's tolerance of it")

    s.assume("Roofline at datasheet dense peaks (dense-peaks, roofline-time) on one GPU, weights read once per pass "
             "(weights-once-per-pass); short contexts, so KV reads and attention are left out: verification reads "
             "each sequence's KV once for its γ+1 tokens, so long contexts push the ceiling out (spec-decode-by-load).")
    s.assume("Each draft token is accepted with probability α, independently (Leviathan et al.); a draft pass costs "
             "c of a plain target step at the same batch, on either side of the roofline (a drafter of the same "
             "family flips at the same batch).")
    s.assume("Every sequence in the batch speculates with the same γ; the engine's own overheads are left out.")
    s.slip("γ+1 taken as the tokens per round (every draft accepted)", on="tokens_per_round",
           factor=s.evaluate((gamma + 1) / E))
    s.slip("the ridge taken as the ceiling (the γ+1 tokens per sequence forgotten)", on="ceiling",
           factor=s.evaluate(b_w * ridge / 2) / s.value(ceiling))
    s.slip("draft cost left out", on=("speedup_batch1", "speedup"), factor=s.evaluate(E * t_p / t_v) / s.value(S_B))
    _ceiling_levers(s, p, S_B, alpha=alpha, gamma=gamma, c=c, N=N, W=W, B=B, BW=BW, P=P)
    _ceiling_regime(s, p, B, even, ceiling, S_B, S1)

