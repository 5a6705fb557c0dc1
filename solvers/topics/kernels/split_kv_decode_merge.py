"""Split-KV decode - filling the SMs and merging partials by log-sum-exp."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, Side
from solvers.models.collective import tp_all_reduce
from solvers.models.common import given_config
from solvers.models.steptime import engine
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of
from solvers.units import format_number

PARTIAL_BYTES = 4  # split-KV kernels keep each partial output and its LSE in FP32


# The merge options' lines, off the 0.1 grid of Δ (ln 7 = 1.946, ln 19 = 2.944): one of the two always holds.
ONE_EIGHTH, ONE_TWENTIETH = sympy.Rational(1, 8), sympy.Rational(1, 20)


def _merge_judgements(s: Sheet, *, splits, empty, overhead, weight, kv_read, weight_read) -> None:
    """The merge statements are about the stage's two splits, decided in every variant; the ones about
    this variant's own splits cannot be decided where the batch fills the SMs by itself (one split, no
    partials, nothing split): they are not listed there (the opening is drawn where it splits)."""
    key = "merge_facts"
    split = s.compare(splits, 1) > 0
    none = "the batch has more than half as many blocks as SMs: one split, no partials, no merge"
    s.judge(key, "the lower-LSE split carries under an eighth of the merged output", s.compare(weight, ONE_EIGHTH) < 0,
            f"its weight is 1/(1 + e^Δ) = {s.text(weight, 3)}")
    s.judge(key, "the lower-LSE split carries at least a twentieth of the merged output",
            s.compare(weight, ONE_TWENTIETH) >= 0, f"its weight is 1/(1 + e^Δ) = {s.text(weight, 3)}")
    s.judge(key, "the FP32 partials, written and read back, add under {merge_share} to this step's attention traffic",
            s.compare(overhead, s.param("f_merge", "merge_share")) < 0 if split else None,
            f"they add {s.text(overhead, 3)}: FP32 output and LSE per split and query head, written and read back "
            "by the merge, against the whole context's bf16 keys and values" if split else none)
    s.judge(key, "the shorter request leaves at least half of its splits without keys",
            s.compare(2 * empty, splits) >= 0 if split else None,
            f"{s.text(empty)} of {s.text(splits)} splits get none: the layout's tiles per split are the longest's, "
            "so the short request's keys run out early" if split else none)
    s.judge(key, "each GPU reads more bytes of KV cache than of weights in this step",
            s.compare(kv_read, weight_read) > 0,
            f"{s.text(kv_read, 3)} of KV against {s.text(weight_read, 3)} of weights a GPU: "
            + ("the attention is most of the step's reads, so how many SMs it keeps busy sets the speed"
               if s.compare(kv_read, weight_read) > 0 else
               "the weights are most of the step's reads, so the split's gain is diluted over the whole step"))
    s.judge(key, "a CUDA graph captured at this batch replays the split count it was captured with", True,
            "the split count is part of the launch's grid, which a captured graph replays as it was: engines pick "
            "and pin the splits per captured batch size", fact=True)


def _split_regime(s: Sheet, B, B_star, blocks, n_split, n_sm) -> None:
    count, splits = s.text(blocks), s.text(n_split)
    idle = format_number(max(0, s.value(n_sm) - s.value(blocks)))
    busy = s.compare(blocks, n_sm) < 0
    s.regime_by(B, B_star, tie="below", above=Side(
        "no-split",
        f"The batch alone gives {count} blocks, more than half the {s.text(n_sm)} SMs: "
        + (f"{idle} SMs idle, but two splits would need a second wave, and the most loaded SM sets the time: no "
           "split, which would only add partial-output traffic and a merge pass." if busy else
           "every SM is busy, and a split would only add partial-output traffic and a merge pass."),
        "At or below the boundary batch two splits or more fit one wave of blocks: split each sequence's keys "
        "and merge the partials by their LSEs."),
        below=Side(
        "split-needed",
        f"{count} blocks leave {idle} of {s.text(n_sm)} SMs idle while the attention streams the "
        f"KV cache: {splits} splits per sequence put them to work (as many as fit one wave, or as the keys "
        "allow), at the price of FP32 partials and a merge.",
        "Past the boundary batch two splits would need a second wave: one split per sequence."))


def solve(p, s: Sheet) -> None:
    """Decode attention at a small batch: one thread block per (sequence, KV head), the query heads of
    the group packed into it. Splitting each sequence's keys across more blocks fills the SMs; each split
    returns a partial output and its log-sum-exp, and a second pass merges them exactly."""
    e = engine(s, p.model, p.gpu, p.tp, dtype=p.dtype, communication=p.tp > 1, kv_prerequisite=True)
    B = s.param("B", "batch")
    T = s.param("T", "context")
    n_sm = s.given("n_SM", p.gpu.sms, "", f"{p.gpu.name} SMs")
    # KV heads per GPU: the engine's own step (kvcache.kv_heads_per_gpu), carried rather than declared again.
    H_g = s.symbol("H_gpu")
    H = given_config(s, p.model, "heads")
    H_kv = given_config(s, p.model, "kv_heads")
    d = given_config(s, p.model, "head_dim")
    L = given_config(s, p.model, "layers")

    blocks = s.step("blocks", "Thread blocks without a split", "n_blk", B * H_g, "",
                    "one per sequence and KV head this GPU holds; the query heads sharing a KV head ride in it")
    fill = s.step("fill", "Share of the SMs those blocks occupy", "u_fill", min_of(1, blocks / n_sm), "%",
           "each block runs on one SM; the rest idle through the attention")
    B_star = s.step("boundary_batch", "Largest batch a split still helps", "B_star", n_sm / (2 * H_g), "sequences",
                    "two splits fit one wave while 2·B·H_gpu ≤ n_SM")
    n_wave = s.step("wave_splits", "Splits that fit one wave of blocks", "n_wave", max_of(1, floor_of(n_sm / blocks)),
                    "", "as many splits as fit one wave of blocks on the SMs: blocks × splits ≤ SMs (1 once the "
                    "batch has more than half as many blocks as SMs)")
    tile = s.param("t_kv", "kv_tile")
    tiles = s.step("tiles", "Key tiles per sequence", "n_tile", ceil_of(T / tile), "",
                   "the context in tiles of keys, the last one maybe partial")
    per_split = s.step("tiles_per_split", "Key tiles per split", "n_per", ceil_of(tiles / min_of(n_wave, tiles)), "",
                       "equal chunks of whole tiles over those splits (one tile a split at least), the last one "
                       "maybe shorter")
    n_split = s.step("splits", "Splits per sequence launched", "n_split", ceil_of(tiles / per_split), "",
                     "the splits those chunks fill: one wave, every launched split with keys")
    # A shorter request in the same launch: the layout (splits, tiles per split) is the longest's.
    share = s.param("f_short", "short_share")
    # A share of T may leave a fraction of a token (45% of 1,792 is 806.4): the request is whole tokens. T is a
    # multiple of 256 and the share of 5%, so rounding never moves a tile boundary: its tiles are the same.
    short = s.step("short_tokens", "The shorter request's keys", "T_short", floor_of(T * share), "tokens",
                   "a share of the longest's context, in whole tokens")
    n_empty = s.step("empty_splits", "The shorter request's splits with no keys", "n_empty",
                     n_split - ceil_of(ceil_of(short / tile) / per_split), "",
                     "its ⌈T_short/tile⌉ tiles fill the first splits at the longest's tiles per split; the rest get "
                     "none and must still write LSE = −inf and a zero output")

    # The exact merge, on two of the splits.
    gap = s.param("Δ", "lse_gap")
    weight = s.step("merge_weight", "Weight of the lower-LSE split in the merge", "w_1", 1 / (1 + sympy.exp(gap)), "%",
           "w_i = exp(LSE_i − LSE) with LSE = log Σ exp(LSE_i): here 1/(1 + e^Δ)")
    s.step("merged_lse", "Merged LSE above the larger one", "ΔLSE", sympy.log(1 + sympy.exp(-gap)), "",
           "LSE = LSE_2 + log(1 + e^−Δ): the merged softmax denominator, in log space")

    # Traffic: with splits every split writes its partial output and LSE in FP32 and the merge reads them back;
    # a single split writes the output directly and launches no merge (FlashAttention-2's non-split path).
    b_p = s.given("b_p", PARTIAL_BYTES, "B", "bytes per partial value (FP32)")
    kv_read = s.step("kv_read", "KV bytes each GPU reads per step", "M_KV", e.KV * B * T, "GB",
                     "every sequence's own keys and values, all layers")
    if s.compare(n_split, 1) > 0:
        partial = s.step("partial_bytes", "Partial-output traffic per step", "M_part",
                         2 * L * B * H_g * n_split * (H / H_kv) * (d + 1) * b_p, "MB",
                         "per layer, split and query head: d output values and one LSE, written then read by the merge")
    else:
        partial = s.step("partial_bytes", "Partial-output traffic per step", "M_part", sympy.S.Zero, "MB",
                         "one split writes the output itself: no FP32 partials, no merge pass")
    overhead = s.step("partial_overhead", "Partial traffic over the KV read", "r_part", partial / kv_read, "%",
                      "what the split adds to the attention's traffic")

    # Per-user speed, unsplit and split: the weights stream at full bandwidth, the attention at the SMs' share.
    w_read = s.step("weight_read", "Weight bytes each GPU reads per step", "M_W", e.W / e.TP, "GB",
                    "its share of the weights, once a step whatever the batch")
    weights = s.step("t_weights", "Weight read per step", "t_W", w_read / e.byte_rate, "ms",
                     "each GPU's share of the weights at achievable bandwidth")
    # The most loaded SM sets the time: each busy SM pulls 1/SMs of the bandwidth, and one holding a second
    # block (a second wave) takes twice as long; its block is a full chunk of tiles.
    waves0 = s.step("waves_unsplit", "Waves of blocks without a split", "k_0", ceil_of(blocks / n_sm), "",
                    "blocks over SMs, rounded up: the most loaded SM runs this many")
    t_att0 = s.step("attention_unsplit", "Attention read without a split", "t_att0",
                    kv_read * n_sm * waves0 / (blocks * e.byte_rate), "ms",
                    "each block's whole sequence of keys at 1/SMs of the bandwidth, once a wave")
    waves1 = s.step("waves_split", "Waves of blocks with the splits", "k_1", ceil_of(blocks * n_split / n_sm), "",
                    "one wave by the choice of splits")
    t_att1 = s.step("attention_split", "Attention read with the splits", "t_att1",
                    n_sm * waves1 * (kv_read * per_split / tiles + partial / n_split) / (blocks * e.byte_rate), "ms",
                    "the most loaded SM's full chunk of tiles (and its partials) at 1/SMs of the bandwidth, "
                    "once a wave")
    t_math = s.step("", "Math time of the step", "t_F", e.math_time(2 * e.N * B, e.A * B * T), "ms",
                    "2 FLOPs per weight per token plus attention over the context, at achievable FLOP/s")
    ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    speeds = {}
    for tag, t_att, label in (("unsplit", t_att0, "without a split"), ("split", t_att1, "split")):
        speeds[tag] = s.step(f"per_user_{tag}", f"Tokens per second per user, {label}", f"X_{tag}",
                             1 / (max_of(weights + t_att, t_math) + ar + e.t_oh), "tokens/s",
                             "one token per step: reads (weights, then attention) or math, whichever is longer"
                             + (", plus the all-reduces" if p.tp > 1 else "") + ", plus the step's overhead")

    s.step("split_gain", "Attention speed-up from splitting", "g_att", t_att0 / t_att1, "",
           "the most loaded SM's attention time, unsplit over split")
    _merge_judgements(s, splits=n_split, empty=n_empty, overhead=overhead, weight=weight, kv_read=kv_read,
                      weight_read=w_read)
    s.assume("One thread block per (sequence, KV head) with its query heads packed together (FlashAttention-2's "
             "decode path swaps the query-head group into the rows; FlashInfer and FlashDecoding do the same); "
             "the blocks of all splits run at once (several fit on one SM).")
    s.assume("Attention's reads get the busy SMs' share of HBM bandwidth, as the prompt states: 1/SMs of it per "
             "busy SM. A lone SM can pull several times its share, so the unsplit time is an upper bound and the "
             "speed-up from splitting is larger here than measured (Flash-Decoding reports up to 8x on attention).")
    s.assume("Splits: as many as fit one wave of blocks on the SMs, floor(SMs / blocks), at most one a tile, the "
             "keys dealt in equal chunks of whole tiles, ⌈tiles / splits⌉ a split, the last maybe shorter, as "
             "FlashAttention-2 lays them out (n_blocks_per_split). The most loaded SM sets the attention's time, so "
             "a part-filled second wave costs a whole wave: filling every SM with ⌈SMs / blocks⌉ splits is slower. "
             "More waves (k·SMs / blocks splits) could use the last idle SMs of the wave but write k times the "
             "partials; one wave is the choice here. FlashAttention-2's own heuristic (the fewest splits within "
             "85% of the best wave efficiency, at most min(SMs, tiles, 128), none once the batch fills 80% of the "
             "SMs) lands at or just below this count. Empty splits come from mixed-length batches: one launch's "
             "split layout is sized by the longest sequence, so a shorter one's last splits get no keys. The "
             "per-user speeds take every sequence at the longest context.")
    s.slip("the attention's read alone (weights, all-reduces and overhead left out)", on="per_user_split",
           factor=1 / (s.value(t_att1) * s.value(speeds["split"])))
    group = p.model.heads / p.model.kv_heads
    s.slip("query heads counted instead of KV heads", on="blocks", factor=group)
    s.slip("query heads counted instead of KV heads", on="fill",
           factor=min(1.0, s.value(blocks) * group / s.value(n_sm)) / s.value(fill))
    # The old key (a declared slip): the fewest splits that give every SM a block, ⌈SMs / blocks⌉, which leaves a
    # part-filled second wave; dealt in equal chunks of whole tiles.
    n_fill = int(s.evaluate(ceil_of(n_sm / blocks)))
    if n_fill > 1:
        n_tiles = int(s.value(tiles))
        chunk = max(1, -(-n_tiles // (n_fill - 1)) - 1)  # the largest equal chunk that still makes n_fill splits
        fill_splits = -(-n_tiles // chunk)
        label = "the fewest splits that give every SM a block, ⌈SMs / blocks⌉ (a part-filled second wave)"
        s.slip(label, on="splits", factor=fill_splits / s.value(n_split))
        s.slip(label, on="tiles_per_split", factor=-(-n_tiles // fill_splits) / s.value(per_split))
    _split_regime(s, B, B_star, blocks, n_split, n_sm)

