"""Realism: declared constraints and bank rules refuse draws no real system has."""
from __future__ import annotations

from pathlib import Path

import pytest

from solvers.bank import QuestionError, load_bank, parse_question
from solvers.engine import VariantCode, VariantError, make_variant
from solvers.realism import ConstraintError, broken, declared
from solvers.validate import constraint_rates
from tests.by_hand import param_values

BANK = load_bank()
SOURCE = Path("questions/F/kv-bytes-per-token.yaml").read_text()


def test_a_declared_constraint_reads_parameters_and_fields():
    rule = declared("fits", "context * 2 <= model.max_context and min(tp, 8) >= 2", {"context", "model", "tp"})
    assert rule.check({"context": 4096, "model": {"max_context": 8192}, "tp": 4}) is None
    assert "fits" in rule.check({"context": 8192, "model": {"max_context": 8192}, "tp": 4})


def test_a_constraint_takes_a_power_of_two_apart():
    """fp8-scale-formats' draws turn on where two scale rules disagree: the binade of an amax, log2."""
    rule = declared("binade", "floor(log2(amax)) == 8", {"amax"})
    assert rule.check({"amax": 256.0}) is None and rule.check({"amax": 511.0}) is None
    assert "binade" in rule.check({"amax": 255.9})


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "context.__class__", "open('x')",
                                  "[c for c in context]", "lambda: 1", "nowhere > 1", "context >"])
def test_a_constraint_is_data_never_code(text):
    with pytest.raises(ConstraintError):
        declared("bad", text, {"context"})


def test_a_bad_constraint_names_its_file_field_and_line():
    text = SOURCE.replace("\nanswers:", "\nconstraints:\n  short: \"open('x')\"\nanswers:", 1)
    with pytest.raises(QuestionError, match=r"kv-bytes-per-token.yaml:\d+: constraints.short: "):
        parse_question(Path("kv-bytes-per-token.yaml"), text)
    off = SOURCE.replace("\nanswers:", "\nconstraints: {my-own-rule: false}\nanswers:", 1)
    with pytest.raises(QuestionError, match="only a bank rule can be turned off"):
        parse_question(Path("kv-bytes-per-token.yaml"), off)


def test_an_override_past_the_models_context_is_refused_with_the_reason(bank, catalog):
    with pytest.raises(VariantError, match="context-within-model: Qwen2.5-72B serves at most 32,768 tokens"):
        make_variant(bank, catalog, VariantCode.parse("kv-bytes-per-token@default+model=qwen2.5-72b+context=65536"))


def test_a_prompt_and_reply_past_the_models_context_are_refused(bank, catalog):
    """An engine refuses a request whose prompt and reply pass the model's context (vLLM's max_model_len),
    though the prompt alone fits: a bank rule wherever a model, a prompt and a reply length are drawn."""
    with pytest.raises(VariantError, match="reply-within-model: Llama-3.1-70B serves at most 131,072 tokens"):
        make_variant(bank, catalog, VariantCode.parse("cold-prefill-pools@default+prompt=129024+reply=3000"))
    assert "reply-within-model" in constraint_rates(bank.get("cold-prefill-pools"), catalog, draws=200)


def test_weights_that_leave_no_kv_pool_are_redrawn(bank, catalog):
    rates = constraint_rates(bank.get("kv-bytes-per-token"), catalog, draws=200)
    assert rates["weights-fit"] > 0.05 and "context-within-model" in rates
    with pytest.raises(VariantError, match="weights-fit: Llama-3.1-405B in bf16 over 1 GPU"):
        make_variant(bank, catalog, VariantCode.parse("kv-bytes-per-token@default+model=llama-3.1-405b+tp=1"))


@pytest.mark.parametrize("qid", sorted(q.id for q in BANK.questions.values() if q.constraints))
def test_no_variant_breaks_a_rule_of_its_question(bank, catalog, qid):
    question = bank.get(qid)
    for seed in [None, *range(100)]:
        solution = make_variant(bank, catalog, VariantCode(qid, seed))
        assert broken(question.constraints, param_values(solution)) is None


def test_a_ttft_target_shorter_than_the_prompts_own_prefill_is_refused(bank, catalog):
    code = "coupled-slo-admission@default+gpu=mi300x+tp=8+ttft=0.25+prompt=39000"
    with pytest.raises(VariantError, match="slo-scales-with-work: a 0.25 s TTFT target for a 39,000-token prompt, "
                                           "which takes 0.53 s"):
        make_variant(bank, catalog, VariantCode.parse(code))


def test_a_small_model_is_not_split_wider_than_anyone_serves_it(bank, catalog):
    with pytest.raises(VariantError, match="tp-suits-model: TP 8 leaves 2.0 GB of Llama-3.1-8B per H100 SXM"):
        make_variant(bank, catalog, VariantCode.parse("preemption-policies@default+model=llama-3-8b+tp=8"
                                                      "+weight_dtype=bf16+gpu=h100-sxm"))


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_a_constraints_kv_bytes_are_the_solvers_for_every_model(catalog, dtype):
    """kv_bytes(model, dtype) in a constraint is the figure the solvers' KV model gives, GQA and MLA alike."""
    from solvers.derivation import Sheet
    from solvers.dtypes import DTYPE_BYTES
    from solvers.formulas.kvcache import kv_bytes_per_token
    from solvers.realism import kv_bytes

    for name, model in catalog.collections["models"].items():
        sheet = Sheet()
        solved = sheet.value(kv_bytes_per_token(sheet, model, sheet.given("b", DTYPE_BYTES[dtype]), unit="B"))
        assert kv_bytes(model, dtype) == solved, name


def test_a_constraint_names_the_usable_share_and_the_models_bytes():
    """usable_hbm is the card's share, weight_bytes the model's in a dtype: a constraint types neither."""
    from solvers.conventions import convention_value

    check = declared("fits", "weight_bytes(model, 'fp8') <= usable_hbm * hbm(gpu)", {"model", "gpu"})
    gpu = {"hbm_gb": 80, "hbm_mib": 81559}
    fits = 0.999 * convention_value("usable-hbm") * 81559 * 2**20 / 1e9
    assert check.check({"model": {"params_b": fits}, "gpu": gpu}) is None
    assert check.check({"model": {"params_b": fits * 1.002}, "gpu": gpu}) is not None
    with pytest.raises(ConstraintError, match="names no parameter"):
        declared("bad", "usable_share * 2 > 1", {"model"})
