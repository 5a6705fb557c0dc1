"""Who owns the p99 when speculation is on - acceptance, batch and policy."""
from __future__ import annotations

import functools

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    hbm_bytes,
)
from solvers.formulas.speculation import (
    DRAFT_LAUNCHES,
    LoadModel,
    break_even_alpha,
    expected_tokens,
    speculative_round,
    tokens_per_round,
)
from solvers.formulas.steptime import decode_costs, engine
from solvers.units import format_number, format_quantity

P99 = 0.01  # the tail: the slowest 1% of requests
CELL_TIE = 0.03  # the TPOT answers' tolerance: a cell this close to the p99 off has no side to grade


CODE_ONLY = "speculate on code requests only (chat never drafts)"
CHAT_ONE = "a draft length of 1 for chat, {gamma} for code"


OFF_PEAK = "any request off-peak"
_CELLS = ("high-acceptance requests off-peak", "high-acceptance requests at peak",
          "low-acceptance requests off-peak", "low-acceptance requests at peak")


def _tail_cells(model: LoadModel, p, gamma: int) -> dict:
    """Each cell's TPOT with speculation on, the cells in the p99, and which cell sets it."""
    plain = [model.plain(b) for b in (p.batch_low, p.batch_peak)]
    round_ = [model.kernels(b, gamma + 1, p.context) + model.overhead + gamma * p.draft_cost * (t - model.overhead)
              for b, t in zip((p.batch_low, p.batch_peak), plain)]
    alphas, weights = (p.alpha_high, p.alpha_low), (1 - p.low_share, p.low_share)
    moments = (1 - p.peak_share, p.peak_share)
    tpot, share = [], []
    for alpha, w in zip(alphas, weights):
        for j, m in enumerate(moments):
            tpot.append(round_[j] / expected_tokens(alpha, gamma))
            share.append(w * m)
    order = sorted(range(4), key=lambda k: -tpot[k])
    top, owner = 0.0, order[0]
    for k in order:
        owner = k
        top += share[k]
        if top >= P99:
            break
    off = plain[1]  # the p99 with speculation off: a plain step at peak
    if any(abs(tpot[k] / off - 1) < CELL_TIE for k in range(4)):
        raise Reject("a cell within 3% of the p99 with speculation off: speedup or slowdown is a coin toss")
    owns = [(_CELLS[k], tpot[k] > off, f"{format_quantity(tpot[k], 'ms')} per token against "
             f"{format_quantity(off, 'ms')}, {format_number(100 * share[k], 3)}% of requests") for k in (1, 3)]
    slowest_off_peak = max(tpot[0], tpot[2])
    owns.insert(0, (OFF_PEAK, slowest_off_peak > off, f"the slower class off-peak takes "
                    f"{format_quantity(slowest_off_peak, 'ms')} per token against {format_quantity(off, 'ms')}"))
    owns.append(("none: every request beats it", all(tpot[k] < off for k in range(4)),
                 f"the slowest cell takes {format_quantity(max(tpot), 'ms')} per token against "
                 f"{format_quantity(off, 'ms')}"))
    return {"plain": plain, "round": round_, "tpot": tpot, "share": share, "owner": owner, "owns": owns}


