"""Lossless with respect to which model - speculation under FP8."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import max_of, min_of
from solvers.units import format_number

_COLUMNS = {"p": "p, bf16 target", "q": "q, draft", "p8": "p, FP8 target", "q8": "q, FP8 draft"}


SPEC_TOKENS = ("the", "a", "this", "its", "our")  # the candidates generators.spec_position lists, in order

# The review (bank-review-2): batch-invariant attention that also fixes its split across query counts, run for
# both verify and decode, would remove δ_k too. The option says the verify pass keeps its own kernel.
BATCH_INVARIANT = "batch-invariant kernels alone, the verify pass keeping its own attention kernel"


BOTH = "only both together: batch-invariant kernels and one attention kernel for any query count"
FP32_LOGITS = "FP32 logits (the lm_head in FP32), nothing else"


def _fix_changes(d_k: float, d_b: float) -> tuple:
    """Each single change of the fixes select, with the per-logit difference it leaves."""
    return (
        ("verify with the decode pass's attention kernel alone", d_b, "only the batch-size term remains"),
        (BATCH_INVARIANT, d_k, "each kernel's order is fixed at every batch size, but the verify pass still runs "
         "its own attention kernel: only the verify-kernel term remains"),
    )


def _exactness_draw(p, rows) -> None:
    """The draw's redraws, on floats, before any sheet is built: a gap at the bound or at what a change
    leaves, every position at risk or none, a statement at its line (every change a fix is a key: "none of
    these alone" fails, which a push toward a small term often reaches). Each refuses a
    margin around its line, so the float comparisons here never decide an answer."""
    gaps, d_k, d_b = list(p.gaps), p.delta_kernel, p.delta_batch
    bound = 2 * (d_k + d_b)
    if any(abs(g / bound - 1) < 0.01 for g in gaps):
        raise Reject("a gap within 1% of the bound (graded to 1%)")
    if len({g < bound for g in gaps}) == 1:
        raise Reject("every greedy position at risk, or none")
    changes = _fix_changes(d_k, d_b)
    for option, left, _ in changes:
        if any(abs(g / (2 * left) - 1) < 0.01 for g in gaps):
            raise Reject(f"{option}: a gap within 1% of what it leaves")
    P = [row[_COLUMNS["p"]] for row in rows]
    alpha = sum(map(min, P, (row[_COLUMNS["q"]] for row in rows)))
    if abs(1 - alpha - 0.2) < 0.005:
        raise Reject("a statement sits at its line")


def _exactness_holds(s: Sheet, rows, top: int, alpha, alpha8) -> None:
    """The holds select, each statement decided on the sheet's exact values: the two acceptance rates
    can tie (seed 254: 78.9% both, which floats put a hair apart), and a tie does not lower it."""
    p_top, q_top, p8_top = (rows[top][_COLUMNS[c]] for c in ("p", "q", "p8"))

    def percent(x) -> str:
        return f"{format_number(100 * s.evaluate(x), 3)}%"

    holds = {
        "the FP8 drafter lowers the acceptance rate here": (
            s.compare(alpha8, alpha) < 0, f"{percent(alpha8)} against {percent(alpha)}"),
        "the FP8 target verifying emits the bf16 target's top token more often than the bf16 target does": (
            p8_top > p_top, f"the output follows the verifier: {format_number(p8_top)} against "
            f"{format_number(p_top)}, whatever drafts"),
        "the drafter under-proposes the bf16 target's top token, so a rejection can resample it": (
            q_top < p_top, f"q = {format_number(q_top)} against p = {format_number(p_top)}"),
        "over a fifth of the drafts are rejected here": (
            s.compare(1 - alpha, sympy.Rational(1, 5)) > 0, f"1 − α = {percent(1 - alpha)}"),
    }
    if len({truth for truth, _ in holds.values()}) == 1:
        raise Reject("all of these hold or none")
    for option, (truth, why) in holds.items():
        s.judge("holds", option, truth, why)


def _exactness_fixes(s: Sheet, p, gaps: list[float]) -> None:
    """Each single change by the greedy bound it leaves: a change fixes every listed position if no gap
    is under what remains."""
    key = "fixes"
    changes = _fix_changes(p.delta_kernel, p.delta_batch)
    for option, left, why in changes:
        under = [g for g in gaps if g < 2 * left]
        s.judge(key, option, not under, f"{why}: 2·{format_number(left, 3)} = {format_number(2 * left, 3)}"
                + (f", {len(under)} gap(s) still below it" if under else ", no gap below it"))
    fixed = [option for option, holds in s.judged(key).items() if holds]
    s.judge(key, BOTH, not fixed, "the smallest gap, " + format_number(min(gaps)) + ", is under "
            + ("what each of them leaves: it takes both, which leaves nothing" if not fixed
               else "what one leaves, not under what " + fixed[0] + " leaves: one alone does"))
    s.judge(key, FP32_LOGITS, False, "the differences come from the summation order upstream (attention, split-K "
            "GEMMs), which two runs still do differently: FP32 logits only spare the last rounding, so two runs' "
            "logits still differ", fact=True)


def _exactness_regime(s: Sheet, d_k, d_b, bound) -> None:
    """Which of the two breaks sets most of the flip bound: the one whose fix comes first. A tie is refused."""
    if s.compare(d_k, d_b) == 0:
        raise Reject("the two logit differences tie: neither break dominates")
    share = f"δ_k = {s.text(d_k)} against δ_b = {s.text(d_b)}, each counted twice in the bound's {s.text(bound, 3)}"
    s.regime_by(d_k, d_b, above=Side(
        "verify-kernel",
        f"The switch to the verify pass's own attention kernel sets most of the bound ({share}): verifying with "
        "decode's kernel (or one kernel whose order fixes its split for any query count) removes the larger term; "
        "batch-invariant kernels alone leave it.",
        "Where the batch-size term is the larger, batch-invariant kernels come first."),
        below=Side(
        "batch-size",
        f"The batch-size term sets most of the bound ({share}): batch-invariant kernels remove the larger term; "
        "verifying with decode's kernel alone leaves it.",
        "Where the verify-kernel term is the larger, verifying with decode's kernel comes first."))


def solve(p, s: Sheet) -> None:
    """Modified rejection sampling keeps the verifying model's distribution exactly, whatever the draft;
    a quantized target changes which distribution that is, and FP8 kernels that differ between the
    verify and decode passes, or across batch sizes, flip greedy tokens where the top-2 gap is small."""
    rows = [dict(zip(("token", *_COLUMNS.values()), (token, *p[f"token_{i + 1}"])))
            for i, token in enumerate(SPEC_TOKENS)]
    top = max(range(len(rows)), key=lambda i: rows[i][_COLUMNS["p"]])
    _exactness_draw(p, rows)  # the redraws on floats first: a rejected draw builds no sheet
    col = {key: [s.given(f"{key}_{i + 1}", row[name], "", f"{name}, '{row['token']}'") for i, row in enumerate(rows)]
           for key, name in _COLUMNS.items()}
    P, Q, P8, Q8 = col["p"], col["q"], col["p8"], col["q8"]
    word = rows[top]["token"]
    alpha = s.step("acceptance", "Acceptance probability at this position", "α", sympy.Add(*map(min_of, P, Q)), "%",
                   "a draft token x is kept with probability min(1, p/q): Σ q·min(1, p/q) = Σ min(p, q)")
    Z = s.step("", "Mass the rejection leaves to the residual", "Z", 1 - alpha, "",
               "Σ max(0, p − q) = 1 − α: what the target wants and the draft under-proposes")
    resid = s.step("residual_top", f"Residual probability of '{word}'", "r_top",
                   max_of(0, P[top] - Q[top]) / Z, "%", "after a rejection, resample from max(0, p − q)/Z")
    s.step("keep_top", f"Chance a drafted '{word}' is kept", "a_top", min_of(1, P[top] / Q[top]), "%",
           "min(1, p/q): certain where the drafter under-proposes it, p/q where it over-proposes")
    s.step("", f"Probability the round emits '{word}'", "P_out", Q[top] * min_of(1, P[top] / Q[top]) + Z * resid,
           "%", "accepted when drafted, or resampled after a rejection: q·min(1, p/q) + (1 − α)·r = p exactly")
    alpha8 = s.step("acceptance_fp8_draft", "Acceptance with the FP8 drafter", "α_8",
                    sympy.Add(*map(min_of, P, Q8)), "%", "the same rule against the same bf16 target: only the "
                    "acceptance moves, the output still follows p")
    s.step("shift_fp8_target", "Distance of the FP8 target from the bf16 target", "TV",
                   sympy.Add(*(max_of(a - b, b - a) for a, b in zip(P, P8))) / 2, "%",
                   "total variation ½Σ|p − p₈|: with the FP8 target verifying, the output follows p₈, exactly, "
                   "and differs from the bf16 model's by this much without any error")
    s.step("output_top_fp8", f"Probability FP8 target and drafter emit '{word}' (the bf16 target's top)", "P_8",
           P8[top], "%",
           "the rule makes the output follow whichever model verifies, whatever drafts: p₈, not the bf16 p")
    d_k = s.param("δ_k", "delta_kernel")
    d_b = s.param("δ_b", "delta_batch")
    bound = s.step("flip_bound", "Largest change of a top-2 gap between plain and speculative decoding", "Δ",
                   2 * (d_k + d_b), "", "each of the two logits can move by δ_k (verify kernel against decode "
                   "kernel) plus δ_b (another batch size), in opposite directions")
    gaps = list(p.gaps)
    for i, g in enumerate(gaps):
        s.judge("positions", f"position {i + 1}", g < s.value(bound),
                f"gap {format_number(g)} {'<' if g < s.value(bound) else '>'} {s.text(bound, 3)}")
    _exactness_fixes(s, p, gaps)
    _exactness_holds(s, rows, top, alpha, alpha8)
    _exactness_regime(s, d_k, d_b, bound)

    s.assume("Sampling at temperature 1 over the five listed tokens (the rest of the vocabulary has no mass here); "
             "the rule is Leviathan et al.'s: accept x ~ q with probability min(1, p(x)/q(x)), else resample from "
             "max(0, p − q) normalised. Greedy decoding is its temperature-0 limit: keep the draft if it is the "
             "target's argmax.")
    s.assume("Two FP8 logit differences: δ_k between two kernels, the verify pass's attention kernel (γ+1 queries "
             "per sequence) and decode's (one query), at any batch size; δ_b within one kernel between batch sizes "
             "(split-K and tile choices change its summation order). Batch-invariant kernels fix each kernel's "
             "order at every batch size, so they remove δ_b; verifying with decode's kernel removes δ_k (so would "
             "one attention kernel, batch-invariant across query counts too, run for both passes: the option "
             "keeps the verify pass on its own kernel, as serving engines do). A "
             "greedy token can differ from plain decoding where its top-2 gap is under 2(δ_k + δ_b).")
    s.slip("acceptance taken as Σ p·q (the chance both pick the same token)", on="acceptance",
           factor=s.evaluate(sympy.Add(*(a * b for a, b in zip(P, Q)))) / s.value(alpha))
    s.slip("total variation without the ½ (Σ|p − p₈|)", 2.0, on="shift_fp8_target")
    s.assume("Each greedy position is scored on the same prefix in both runs, as though the earlier positions had "
             "agreed. Once one token differs the two runs continue from different prefixes and part for good, so "
             "the first position at risk is where they can first differ; the later ones are what would be at risk "
             "had they not. The verify pass also writes the KV cache with its own kernel, so small differences "
             "carry into later steps even without a flip; and plain decoding is no fixed reference either: under "
             "continuous batching its own batch changes step to step, so δ_b touches it too.")
    s.assume("FP8 moves a large target's next-token distribution little (its logits perturbed by noise of 0.04 in "
             "the draws: about 1-2% total variation) and a small drafter's more (0.12), as weight quantization "
             "does to models of those sizes.")

