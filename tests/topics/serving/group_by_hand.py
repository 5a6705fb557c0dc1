"""A TP group's step figures by hand, in plain Python from the catalogue records (the step-time model's
defaults: 60% of peak compute, 80% of HBM bandwidth, 2 ms per step), independently of sympy: shared by the
tests of the questions on the step-time model (chunked-prefill-budget, coupled-slo-admission,
decode-loop-overlap, long-reply-batching, roofline-model-breaks)."""
from __future__ import annotations

ETA_C, ETA_BW, OVERHEAD = 0.6, 0.8, 2e-3


ALPHA = 10e-6  # the conventions card: one all-reduce's latency inside an NVLink domain


SEEDS = range(120)  # for the properties every draw must have


class Group:
    """A TP group's figures, by hand."""

    def __init__(self, model, gpu, tp, eta_bw=ETA_BW):
        self.N = model.params_b * 1e9
        self.kv = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
        self.A = 4 * model.layers * model.heads * model.head_dim
        self.tp, self.gpu, self.model = tp, gpu, model
        self.rate = tp * ETA_C * gpu.bf16_dense_tflops * 1e12
        self.bw = eta_bw * gpu.hbm_tb_s * 1e12
        self.weights = self.N * 2 / tp  # per GPU

    def flops(self, tokens, attended):
        return 2 * self.N * tokens + self.A * attended

    def time(self, tokens, attended, cached, overhead=OVERHEAD):
        return max((self.weights + self.kv * cached) / self.bw, self.flops(tokens, attended) / self.rate) + overhead

    def allreduce(self, tokens, alpha=ALPHA):
        """Two ring all-reduces per layer of the tokens' bf16 activations over NVLink (0 at TP 1)."""
        if self.tp == 1:
            return 0.0
        link = self.gpu.nvlink_gb_s * 1e9 / 2
        return 2 * self.model.layers * (alpha + 2 * (self.tp - 1) / self.tp * tokens * self.model.hidden * 2 / link)


def group_of(solution, eta_bw=ETA_BW):
    return Group(solution.param("model").value, solution.param("gpu").value, solution.param("tp").value, eta_bw)


def draws_of(variant, qid):
    return [variant(f"{qid}@{seed}") for seed in SEEDS]
