"""Speculative decoding: a drafter proposes γ tokens, the target scores all of them (and one
more) in a single pass, and a rejection rule keeps a prefix of them.

The closed forms every question here shares (Leviathan, Kalman, Matias 2023, sec. 3):
with each draft token accepted with probability α, independently, a round yields

    E = 1 + α + ... + α^γ = (1 − α^(γ+1)) / (1 − α)        (γ + 1 at α = 1)

tokens, and at batch 1, where the target's pass costs the same for 1 or γ + 1 tokens, the
wall-time speedup is E / (γ·c + 1), c being a draft pass's cost over a target pass's.

Past batch 1 the target's verification pass carries B·(γ + 1) tokens: with the weights read
once per pass its intensity is 2·B·(γ + 1)/b_w FLOP/B, so it stays memory-bound (and the extra
tokens ride free) while B ≤ b_w·ridge / (2·(γ + 1)): 295/(γ + 1) on an H100 in bf16, 59 at
γ = 4. Beyond that the verify pass costs more than a plain decode step, and the speedup falls
until speculation loses. The step-time model of steptime.py times the pass (verify_work).
"""
from __future__ import annotations

import functools
import json
import math
import zlib
from dataclasses import dataclass

import numpy as np
import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import all_reduce_terms
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    model_params,
    peak_flops,
    require_context,
)
from solvers.topics.steptime import DEFAULT_CONSTANTS, DecodeCosts, Engine, decode_costs, engine
from solvers.units import format_number, format_quantity


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one round yields: accepted drafts plus the target's own token (γ + 1 at α = 1)."""
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def batch1_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.'s wall-time speedup at batch 1: E / (γ·c + 1)."""
    return expected_tokens(alpha, gamma) / (gamma * c + 1)


def tokens_per_round(s: Sheet, alpha: sympy.Symbol, gamma: sympy.Expr, key: str = "tokens_per_round",
                     symbol: str = "E") -> sympy.Symbol:
    """E = (1 − α^(γ+1)) / (1 − α) as a step (α < 1: the questions draw it so)."""
    return s.step(key, "Expected tokens per round", symbol, (1 - alpha ** (gamma + 1)) / (1 - alpha), "tokens",
                  "a geometric series: the i-th draft survives with probability α^i, and the target always adds "
                  "one token of its own (the correction or the bonus)")


def batch1_speedup_step(s: Sheet, E: sympy.Symbol, gamma: sympy.Expr, c: sympy.Symbol,
                        key: str = "speedup_batch1") -> sympy.Symbol:
    return s.step(key, "Wall-time speedup at batch 1", "S_1", E / (gamma * c + 1), "x",
                  "the verify pass costs one target pass however many tokens it scores; the γ draft passes cost "
                  "c of one each (Leviathan et al.)")


# --- spec-decode-batch-ceiling ------------------------------------------------------------

WORTH_SPECULATING = 1.1  # a draw whose batch-1 speedup is below this has nothing to lose
LEVER_GAIN = 1.2  # a change "raises" the speedup when it gains at least this factor
LEVER_TIE = 0.01  # a lever within 1% of that line is redrawn: no side to grade


def _roofline(weights, flops, BW, P):
    """One pass on one GPU at datasheet peaks: the slower of reading the weights and the math."""
    return max_of(weights / BW, flops / P)


def spec_decode_batch_ceiling(p, s: Sheet) -> None:
    """Speculation against the batch on one GPU's roofline: free while the verify pass stays
    memory-bound, dearer past the ceiling, a loss past break-even."""
    alpha = s.param("α", "alpha")
    gamma = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    B = s.param("B", "batch")
    N = s.given("N", model_params(p.model), "", f"{p.model.name} parameters")
    b_w = s.given("b_w", dtype_bytes(p.dtype), "B", f"bytes per weight ({p.dtype})")
    P = s.given("P", peak_flops(p.gpu, p.dtype), "TFLOP/s", f"{p.gpu.name} dense {p.dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", f"{p.gpu.name} HBM bandwidth")

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
    _ceiling_levers(s, p, value=s.value(S_B))
    _ceiling_regime(s, p, B, even, ceiling, S_B, S1)


def _speedup(p, alpha: float, gamma: int, c: float, batch: float, peak: float, bandwidth: float) -> float:
    """The sheet's speedup in plain arithmetic, for a what-if."""
    weights = model_params(p.model) * dtype_bytes(p.dtype)
    plain = max(weights / bandwidth, 2 * model_params(p.model) * batch / peak)
    verify = max(weights / bandwidth, 2 * model_params(p.model) * batch * (gamma + 1) / peak)
    return expected_tokens(alpha, gamma) * plain / (verify + gamma * c * plain)


