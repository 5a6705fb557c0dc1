"""A TP replica's step times and the serving-cost ledger, by hand in plain Python from the catalogue
records and the step-time model's card constants (60% of peak compute, 50% at fp8, 80% of HBM bandwidth,
2 ms per step, 10 us per all-reduce), independently of sympy: shared by the cost questions' tests."""
from __future__ import annotations

import math

from solvers.formulas.common import GPU_MEMORY_UTILIZATION

ETA_C, ETA_C8, ETA_BW, OVERHEAD, ALPHA = 0.6, 0.5, 0.8, 2e-3, 10e-6  # step-compute(-fp8), step-bandwidth, ...


SEEDS = range(40)


class Replica:
    """A TP group's step times by hand: roofline, then two ring all-reduces per layer, then the overhead."""

    def __init__(self, model, gpu, tp):
        self.N = model.params_b * 1e9
        self.kv = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
        self.A = 4 * model.layers * model.heads * model.head_dim
        self.weights = self.N * 2 / tp
        self.fr = tp * ETA_C * gpu.bf16_dense_tflops * 1e12
        self.fr_att = self.fr  # attention at the cache's peak (the card's matmul-precision): bf16 here
        self.br = ETA_BW * gpu.hbm_tb_s * 1e12
        self.pool = gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION - self.weights
        link = gpu.nvlink_gb_s * 1e9 / 2
        self.ar0 = 2 * model.layers * ALPHA if tp > 1 else 0.0
        self.ar_tok = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / link

    def step(self, tokens, attended, cached):
        return (max((self.weights + self.kv * cached) / self.br, self.math(2 * self.N * tokens, self.A * attended))
                + self.ar0 + self.ar_tok * tokens + OVERHEAD)

    def math(self, weight_flops, attention_flops):
        return weight_flops / self.fr + attention_flops / self.fr_att

    def request(self, P, R, v):
        """(prefill step, decode batch, decode step) of one request: the ledger's formulas."""
        S = P + R / 2
        room = 1 / v - OVERHEAD - self.ar0
        B = math.floor(min((room - self.weights / self.br) / (self.kv * S / self.br + self.ar_tok),
                           room / (self.math(2 * self.N, self.A * S) + self.ar_tok), self.pool / (self.kv * S)))
        return self.step(P, P**2 / 2, 0), B, self.step(B, B * S, B * S)
