"""One drafter from 3 a.m. to 6 p.m. - speculation by batch bucket."""
from __future__ import annotations

import math

from solvers.derivation import Reject, Sheet, Side
from solvers.models.common import (
    GPU_MEMORY_UTILIZATION,
    given_hbm_bytes,
    given_usable_share,
    hbm_bytes,
    require_context,
)
from solvers.models.speculation import GAMMAS, LoadModel, expected_tokens, speculative_round, tokens_per_round
from solvers.models.steptime import decode_costs, engine
from solvers.sheetmath import floor_of, min_of
from solvers.units import format_number, format_quantity

BUCKETS = (32, 128)  # the batch buckets whose draft length is graded


GAMMA_TIE = 0.005  # two draft lengths within 0.5% of each other: no best one to grade


def _buckets(model: LoadModel, p, peak: float) -> dict:
    """Best draft length per graded bucket, and the largest power-of-two batch where speculation
    pays: {bucket: (best, the draft length shown), 'last': (batch, its speedup)}."""
    table: dict = {}
    for bucket in BUCKETS:
        if bucket > peak:
            raise Reject(f"batch {bucket} does not fit at this context")
        best, top, second = model.best(bucket, p.alpha, p.draft_cost)
        if top - second < GAMMA_TIE * top:
            raise Reject(f"two draft lengths within 0.5% at batch {bucket}")
        tried = best or max(GAMMAS, key=lambda g: model.speedup(bucket, g, p.alpha, p.draft_cost))
        table[bucket] = (best, tried)
    pays = [(b, model.best(b, p.alpha, p.draft_cost)) for b in (2 ** k for k in range(11)) if b <= peak]
    on = [(b, top) for b, (best, top, _) in pays if best > 0]
    if not on:
        raise Reject("speculation does not pay even at batch 1")
    if any(abs((top if best else second) - 1) < GAMMA_TIE for _, (best, top, second) in pays):
        raise Reject("a bucket sits at break-even")
    table["last"] = on[-1]
    return table


def _last_paying(model: LoadModel, p, peak: float, context: float) -> int:
    """Largest power-of-two batch that fits where the best draft length beats 1 (0: none)."""
    return max((b for b in (2 ** k for k in range(11)) if b <= peak
                and model.best(b, p.alpha, p.draft_cost, context)[0] > 0), default=0)


def _context_what_if(s: Sheet, p, model: LoadModel, peak: float, last: int) -> None:
    """Every request with four times the context, the same engine: which parts of the table move."""
    key, longer = "context", 4 * p.context
    room = (GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes) / model.kv_bytes
    peak4 = min(p.max_num_seqs, math.floor(room / (longer + p.gamma + 1)))
    if peak4 < 1:
        raise Reject("four times the context does not fit one sequence")
    s.judge(key, "the peak batch shrinks", peak4 < peak,
            f"{format_number(peak4)} sequences fit instead of {format_number(peak)}"
            + (" (max_num_seqs binds both times)" if peak4 == peak else ""))
    at_peak = model.speedup(peak4, int(p.gamma), p.alpha, p.draft_cost, longer)
    s.judge(key, "speculation left on pays at the new peak batch", at_peak > 1,
            f"{format_number(at_peak, 3)}x at {format_number(peak4)} sequences")
    small = BUCKETS[0]
    step, step_long = model.plain(small), model.plain(small, longer)
    s.judge(key, f"the plain step at batch {small} gets {{longer_by}} longer or more",
            step_long >= (1 + p.longer_by) * step,
            f"{format_quantity(step_long, 'ms')} instead of {format_quantity(step, 'ms')}: the KV reads' share")
    last4 = _last_paying(model, p, peak4, longer)
    s.judge(key, "speculation pays up to a larger power-of-two batch", last4 > last,
            f"up to {format_number(last4)} instead of {format_number(last)}"
            + (f", capped by the {format_number(peak4)} sequences that fit" if last4 * 2 > peak4 else ""))
    if len(set(s.judged(key).values())) == 1:
        raise Reject("four times the context changes all of these or none")