def _ceiling_levers(s: Sheet, p, value: float) -> None:
    """Which single change lifts this batch's speedup by LEVER_GAIN: below the ceiling the drafts and
    acceptance decide it, above it the verify pass's math does."""
    peak, bandwidth = peak_flops(p.gpu, p.dtype), hbm_bandwidth(p.gpu)
    base = dict(alpha=p.alpha, gamma=p.gamma, c=p.draft_cost, batch=p.batch, peak=peak, bandwidth=bandwidth)

    def say(option: str, why: str, **change) -> None:
        ratio = _speedup(p, **(base | change)) / value
        if abs(ratio / LEVER_GAIN - 1) < LEVER_TIE:
            raise Reject(f"{option}: within 1% of the 20% line")
        s.judge("levers", option, ratio >= LEVER_GAIN, f"{why}: {format_number(ratio, 3)}x the speedup")

    gamma = int(p.gamma)
    half = max(1, gamma // 2)
    say("half the draft length", f"γ = {half}: fewer tokens scored per sequence, fewer expected per round",
        gamma=half)
    say("twice the draft length", f"γ = {2 * gamma}: more tokens per round if they ride free", gamma=2 * gamma)
    say("a drafter half as costly", f"γ·c falls from {format_number(p.gamma * p.draft_cost, 3)} to "
        f"{format_number(p.gamma * p.draft_cost / 2, 3)} plain steps", c=p.draft_cost / 2)
    higher = (1 + p.alpha) / 2  # halfway to a perfect drafter: never past α = 1
    say("acceptance halfway to 1", f"α = {format_number(higher, 3)}", alpha=higher)
    say("a GPU with twice the tensor peak", "the ceiling doubles; the verify pass's math halves", peak=2 * peak)
    if not any(s.judged("levers").values()):
        raise Reject("no single change gains 20%: nothing to choose between")


def _ceiling_regime(s: Sheet, p, B, even, ceiling, S_B, S1) -> None:
    at, cap, flat = (format_number(s.value(x), 3) for x in (S_B, ceiling, S1))
    where = (f"at batch {format_number(p.batch)}, within the ceiling of {cap}, the verify pass still costs one "
             f"weight read and the speedup is the batch-1 figure of {flat}x"
             if s.compare(B, ceiling) <= 0 else
             f"at batch {format_number(p.batch)}, past the ceiling of {cap}, the verify pass pays for its extra "
             f"tokens in math and the speedup falls from {flat}x to {at}x")
    s.regime_by(B, even, tie="above", below=Side(
        "helps",
        f"Speculation pays: {where}; it stops paying at about {format_number(s.value(even), 3)} sequences.",
        "Past break-even the round costs more plain steps than it yields tokens: speculation slows every user "
        "and cuts throughput, so it must shrink its draft or switch off as the batch grows."),
        above=Side(
        "hurts",
        f"Speculation loses: {where}, below 1 because the batch ({format_number(p.batch)}) is past break-even at "
        f"about {format_number(s.value(even), 3)} sequences.",
        "Below break-even the weight read has idle bandwidth to spare and the drafts turn it into tokens: at small "
        "batch the speedup returns to the batch-1 figure."))


# --- spec-decode-by-load --------------------------------------------------------------------

GAMMAS = (1, 2, 3, 4, 5, 6, 7, 8)  # draft lengths an engine is configured with (0: speculation off)
BUCKETS = (32, 128)  # the batch buckets whose draft length is graded
GAMMA_TIE = 0.005  # two draft lengths within 0.5% of each other: no best one to grade


@functools.cache
def _group_figures(model_key: str, gpu_key: str, tp: int) -> dict[str, float]:
    """The step model's constants for one TP group as floats, from a scratch sheet with the same
    engine and all-reduce terms as the question's (cached: the search runs before the sheet)."""
    model, gpu = (Record(json.loads(key)) for key in (model_key, gpu_key))
    s = Sheet()
    e = engine(s, model, gpu, tp, communication=True)
    comm = all_reduce_terms(s, model, gpu, tp)
    return {"weights": s.evaluate(e.W / e.TP / e.byte_rate), "kv_bytes": s.value(e.KV),
            "kv_token": s.evaluate(e.KV / e.byte_rate), "token_flops": s.evaluate(2 * e.N / e.flop_rate),
            "pair": s.evaluate(e.A / e.flop_rate), "weight_bytes": s.evaluate(e.W / e.TP),
            "overhead": s.value(e.t_oh), "ar_fixed": s.evaluate(comm.fixed), "ar_token": s.evaluate(comm.per_token)}


@dataclass(frozen=True)
class _LoadModel:
    """The question's decode costs as floats (the same step model, the same all-reduce terms), for
    the search over draft lengths, batches and a longer context that the sheet then shows at the
    chosen points. Times in seconds, bytes per GPU."""

    context: float  # the question's context
    weights: float  # reading one GPU's share of the weights
    kv_bytes: float  # KV bytes of one cached token
    kv_token: float  # reading one cached token's KV
    token_flops: float  # one token's math through the weights
    pair: float  # attention math per query-key pair
    weight_bytes: float  # one GPU's share of the weights
    overhead: float  # the fixed overhead per step
    ar_fixed: float  # the all-reduces' latency per step
    ar_token: float  # the all-reduces' time per token

    @classmethod
    def of(cls, p) -> _LoadModel:
        key = json.dumps(p.model, sort_keys=True), json.dumps(p.gpu, sort_keys=True), int(p.tp)
        return cls(context=p.context, **_group_figures(*key))

    def kernels(self, batch: float, tokens: int, context: float) -> float:
        math = self.token_flops + self.pair * context
        return (max(self.weights + batch * self.kv_token * context, batch * tokens * math)
                + self.ar_fixed + self.ar_token * batch * tokens)

    def plain(self, batch: float, context: float | None = None) -> float:
        return self.kernels(batch, 1, context or self.context) + self.overhead

    def speedup_round(self, batch: float, gamma: int, c: float, context: float | None = None) -> float:
        """A round: the verify pass, the overhead once, γ drafts at c of the plain step's kernels."""
        context = context or self.context
        return (self.kernels(batch, gamma + 1, context) + self.overhead
                + gamma * c * self.kernels(batch, 1, context))

    def speedup(self, batch: float, gamma: int, alpha: float, c: float, context: float | None = None) -> float:
        return expected_tokens(alpha, gamma) * self.plain(batch, context) / self.speedup_round(batch, gamma, c, context)

    def mixed_round(self, batch: float, plan: tuple, c: float) -> float:
        """A round of a batch whose classes, in shares (share, γ), draft different lengths (0: not
        speculating): the verify pass carries every sequence's γ+1 tokens, and the drafter runs as
        many passes as the longest draft, the j-th over the sequences drafting at least j tokens."""
        longest = max(g for _, g in plan)
        if longest == 0:
            return self.plain(batch)
        tokens = sum(share * (g + 1) for share, g in plan)
        drafts = sum(self.kernels(batch * sum(share for share, g in plan if g >= j), 1, self.context)
                     for j in range(1, longest + 1))
        return self.kernels(batch, tokens, self.context) + self.overhead + c * drafts

    def best(self, batch: float, alpha: float, c: float, context: float | None = None) -> tuple[int, float, float]:
        """(best draft length, its speedup, the runner-up's), draft length 0 = off at speedup 1."""
        ranked = sorted(((self.speedup(batch, g, alpha, c, context), g) for g in GAMMAS), reverse=True)
        (top, gamma), (second, _) = ranked[0], ranked[1]
        if top < 1:
            return 0, 1.0, top
        return gamma, top, max(second, 1.0)


def _round(e: Engine, costs: DecodeCosts, B, gamma, c, plain) -> sympy.Expr:
    """A round: the verify pass of B·(γ+1) tokens, the overhead once, γ drafts at c of the plain
    step's kernels each."""
    return costs.kernels(B, gamma + 1) + e.t_oh + gamma * c * (plain - e.t_oh)


def spec_decode_by_load(p, s: Sheet) -> None:
    """One drafter left on from 3 a.m. to 6 p.m.: the step-time model at batch 1 and at the peak
    batch, the best draft length per batch bucket, and how the context moves all of it."""
    require_context(p.model, 4 * p.context)  # the what-if asks for four times the context
    model = _LoadModel.of(p)
    room = math.floor((GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes) / (model.kv_bytes * p.context))
    peak = min(p.max_num_seqs, room)
    table = _buckets(model, p, peak)  # every reason to redraw, before the sheet
    if abs(model.speedup(peak, int(p.gamma), p.alpha, p.draft_cost) - 1) < GAMMA_TIE:
        raise Reject("speculation left on breaks even at the peak batch")
    _context_what_if(s, p, model, peak, table["last"][0])
    e = engine(s, p.model, p.gpu, p.tp, communication=True, kv_prerequisite=True)
    S = s.param("S", "context")
    costs = decode_costs(s, e, p.model, p.gpu, p.tp, S)
    B_max = s.param("B_max", "max_num_seqs")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "%", "usable HBM (usable-hbm)")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    fits = s.step("kv_room", "Sequences whose KV fits at this context", "B_kv",
                  floor_of((u * M - e.W / e.TP) / (e.KV * S)), "sequences",
                  "usable HBM per GPU less its share of the weights, over each sequence's KV on that GPU")
    B_pk = s.step("peak_batch", "Peak batch", "B_pk", min_of(B_max, fits), "sequences",
                  "the scheduler's max_num_seqs or the KV pool, whichever runs out first")

    alpha = s.param("α_acc", "alpha")  # α is the all-reduce latency on this sheet
    gamma = s.param("γ", "gamma")
    c = s.param("c", "draft_cost")
    E = tokens_per_round(s, alpha, gamma)
    t_1 = s.step("plain_batch1", "Plain step at batch 1", "t_1", costs.kernels(1) + e.t_oh, "ms",
                 "one weight read, one sequence's KV, one token's math and all-reduces, the overhead")
    T_1 = s.step("round_batch1", "Round at batch 1", "T_1", _round(e, costs, 1, gamma, c, t_1), "ms",
                 "γ+1 tokens still ride on the same weight read; the drafts add γ·c of a step")
    S_1 = s.step("speedup_batch1", "Speedup at batch 1", "S_1", E * t_1 / T_1, "x",
                 "E tokens per round against one per plain step")
    t_pk = s.step("plain_peak", "Plain step at the peak batch", "t_pk", costs.kernels(B_pk) + e.t_oh, "ms",
                  "the same terms with B_pk sequences")
    s.step("per_user_peak", "Tokens/s per user at the peak batch, no speculation", "X_pk", 1 / t_pk, "tokens/s",
           "one token per plain step")
    T_pk = s.step("round_peak", "Round at the peak batch", "T_pk", _round(e, costs, B_pk, gamma, c, t_pk), "ms",
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
             "context. The drafter's own weights and KV are left out of the memory, and the γ extra tokens of "
             "KV a round writes are small beside the context.")
    s.assume("Buckets are judged by draft lengths " + ", ".join(map(str, GAMMAS)) + " (0 = off): the best is the "
             "one with the highest speedup, off where none exceeds 1.")
    s.slip("the compute-bound limit E/(γ+1) taken at the peak batch (overheads and drafts ignored)",
           on="speedup_peak", factor=s.evaluate(E / (gamma + 1)) / s.value(S_pk))
    s.slip("the batch-1 speedup kept at the peak batch", on="speedup_peak", factor=s.value(S_1) / s.value(S_pk))
    _by_load_regime(s, p, model, S_pk, peak, last)


