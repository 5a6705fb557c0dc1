"""One drafter from 3 a.m. to 6 p.m. - speculation by batch bucket."""
from __future__ import annotations

import math

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    given_hbm_bytes,
    given_usable_share,
    hbm_bytes,
)
from solvers.formulas.speculation import DRAFT_LAUNCHES, LoadModel, expected_tokens, speculative_round, tokens_per_round
from solvers.formulas.steptime import DecodeCosts, decode_costs, engine
from solvers.sheetmath import floor_of, min_of
from solvers.units import format_number, format_quantity

SPEEDUP_TIE = 0.03  # a graded speedup's tolerance: the break-even verdict keeps clear of it
RULE_EDGE = 0.004  # a draft length within 0.4% of the shorter-wins line: a candidate's rounding would cross it
PICKS_OFF = "the draft-length rule turns speculation off there, not just shorter"


def _gammas(p) -> tuple[int, ...]:
    """The draft lengths the engine may be set to: 1 to the question's longest."""
    return tuple(range(1, int(p.longest_draft) + 1))


def _best_length(model: LoadModel, p, batch: float, *, graded: bool = True) -> tuple[int, float, str]:
    """The draft length for this batch by the question's rule: the shortest (off the shortest of all, at 1x)
    whose speedup comes within `shorter_wins` of the best; with its speedup and a line of why. A graded
    choice near the rule's line is refused."""
    speedups = {0: 1.0} | {g: model.speedup(batch, g, p.alpha, p.draft_cost) for g in _gammas(p)}
    top_g = max(speedups, key=speedups.__getitem__)
    line = speedups[top_g] * (1 - p.shorter_wins)
    if graded and any(abs(x - line) < RULE_EDGE * speedups[top_g] for x in speedups.values()):
        raise Reject(f"a draft length on the shorter-wins line at batch {format_number(batch)}")
    chosen = min(g for g, x in speedups.items() if x >= line)
    said = "off" if chosen == 0 else f"γ = {chosen}"
    if chosen == top_g:
        runner = max((x for g, x in speedups.items() if g != chosen))
        why = f"{said} gives {format_number(speedups[chosen], 3)}x, ahead of {format_number(runner, 3)}x for the next"
    else:
        why = (f"{said} gives {format_number(speedups[chosen], 3)}x, within {format_number(p.shorter_wins * 100)}% of "
               f"γ = {top_g}'s {format_number(speedups[top_g], 3)}x: the shorter wins")
    return chosen, speedups[chosen], why


def _buckets(model: LoadModel, p, peak: float) -> dict:
    """The draft-length table: each bucket's (draft length, its speedup, why), and the largest power-of-two
    batch where speculation pays, 'last': (batch, draft length, speedup, what the next bucket up does)."""
    table: dict = {}
    for bucket in (int(p.small_batch), int(p.large_batch)):
        if bucket > peak:
            raise Reject(f"batch {bucket} does not fit at this context")
        table[bucket] = _best_length(model, p, bucket, graded=bucket == p.large_batch)
    if table[int(p.large_batch)][0] == 0:
        raise Reject(f"speculation does not pay at batch {int(p.large_batch)}")
    rows = [(b, _best_length(model, p, b, graded=False)) for b in (2 ** k for k in range(11)) if b <= peak]
    last, (gamma, top, _) = [(b, row) for b, row in rows if row[0] > 0][-1]
    above = next((f"at {2 * last} speculation is off ({why})" for b, (_, _, why) in rows if b == 2 * last),
                 f"batch {2 * last} does not fit")
    table["last"] = (last, gamma, top, above)
    return table


