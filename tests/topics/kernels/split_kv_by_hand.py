"""Split-KV attention by hand in numpy: each split's partial softmax, their log-sum-exp merge and FA2's
split bounds; shared by the tests of split-kv-decode-merge and tma-warp-specialization."""
from __future__ import annotations

import math

import numpy as np


def lse_merge(outputs: np.ndarray, lses: np.ndarray) -> tuple[np.ndarray, float]:
    """Merge split attention states (normalised partial output, log-sum-exp) as the key says: weights
    exp(LSE_i - m) with m the largest LSE, so an empty split (LSE = -inf, output 0) drops out."""
    m = lses.max()
    if m == -np.inf:
        return np.zeros(outputs.shape[1]), -np.inf
    w = np.exp(lses - m)
    return (w[:, None] * outputs).sum(0) / w.sum(), m + np.log(w.sum())


def split_attention(q, keys, values, bounds):
    """Each split's normalised output and LSE over keys[start:end]; an empty split writes 0 and -inf
    (as FlashAttention-2's compute_attn_1rowblock_splitkv does)."""
    outputs, lses = [], []
    for start, end in bounds:
        if start >= end:
            outputs.append(np.zeros(values.shape[1]))
            lses.append(-np.inf)
            continue
        scores = keys[start:end] @ q
        m = scores.max()
        p = np.exp(scores - m)
        outputs.append(p @ values[start:end] / p.sum())
        lses.append(m + np.log(p.sum()))
    return np.array(outputs), np.array(lses)


def fa2_split_bounds(tokens: int, tile: int, splits: int, longest: int | None = None) -> list[tuple[int, int]]:
    """FlashAttention-2's split ranges in tokens for one sequence of a launch: n_blocks_per_split =
    ceil(ceil(longest / tile) / splits) from the launch's longest sequence (params.seqlen_k), each split's end
    capped at this sequence's own tiles (binfo.actual_seqlen_k)."""
    per = math.ceil(math.ceil((longest or tokens) / tile) / splits)
    n_blocks = -(-tokens // tile)
    return [(min(i * per, n_blocks) * tile, min(min((i + 1) * per, n_blocks) * tile, tokens)) for i in range(splits)]


def fa2_num_splits(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int = 128) -> int:
    """FlashAttention-2's num_splits_heuristic (csrc/flash_attn/flash_api.cpp) line by line, in its float arithmetic;
    set_params_splitkv calls it with num_sms = 2 × the SM count."""
    if batch_nheads_mblocks >= np.float32(0.8) * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(n: int) -> bool:
        return n == 1 or -(-num_n_blocks // n) != -(-num_n_blocks // (n - 1))

    efficiency = []
    for n in range(1, max_splits + 1):
        waves = np.float32(batch_nheads_mblocks * n) / np.float32(num_sms)
        efficiency.append(np.float32(waves / np.ceil(waves)) if eligible(n) else np.float32(0))
    best = max(efficiency)
    return next((n for n in range(1, max_splits + 1) if eligible(n) and efficiency[n - 1] >= 0.85 * float(best)), 1)