def _buckets(model: _LoadModel, p, peak: float) -> dict:
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


def _last_paying(model: _LoadModel, p, peak: float, context: float) -> int:
    """Largest power-of-two batch that fits where the best draft length beats 1 (0: none)."""
    return max((b for b in (2 ** k for k in range(11)) if b <= peak
                and model.best(b, p.alpha, p.draft_cost, context)[0] > 0), default=0)


def _context_what_if(s: Sheet, p, model: _LoadModel, peak: float, last: int) -> None:
    """Every request with four times the context, the same engine: which parts of the table move."""
    key, longer = "context", 4 * p.context
    room = (GPU_MEMORY_UTILIZATION * hbm_bytes(p.gpu) - model.weight_bytes) / model.kv_bytes
    peak4 = min(p.max_num_seqs, math.floor(room / longer))
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
    s.judge(key, f"the plain step at batch {small} gets 10% longer or more", step_long >= 1.1 * step,
            f"{format_quantity(step_long, 'ms')} instead of {format_quantity(step, 'ms')}: the KV reads' share")
    last4 = _last_paying(model, p, peak4, longer)
    s.judge(key, "speculation pays up to a larger power-of-two batch", last4 > last,
            f"up to {format_number(last4)} instead of {format_number(last)}"
            + (f", capped by the {format_number(peak4)} sequences that fit" if last4 * 2 > peak4 else ""))
    if len(set(s.judged(key).values())) == 1:
        raise Reject("four times the context changes all of these or none")