def _peak_reasons(s: Sheet, p, model: LoadModel, costs: DecodeCosts, fits, B_max, B_pk, gamma) -> None:
    """What sets the peak step, judged at this variant's peak batch: the cap, whether speculation would pay at
    half that batch, each pass's math against its reads, and whether the rule's draft length there is shorter
    than γ."""
    key = "peak_reasons"
    cap = s.compare(B_max, fits)
    if cap == 0:
        raise Reject("max_num_seqs and the KV pool allow the same batch")
    s.judge(key, "the KV pool, not max_num_seqs, caps the batch", cap > 0,
            f"{s.text(fits)} fit, against a cap of {s.text(B_max)}")
    # At every batch a push lands on, the KV reads outlast the weights' (the pool dwarfs a GPU's share of the
    # weights): asked instead is whether capping the batch at half the peak would bring speculation back.
    half = s.value(B_pk) // 2
    at_half = model.speedup(half, int(p.gamma), p.alpha, p.draft_cost)
    if abs(at_half - 1) < SPEEDUP_TIE:
        raise Reject("speculation left on breaks even at half the peak batch")
    s.judge(key, "speculation left on would pay at half the peak batch", at_half > 1,
            f"at {format_number(half)} sequences a round of γ = {int(p.gamma)} gives {format_number(at_half, 3)}x")
    plain_math, reads = B_pk * costs.math, costs.weights + B_pk * costs.kv
    read = format_quantity(s.evaluate(reads), "ms")
    for option, work in (("a plain step's math outlasts its reads", plain_math),
                         ("the verify pass's math outlasts its reads", (gamma + 1) * plain_math)):
        s.judge(key, option, s.compare(work, reads) > 0,
                f"{format_quantity(s.evaluate(work), 'ms')} of math against {read} of reads")
    # Asked is whether the bucket rule switches speculation off there or only shortens it: "shorter than γ (or
    # off)" held in 196 of 200 pushed draws, and "best" named the longest length the rule passes over in a tie.
    chosen, _, why = _best_length(model, p, s.value(B_pk))
    s.judge(key, PICKS_OFF, chosen == 0, why)


def _by_load_regime(s: Sheet, p, S_pk, peak: float) -> None:
    # The key's line says the verdict and the speedup, not which term fills the step: the push's select asks that.
    at = format_number(s.value(S_pk), 3)
    limit = expected_tokens(p.alpha, int(p.gamma)) / (p.gamma + 1 + p.gamma * p.draft_cost)
    s.regime_by(S_pk, 1, boundary_label="break-even", tie="below", above=Side(
        "keep-on",
        f"Even at the peak batch of {format_number(peak)} speculation pays ({at}x): a round costs less than the "
        "E plain steps it replaces.",
        "With a larger peak batch (shorter contexts, a higher cap) the verify pass turns compute-bound: then "
        "speculation left on costs peak throughput and must switch off in the top buckets."),
        below=Side(
        "turn-off",
        f"Left on at the peak batch of {format_number(peak)}, speculation costs throughput ({at}x): a round "
        f"costs more than the E plain steps it replaces. The floor, were every term paid per token, is "
        f"E/(γ+1+γc) = {format_number(limit, 3)}x.",
        "At longer contexts the KV reads dominate the step and the verify pass rides on them: speculation keeps "
        "paying at the (smaller) peak batch."))


