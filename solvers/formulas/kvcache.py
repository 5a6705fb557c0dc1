"""KV-cache sizing shared by every question that needs it: bytes per token (MHA, GQA, MQA,
MLA), the share one GPU holds under tensor parallelism, and blocks for a sequence.

Each helper adds its steps to the sheet, so the solution shows the formula it used.
Conventions follow vLLM: KV heads per GPU = max(1, H_kv // TP) (heads are replicated once
TP exceeds them); an MLA latent has no heads to split and sits whole on every rank; a
sequence occupies ceil(tokens / block_size) blocks."""
from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import sympy

from solvers.data import Record
from solvers.derivation import Sheet
from solvers.formulas.common import given_config
from solvers.sheetmath import ceil_of, floor_of, max_of


def _mla_latent(sheet: Sheet, model: Record) -> sympy.Expr:
    """Elements MLA caches per layer: the compressed latent plus the decoupled RoPE key."""
    latent = given_config(sheet, model, "kv_lora_rank")
    rope = given_config(sheet, model, "qk_rope_head_dim")
    return latent + rope


def _kv_layers(sheet: Sheet, model: Record) -> sympy.Symbol:
    """The layers that keep a KV cache: every layer, or a hybrid's attention layers (its Mamba layers keep none)."""
    return given_config(sheet, model, "attention_layers" if "attention_layers" in model else "layers")


def kv_bytes_per_token(sheet: Sheet, model: Record, kv_bytes: sympy.Symbol, key: str = "kv_per_token",
                       unit: str = "KiB") -> sympy.Symbol:
    """Per-token KV cache bytes across all layers: GQA/MHA/MQA, or MLA's shared latent."""
    layers = _kv_layers(sheet, model)
    if model.attention == "mla":
        return sheet.step(key, "KV cache bytes per token (MLA: one latent per layer)", "KV_tok",
                          layers * _mla_latent(sheet, model) * kv_bytes, unit,
                          "MLA caches one compressed latent plus the RoPE key per layer, shared by all heads")
    kv_heads = given_config(sheet, model, "kv_heads")
    head_dim = given_config(sheet, model, "head_dim")
    return sheet.step(key, "KV cache bytes per token", "KV_tok", 2 * layers * kv_heads * head_dim * kv_bytes, unit,
                      "a key and a value vector per KV head in every layer")


class TakesPrerequisites(Protocol):
    """What a result taken from an earlier question needs of a sheet: a Sheet, or a view of one
    that tags the symbol (two models' bytes per token side by side)."""

    def prerequisite(self, question_id: str, symbol: str, value: float, unit: str, label: str) -> sympy.Symbol: ...


def kv_bytes_per_token_given(sheet: TakesPrerequisites, model: Record, kv_bytes: float, dtype: str) -> sympy.Symbol:
    """KV bytes per token as a result of kv-bytes-per-token (the question must require it): the
    same formula, evaluated on a scratch sheet, stands here as one given instead of a derivation."""
    value = _kv_bytes_value(*_kv_fields(model), kv_bytes)
    return sheet.prerequisite("kv-bytes-per-token", "KV_tok", value, "KiB", f"KV cache bytes per token ({dtype})")


def _kv_fields(model: Record) -> tuple[str, tuple[tuple[str, object], ...]]:
    """What kv_bytes_per_token reads of a model, read in its order (a missing field raises as it would there)."""
    layers = "attention_layers" if "attention_layers" in model else "layers"
    read = [(layers, getattr(model, layers))]
    read += [(name, getattr(model, name)) for name in (("kv_lora_rank", "qk_rope_head_dim")
                                                       if model.attention == "mla" else ("kv_heads", "head_dim"))]
    return model.attention, tuple(read)


@lru_cache(maxsize=256)
def _kv_bytes_value(attention: str, fields: tuple[tuple[str, object], ...], kv_bytes: float) -> float:
    """kv_bytes_per_token on a scratch sheet, kept by what it reads: a solver takes it for several layouts, and a
    push's search solves the variant again a few dozen times (it was a quarter of voice-latency-budget's float
    solve)."""
    scratch = Sheet()
    model = Record({"attention": attention, **dict(fields)})
    return scratch.value(kv_bytes_per_token(scratch, model, scratch.given("b_kv", kv_bytes, "B")))


def kv_heads_per_gpu(sheet: Sheet, model: Record, tp: sympy.Symbol, key: str = "kv_heads_per_gpu") -> sympy.Symbol:
    """KV heads one GPU stores under TP: H_kv // TP, but never fewer than one (replication)."""
    kv_heads = given_config(sheet, model, "kv_heads")
    return sheet.step(key, "KV heads per GPU", "H_gpu", max_of(1, floor_of(kv_heads / tp)), "",
                      "heads split across the TP ranks; past H_kv ranks each one keeps a replicated head")


def kv_bytes_per_token_per_gpu(sheet: Sheet, model: Record, kv_bytes: sympy.Symbol, tp: sympy.Symbol,
                               key: str = "kv_per_token_gpu", unit: str = "KiB") -> sympy.Symbol:
    """The KV bytes of one token that one GPU holds under tensor parallelism."""
    layers = _kv_layers(sheet, model)
    if model.attention == "mla":
        return sheet.step(key, "KV bytes per token on each GPU (MLA)", "KV_gpu",
                          layers * _mla_latent(sheet, model) * kv_bytes, unit,
                          "the latent has no heads to split: every TP rank keeps all of it")
    heads = kv_heads_per_gpu(sheet, model, tp)
    head_dim = given_config(sheet, model, "head_dim")
    return sheet.step(key, "KV bytes per token on each GPU", "KV_gpu", 2 * layers * heads * head_dim * kv_bytes,
                      unit, "a key and a value per layer for each KV head this GPU holds")


def kv_bytes_per_token_per_gpu_given(sheet: Sheet, model: Record, kv_bytes: float, dtype: str,
                                     tp: sympy.Symbol) -> sympy.Symbol:
    """One GPU's share of a token's KV, from kv-bytes-per-token's figure (the question requires it):
    the KV heads this GPU holds out of all of them; an MLA latent is kept whole on every rank."""
    kv_tok = kv_bytes_per_token_given(sheet, model, kv_bytes, dtype)
    if model.attention == "mla":
        return sheet.step("kv_per_token_gpu", "KV bytes per token on each GPU (MLA)", "KV_gpu", kv_tok, "KiB",
                          "the latent has no heads to split: every TP rank keeps all of it")
    heads = kv_heads_per_gpu(sheet, model, tp)
    H_kv = given_config(sheet, model, "kv_heads")
    return sheet.step("kv_per_token_gpu", "KV bytes per token on each GPU", "KV_gpu", kv_tok * heads / H_kv, "KiB",
                      "the KV heads this GPU holds, out of all of them")


def blocks_for_tokens(sheet: Sheet, tokens: sympy.Symbol, block_size: sympy.Symbol,
                      key: str = "blocks_per_sequence") -> sympy.Symbol:
    """Blocks a sequence of `tokens` occupies: the last one may be partly empty."""
    return sheet.step(key, "Blocks for one sequence", "n_blk", ceil_of(tokens / block_size), "blocks",
                      "whole blocks only: the last block holds the remainder")