def _tail_policies(model: LoadModel, p, cells: dict) -> list:
    """Each policy's p99 and mean TPOT: (option, meets both counts, why). A policy sets each class's
    draft length per batch; both classes share every round of their batch, so a request that does
    not speculate still waits for the others' verify tokens and drafts."""
    gamma, c = int(p.gamma), p.draft_cost
    alphas, shares = (p.alpha_high, p.alpha_low), (1 - p.low_share, p.low_share)
    batches = (p.batch_low, p.batch_peak)
    evens = [break_even_alpha(cells["round"][j] / cells["plain"][j], gamma) for j in range(2)]
    mixed_round = functools.cache(model.mixed_round)  # the plans below share most of their rounds

    def tpots(plan: tuple) -> list:
        """Cell k = class k // 2 at moment k % 2, given (γ_code, γ_chat) per moment."""
        rounds = [mixed_round(batches[j], tuple(zip(shares, plan[j])), c) for j in range(2)]
        return [rounds[k % 2] / expected_tokens(alphas[k // 2], plan[k % 2][k // 2]) for k in range(4)]

    def mean_at(j: int, g: int) -> float:
        round_ = mixed_round(batches[j], tuple((w, g) for w in shares), c)
        return sum(w * round_ / expected_tokens(a, g) for w, a in zip(shares, alphas))

    on, off = (gamma, gamma), (0, 0)
    plans = {
        "keep speculation on for every request": (on, on),
        "keep it on at a batch only where it lowers that batch's mean TPOT":
            tuple(on if mean_at(j, gamma) < mean_at(j, 0) else off for j in range(2)),
        "a draft length of 3 for every request": ((3, 3), (3, 3)),
        "speculate only where the request's acceptance beats the break-even for the current batch":
            tuple(tuple(gamma if a > evens[j] else 0 for a in alphas) for j in range(2)),
        # A draft length of 1 for every request keeps the p99 and cuts the mean wherever a push lands (1 + α
        # tokens for a verify pass of two): asked is chat's single draft token riding code's longer rounds.
        CHAT_ONE: ((gamma, 1), (gamma, 1)),
        "a draft length of 5 for every request": ((5, 5), (5, 5)),
        CODE_ONLY: ((gamma, 0), (gamma, 0)),
    }
    plain_cells = tpots((off, off))
    off_p99, off_mean = _p99(plain_cells, cells["share"]), _mean(plain_cells, cells["share"])
    out: list = []
    for option, plan in plans.items():
        if option.startswith("a draft length of") and plan == (on, on):  # the variant's own γ: "keep on" again
            out.append((option, None, "the draft length this deployment already runs: the same plan as keeping "
                        "speculation on for every request"))
            continue
        tpot = tpots(plan)
        p99, mean = _p99(tpot, cells["share"]), _mean(tpot, cells["share"])
        keeps, cuts = p99 <= off_p99, mean < off_mean
        if keeps and abs(mean / off_mean - 1) < 0.005 or cuts and abs(p99 / off_p99 - 1) < 0.005 and p99 != off_p99:
            raise Reject(f"{option}: the deciding count ties speculation off within 0.5%")
        holds = keeps and cuts
        lengths = "; ".join(f"{where} γ {plan[j][0]} code, {plan[j][1]} chat"
                            for j, where in enumerate(("off-peak", "peak")))
        out.append((option, holds, f"{lengths}: p99 {format_quantity(p99, 'ms')} against "
                    f"{format_quantity(off_p99, 'ms')} off; mean {format_quantity(mean, 'ms')} against "
                    f"{format_quantity(off_mean, 'ms')}"))
    if len({holds for _, holds, _ in out} - {None}) == 1:
        raise Reject("every policy meets both counts or none")
    return out


def _p99(tpot: list, share: list) -> float:
    top = 0.0
    for k in sorted(range(len(tpot)), key=lambda k: -tpot[k]):
        top += share[k]
        if top >= P99:
            return tpot[k]
    return min(tpot)


def _mean(tpot: list, share: list) -> float:
    return sum(t * w for t, w in zip(tpot, share))


def solve(p, s: Sheet) -> None:
    """Speculation over a day's requests: the speedup of each (acceptance, batch) cell, the break-even
    acceptance per batch, the cells that own the p99 TPOT, and a policy that keeps the tail."""
    model = LoadModel.of(p)
    for batch in (p.batch_low, p.batch_peak):
        room = (GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes) / (model.kv_bytes * p.context)
        if batch > room:
            raise Reject("the peak batch does not fit at this context")
    gamma = int(p.gamma)
    cells = _tail_cells(model, p, gamma)
    e_star_peak = cells["round"][1] / cells["plain"][1]
    if e_star_peak >= gamma + 1:
        raise Reject("at peak even perfect acceptance loses")
    policies = _tail_policies(model, p, cells)  # every reason to redraw, before the sheet

    e = engine(s, p.model, p.gpu, p.tp, communication=True, kv_prerequisite=True)
    S = s.param("S", "context")
    costs = decode_costs(s, e, p.model, p.gpu, p.tp, S)
    gamma_ = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    a_hi = s.param("α_hi", "alpha_high")
    a_lo = s.param("α_lo", "alpha_low")
    rows = []
    for tag, where, param in (("lo", "off-peak", "batch_low"), ("pk", "at peak", "batch_peak")):
        B = s.param(f"B_{tag}", param)
        t = s.step(f"plain_{tag}", f"Plain step {where}", f"t_{tag}", costs.kernels(B) + e.t_oh, "ms",
                   "the step-time model's terms at this batch")
        T = s.step(f"round_{tag}", f"Round {where}", f"T_{tag}", speculative_round(e, costs, B, gamma_, c, t), "ms",
                   "verify pass of B·(γ+1) tokens, the overhead once, γ drafts at c of the plain kernels")
        rows.append((t, T))
    (t_lo, T_lo), (t_pk, T_pk) = rows
    E_hi = tokens_per_round(s, a_hi, gamma_, key="tokens_high", symbol="E_hi")
    E_lo = tokens_per_round(s, a_lo, gamma_, key="tokens_low", symbol="E_lo")
    s.step("speedup_best", "Speedup, high-acceptance request off-peak", "S_best", E_hi * t_lo / T_lo, "x",
           "both inputs at their best")
    s.step("speedup_worst", "Speedup, low-acceptance request at peak", "S_worst", E_lo * t_pk / T_pk, "x",
           "both inputs at their worst: where the tail lives")
    Es_lo = s.step("even_tokens_low", "Tokens per round to break even off-peak", "E*_lo", T_lo / t_lo, "tokens",
                   "the round must yield as many tokens as plain steps fit in its time")
    Es_pk = s.step("even_tokens_peak", "Tokens per round to break even at peak", "E*_pk", T_pk / t_pk, "tokens",
                   "the round is dearer at peak, so it must yield more")
    a_even_lo = s.given("α*_lo", break_even_alpha(s.value(Es_lo), gamma), "",
                        "break-even acceptance off-peak: E(α) = E*_lo solved by bisection")
    a_even_pk = s.given("α*_pk", break_even_alpha(s.value(Es_pk), gamma), "",
                        "break-even acceptance at peak: E(α) = E*_pk solved by bisection")
    s.choose("alpha_even_peak", s.value(a_even_pk), f"a round at peak must yield {s.text(Es_pk, 4)} to match "
             f"the plain steps in its time; (1 − α^{gamma + 1})/(1 − α) reaches that at α = {s.text(a_even_pk, 3)} "
             f"(off-peak: {s.text(a_even_lo, 3)})")
    f = s.param("f_chat", "low_share")
    m = s.param("f_peak", "peak_share")
    s.step("mean_off", "Mean TPOT across requests, speculation off", "τ̄_off", (1 - m) * t_lo + m * t_pk, "ms",
           "a plain step at each moment, weighted by the requests arriving then")
    s.step("mean_on", "Mean TPOT across requests, speculation always on", "τ̄_on",
           ((1 - m) * T_lo + m * T_pk) * ((1 - f) / E_hi + f / E_lo), "ms",
           "each (class, moment) cell's round over its tokens, weighted by its share of requests")
    s.step("p99_off", "p99 TPOT, speculation off", "τ99_off", t_pk, "ms",
           f"every request at peak waits a plain step; peak requests are over {format_number(100 * P99)}% of all")
    owner = cells["owner"]
    tpot = {0: (T_lo, E_hi), 1: (T_pk, E_hi), 2: (T_lo, E_lo), 3: (T_pk, E_lo)}[owner]
    s.step("p99_on", "p99 TPOT, speculation always on", "τ99_on", tpot[0] / tpot[1], "ms",
           f"the slowest cell holding the top {format_number(100 * P99)}% of requests: {_CELLS[owner]}, a round per "
           "E tokens")
    B_pk = s.symbol("B_pk")
    B_code = s.step("", "Code sequences in the peak batch, on average", "B_code", (1 - f) * B_pk, "sequences",
                    "the batch holds both classes in their shares of requests: an average over batches, so a "
                    "fraction of a sequence stands")
    n_mix = s.step("", "Verify tokens at peak, only code drafting", "n_mix", B_code * (gamma_ + 1) + f * B_pk,
                   "tokens", "γ+1 per code sequence, one per chat sequence")
    s.step("tpot_chat_mixed", "Chat TPOT at peak, only code speculating", "τ_mix",
           costs.kernels(B_pk, n_mix / B_pk) + e.t_oh + gamma_ * c * costs.kernels(B_code), "ms",
           "chat scores one token per round but shares the round: the code sequences' verify tokens and their γ "
           "draft passes (over the code sequences only) set its length, for one chat token")
    for option, holds, why in cells["owns"]:
        # Off-peak batches (16 or fewer) are weight-bound: even a poor round costs less per token there
        # than a plain step at the peak batch, so the tail is always at peak.
        s.judge("owners", option, holds, why, fact=option == OFF_PEAK)
    for option, holds, why in policies:
        # Chat at peak (3% of requests or more) waits a longer round than a plain step for one token.
        s.judge("policy", option, holds, why, fact=option == CODE_ONLY)

    s.assume("Step-time model (steptime.py, the card's step constants, tp-all-reduce over NVLink); a round is one "
             "engine step: the overhead once, the verify pass, γ drafts at c of a plain step's kernels each.")
    s.assume(DRAFT_LAUNCHES)
    s.assume("Two request classes with one acceptance rate each, i.i.d. per draft token; two moments of the day, "
             "off-peak and peak, each with its own batch. A request's TPOT is its round over its expected tokens "
             "(its mean over the reply; the tail across requests is taken over these cells).")
    s.assume("Every batch holds both classes in their shares. A policy sets each class's draft length per batch "
             "(0 = off); a round carries every sequence's verify tokens and runs as many draft passes as the "
             "longest draft, the j-th over the sequences drafting at least j, and every request in the batch waits "
             "for it. A policy is judged on two counts: its p99 TPOT is no worse than with speculation off, and it "
             "lowers the mean TPOT across requests.")
    s.slip("the batch-1 formula E/(γc+1) used at peak", on="speedup_worst",
           factor=s.evaluate(E_lo / (gamma_ * c + 1) / (E_lo * t_pk / T_pk)))
    s.regime_by(a_lo, a_even_pk, tie="below", above=Side(
        "speedup",
        f"Even the low-acceptance requests at peak (α = {format_number(p.alpha_low, 3)}) sit above the break-even "
        f"acceptance of {s.text(a_even_pk, 3)}: speculation speeds up every cell, and the tail "
        "with it.",
        "Below the break-even acceptance the round costs more than the tokens it yields: those requests at peak "
        "get slower TPOT than with speculation off, and they own the p99."),
        below=Side(
        "slowdown",
        f"The low-acceptance requests at peak (α = {format_number(p.alpha_low, 3)}) sit below the break-even "
        f"acceptance of {s.text(a_even_pk, 3)}: speculation slows them down, and they own the "
        "p99 while the mean improves.",
        "Above the break-even acceptance every cell gains: then speculation can stay on and only the draft length "
        "needs tuning by load."))