def _by_load_regime(s: Sheet, p, model: LoadModel, S_pk, peak: float, last: int) -> None:
    at = format_number(s.value(S_pk), 3)
    limit = expected_tokens(p.alpha, int(p.gamma)) / (p.gamma + 1 + p.gamma * p.draft_cost)
    kv_reads = peak * model.kv_token * p.context  # seconds of KV reads in the peak step
    why = (f"at {format_number(p.context)} tokens of context the peak step is mostly KV reads "
           f"({format_quantity(kv_reads, 'ms')} against {format_quantity(model.weights, 'ms')} of weights), which the "
           "verify pass shares across its γ+1 tokens" if kv_reads > model.weights else
           f"the batch cap of {format_number(p.max_num_seqs)} keeps the verify pass's extra math short of the step's "
           "reads")
    s.regime_by(S_pk, 1, boundary_label="break-even", tie="below", above=Side(
        "keep-on",
        f"Even at the peak batch of {format_number(peak)} speculation pays ({at}x): {why}.",
        "With a larger peak batch (shorter contexts, a higher cap) the verify pass turns compute-bound: then "
        "speculation left on costs peak throughput and must switch off in the top buckets."),
        below=Side(
        "turn-off",
        f"Left on at the peak batch of {format_number(peak)}, speculation costs throughput ({at}x): the verify "
        f"pass's γ extra tokens per sequence are paid in math and all-reduce bytes. It stays above the "
        f"compute-bound limit E/(γ+1+γc) = {format_number(limit, 3)}x: the step overhead and the all-reduce "
        f"latency do not grow with the batch and a round pays them once for E tokens, and the verify pass reads "
        f"each sequence's KV once for its γ+1 tokens. With the best "
        f"draft length per bucket it still pays up to batch {format_number(last)}, and must be off above.",
        "At longer contexts the KV reads dominate the step and the verify pass rides on them: speculation keeps "
        "paying at the (smaller) peak batch."))


def solve(p, s: Sheet) -> None:
    """One drafter left on from 3 a.m. to 6 p.m.: the step-time model at batch 1 and at the peak
    batch, the best draft length per batch bucket, and how the context moves all of it."""
    require_context(p.model, 4 * p.context)  # the what-if asks for four times the context
    model = LoadModel.of(p)
    # A speculating sequence holds KV slots for its context and the round's γ+1 verify tokens: the engine
    # allocates them before the verify pass (vLLM's allocate_slots), as spec-decode-step-accounting counts them.
    room = math.floor((GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes)
                      / (model.kv_bytes * (p.context + p.gamma + 1)))
    peak = min(p.max_num_seqs, room)
    table = _buckets(model, p, peak)  # every reason to redraw, before the sheet
    if abs(model.speedup(peak, int(p.gamma), p.alpha, p.draft_cost) - 1) < GAMMA_TIE:
        raise Reject("speculation left on breaks even at the peak batch")
    _context_what_if(s, p, model, peak, table["last"][0])
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
    for bucket in BUCKETS:
        best, tried = table[bucket]
        g = s.given(f"γ_{bucket}", tried, "", f"best of the draft lengths {', '.join(map(str, GAMMAS))} at this "
                    "batch" + ("" if best else " (still below 1: off)"))
        # The bucket's step and round are the peak's formulas at another batch: shown as the search's
        # figures, not derived again (each round's formula costs a millisecond to print).
        t_b = s.given(f"t_{bucket}", model.plain(bucket), "ms", f"plain step at batch {bucket}: the same terms as "
                      "t_pk at this batch (the bucket search)")
        T_b = s.given(f"T_{bucket}", model.speedup_round(bucket, tried, p.draft_cost), "ms",
                      f"round at batch {bucket} with γ = {tried}: the same terms as T_pk (the bucket search)")
        s.step(f"speedup_b{bucket}", f"Speedup at batch {bucket}, best draft length", f"S_{bucket}",
               (1 - alpha ** (g + 1)) / (1 - alpha) * t_b / T_b, "x",
               "speculation is on in this bucket only if this beats 1")
        s.choose(f"gamma_{bucket}", float(best))
    last, top = table["last"]
    s.given("B_on", last, "sequences", "largest power-of-two batch where speculation pays: its best draft length "
            f"gives {format_number(top, 3)}x there, "
            + ("and none beats 1 one bucket up" if last * 2 <= peak else "and no larger bucket fits"))
    s.choose("last_bucket", float(last))

    s.assume("A round is one engine step: the overhead once (step-overhead), the verify pass, and γ draft passes at "
             "c of a plain step's kernels each; every TP all-reduce by tp-all-reduce over NVLink, not overlapped.")
    s.assume("Each draft token is accepted with probability α, independently; every sequence holds about the same "
             "context. The drafter's own weights and KV are left out of the memory; each sequence holds KV slots "
             "for its context and the round's γ+1 verify tokens, allocated before the verify pass (vLLM's "
             "scheduler allocates slots for every scheduled token, the drafts included).")
    s.assume("Buckets are judged by draft lengths " + ", ".join(map(str, GAMMAS)) + " (0 = off): the best is the "
             "one with the highest speedup, off where none exceeds 1.")
    s.slip("the compute-bound limit E/(γ+1) taken at the peak batch (overheads and drafts ignored)",
           on="speedup_peak", factor=s.evaluate(E / (gamma + 1)) / s.value(S_pk))
    s.slip("the batch-1 speedup kept at the peak batch", on="speedup_peak", factor=s.value(S_1) / s.value(S_pk))
    _by_load_regime(s, p, model, S_pk, peak, last)

