"""The step-time model of a TP group in plain Python from the catalogue records (the conventions card's
60% of peak compute, 80% of HBM bandwidth, 2 ms per step, 10 us per all-reduce), independently of sympy:
shared by the tests of spec-decode-by-load, spec-decode-step-accounting and spec-decode-tail."""
from __future__ import annotations

from solvers.formulas.speculation import expected_tokens
from tests.by_hand import value_of

ETA_C, ETA_BW, OVERHEAD, AR_LATENCY = 0.6, 0.8, 2e-3, 10e-6  # the conventions card's step model


class StepByHand:
    """The step-time model of a TP group in plain Python from the catalogue records (bf16, tp ≤ KV heads)."""

    def __init__(self, solution):
        m, g = value_of(solution, "model"), value_of(solution, "gpu")
        self.tp, self.m, self.g = value_of(solution, "tp"), m, g
        self.n = m.params_b * 1e9
        self.kv = 2 * m.layers * (m.kv_heads // self.tp) * m.head_dim * 2  # per GPU per token
        self.pair = 4 * m.layers * m.heads * m.head_dim
        self.bw = ETA_BW * g.hbm_tb_s * 1e12
        self.rate = self.tp * ETA_C * g.bf16_dense_tflops * 1e12
        self.link = g.nvlink_gb_s * 1e9 / 2

    def kernels(self, batch, tokens, context):
        reads = (self.n * 2 / self.tp + self.kv * batch * context) / self.bw
        math = (2 * self.n + self.pair * context) * batch * tokens / self.rate
        comm = 0 if self.tp == 1 else 2 * self.m.layers * (
            AR_LATENCY + 2 * (self.tp - 1) / self.tp * batch * tokens * self.m.hidden * 2 / self.link)
        return max(reads, math) + comm

    def speedup(self, batch, context, gamma, alpha, c):
        plain = self.kernels(batch, 1, context)
        return expected_tokens(alpha, gamma) * (plain + OVERHEAD) / (
            self.kernels(batch, gamma + 1, context) + OVERHEAD + gamma * c * plain)

    def room(self, context, gamma):
        """Sequences whose KV fits: each holds slots for its context and the round's γ+1 verify tokens."""
        return int((0.9 * self.g.hbm_mib * 2**20 - self.n * 2 / self.tp) // (self.kv * (context + gamma + 1)))
