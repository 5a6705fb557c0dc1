"""The shared KV-sizing helper against published figures and vLLM's page-size formula."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from solvers.data import Record
from solvers.derivation import Sheet
from solvers.formulas.kvcache import blocks_for_tokens, kv_bytes_per_token, kv_bytes_per_token_per_gpu


def per_token(model, kv_bytes=2):
    sheet = Sheet()
    return sheet.value(kv_bytes_per_token(sheet, model, sheet.given("b", kv_bytes, "B")))


def per_gpu(model, tp, kv_bytes=2):
    sheet = Sheet()
    b, n = sheet.given("b", kv_bytes, "B"), sheet.given("n", tp)
    return sheet.value(kv_bytes_per_token_per_gpu(sheet, model, b, n))


@pytest.mark.parametrize("model_id, expected", [
    ("llama-3-8b", 131_072), ("llama-3-70b", 327_680), ("llama-3.1-405b", 516_096),
    ("mixtral-8x7b", 131_072), ("qwen2.5-72b", 327_680), ("deepseek-v3", 70_272),
])
def test_bytes_per_token_match_reference_data(catalog, model_id, expected):
    assert per_token(catalog.get("models", model_id)) == expected


def test_fp8_halves_it(catalog):
    assert per_token(catalog.get("models", "llama-3-70b"), kv_bytes=1) == 163_840


def vllm_page_size(block_size, num_kv_heads, head_size, dtype_bytes):
    """vLLM's FullAttentionSpec.page_size_bytes for one layer (v1 kv_cache_interface.py)."""
    return 2 * block_size * num_kv_heads * head_size * dtype_bytes


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16, 32])
def test_per_gpu_bytes_follow_vllm_page_size_with_replication(catalog, tp):
    model = catalog.get("models", "llama-3-70b")
    heads_per_gpu = max(1, model.kv_heads // tp)  # vLLM: get_num_kv_heads
    page = vllm_page_size(16, heads_per_gpu, model.head_dim, 2)
    assert per_gpu(model, tp) * 16 == page * model.layers


def test_kv_per_gpu_stops_falling_past_the_kv_heads(catalog):
    model = catalog.get("models", "llama-3-70b")
    assert per_gpu(model, 8) == per_gpu(model, 16) == per_gpu(model, 64) == 327_680 / 8


def test_mla_latent_is_whole_on_every_rank(catalog):
    model = catalog.get("models", "deepseek-v3")
    assert per_gpu(model, 1) == per_gpu(model, 8) == 70_272
    # vLLM's MLA page: one "head" of kv_lora_rank + rope dim, no factor 2.
    assert 16 * per_gpu(model, 8) == 16 * 576 * 2 * model.layers


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from([1, 8, 16, 32, 128]))
def test_blocks_cover_the_sequence(tokens, block):
    sheet = Sheet()
    blocks = sheet.value(blocks_for_tokens(sheet, sheet.given("T", tokens), sheet.given("k", block)))
    assert blocks * block >= tokens > (blocks - 1) * block


def test_same_fact_may_be_stated_twice_but_not_two_values():
    sheet = Sheet()
    model = Record(layers=2, kv_heads=2, head_dim=4, attention="gqa")
    b, n = sheet.given("b", 2, "B"), sheet.given("n", 1)
    kv_bytes_per_token(sheet, model, b)
    kv_bytes_per_token_per_gpu(sheet, model, b, n)  # declares L, H_kv, d_h again: fine
    with pytest.raises(ValueError):
        sheet.given("L", 3)


def test_a_prerequisite_stands_as_one_given_with_its_source(bank, catalog):
    from solvers.engine import VariantCode, make_variant

    solution = make_variant(bank, catalog, VariantCode("paged-block-size", None))
    assert "kv-bytes-per-token" in solution.question.requires
    given = next(g for g in solution.sheet.givens if g.symbol == "KV_tok")
    assert given.label.endswith("(from kv-bytes-per-token)") and given.shown == "320 KiB"
    assert not any(step.symbol == "KV_tok" for step in solution.sheet.steps)  # not derived again


def test_taking_a_result_without_requiring_its_question_is_an_error(bank, catalog):
    import dataclasses

    from solvers.bank import Bank
    from solvers.engine import VariantCode, make_variant

    question = dataclasses.replace(bank.get("paged-block-size"), requires=())
    with pytest.raises(RuntimeError, match="takes results of kv-bytes-per-token without declaring requires"):
        make_variant(Bank({question.id: question}), catalog, VariantCode(question.id, None))


def test_a_parameter_given_takes_its_unit_and_label_from_the_question_file(bank, catalog):
    from solvers.engine import VariantCode, make_variant

    solution = make_variant(bank, catalog, VariantCode("paged-block-size", 3))
    givens = {g.symbol: g for g in solution.sheet.givens}
    for symbol, name in (("B", "block_size"), ("n", "batch"), ("L_avg", "mean_length"), ("P", "prefix")):
        spec, param = solution.question.parameter(name), solution.param(name)
        assert (givens[symbol].unit, givens[symbol].label, givens[symbol].shown) == (spec.unit, spec.label, param.shown)
