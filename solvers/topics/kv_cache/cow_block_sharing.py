"""Sharing prompt blocks across samples, and when copy-on-write fires."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    dtype_bytes,
)
from solvers.formulas.kvcache import (
    blocks_for_tokens,
    kv_bytes_per_token_given,
)
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_number

TOO_CLOSE = 0.02  # the saving's tolerance in the question file


def _cow_regime(s: Sheet, G, P, saving, ceiling, half, saved) -> None:
    out, prompt, gib = format_number(s.value(G)), format_number(s.value(P)), s.text(saved)
    got, cap = s.text(saving), s.text(ceiling)
    s.regime_by(saving, half, tie="below", above=Side(
        "prompt-dominated",
        f"The saving ({got}) is more than half its {cap} ceiling: outputs ({out} tokens) are short next to the "
        f"prompt ({prompt}), so the shared prompt blocks are most of what each sample holds.",
        "Once outputs outgrow the prompt the private output blocks dominate and the saving falls as P/(P + G): "
        "long reasoning traces or RL rollouts keep little of it.",
        near=f"The saving ({got}) is just over half its {cap} ceiling: outputs ({out} tokens) are nearly as long as "
             f"the prompt ({prompt}), and somewhat longer ones would make the private blocks the larger part."),
        below=Side(
        "output-dominated",
        f"The saving ({got}) is under half its {cap} ceiling: outputs ({out} tokens) are long next to the prompt "
        f"({prompt}), private output blocks dominate, and it keeps falling as P/(P + G). Sharing still saves "
        f"{gib}, the prompt's shared blocks k − 1 times over, whatever the outputs; they are just a small part of "
        "what the request holds.",
        "With outputs shorter than the prompt (short answers to long contexts, best-of-n on a long document) the "
        "shared blocks dominate and the saving nears its ceiling.",
        near=f"The saving ({got}) has just fallen under half its {cap} ceiling: outputs ({out} tokens) are about as "
             f"long as the prompt ({prompt}), and every further output token pulls it lower."))


def solve(p, s: Sheet) -> None:
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    k, P, G, B = (s.param(sym, name) for sym, name in
                  (("k", "samples"), ("P", "prompt"), ("G", "output"), ("B", "block_size")))
    v0 = p.engine == "v0"

    T = s.step("sample_tokens", "Tokens per sample", "T", P + G, "tokens", "the prompt plus its own output")
    per_sample = blocks_for_tokens(s, T, B)
    alone = s.step("blocks_without", "Blocks without sharing", "N_0", k * per_sample, "blocks",
                   "every sample holds its own copy of the prompt")
    if v0:
        shared = s.step("shared_blocks", "Full prompt blocks shared by all samples", "n_s", floor_of(P / B),
                        "blocks", "full blocks of prompt are never written again: one copy, reference-counted")
    else:
        shared = s.step("shared_blocks", "Prompt blocks the prefix cache shares", "n_s", floor_of((P - 1) / B),
                        "blocks", "whole blocks only, and at most P − 1 tokens: the last prompt token is always "
                        "recomputed for its logits")
    own = s.step("own_blocks", "Blocks each sample holds alone", "n_own", per_sample - shared, "blocks",
                 "the block the prompt ends in and the output's blocks")
    together = s.step("blocks_with", "Blocks with sharing", "N_1", shared + k * own, "blocks",
                      "the shared blocks once, plus every sample's own")
    saving = s.step("saving", "Blocks saved", "S", 1 - together / alone, "%", "blocks with sharing over blocks without")
    ceiling = s.step("saving_ceiling", "Saving if the samples held only the prompt", "S_max", (k - 1) / k, "%",
                     "one prompt copy instead of k; outputs pull the saving down as P/(P + G)")
    saved = s.step("saved_bytes", "KV memory saved", "M_S", (alone - together) * B * kv_tok, "GiB",
           "each block holds B tokens in every layer")
    tail = s.step("tail_tokens", "Prompt tokens past the shared blocks", "P_t", P - B * shared, "tokens",
                  "the part of the prompt no sample can simply point at")
    if v0:
        misaligned = s.step("partial_prompt_block", "Prompt ends inside a block", "m",
                            ceil_of(P / B) - floor_of(P / B), "", "1 if P is not a multiple of B")
        copies = s.step("copies", "Copy-on-write copies", "N_cow", (k - 1) * misaligned, "blocks",
                        "each sample's first token lands in the shared partial block: all but the last writer "
                        "copy it")
        s.step("tail_redone", "Prompt tokens whose KV is copied, over all other samples", "P_re", copies * tail,
                        "tokens", "each copy carries the KV of the prompt's tokens past its last full block; "
                        "the prompt is prefilled once")
        s.choose("tail_cost", "a-copy-at-the-first-decode-step" if s.value(copies) else "nothing-extra",
                 "a sample's first token writes into the block the prompt ends in" if s.value(copies) else
                 "the prompt fills its last block exactly: the first token opens a private block")
    else:
        s.step("tail_redone", "Prompt tokens prefilled again, over all other samples", "P_re", (k - 1) * tail, "tokens",
                        "every sample after the first prefills them again; v1 makes no copy-on-write")
        s.choose("tail_cost", "a-recompute-at-prefill",
                 "each later sample is its own request and prefills what the prefix cache cannot match")
    if v0:
        s.assume("vLLM v0 parallel sampling: the prompt is prefilled once and every sample points at its blocks; "
                 "a block is copied when a sample writes into it while another still holds it (copy-on-write, "
                 "PagedAttention §4.4). The V0 engine has since been removed from vLLM (V1 became the only engine "
                 "in 2025): this is the paper's design, still the reference for copy-on-write block sharing.")
    else:
        s.assume("vLLM v1 parallel sampling: the request fans out as k requests of one sample; the first prefills "
                 "the prompt and the others hit its full blocks in the prefix cache within the same batch, up to "
                 "P − 1 tokens in whole blocks (the last token is recomputed for its logits). No copy-on-write.")
    s.assume("Every sample runs to the same output length; KV bytes are those of one model replica, all layers.")
    s.slip("/k: blocks of one sample", 1 / p.samples, on="blocks_without")
    if not v0:  # only v1 prefills the tail again: in v0 nothing is prefilled twice
        s.slip("x k/(k − 1): the first sample's own prefill counted too", p.samples / (p.samples - 1),
               on="tail_redone")
    elif s.value(tail) > 0:
        s.slip("the copied blocks counted whole, B tokens each", p.block_size / max(1, s.value(tail)),
               on="tail_redone")
    half = s.step("saving_half_ceiling", "Half the ceiling", "S_half", ceiling / 2, "%",
                  "the saving falls through it about where the outputs grow as long as the prompt")
    # The saving is graded within 2%: a draw that close to the line could be called either way.
    if abs(s.value(saving) / s.value(half) - 1) <= TOO_CLOSE:
        raise Reject("the saving is within 2% of half its ceiling: too close to call")
    _cow_regime(s, G, P, saving, ceiling, half, saved)

