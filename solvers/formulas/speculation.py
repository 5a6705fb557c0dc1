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
until speculation loses. The step-time model of steptime.py times the pass (verify_work)."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import sympy

from solvers.conventions import convention, recording
from solvers.data import Record
from solvers.derivation import Sheet
from solvers.formulas.collective import all_reduce_terms
from solvers.formulas.steptime import DecodeCosts, Engine, engine


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one round yields: accepted drafts plus the target's own token (γ + 1 at α = 1)."""
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def tokens_per_round(s: Sheet, alpha: sympy.Symbol, gamma: sympy.Expr, key: str = "tokens_per_round",
                     symbol: str = "E") -> sympy.Symbol:
    """E = (1 − α^(γ+1)) / (1 − α) as a step (α < 1: the questions draw it so)."""
    return s.step(key, "Expected tokens per round", symbol, (1 - alpha ** (gamma + 1)) / (1 - alpha), "tokens",
                  "a geometric series: the i-th draft survives with probability α^i, and the target always adds "
                  "one token of its own (the correction or the bonus)")


GAMMAS = (1, 2, 3, 4, 5, 6, 7, 8)  # draft lengths an engine is configured with (0: speculation off)


@functools.cache
def _group_figures(model_key: str, gpu_key: str, tp: int) -> tuple[dict[str, float], tuple[str, ...]]:
    """The step model's constants for one TP group as floats, from a scratch sheet with the same
    engine and all-reduce terms as the question's (cached: the search runs before the sheet), and
    the cards that sheet read."""
    model, gpu = (Record(json.loads(key)) for key in (model_key, gpu_key))
    cards: list[str] = []
    with recording(cards):
        s = Sheet()
        e = engine(s, model, gpu, tp, communication=True)
        comm = all_reduce_terms(s, model, gpu, tp)
        convention("roofline-time")  # kernels(): the slower of the reads and the math
    return ({"weights": s.evaluate(e.W / e.TP / e.byte_rate), "kv_bytes": s.value(e.KV),
             "kv_token": s.evaluate(e.KV / e.byte_rate), "token_flops": s.evaluate(2 * e.N / e.flop_rate),
             "pair": s.evaluate(e.A / e.attention_rate), "weight_bytes": s.evaluate(e.W / e.TP),
             "overhead": s.value(e.t_oh), "ar_fixed": s.evaluate(comm.fixed), "ar_token": s.evaluate(comm.per_token)},
            tuple(cards))


@dataclass(frozen=True)
class LoadModel:
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
    def of(cls, p) -> LoadModel:
        key = json.dumps(p.model, sort_keys=True), json.dumps(p.gpu, sort_keys=True), int(p.tp)
        figures, cards = _group_figures(*key)
        for card in cards:  # read again on every solve: the cache ran the scratch sheet once, for the first
            convention(card)
        return cls(context=p.context, **figures)

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


# Where the bank's round and a real engine's part (read12): the draft passes are charged their kernels only.
DRAFT_LAUNCHES = ("Each draft pass is charged c of the plain step's kernels and no overhead of its own; a real engine "
                  "launches each draft step (a kernel chain or a CUDA-graph replay) and samples between them, so "
                  "these speedups run high, most at small batches where a step is short.")


def speculative_round(e: Engine, costs: DecodeCosts, B, gamma, c, plain) -> sympy.Expr:
    """A round: the verify pass of B·(γ+1) tokens, the overhead once, γ drafts at c of the plain
    step's kernels each."""
    return costs.kernels(B, gamma + 1) + e.t_oh + gamma * c * (plain - e.t_oh)


def break_even_alpha(tokens: float, gamma: int) -> float:
    """The acceptance rate whose expected tokens per round equal `tokens` (E rises from 1 at α = 0
    to γ + 1 at α = 1), by bisection to 1e-12."""
    low, high = 0.0, 1.0
    while high - low > 1e-12:
        mid = (low + high) / 2
        low, high = (mid, high) if expected_tokens(mid, gamma) < tokens else (low, mid)
    return (low + high) / 2