def solve(p, s: Sheet) -> None:
    """One drafter left on from 3 a.m. to 6 p.m.: the step-time model at batch 1 and at the peak
    batch, the best draft length per batch bucket, and how the context moves all of it."""
    model = LoadModel.of(p)
    # A speculating sequence holds KV slots for its context and the round's γ+1 verify tokens: the engine
    # allocates them before the verify pass (vLLM's allocate_slots), as spec-decode-step-accounting counts them.
    room = math.floor((GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes)
                      / (model.kv_bytes * (p.context + p.gamma + 1)))
    peak = min(p.max_num_seqs, room)
    table = _buckets(model, p, peak)  # every reason to redraw, before the sheet
    if abs(model.speedup(peak, int(p.gamma), p.alpha, p.draft_cost) - 1) < SPEEDUP_TIE:
        raise Reject("speculation left on breaks even at the peak batch")
    e = engine(s, p.model, p.gpu, p.tp, communication=True, kv_prerequisite=True)
    S = s.param("S", "context")
    costs = decode_costs(s, e, p.model, p.gpu, p.tp, S)
    B_max = s.param("B_max", "max_num_seqs")
    gamma = s.param("γ", "gamma")
    u = given_usable_share(s)
    M = given_hbm_bytes(s, p.gpu)
    fits = s.step("kv_room", "Sequences whose KV fits at this context", "B_kv",
                  floor_of((u * M - e.W / e.TP) / (e.KV * (S + gamma + 1))), "sequences",
                  "usable HBM per GPU less its share of the weights, over each sequence's KV on that GPU: its "
                  "context and the γ+1 slots the engine allocates for the round's verify tokens")
    B_pk = s.step("peak_batch", "Peak batch", "B_pk", min_of(B_max, fits), "sequences",
                  "the scheduler's max_num_seqs or the KV pool, whichever runs out first")

    alpha = s.param("α_acc", "alpha")  # α is the all-reduce latency on this sheet
    c = s.param("c", "draft_cost")
    E = tokens_per_round(s, alpha, gamma)
    t_1 = s.step("plain_batch1", "Plain step at batch 1", "t_1", costs.kernels(1) + e.t_oh, "ms",
                 "one weight read, one sequence's KV, one token's math and all-reduces, the overhead")
    T_1 = s.step("round_batch1", "Round at batch 1", "T_1", speculative_round(e, costs, 1, gamma, c, t_1), "ms",
                 "γ+1 tokens still ride on the same weight read; the drafts add γ·c of a step")
    S_1 = s.step("speedup_batch1", "Speedup at batch 1", "S_1", E * t_1 / T_1, "x",
                 "E tokens per round against one per plain step")
    t_pk = s.step("plain_peak", "Plain step at the peak batch", "t_pk", costs.kernels(B_pk) + e.t_oh, "ms",
                  "the same terms with B_pk sequences")
    s.step("per_user_peak", "Tokens/s per user at the peak batch, no speculation", "X_pk", 1 / t_pk, "tokens/s",
           "one token per plain step")
    T_pk = s.step("round_peak", "Round at the peak batch", "T_pk", speculative_round(e, costs, B_pk, gamma, c, t_pk),
                  "ms",
                  "now the γ extra tokens per sequence are paid in math and all-reduce bytes")
    S_pk = s.step("speedup_peak", "Speedup at the peak batch, speculation left on", "S_pk", E * t_pk / T_pk, "x",
                  "below 1 means speculation costs throughput and per-user speed alike")
    lengths = ", ".join(map(str, _gammas(p)))
    for key, bucket in (("speedup_small", int(p.small_batch)), ("speedup_large", int(p.large_batch))):
        chosen, _, why = table[bucket]
        g = s.given(f"γ_{bucket}", chosen, "", f"draft length at batch {bucket} (0: off): {why}")
        # The bucket's step and round are the peak's formulas at another batch: shown as the search's
        # figures, not derived again (each round's formula costs a millisecond to print).
        t_b = s.given(f"t_{bucket}", model.plain(bucket), "ms", f"plain step at batch {bucket}: the same terms as "
                      "t_pk at this batch (the bucket search)")
        T_b = s.given(f"T_{bucket}", model.speedup_round(bucket, chosen, p.draft_cost), "ms",
                      f"round at batch {bucket} with γ = {chosen}: the same terms as T_pk (the bucket search)")
        s.step(key, f"Speedup at batch {bucket}, its draft length", f"S_{bucket}",
               (1 - alpha ** (g + 1)) / (1 - alpha) * t_b / T_b, "x",
               "that draft length's tokens per round over the round, against one token a plain step")
    chosen, _, why = table[int(p.large_batch)]
    s.choose("gamma_large", float(chosen), why)
    last, best_last, top, above = table["last"]
    s.given("B_on", last, "sequences", f"largest power-of-two batch where speculation pays: γ = {best_last} gives "
            f"{format_number(top, 3)}x there; {above}")

    s.assume("A round is one engine step: the overhead once (step-overhead), the verify pass, and γ draft passes at "
             "c of a plain step's kernels each; every TP all-reduce by tp-all-reduce over NVLink, not overlapped.")
    s.assume(DRAFT_LAUNCHES)
    s.assume("Each draft token is accepted with probability α, independently; every sequence holds about the same "
             "context. The drafter's own weights and KV are left out of the memory; each sequence holds KV slots "
             "for its context and the round's γ+1 verify tokens, allocated before the verify pass (vLLM's "
             "scheduler allocates slots for every scheduled token, the drafts included).")
    s.assume(f"Buckets are judged by draft lengths {lengths} and off (1x): the shortest whose speedup comes within "
             f"{format_number(p.shorter_wins * 100)}% of the best wins (it wastes less on rejected drafts).")
    s.slip("the compute-bound limit E/(γ+1) taken at the peak batch (overheads and drafts ignored)",
           on="speedup_peak", factor=s.evaluate(E / (gamma + 1)) / s.value(S_pk))
    s.slip("the batch-1 speedup kept at the peak batch", on="speedup_peak", factor=s.value(S_1) / s.value(S_pk))
    _peak_reasons(s, p, model, costs, fits, B_max, B_pk, gamma)
    _by_load_regime(s, p, S_pk, peak)

