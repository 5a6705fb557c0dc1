"""Audit the cost ledger before a rollout - real and misleading wins."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.cost import pct_text
from solvers.units import format_number

SAVING_BAND = sympy.Rational(1, 10)  # a saving within a tenth of the noise floor either way is refused
P99_BAND = sympy.Rational(1, 20)  # a p99 within 5% of the SLO either way is refused


def _rollout_margins(s: Sheet, p, check, slo, gate) -> None:
    """The two gates whose margin a canary can erode: p99 headroom 1 − p99/SLO and the share of the quality
    gate left, (gate + delta)/gate. (The rolled-out row is the cheapest that passes: its saving clears the noise
    by far, so that gate is never the thin one.)"""
    _, tpot, quality = check
    margins = {"the p99 TPOT SLO": s.evaluate(1 - tpot / slo), "the quality gate": s.evaluate((gate + quality) / gate)}
    for name, margin in margins.items():
        s.judge("thin_gates", name, margin < p.thin, f"margin {pct_text(margin)}")
    wide = all(m >= p.thin for m in margins.values())
    s.judge("thin_gates", "none: both margins are wide", wide,
            f"both gates pass by {pct_text(p.thin)} or more" if wide else "at least one gate is thin")


def _by(use: float) -> str:
    """How far past a gate, in words chosen by the margin (draws within the measurement noise of a gate are
    refused, so a hair is never drawn): a small margin under 15%, clearly past it."""
    return "by a small margin" if use < 1.15 else "clearly"


# What to try before rejecting a row that misses the SLO: the latency it spends can be bought back.
_MISS_NEXT = {
    "twice the batch cap": "a batch cap between the baseline's and twice it may meet the SLO at part of the saving, "
                           "and a row with p99 headroom (fp8, speculative decoding) can spend it on batch: each is a "
                           "new row to measure",
    "A100s instead of H100s": "an A100 at a smaller batch may meet it at part of the saving: a new row to measure",
}


def _audit_regime(s: Sheet, name: str, check, slo, gate) -> None:
    """Three regimes, one per verdict on the headline: a real win, or misleading because it misses the SLO, or
    because it fails the quality gate. Each gate's use is p99/SLO or quality lost/gate (above 1 it fails); the
    regime is read against the gate the headline fails, or where it fails none, the one it uses most."""
    _, tpot, quality = check
    slo_use = s.step("headline_slo_use", "Headline's p99 over the SLO", "g_SLO", tpot / slo, "x",
                     "above 1 it misses the SLO")
    quality_use = s.step("headline_quality_use", "Headline's quality lost over the gate", "g_q", -quality / gate, "x",
                         "above 1 it fails the quality gate (a gain counts as negative use)")
    next_try = _MISS_NEXT.get(name, "")
    real = Side(
        "real",
        f"The cheapest row, {name}, passes every gate (p99 {s.text(tpot)} against an SLO of "
        f"{s.text(slo)}, quality {s.value(quality):+.1f} points against a "
        f"{s.text(gate)}-point gate): the headline is a real win; roll it out behind a canary.",
        "A p99 over the SLO or a quality drop past the gate would make the same headline a misleading win.",
        near=f"The cheapest row, {name}, passes every gate, but one sits near its limit: a real win on paper that "
             "the canary must confirm at peak.")
    misses = Side(
        "misses-slo",
        f"The cheapest row, {name}, runs its p99 TPOT at {format_number(s.value(slo_use), 3)}× the SLO: a ledger "
        "sorted by dollars would roll out a change the latency gate exists to stop (a cheaper GPU or a bigger "
        f"batch buys its tokens with latency). Before dropping it: {next_try}.",
        "Under a looser SLO the same row would be the real win to roll out.",
        near=f"The cheapest row, {name}, misses the SLO {_by(s.value(slo_use))} "
             f"({format_number(s.value(slo_use), 4)}× it): not on this ledger; before dropping it, {next_try}.")
    fails = Side(
        "fails-quality",
        f"The cheapest row, {name}, loses {format_number(s.value(quality_use), 3)}× the quality the gate allows: "
        "it is cheaper because it changed the model's math, and the eval suite says by too much.",
        "Under a looser quality gate (or a better calibration) the same row would be the real win.",
        near=f"The cheapest row, {name}, fails the quality gate {_by(s.value(quality_use))} "
             f"({format_number(s.value(quality_use), 4)}× it), past the eval's noise: a better calibration or fp8 "
             "on fewer layers is a new row to measure, not this one.")
    if s.compare(quality_use, 1) > 0:  # it fails quality (and, by the solver's check, only quality)
        by_quality = True
    elif s.compare(slo_use, 1) > 0:
        by_quality = False
    else:  # a real win: read against the gate it uses most
        by_quality = s.compare(quality_use, slo_use) > 0
    if by_quality:
        s.regime_by(quality_use, 1, boundary_label="a gate used to its limit", tie="below", above=fails, below=real)
    else:
        s.regime_by(slo_use, 1, boundary_label="a gate used to its limit", tie="below", above=misses, below=real)


def _refuse_knife_edges(s: Sheet, costs, checks, floor, slo, gate) -> None:
    """A week whose verdict on some row turns on less than the measurements can tell is redrawn (re-measured, as
    a team would): a saving within a tenth of the noise floor, a p99 within 5% of the SLO (a week's p99 moves by
    that much), a quality delta within the eval noise of the gate. Every row's verdict is graded (the real wins),
    so the band applies to each row; a push that lands a row in one is not made."""
    base, qnoise = costs[0], s.param("ε_q", "quality_noise")

    def within(x, line, band) -> bool:
        return s.compare(x, line - band) > 0 and s.compare(x, line + band) < 0

    for index, (change, tpot, quality) in enumerate(checks[1:], start=1):
        if within(1 - costs[index] / base, floor, SAVING_BAND * floor):
            raise Reject(f"{change} saves within a tenth of the noise floor: too close to call")
        if within(tpot, slo, P99_BAND * slo):
            raise Reject(f"{change}'s p99 is within 5% of the SLO: too close to call")
        if s.compare(quality + gate, qnoise) <= 0 and s.compare(quality + gate, -qnoise) >= 0:
            raise Reject(f"{change}'s quality delta is within the eval noise of the gate: re-run the eval")


def _cheapest(s: Sheet, costs, rows: list[int]) -> int:
    """The row of least cost by exact comparison; a tie for it is redrawn (a sorted ledger has no one top row)."""
    least = rows[0]
    for i in rows[1:]:
        least = i if s.compare(costs[i], costs[least]) < 0 else least
    if any(i != least and s.compare(costs[i], costs[least]) == 0 for i in rows):
        raise Reject("two rows tie for the cheapest")
    return least


def solve(p, s: Sheet) -> None:
    """Dollars per million output tokens for every ledger row; a row is a real win only if it is cheaper by more
    than the noise on a difference of two runs, meets the p99 TPOT SLO and loses no more quality than the gate
    allows."""
    slo = s.param("TPOT_SLO", "slo")
    gate = s.param("q_gate", "gate")
    noise = s.param("ε", "noise")
    mtok = s.given("M_tok", 1e6, "tokens", "tokens in a million")
    rows = p.ledger
    costs, checks = [], []
    for index, row in enumerate(rows):
        at = 0 if row["$/GPU-h"] == rows[0]["$/GPU-h"] else index  # a change on the same GPU: the baseline's price
        price = s.given(f"c_{at}", rows[at]["$/GPU-h"] / 3600, "$/h", f"{rows[at]['change']}: price per GPU-hour")
        tps = s.given(f"X_{index}", row["tokens/s per GPU"], "tokens/s", f"{row['change']}: tokens/s per GPU")
        tpot = s.given(f"τ_{index}", row["p99 TPOT (ms)"] * 1e-3, "ms", f"{row['change']}: p99 TPOT")
        quality = s.given(f"q_{index}", row["quality (pts)"], "", f"{row['change']}: quality delta (points)")
        key = "baseline_cost" if index == 0 else f"cost_{index}"
        costs.append(s.step(key, f"Dollars per million output tokens: {row['change']}", f"D_{index}",
                            price / tps * mtok, "$", "a GPU-hour's price over the tokens that GPU-hour produces"))
        checks.append((row["change"], tpot, quality))
    base = costs[0]
    if s.compare(checks[0][1], slo) > 0:
        raise Reject("the baseline already misses the SLO: no change is audited against a service that fails it")
    candidates = list(range(1, len(rows)))
    cheapest = _cheapest(s, costs, candidates)
    if s.compare(costs[cheapest], base) >= 0:
        raise Reject("no row is cheaper than the baseline: nothing to audit")
    s.choose("headline", rows[cheapest]["change"],
             f"it makes a million output tokens for {s.text(costs[cheapest])} against the baseline's {s.text(base)}, "
             f"{pct_text(s.evaluate(1 - costs[cheapest] / base))} less: the cheapest row, before any gate")
    floor = s.step("noise_floor", "Noise floor on a saving: two standard deviations of a difference of two runs",
                   "ε_Δ", 2 * sympy.sqrt(2) * noise, "%",
                   "a run's cost has standard deviation ε, a difference of two √2·ε; a rollout gate asks 2σ")
    _refuse_knife_edges(s, costs, checks, floor, slo, gate)
    s.step("headline_cost", "The headline: the cheapest row", "D_min", costs[cheapest], "$",
           "what a ledger sorted by cost puts on top")
    real, headline_fails = [], []
    for i in candidates:
        change, tpot, quality = checks[i]
        saving = 1 - costs[i] / base
        passes = {"the noise floor": s.compare(saving, floor) > 0, "the p99 TPOT SLO": s.compare(tpot, slo) <= 0,
                  "the quality gate": s.compare(-quality, gate) <= 0}
        if all(passes.values()):
            real.append(i)
        failed = [name for name, ok in passes.items() if not ok]
        if i == cheapest:
            headline_fails = failed
        s.judge("real_wins", change, not failed,
                f"saves {pct_text(s.evaluate(saving))} (noise {s.text(floor, 3)}), p99 {s.text(tpot)}, quality "
                f"{s.text(quality, 2)} pts" + (f": fails {', '.join(failed)}" if failed else ""))
    if not real:
        raise Reject("no real win to roll out")
    if len(real) == len(candidates):  # the real wins would be every row, a select with nothing to tell apart
        s.refuse_if_asked(["real_wins"], "every row is a real win: nothing to audit")
    if len(headline_fails) > 1 or "the noise floor" in headline_fails:
        # The cheapest row saves a quarter or more, and no row of the generator's fails both gates.
        raise Reject("the headline fails more than one gate, or the noise: the regime names one")
    best = _cheapest(s, costs, real)
    s.choose("rollout", rows[best]["change"],
             f"of the rows that pass every gate it is the cheapest, {s.text(costs[best])} a million output tokens")
    s.step("rollout_saving", "Saving of the row to roll out", "f_save", 1 - costs[best] / base, "%",
           "the cheapest row that passes every gate, against the baseline")
    _rollout_margins(s, p, checks[best], slo, gate)
    _audit_regime(s, rows[cheapest]["change"], checks[cheapest], slo, gate)
    s.assume("The ledger's rows are shadow measurements at production traffic; a row's cost is its GPU-hour price "
             "over the output tokens one GPU produces in that hour (prefill and idle time are in both alike).")
    s.assume("A win must clear three gates: cheaper than the baseline by more than two standard deviations of a "
             "difference of two runs (2√2 × a run's standard deviation, the noise being independent from run to "
             "run), p99 TPOT within the SLO, and a quality drop no larger than the gate on the eval suite.")
    s.assume("A week where a row's verdict turns on less than its measurements can tell is re-measured, not graded: "
             "a saving within a tenth of the noise floor, a p99 within 5% of the SLO (a week's p99 moves about that "
             "much), a quality delta within the eval's run-to-run noise of the gate.")
    s.assume("Each row is one change measured alone. Latency headroom a row leaves under the SLO (fp8's, speculative "
             "decoding's) can be spent on a larger batch, and a batch cap between the baseline's and twice it may "
             "meet an SLO the doubled cap misses: each combination is a new row to measure, not a sum of two rows.")
    s.assume("Every row but fp8 keeps the model's math (a larger batch only reorders sums in batch-variant kernels; "
             "speculative decoding is lossless against its target model): their quality deltas are eval noise, "
             "within the stated noise either way, still held to the gate as measured.")