def _by_load_regime(s: Sheet, p, model: _LoadModel, S_pk, peak: float, last: int) -> None:
    at = format_number(s.value(S_pk), 3)
    limit = expected_tokens(p.alpha, int(p.gamma)) / (p.gamma + 1 + p.gamma * p.draft_cost)
    kv_reads = peak * model.kv_token * p.context  # seconds of KV reads in the peak step
    why = (f"at {format_number(p.context)} tokens of context the peak step is mostly KV reads "
           f"({format_quantity(kv_reads, 'ms')} against {format_quantity(model.weights, 'ms')} of weights), which the "
           "verify pass shares across its γ+1 tokens" if kv_reads > model.weights else
           f"the batch cap of {format_number(p.max_num_seqs)} keeps the verify pass's extra math short of the step's "
           "reads")
    s.regime_by(S_pk, s.given("S_even", 1, "x", "break-even"), tie="below", above=Side(
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


# --- spec-decode-step-accounting --------------------------------------------------------------


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


def spec_decode_step_accounting(p, s: Sheet) -> None:
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
    # Rollback.
    waste = s.step("discarded", "KV entries written and discarded per step", "n_rb", B * (gamma + 1 - E), "tokens",
                   "the verify pass writes KV for all γ+1 positions; the rejected tail is rolled back by moving the "
                   "sequence's length back, and the next step overwrites those slots: nothing is copied")
    s.step("discarded_share", "Share of the verify tokens thrown away", "r_rb", (gamma + 1 - E) / (gamma + 1), "%",
           "γ+1 positions scored, E of them kept")
    # The decode-only step: no prompt waiting.
    t_p = s.step("plain_step", "Plain decode step at this batch", "t_p", costs.kernels(B) + e.t_oh, "ms",
                 "the step-time model's terms with B sequences")
    T = s.step("round_time", "Round at this batch (decode only)", "T_r", _round(e, costs, B, gamma, c, t_p), "ms",
               "the verify pass of B·(γ+1) tokens, the overhead once, γ drafts at c of the plain step's kernels")
    S_B = s.step("speedup", "Speedup at this batch", "S_B", E * t_p / T, "x", "E tokens per round against one per step")
    s.step("per_user", "Tokens/s per user, speculating", "X_s", E / T, "tokens/s", "E tokens per round")
    s.step("per_user_budget_batch", "Tokens/s per user at the largest batch that fits the budget", "X_τ",
           E / _round(e, costs, B_tau, gamma, c, costs.kernels(B_tau) + e.t_oh), "tokens/s",
           "the same round with B_τ sequences, no prompt waiting")
    B_c = s.step("compute_batch", "Batch where the verify pass turns compute-bound", "B_c",
                 costs.weights / ((gamma + 1) * costs.math - costs.kv), "sequences",
                 "B·(γ+1)·t_F = t_W + B·t_KV: each sequence adds γ+1 tokens of math but one KV read")
    if s.compare((gamma + 1) * costs.math, costs.kv) <= 0:
        raise Reject("the verify pass never turns compute-bound at this context")
    even = _break_even(s, e, costs, E, gamma, c)
    room = s.step("kv_room", "Sequences whose KV fits", "B_kv",
                  floor_of((s.given("u", GPU_MEMORY_UTILIZATION, "%", "usable HBM (usable-hbm)")
                               * s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM") - e.W / e.TP)
                              / (e.KV * (S + gamma + 1))), "sequences",
                  "usable HBM less the weights, over each sequence's KV with room for its γ+1 lookahead slots")
    if s.compare(even, room) > 0 or s.compare(B, room) > 0:
        raise Reject("the batch or the break-even batch does not fit in memory")

    s.assume("Chunked prefill with a token budget per step (vLLM's max_num_batched_tokens): a prompt waits, and "
             "every step fills the budget with its chunk after the decode tokens. The verify pass's γ+1 tokens per "
             "sequence are scheduled tokens (vLLM V1 counts them in num_scheduled_tokens).")
    s.assume("Step-time model (steptime.py, the card's step constants, attention by attention-flops) for the "
             "decode-only step" + (", TP all-reduces by tp-all-reduce at the all-reduce-latency-nvlink latency"
                                   if p.tp > 1 else "") + "; a round is one engine step: the "
             "overhead once, the verify pass, γ draft passes at c of the plain step's kernels each.")
    s.assume("Rejection costs no copy: the paged KV of the rejected positions is left in place and overwritten "
             "(vLLM rolls back the sequence's computed-token count; blocks allocated for the lookahead stay with "
             "the sequence). Each draft token is accepted with probability α, independently.")
    s.slip("budget counted as one token per sequence (drafts forgotten)", on="prefill_left",
           factor=s.evaluate(tau - B) / s.value(left))
    s.slip("the discarded count taken as γ − α·γ (acceptance per token, no prefix rule)", on="discarded",
           factor=s.evaluate(B * gamma * (1 - alpha)) / s.value(waste))
    _accounting_holds(s, p, overhead=s.value(e.t_oh), steps=(s.value(steps_p), s.value(steps_s)), B_c=s.value(B_c),
                      costs=costs)
    _accounting_regime(s, p, B, even, S_B, B_c)


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


def _accounting_holds(s: Sheet, p, overhead: float, steps: tuple[float, float], B_c: float, costs: DecodeCosts) -> None:
    key, B, gamma, tau = "holds", p.batch, int(p.gamma), p.budget
    plain_left, spec_left = tau - B, tau - B * (gamma + 1)
    s.judge(key, "speculating at least doubles the steps the waiting prompt's prefill takes",
            steps[1] >= 2 * steps[0], f"{format_number(steps[1])} steps instead of {format_number(steps[0])}: "
            f"{format_number(spec_left)} prefill tokens per step instead of {format_number(plain_left)}")
    s.judge(key, "the verify pass at this batch is compute-bound", B > B_c,
            f"it turns compute-bound past {format_number(B_c, 3)} sequences")
    weights, kv, math_ = (s.value(x) for x in (costs.weights, costs.kv, costs.math))
    s.judge(key, "the plain decode step at this batch is compute-bound", B * math_ > weights + B * kv,
            f"{format_quantity(B * math_, 'ms')} of math against {format_quantity(weights + B * kv, 'ms')} of reads")
    kept = expected_tokens(p.alpha, gamma)
    s.judge(key, "over a third of the verify tokens are thrown away", 3 * (gamma + 1 - kept) > gamma + 1,
            f"{format_number(gamma + 1 - kept, 3)} of {gamma + 1} positions per sequence")
    one = _step_speedup(s, costs, B, 1, p.alpha, p.draft_cost, overhead)
    s.judge(key, "a draft length of 1 would pay at this batch", one > 1, f"{format_number(one, 3)}x at γ = 1")
    if len(set(s.judged(key).values())) == 1:
        raise Reject("all of these hold or none")


def _step_speedup(s: Sheet, costs: DecodeCosts, B: float, gamma: int, alpha: float, c: float,
                  overhead: float) -> float:
    """The sheet's decode-only speedup at another draft length, in plain arithmetic."""
    weights, kv, math_ = (s.value(x) for x in (costs.weights, costs.kv, costs.math))
    ar_fixed, ar_token = s.evaluate(costs.comm.fixed), s.evaluate(costs.comm.per_token)
    kernels = max(weights + B * kv, B * math_) + ar_fixed + ar_token * B
    verify = max(weights + B * kv, B * (gamma + 1) * math_) + ar_fixed + ar_token * B * (gamma + 1)
    return expected_tokens(alpha, gamma) * (kernels + overhead) / (verify + overhead + gamma * c * kernels)


def _accounting_regime(s: Sheet, p, B, even, S_B, B_c) -> None:
    at, flip = format_number(s.value(S_B), 3), format_number(s.value(B_c), 3)
    where = format_number(s.value(even), 3)
    s.regime_by(B, even, tie="above", below=Side(
        "helps",
        f"At batch {format_number(p.batch)} speculation still pays ({at}x with no prompt waiting): the round "
        f"costs less than the E plain steps it replaces. It starts losing at about {where} sequences; the verify "
        f"pass turns compute-bound from {flip}.",
        "Past break-even each round costs more than the tokens it yields: with the verify pass compute-bound, "
        "every rejected position is paid-for math, and speculation must shrink its draft or switch off."),
        above=Side(
        "hurts",
        f"At batch {format_number(p.batch)} speculation loses ({at}x): past {where} sequences the verify pass's "
        f"extra tokens cost more, in math and all-reduce bytes, than the accepted ones save (it is compute-bound "
        f"from {flip}).",
        "Below break-even the verify pass's extra tokens ride on reads the step makes anyway: speculation pays, "
        "and the rejected positions cost next to nothing."))


# --- spec-decode-tail -----------------------------------------------------------------------

P99 = 0.01  # the tail: the slowest 1% of requests


def break_even_alpha(tokens: float, gamma: int) -> float:
    """The acceptance rate whose expected tokens per round equal `tokens` (E rises from 1 at α = 0
    to γ + 1 at α = 1), by bisection to 1e-12."""
    low, high = 0.0, 1.0
    while high - low > 1e-12:
        mid = (low + high) / 2
        low, high = (mid, high) if expected_tokens(mid, gamma) < tokens else (low, mid)
    return (low + high) / 2


CODE_ONLY = "speculate on code requests only (chat never drafts)"
_CELLS = ("high-acceptance requests off-peak", "high-acceptance requests at peak",
          "low-acceptance requests off-peak", "low-acceptance requests at peak")


def spec_decode_tail(p, s: Sheet) -> None:
    """Speculation over a day's requests: the speedup of each (acceptance, batch) cell, the break-even
    acceptance per batch, the cells that own the p99 TPOT, and a policy that keeps the tail."""
    model = _LoadModel.of(p)
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
        T = s.step(f"round_{tag}", f"Round {where}", f"T_{tag}", _round(e, costs, B, gamma_, c, t), "ms",
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
    s.choose("alpha_even_low", s.value(a_even_lo))
    s.choose("alpha_even_peak", s.value(a_even_pk))
    s.step("p99_off", "p99 TPOT, speculation off", "τ99_off", t_pk, "ms",
           f"every request at peak waits a plain step; peak requests are over {format_number(100 * P99)}% of all")
    owner = cells["owner"]
    tpot = {0: (T_lo, E_hi), 1: (T_pk, E_hi), 2: (T_lo, E_lo), 3: (T_pk, E_lo)}[owner]
    s.step("p99_on", "p99 TPOT, speculation always on", "τ99_on", tpot[0] / tpot[1], "ms",
           f"the slowest cell holding the top {format_number(100 * P99)}% of requests: {_CELLS[owner]}, a round per "
           "E tokens")
    f = s.param("f_chat", "low_share")
    B_pk = s.symbol("B_pk")
    B_code = s.step("", "Code sequences in the peak batch", "B_code", (1 - f) * B_pk, "sequences",
                    "the batch holds both classes in their shares")
    n_mix = s.step("", "Verify tokens at peak, only code drafting", "n_mix", B_code * (gamma_ + 1) + f * B_pk,
                   "tokens", "γ+1 per code sequence, one per chat sequence")
    s.step("tpot_chat_mixed", "Chat TPOT at peak, only code speculating", "τ_mix",
           costs.kernels(B_pk, n_mix / B_pk) + e.t_oh + gamma_ * c * costs.kernels(B_code), "ms",
           "chat scores one token per round but shares the round: the code sequences' verify tokens and their γ "
           "draft passes (over the code sequences only) set its length, for one chat token")
    for option, holds, why in cells["owns"]:
        # Off-peak batches (16 or fewer) are weight-bound: even a poor round costs less per token there
        # than a plain step at the peak batch, so the tail is always at peak.
        s.judge("owners", option, holds, why, fact=option.endswith("off-peak"))
    for option, holds, why in policies:
        # Chat at peak (3% of requests or more) waits a longer round than a plain step for one token.
        s.judge("policy", option, holds, why, fact=option == CODE_ONLY)

    s.assume("Step-time model (steptime.py, the card's step constants, tp-all-reduce over NVLink); a round is one "
             "engine step: the overhead once, the verify pass, γ drafts at c of a plain step's kernels each.")
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
        f"acceptance of {format_number(s.value(a_even_pk), 3)}: speculation speeds up every cell, and the tail "
        "with it.",
        "Below the break-even acceptance the round costs more than the tokens it yields: those requests at peak "
        "get slower TPOT than with speculation off, and they own the p99."),
        below=Side(
        "slowdown",
        f"The low-acceptance requests at peak (α = {format_number(p.alpha_low, 3)}) sit below the break-even "
        f"acceptance of {format_number(s.value(a_even_pk), 3)}: speculation slows them down, and they own the "
        "p99 while the mean improves.",
        "Above the break-even acceptance every cell gains: then speculation can stay on and only the draft length "
        "needs tuning by load."))


def _tail_cells(model: _LoadModel, p, gamma: int) -> dict:
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
    if any(abs(tpot[k] / off - 1) < 0.01 for k in range(4)):
        raise Reject("a cell within 1% of the p99 with speculation off")
    owns = [(_CELLS[k], tpot[k] > off, f"{format_quantity(tpot[k], 'ms')} per token against "
             f"{format_quantity(off, 'ms')}, {format_number(100 * share[k], 3)}% of requests") for k in range(4)]
    owns.append(("none: every request beats it", all(tpot[k] < off for k in range(4)),
                 f"the slowest cell takes {format_quantity(max(tpot), 'ms')} per token against "
                 f"{format_quantity(off, 'ms')}"))
    return {"plain": plain, "round": round_, "tpot": tpot, "share": share, "owner": owner, "owns": owns}


def _tail_policies(model: _LoadModel, p, cells: dict) -> list:
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
    per_batch = tuple((g, g) for g in (min(range(GAMMAS[-1] + 1), key=lambda g: mean_at(j, g)) for j in range(2)))
    plans = {
        "keep speculation on for every request": (on, on),
        "keep it on at a batch only where it lowers that batch's mean TPOT":
            tuple(on if mean_at(j, gamma) < mean_at(j, 0) else off for j in range(2)),
        "a draft length of 3 for every request": ((3, 3), (3, 3)),
        "speculate only where the request's acceptance beats the break-even for the current batch":
            tuple(tuple(gamma if a > evens[j] else 0 for a in alphas) for j in range(2)),
        "a draft length of 1 for every request": ((1, 1), (1, 1)),
        "a draft length of 5 for every request": ((5, 5), (5, 5)),
        CODE_ONLY: ((gamma, 0), (gamma, 0)),
        "one draft length per batch, the one with the lowest mean TPOT there (0 = off)": per_batch,
    }
    plain_cells = tpots((off, off))
    off_p99, off_mean = _p99(plain_cells, cells["share"]), _mean(plain_cells, cells["share"])
    out = []
    for option, plan in plans.items():
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
    if len({holds for _, holds, _ in out}) == 1:
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


# --- adaptive-draft-length --------------------------------------------------------------------

# What the policies may choose from: powers of two, as a menu of draft lengths (and of the graphs
# an engine captures for them). Near the best γ the time per token is flat, so consecutive integers
# are within 0.5% of each other in nearly every draw; doubling steps are not.
DRAFT_LENGTHS = np.array([1, 2, 4, 8, 16])
GAMMA_FLAT = 0.005  # a runner-up draft length within 0.5% of the best time: no best one to grade
REQUESTS = 4000  # the seeded sample of requests run in batches
SLOWER_IN_BATCH = 1.6  # the batching select's line for the per-request rule's time per token over a fixed γ's
PLAIN_TIE = 0.03  # the rule's simulated time in batches within 3% of plain decoding's: inside the sample's noise
WORTH_BUILDING = 0.10  # a per-request policy is worth its complexity above this gain over the best fixed γ


def _time_per_token(alpha, gamma, c):
    """Batch 1: a round costs γ·c + 1 target steps and yields E(α, γ) tokens."""
    return (gamma * c + 1) * (1 - alpha) / (1 - alpha ** (gamma + 1))


def _sample_seed(p) -> int:
    """The simulation's seed, from the variant's own figures: the same variant, the same sample."""
    text = "|".join(f"{name}={float(p[name]):.6g}" for name in ("code_share", "alpha_code", "alpha_chat", "spread",
                                                                "draft_cost", "warmup", "batch"))
    return zlib.crc32(text.encode())


QUADRATURE_NODES = 48  # Gauss-Legendre nodes on each half of [0, 1]: within 1e-12 of 96 nodes on every class


@functools.lru_cache(maxsize=128)
def beta_quadrature(A: float, B: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes α, their 1 − α and weights for E[f(α)] with α ~ Beta(A, B). Each half of [0, 1] is mapped by
    a power (α = t^p/2 below, 1 − α = t^q/2 above) that turns the density's endpoint power into a smooth
    t^(≥4): code's (1 − α)^(B−1) is singular at 1 (B down to 0.16), where plain nodes miss mass. 1 − α is
    carried apart because 1 − t^q/2 rounds to 1."""
    t, w = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
    t, w = (t + 1) / 2, w / 2
    p, q = math.ceil(5 / A), math.ceil(5 / B)
    low, high = t ** p / 2, t ** q / 2  # α below 1/2, 1 − α above it
    w_low = w * p / 2 * 2 ** (1 - A) * t ** (p * A - 1) * (1 - low) ** (B - 1)
    w_high = w * q / 2 * 2 ** (1 - B) * t ** (q * B - 1) * (1 - high) ** (A - 1)
    log_beta = math.lgamma(A) + math.lgamma(B) - math.lgamma(A + B)
    arrays = (np.concatenate([low, 1 - high]), np.concatenate([1 - low, high]),
              np.concatenate([w_low, w_high]) / math.exp(log_beta))
    for array in arrays:
        array.setflags(write=False)  # cached: shared by every solve of the same class
    return arrays


def _class_times(p, mean: float) -> tuple[np.ndarray, float]:
    """One class's mean time per token over its Beta spread: at each fixed draft length of the menu, and
    for the per-request rule (each request's γ from its Beta-posterior estimate after the warm-up's
    judged drafts, k ~ Binomial(warm-up, α)), by quadrature."""
    A, B = p.spread * mean, p.spread * (1 - mean)
    alpha, rest, weight = beta_quadrature(A, B)
    c, G, n = p.draft_cost, DRAFT_LENGTHS, int(p.warmup)
    tokens = np.cumsum(alpha[:, None] ** np.arange(G.max() + 1), axis=1)[:, G]  # 1 + α + … + α^γ, no 1 − α
    cost = (G * c + 1) / tokens  # nodes × draft lengths
    k = np.arange(n + 1)
    chosen = _time_per_token(((k + A) / (n + p.spread))[:, None], G[None, :], c).argmin(axis=1)
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in k])
    judged = np.exp(log_choose + k * np.log(alpha)[:, None] + (n - k) * np.log(rest)[:, None])  # nodes × k
    return weight @ cost, float(weight @ (judged * cost[:, chosen]).sum(axis=1))


def adaptive_exact(p) -> dict:
    """The three policies at batch 1 on the code/chat mix, over each class's Beta spread by quadrature:
    mean time per token of each (in target steps) and the graded draft lengths."""
    code, code_adaptive = _class_times(p, p.alpha_code)
    chat, chat_adaptive = _class_times(p, p.alpha_chat)
    f = p.code_share
    means = (f * code + (1 - f) * chat, code, chat)
    if any(np.sort(m)[1] < (1 + GAMMA_FLAT) * m.min() for m in means):
        raise Reject("two draft lengths within 0.5% of the best time")
    i_fixed, i_code, i_chat = (int(m.argmin()) for m in means)
    G = DRAFT_LENGTHS
    return {"fixed": float(means[0][i_fixed]), "class": float(f * code[i_code] + (1 - f) * chat[i_chat]),
            "adaptive": f * code_adaptive + (1 - f) * chat_adaptive,
            "g_fixed": int(G[i_fixed]), "g_code": int(G[i_code]), "g_chat": int(G[i_chat])}


def batch_sample(p) -> dict:
    """Seeded sample of requests (class, α, the per-request rule's γ from its warm-up) run in batches."""
    rng = np.random.default_rng(_sample_seed(p))
    code = rng.random(REQUESTS) < p.code_share
    mean = np.where(code, p.alpha_code, p.alpha_chat)
    alpha = np.clip(rng.beta(p.spread * mean, p.spread * (1 - mean)), 1e-9, 1 - 1e-9)
    judged = int(p.warmup)
    estimate = (rng.binomial(judged, alpha) + p.spread * mean) / (judged + p.spread)  # Beta posterior mean
    chosen = _time_per_token(estimate[:, None], DRAFT_LENGTHS[None, :], p.draft_cost).argmin(axis=1)
    return _in_batches(p, alpha, DRAFT_LENGTHS[chosen])


def _in_batches(p, alpha, chosen) -> dict:
    """The batch-1 per-request rule against the best fixed γ when the sample runs in batches of B
    sharing each round: the verify pass carries Σ(γ_r+1) tokens (free up to the ridge in tokens), and
    the drafter runs as many passes as the longest draft in the batch. Mean time per token of each,
    in target steps: every request waits its batch's round for its own E tokens."""
    B, ridge, c = int(p.batch), _ridge_tokens(p), p.draft_cost
    groups = len(alpha) // B
    a, g = alpha[:groups * B].reshape(groups, B), chosen[:groups * B].reshape(groups, B)

    def time_per_token(gammas) -> float:
        verify = np.maximum(1, (gammas + 1).sum(axis=1) / ridge)
        rounds = verify + gammas.max(axis=1) * c * max(1.0, B / ridge)
        return float((rounds[:, None] / expected_tokens_array(a, gammas)).mean())

    fixed = {int(k): time_per_token(np.full_like(g, k)) for k in DRAFT_LENGTHS}
    best = min(fixed, key=fixed.__getitem__)
    if sorted(fixed.values())[1] < (1 + GAMMA_FLAT) * fixed[best]:
        raise Reject("two fixed draft lengths within 0.5% in batches")
    return {"g_best": best, "fixed": fixed[best], "adaptive": time_per_token(g)}


def expected_tokens_array(alpha, gamma):
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def _ridge_tokens(p) -> float:
    """Tokens a bf16 verify pass carries before it turns compute-bound: 2 bytes per weight, 2 FLOPs,
    at the step model's achievable compute and bandwidth (step-compute, step-bandwidth)."""
    constants = DEFAULT_CONSTANTS
    return constants.compute * peak_flops(p.gpu, "bf16") / (constants.bandwidth * hbm_bandwidth(p.gpu))


def _best_constant(s: Sheet, p) -> tuple[int, int, int]:
    """With every request at its class's mean acceptance: the best fixed γ and each class's own."""
    def mix(g_code: int, g_chat: int) -> float:
        return (p.code_share * _time_per_token(p.alpha_code, g_code, p.draft_cost)
                + (1 - p.code_share) * _time_per_token(p.alpha_chat, g_chat, p.draft_cost))
    fixed = min(DRAFT_LENGTHS, key=lambda g: mix(g, g))
    code = min(DRAFT_LENGTHS, key=lambda g: _time_per_token(p.alpha_code, g, p.draft_cost))
    chat = min(DRAFT_LENGTHS, key=lambda g: _time_per_token(p.alpha_chat, g, p.draft_cost))
    return int(fixed), int(code), int(chat)


def adaptive_draft_length(p, s: Sheet) -> None:
    """Fixed, per-class and per-request draft lengths on a code/chat mix at batch 1, exactly over
    the per-request Beta spread (quadrature); then the same rule inside batches (a seeded sample)."""
    sim = adaptive_exact(p)
    gain = sim["fixed"] / sim["adaptive"] - 1
    if abs(gain - WORTH_BUILDING) < 0.005:
        raise Reject("the adaptive gain sits at the 10% line")
    c = s.param("c", "draft_cost")
    w_code = s.param("f_code", "code_share")
    a_code = s.param("α_code", "alpha_code")
    a_chat = s.param("α_chat", "alpha_chat")
    g_fix, g_code, g_chat = _best_constant(s, p)
    # Closed form with constant acceptance per class.
    menu = ", ".join(map(str, DRAFT_LENGTHS))
    Gf = s.given("γ̄_f", g_fix, "", f"best fixed draft length if every request sat at its class mean (of {menu}); "
                 "for the constant-α gain only")
    Gc = s.given("γ̄_code", g_code, "", "code's best draft length at its mean α")
    Gh = s.given("γ̄_chat", g_chat, "", "chat's best draft length at its mean α")
    fixed_c = s.step("", "Time per token, best fixed draft length, constant acceptance", "τ_f",
                     w_code * (Gf * c + 1) * (1 - a_code) / (1 - a_code ** (Gf + 1))
                     + (1 - w_code) * (Gf * c + 1) * (1 - a_chat) / (1 - a_chat ** (Gf + 1)), "",
                     "in target steps per token: a round costs γc + 1 steps and yields E(α, γ) tokens")
    class_c = s.step("", "Time per token, per-class draft lengths, constant acceptance", "τ_c",
                     w_code * (Gc * c + 1) * (1 - a_code) / (1 - a_code ** (Gc + 1))
                     + (1 - w_code) * (Gh * c + 1) * (1 - a_chat) / (1 - a_chat ** (Gh + 1)), "",
                     "each class at its own best length")
    s.step("gain_class_constant", "Per-class gain, constant acceptance per class", "G_c0", fixed_c / class_c - 1, "%",
           "per-request would add nothing: every request of a class is the same")
    # Acceptance varies per request: batch 1 over each class's Beta spread exactly, batches by sample.
    source = f"quadrature over each class's Beta spread, {2 * QUADRATURE_NODES} Gauss-Legendre nodes"
    for key, who in (("fixed", "best fixed draft length for all requests"), ("code", "code's best draft length"),
                     ("chat", "chat's best draft length")):
        s.given(f"γ_{key}", sim[f"g_{key}"], "", f"{who} over the per-request spread, lowest mean time per token "
                f"({source})")
        s.choose(f"gamma_{key}", float(sim[f"g_{key}"]))
    t_f = s.given("τ_fixed", sim["fixed"], "", f"mean time per token, best fixed γ = {sim['g_fixed']} ({source})")
    t_c = s.given("τ_class", sim["class"], "", f"mean time per token, code γ = {sim['g_code']}, chat γ = "
                  f"{sim['g_chat']} ({source})")
    t_a = s.given("τ_adapt", sim["adaptive"], "", f"mean time per token, each request's γ from its estimate after "
                  f"{p.warmup:g} judged drafts ({source})")
    s.step("gain_class", "Per-class gain over the best fixed γ", "G_c", t_f / t_c - 1, "%",
           "the class means differ, but each class's spread is left on the table")
    G_a = s.step("gain_adaptive", "Per-request gain over the best fixed γ", "G_a", t_f / t_a - 1, "%",
                 "each request's own acceptance sets its length: the high-α requests draft long, the low-α short")
    batch = sim["batch"] = batch_sample(p)
    source = f"seeded simulation, n = {REQUESTS} requests, seed from the variant"
    s.step("gain_batch", f"Per-request gain in batches of {p.batch:g}", "G_B",
           s.given("τ_fix_B", batch["fixed"], "", f"mean time per token in batches of {p.batch:g}, best fixed "
                   f"γ = {batch['g_best']} ({source})")
           / s.given("τ_ad_B", batch["adaptive"], "", f"the same batches, each request at its batch-1 γ ({source})")
           - 1, "%",
           "the round is set by the batch: its longest draft and its total verify tokens")
    threshold = s.given("G_build", WORTH_BUILDING, "%", "gain that pays for a per-request policy")

    s.assume("Batch 1 (Leviathan et al.): a round costs γ·c + 1 target steps and yields E(α, γ) tokens; every "
             "request yields the same number of tokens, so the workload's time per token is the mean of its "
             f"requests'. Draft lengths {menu}.")
    s.assume(f"Per-request acceptance ~ Beta with the class mean and concentration {p.spread:g} (i.i.d. per draft "
             "token within a request); the adaptive policy estimates it after its warm-up from accepted over judged "
             "drafts with the class mean as prior, then keeps the best γ for that estimate (warm-up cost left out).")
    s.assume(f"In a batch of {p.batch:g} every request rides the same round: the verify pass carries Σ(γ_r + 1) "
             f"tokens, free up to {format_number(_ridge_tokens(p), 3)} on {p.gpu.name} (its bf16 ridge in tokens at "
             "the step-compute and step-bandwidth efficiencies), "
             "and the drafter runs as many passes as "
             "the longest draft.")
    s.slip("the gain quoted in time saved (1 − τ_policy/τ_fixed) instead of throughput", on="gain_adaptive",
           factor=(1 - sim["adaptive"] / sim["fixed"]) / gain)
    _batching_holds(s, p, sim)
    s.regime_by(G_a, threshold, tie="above", above=Side(
        "worth-building",
        f"At c = {format_number(p.draft_cost, 3)} every wasted draft pass costs real time, so matching each "
        f"request's γ to its own acceptance gains {format_number(100 * gain, 3)}% over one γ for all: worth "
        "building, at batch 1.",
        "With a cheap drafter long drafts cost little even when rejected, so one long γ serves nearly every request "
        "and per-request adaptivity gains only a few percent."),
        below=Side(
        "not-worth-it",
        f"At c = {format_number(p.draft_cost, 3)} a rejected draft costs little, so one long γ serves nearly every "
        f"request: per-request adaptivity gains {format_number(100 * gain, 3)}%, not worth its complexity.",
        "With an expensive drafter each wasted pass costs real time: matching γ to each request's acceptance then "
        "gains well over 10% at batch 1."))


def _batching_holds(s: Sheet, p, sim: dict) -> None:
    key, batch = "batching", sim["batch"]
    slower = batch["adaptive"] / batch["fixed"]
    if abs(slower / SLOWER_IN_BATCH - 1) < 0.01:
        raise Reject("the per-request rule's slowdown in batches sits at the line of the batching select")
    s.judge(key, f"the batch-1 per-request rule stays under {format_number(SLOWER_IN_BATCH)} times the fixed γ's time "
            "per token in these batches", slower < SLOWER_IN_BATCH,
            f"{format_number(slower, 3)}x the time per token of the best fixed γ = {batch['g_best']} for the batch")
    s.judge(key, "the best fixed draft length in a batch differs from the batch-1 one",
            batch["g_best"] != sim["g_fixed"],
            f"γ = {batch['g_best']} in batches of {format_number(p.batch)}, γ = {sim['g_fixed']} alone")
    tokens, ridge = p.batch * (batch["g_best"] + 1), _ridge_tokens(p)
    s.judge(key, "the verify pass at that draft length is compute-bound", tokens > ridge,
            f"{format_number(tokens)} tokens against the ridge of {format_number(ridge, 3)}")
    plain = max(1.0, p.batch / ridge)  # a plain decode step of the batch, one token per request
    if abs(batch["adaptive"] / plain - 1) < PLAIN_TIE:
        raise Reject("the per-request rule in batches sits at plain decoding's time per token")
    s.judge(key, "the batch-1 per-request rule is slower than plain decoding (no drafter) in these batches",
            batch["adaptive"] > plain,
            f"{format_number(batch['adaptive'], 3)} target steps per token against {format_number(plain, 3)} without "
            "a drafter: each round waits for its batch's longest draft and many requests keep few of its tokens")
    if len(set(s.judged(key).values())) == 1:
        raise Reject("all of these hold or none")


# --- spec-decode-exactness ------------------------------------------------------------------

_COLUMNS = {"p": "p, bf16 target", "q": "q, draft", "p8": "p, FP8 target", "q8": "q, FP8 draft"}
SPEC_TOKENS = ("the", "a", "this", "its", "our")  # the candidates generators.spec_position lists, in order


def spec_decode_exactness(p, s: Sheet) -> None:
    """Modified rejection sampling keeps the verifying model's distribution exactly, whatever the draft;
    a quantized target changes which distribution that is, and FP8 kernels that differ between the
    verify and decode passes, or across batch sizes, flip greedy tokens where the top-2 gap is small."""
    rows = [dict(zip(("token", *_COLUMNS.values()), (token, *p[f"token_{i + 1}"])))
            for i, token in enumerate(SPEC_TOKENS)]
    top = max(range(len(rows)), key=lambda i: rows[i][_COLUMNS["p"]])
    holds = _exactness_draw(p, rows, top)  # every redraw on floats first: a rejected draw builds no sheet
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
    s.step("acceptance_fp8_draft", "Acceptance with the FP8 drafter", "α_8",
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
                f"gap {format_number(g)} {'<' if g < s.value(bound) else '>'} {format_number(s.value(bound), 3)}")
    _exactness_fixes(s, p, gaps)
    for option, (truth, why) in holds.items():
        s.judge("holds", option, truth, why)

    s.assume("Sampling at temperature 1 over the five listed tokens (the rest of the vocabulary has no mass here); "
             "the rule is Leviathan et al.'s: accept x ~ q with probability min(1, p(x)/q(x)), else resample from "
             "max(0, p − q) normalised. Greedy decoding is its temperature-0 limit: keep the draft if it is the "
             "target's argmax.")
    s.assume("Two FP8 logit differences: δ_k between two kernels, the verify pass's attention kernel (γ+1 queries "
             "per sequence) and decode's (one query), at any batch size; δ_b within one kernel between batch sizes "
             "(split-K and tile choices change its summation order). Batch-invariant kernels fix each kernel's "
             "order at every batch size, so they remove δ_b; only verifying with decode's kernel removes δ_k. A "
             "greedy token can differ from plain decoding where its top-2 gap is under 2(δ_k + δ_b).")
    s.slip("acceptance taken as Σ p·q (the chance both pick the same token)", on="acceptance",
           factor=s.evaluate(sympy.Add(*(a * b for a, b in zip(P, Q)))) / s.value(alpha))
    if rows[top][_COLUMNS["p"]] != rows[top][_COLUMNS["p8"]]:
        s.slip("the bf16 target's probability kept with the FP8 target verifying", on="output_top_fp8",
               factor=rows[top][_COLUMNS["p"]] / rows[top][_COLUMNS["p8"]])


def _fix_changes(d_k: float, d_b: float) -> tuple:
    """Each single change of the fixes select, with the per-logit difference it leaves."""
    return (
        ("verify with the decode pass's attention kernel", d_b, "only the batch-size term remains"),
        ("batch-invariant kernels", d_k, "only the verify-kernel term remains"),
        ("both logit differences halved", (d_k + d_b) / 2, "half of each term remains"),
        ("the verify-kernel difference cut to a tenth", d_k / 10 + d_b, "a tenth of δ_k and all of δ_b remain"),
        ("the batch-size difference cut to a tenth", d_k + d_b / 10, "all of δ_k and a tenth of δ_b remain"),
    )


def _exactness_draw(p, rows, top: int) -> dict:
    """The draw's redraws, on floats: a gap at the bound or at what a change leaves, every position at
    risk or none, every change a fix, a statement at its line, all statements alike. Returns the holds
    select's judgements (truth, why)."""
    gaps, d_k, d_b = list(p.gaps), p.delta_kernel, p.delta_batch
    bound = 2 * (d_k + d_b)
    if any(abs(g / bound - 1) < 0.02 for g in gaps):
        raise Reject("a gap within 2% of the bound")
    if len({g < bound for g in gaps}) == 1:
        raise Reject("every greedy position at risk, or none")
    changes = _fix_changes(d_k, d_b)
    for option, left, _ in changes:
        if any(abs(g / (2 * left) - 1) < 0.02 for g in gaps):
            raise Reject(f"{option}: a gap within 2% of what it leaves")
    if all(min(gaps) >= 2 * left for _, left, _ in changes):
        raise Reject("every single change fixes every position")
    P, Q, P8, Q8 = ([row[_COLUMNS[c]] for row in rows] for c in ("p", "q", "p8", "q8"))
    alpha, alpha8 = sum(map(min, P, Q)), sum(map(min, P, Q8))
    shift = sum(abs(a - b) for a, b in zip(P, P8)) / 2
    if abs(shift - 0.02) < 0.0015 or abs(1 - alpha - 0.2) < 0.005:
        raise Reject("a statement sits at its line")
    p_top, q_top, p8_top = P[top], Q[top], P8[top]
    holds = {
        "the FP8 drafter lowers the acceptance rate here": (
            alpha8 < alpha, f"{format_number(100 * alpha8, 3)}% against {format_number(100 * alpha, 3)}%"),
        "the FP8 target moves the output distribution by over 2% (total variation)": (
            shift > 0.02, f"{format_number(100 * shift, 3)}%"),
        "the FP8 target verifying emits the bf16 target's top token more often than the bf16 target does": (
            p8_top > p_top, f"the output follows the verifier: {format_number(p8_top)} against "
            f"{format_number(p_top)}, whatever drafts"),
        "the drafter under-proposes the bf16 target's top token, so a rejection can resample it": (
            q_top < p_top, f"q = {format_number(q_top)} against p = {format_number(p_top)}"),
        "over a fifth of the drafts are rejected here": (
            1 - alpha > 0.2, f"1 − α = {format_number(100 * (1 - alpha), 3)}%"),
    }
    if len({truth for truth, _ in holds.values()}) == 1:
        raise Reject("all of these hold or none")
    return holds


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
    s.judge(key, "none of these alone", not fixed, "the smallest gap, " + format_number(min(gaps)) + ", is under "
            + ("what each of them leaves" if not fixed else "what some leave, not under what " + fixed[0] + " leaves"))
