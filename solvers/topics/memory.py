"""Memory questions: KV-cache sizing and what it does to concurrency."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet
from solvers.topics.common import dtype_bytes, hbm_bandwidth, hbm_bytes, kv_bytes_per_token, model_params, peak_flops
from solvers.units import format_number

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization


def kv_bytes_per_token_question(p, s: Sheet) -> None:
    mla = p.model.attention == "mla"
    b_kv = s.given("b_kv", dtype_bytes(p.kv_dtype), "B", f"bytes per KV element ({p.kv_dtype})")
    kv_tok = kv_bytes_per_token(s, p.model, b_kv)
    C = s.given("C", p.context, "tokens", "context per request")
    kv_req = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "GiB",
                    "every token of the context keeps its keys and values")
    n = s.given("n", p.gpus, "", "GPUs (tensor parallel)")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", GPU_MEMORY_UTILIZATION, "", "usable fraction of HBM")
    N = s.given("N", model_params(p.model), "", "parameters")
    b_w = s.given("b_w", dtype_bytes(p.weight_dtype), "B", f"bytes per weight ({p.weight_dtype})")
    if mla:
        free = s.step("kv_memory", "KV memory per GPU", "M_KV", M * u - N * b_w / n, "GB",
                      "each GPU holds 1/n of the weights; MLA's latent has no heads to split, "
                      "so every GPU keeps the whole cache of every request")
    else:
        free = s.step("kv_memory", "KV memory across the group", "M_KV", n * M * u - N * b_w, "GB",
                      "usable HBM of all GPUs minus one copy of the weights; KV heads split across GPUs")
    if s.value(free) <= 0:
        raise Reject("weights do not fit")
    users = s.step("users", "Requests that fit at this context", "U", sympy.floor(free / kv_req), "requests",
                   "whole requests: the KV memory over one request's cache")
    P = s.given("P", peak_flops(p.gpu, p.weight_dtype), "TFLOP/s", f"dense {p.weight_dtype} peak")
    BW = s.given("BW", hbm_bandwidth(p.gpu), "TB/s", "HBM bandwidth")
    B_star = s.step("compute_batch", "Batch where decode turns compute-bound", "B_star", b_w * P / (2 * BW),
                    "requests", "weight GEMMs reach the ridge point when 2B/b_w = P/BW (per GPU, any n)")

    s.assume(f"{format_number(GPU_MEMORY_UTILIZATION * 100)}% of HBM usable (vLLM's default); activations, "
             "CUDA graphs and fragmentation are ignored here.")
    s.assume("Every request holds its full context; K and V are stored in the KV dtype, weights in theirs.")
    s.assume("Compute limit from weight GEMMs only, at datasheet peak; attention reads make decode "
             "even more memory-bound, so the real compute limit is higher still.")
    s.slip("x layers: one layer's KV instead of all of them", 1 / p.model.layers)
    s.slip("x2: K and V counted once", 0.5)

    fit, limit = s.value(users), s.value(B_star)
    if fit < limit:
        s.set_regime(
            "capacity-limited", f"Only {format_number(fit)} requests fit, well short of the "
            f"{format_number(limit)} it takes to saturate compute: memory caps concurrency.",
            B_star, users,
            "With shorter contexts, fp8 KV, or more GPUs, more requests fit; past the compute-bound batch, "
            "extra requests stretch every step instead of riding along for free.")
    else:
        s.set_regime(
            "compute-limited", f"{format_number(fit)} requests fit, more than the {format_number(limit)} "
            "that already saturate compute: a bigger batch only makes each step slower.",
            B_star, users,
            "At longer contexts (or bf16 KV) fewer requests fit and memory becomes the cap, "
            "the usual case for long-context serving.")
