"""Speculative decoding against the batch - free, dearer, then a loss."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.speculation import speculative_round, tokens_per_round
from solvers.formulas.steptime import DecodeCosts, Engine, decode_costs, engine, require_fit
from solvers.sheetmath import floor_of
from solvers.units import figures_against, format_number, format_quantity

WORTH_SPECULATING = 1.1  # a draw whose batch-1 speedup is below this has nothing to lose




LEVER_TIE = 0.02  # a lever within 2% of that line is redrawn: no side to grade
EVEN_TIE = 0.03  # the break-even answer's tolerance: a batch this close to it has no verdict to grade


def _speedup_at(costs: DecodeCosts, e: Engine, B, *, E, gamma, c, peak_scale=1) -> sympy.Expr:
    """E tokens per round against one per plain step, both on the step model at batch B (the math scaled by
    1/peak_scale for a faster GPU)."""
    scaled = DecodeCosts(costs.weights, costs.kv, costs.math / peak_scale, costs.comm)
    plain = scaled.kernels(B, 1) + e.t_oh
    return E * plain / speculative_round(e, scaled, B, gamma, c, plain)


def _ceiling_levers(s: Sheet, p, S_B, costs: DecodeCosts, e: Engine, *, alpha, gamma, c, B) -> None:
    """Which single change lifts this batch's speedup by the parameter `raise_by`: below the ceiling the drafts and
    acceptance decide it, above it the verify pass's math does. Each changed speedup is the sheet's, an expression
    of its symbols, judged exactly against 1 + raise_by."""
    target = 1 + exact(p.raise_by)

    def tokens(a, g) -> sympy.Expr:
        return (1 - a ** (g + 1)) / (1 - a)

    def say(option: str, why: str, *, fact: bool = False, ratio: sympy.Expr | None = None, a=alpha, g=gamma,
            cost=c, peak_scale=1) -> None:
        if ratio is None:
            ratio = _speedup_at(costs, e, B, E=tokens(a, g), gamma=g, c=cost, peak_scale=peak_scale) / S_B
        shown = s.evaluate(ratio)
        if abs(shown / (1 + p.raise_by) - 1) < LEVER_TIE:
            raise Reject(f"{option}: within 2% of the {format_quantity(p.raise_by, '%')} line")
        s.judge("levers", option, s.compare(ratio, target) >= 0,
                f"{why}: {format_number(shown, figures_against(shown, 1 + p.raise_by))}x the speedup", fact=fact)

    drafts = int(p.gamma)
    half = max(1, drafts // 2)
    say("half the draft length (rounded down)",
        f"γ = {half}: fewer tokens scored per sequence, fewer expected per round", g=half)
    say("twice the draft length", f"γ = {2 * drafts}: twice the verify tokens, paid in math past the ceiling, "
        "for drafts less and less likely to land", g=2 * gamma, fact=True)
    higher = (1 + alpha) / 2  # halfway to a perfect drafter: never past α = 1
    say("acceptance halfway to 1", f"α = {format_number(s.evaluate(higher), 3)}", a=higher)
    say("a GPU with twice the tensor peak at the same HBM bandwidth",
        "the ceiling moves out; the verify pass's math halves", peak_scale=2)
    say("switching speculation off", "off, every user gets the plain step's one token: 1x against "
        f"{format_number(s.value(S_B), 3)}x", ratio=1 / S_B)
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
    """Speculation against the batch on one GPU's step model: free while the verify pass stays
    memory-bound, dearer past the ceiling, a loss past break-even (where the context is short enough
    that one exists)."""
    alpha = s.param("α", "alpha")
    gamma = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    B = s.param("B", "batch")
    e = engine(s, p.model, p.gpu, 1, dtype=p.dtype)
    S = s.param("S", "context")
    costs = decode_costs(s, e, p.model, p.gpu, 1, S)
    t_W, t_KV, t_F = costs.weights, costs.kv, costs.math

    E = tokens_per_round(s, alpha, gamma)
    t_1 = s.step("plain_batch1", "Plain step at batch 1", "t_1", costs.kernels(1, 1) + e.t_oh, "ms",
                 "one weight read and one context's KV, plus the overhead")
    T_1 = s.step("round_batch1", "Round at batch 1", "T_1", speculative_round(e, costs, 1, gamma, c, t_1), "ms",
                 "the verify pass (still one read), the overhead once, γ drafts at c of the plain step's kernels")
    S1 = s.step("speedup_batch1", "Wall-time speedup at batch 1", "S_1", E * t_1 / T_1, "x",
                "E tokens a round against one token a plain step (Leviathan et al., with the step's overhead)")
    if s.value(S1) < WORTH_SPECULATING:
        raise Reject("speculation barely pays even at batch 1")
    room = (gamma + 1) * t_F - t_KV
    if s.compare(room, 0) <= 0:
        raise Reject("at this context the verify pass never turns compute-bound: no ceiling")
    ceiling = s.step("ceiling", "Largest batch whose verify pass stays memory-bound", "B_v",
                     floor_of(t_W / room), "sequences",
                     "solve B·(γ+1)·t_F ≤ t_W + B·t_KV for B: each sequence adds its KV read and γ+1 tokens' math")
    plain_at = costs.kernels(ceiling, 1) + e.t_oh
    t_vc = s.step("", "Round at the ceiling", "T_v", speculative_round(e, costs, ceiling, gamma, c, plain_at), "ms",
                  "still one read of the weights and the KV for the verify pass, plus the overhead and drafts")
    s.step("per_user_ceiling", "Tokens per second per user at the ceiling", "X_v", E / t_vc, "tokens/s",
           "E tokens per round")
    t_p = s.step("plain_step", "Plain decode step at this batch", "t_p", costs.kernels(B, 1) + e.t_oh, "ms",
                 "one token per sequence: the slower of the reads and the math, plus the overhead")
    t_v = s.step("verify_step", "Verify pass at this batch", "t_v", costs.kernels(B, gamma + 1), "ms",
                 "γ+1 tokens per sequence through the same weights and KV")
    T = s.step("round_time", "Time of one round", "T_r", speculative_round(e, costs, B, gamma, c, t_p), "ms",
               "the verify pass, the overhead once, γ drafts at c of the plain step's kernels")
    S_B = s.step("speedup", "Speedup at this batch", "S_B", E * t_p / T, "x",
                 "tokens per round over the round's time, against one token per plain step")
    s.step("per_user_plain", "Tokens per second per user, no speculation", "X_p", 1 / t_p, "tokens/s",
           "one token per step")
    s.step("per_user", "Tokens per second per user, speculating", "X_s", E / T, "tokens/s", "E tokens per round")
    # Break-even: E plain steps' worth of time equals a round. While the plain step waits on its reads:
    #   E·(t_W + B·t_KV + t_oh) = B·(γ+1)·t_F + t_oh + γ·c·(t_W + B·t_KV)
    keep = E - gamma * c
    slope = (gamma + 1) * t_F - keep * t_KV
    if s.compare(slope, 0) <= 0:
        raise Reject("at this context the verify pass's math never outgrows what the round earns: no break-even")
    even_read = (keep * t_W + (E - 1) * e.t_oh) / slope
    if s.compare(t_F, t_KV) > 0 and s.compare(even_read * (t_F - t_KV), t_W) > 0:
        raise Reject("break-even lies where the plain step is compute-bound too")
    even = s.step("break_even", "Batch where speculation stops paying", "B_even", even_read, "sequences",
                  "set the round equal to E plain steps: E·(t_W + B·t_KV + t_oh) = B·(γ+1)·t_F + t_oh + "
                  "γ·c·(t_W + B·t_KV), solved for B")

    if s.compare(B, ceiling) <= 0:  # the stage-3 speedup and speed would be the batch-1 ones again
        raise Reject("the batch is within the verify pass's ceiling")
    if abs(s.value(B) / s.value(even) - 1) < EVEN_TIE:
        raise Reject("the batch sits within the break-even answer's tolerance of it")
    require_fit(s, e, p.gpu, (max(s.value(B), s.value(even)) + s.value(gamma) + 1) * s.value(S))

    s.assume("One GPU, no TP all-reduce. Every sequence attends over the same context; the verify pass reads each "
             "sequence's KV once for its γ+1 tokens, so the KV read grows with the batch on both passes while only "
             "the verify pass multiplies the math (the reason long contexts push the ceiling out: MagicDec).")
    s.assume("Each draft token is accepted with probability α, independently (Leviathan et al.); a draft pass costs "
             "c of a plain step's kernels at the same batch, and a round pays the step overhead once (graphed "
             "drafts, as EAGLE runs in vLLM and SGLang).")
    s.assume("Every sequence in the batch speculates with the same γ; the drafter's own weights and KV are left out "
             "of the memory.")
    s.slip("γ+1 taken as the tokens per round (every draft accepted)", on="tokens_per_round",
           factor=s.evaluate((gamma + 1) / E))
    s.slip("the KV read left out of the ceiling (weights only)", on="ceiling",
           factor=s.evaluate(t_W / ((gamma + 1) * t_F)) / s.value(ceiling))
    no_drafts = t_v + t_p - costs.kernels(B, 1)  # the verify pass and the overhead
    s.slip("draft cost left out", on=("speedup_batch1", "speedup"), factor=s.evaluate(E * t_p / no_drafts)
           / s.value(S_B))
    _ceiling_levers(s, p, S_B, costs, e, alpha=alpha, gamma=gamma, c=c, B=B)
    _ceiling_regime(s, p, B, even, ceiling, S_B, S1)
