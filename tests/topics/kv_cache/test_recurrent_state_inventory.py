"""recurrent-state-inventory: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError
from tests.by_hand import DTYPE_BYTES, MiB, param_values

_STATE_MODELS = ["nemotron-h-8b", "nemotron-h-47b", "nemotron-nano-9b-v2", "nemotron-nano-12b-v2",
                 "nemotron-3-nano-30b"]


def _mamba_layer_bytes(model, ssm_dtype: str) -> int:
    """One Mamba-2 layer's state as vLLM allocates it: heads x head_dim x state of SSM state, and (width - 1)
    inputs of heads x head_dim + 2 x groups x state conv channels in bf16."""
    ssm = model.ssm_heads * model.ssm_head_dim * model.ssm_state * DTYPE_BYTES[ssm_dtype]
    conv = (model.conv_kernel - 1) * (model.ssm_heads * model.ssm_head_dim + 2 * model.ssm_groups * model.ssm_state)
    return ssm + 2 * conv


def test_mamba2_state_shapes_match_published_figures(variant):
    """Nemotron-H-8B: 128 heads x 64 x 128 in fp32 is 4 MiB per layer; the conv reads 128·64 + 2·8·128 = 10,240
    channels."""
    results = variant("recurrent-state-inventory@default").sheet.results
    assert results["ssm_layer"] == 4 * MiB
    assert results["conv_layer"] == 3 * 10_240 * 2


@pytest.mark.parametrize("ssm_dtype, kv_dtype, block", [("bf16", "bf16", 528), ("fp32", "bf16", 1040),
                                                        ("fp32", "fp8", 2080)])
def test_vllm_block_for_nemotron_h_8b(variant, ssm_dtype, kv_dtype, block):
    """vLLM's rule (platforms/interface.py, outside mamba_cache_mode all): the least multiple of 16 tokens whose
    one-layer page (4 KiB a token in bf16) holds a 2,158,592 B bf16 layer state is 528; fp32 nearly doubles the
    state (1,040), fp8 KV then halves the page a token (2,080)."""
    solution = variant(f"recurrent-state-inventory@default+ssm_dtype={ssm_dtype}+kv_dtype={kv_dtype}")
    assert solution.expected["block_size"] == block


@pytest.mark.parametrize("seed", range(40))
def test_block_and_retention_by_enumeration(variant, catalog, seed):
    """The engine's choices rebuilt from the config: the least 16-token block whose one-layer page holds a
    Mamba layer's state, the block boundaries within the context, and every r-th one plus the newest kept,
    each a padded page in every Mamba layer."""
    solution = variant(f"recurrent-state-inventory@{seed}")
    p = param_values(solution)
    model = p["model"]
    per_token = 2 * model.kv_heads * model.head_dim * DTYPE_BYTES[p["kv_dtype"]]  # one attention layer
    state = _mamba_layer_bytes(model, p["ssm_dtype"])
    block = next(b for b in range(16, 100_000, 16) if b * per_token >= state)
    boundaries = list(range(block, int(p["context"]) + 1, block))
    kept = {t for t in boundaries if (t // block) % p["retain"] == 0} | {boundaries[-1]}
    assert solution.expected["block_size"] == block
    assert solution.expected["reusable"] == boundaries[-1] > 0
    assert solution.expected["snapshot_bytes"] == len(kept) * model.mamba_layers * block * per_token
    assert solution.expected["state_per_request"] == model.mamba_layers * state
    kv = model.attention_layers * per_token * p["context"]
    assert solution.expected["kv_per_request"] == kv
    assert solution.expected["regime"] == ("state-dominated" if model.mamba_layers * state > kv else "kv-dominated")


def test_the_architecture_is_drawn(variant):
    """The review's point: the layout was fixed. Over 200 draws every hybrid appears, and the recurrent state
    takes more than the two values one layout's two SSM dtypes give."""
    draws = [variant(f"recurrent-state-inventory@{seed}") for seed in range(200)]
    assert {d.param("model").raw for d in draws} == set(_STATE_MODELS)
    assert len({d.expected["state_per_request"] for d in draws}) >= 10
    assert len({d.expected["block_size"] for d in draws}) >= 10


def test_kv_over_every_mixer_layer_is_diagnosed(variant):
    """Counting KV over all 28 Mamba and attention layers instead of the 4 attention ones is x7."""
    solution = variant("recurrent-state-inventory@default")
    kv = solution.expected["kv_per_request"]
    grade = solution.grade_one("kv_per_request", f"{7 * kv / MiB} MiB")
    assert grade.slip == "KV counted over every Mamba and attention layer, not the attention layers alone"


def test_dense_retention_is_diagnosed(variant):
    """A state at every one of the 15 blocks instead of every 8th and the newest (2) is x7.5."""
    solution = variant("recurrent-state-inventory@default")
    grade = solution.grade_one("snapshot_bytes", f"{7.5 * solution.expected['snapshot_bytes'] / MiB} MiB")
    assert grade.slip == "a state kept at every block, not every r blocks"


def test_a_context_under_two_blocks_is_refused(variant):
    """Nemotron-H-47B's fp32 state beside fp8 KV needs 8,256-token blocks: a 12K request holds one block, and
    the draw is refused rather than grade a cache hit of one block or none."""
    with pytest.raises(VariantError, match="under two"):
        variant("recurrent-state-inventory@default+model=nemotron-h-47b+kv_dtype=fp8+context=12288")


def test_recurrent_push_moves_with_the_variant(variant, catalog):
    """The review's point: the push was always to 2,048 tokens and graded a zero. Now it moves the context across
    each variant's own crossover (or, where the range cannot, another figure), to many different values, and
    grades no zero."""
    from solvers.interview import stage_run

    crossed, moved_to = 0, set()
    for seed in range(40):
        solution = variant(f"recurrent-state-inventory@{seed}")
        run = stage_run(solution, catalog, len(solution.question.stages) - 1)
        assert run is not None, seed
        crossed += run.regime != solution.regime_name
        moved_to.add(run.solution.param("context").raw)
        assert all(float(run.solution.expected[key]) > 0 for key in ("kv_per_request", "reusable")), seed
    assert crossed >= 36 and len(moved_to) >= 10


def test_the_8b_is_the_128k_model(variant):
    """Reader (read7): 16K and 33K contexts were drawn on 'Nemotron-H-8B', whose config cited is the Base-8K, an
    8K model. The name is now the Reasoning-128K model (same layer shapes, 128K context), and no draw runs past
    the named model's window."""
    assert param_values(variant("recurrent-state-inventory@default"))["model"].name == "Nemotron-H-8B-Reasoning-128K"
    for seed in range(60):
        p = param_values(variant(f"recurrent-state-inventory@{seed}"))
        assert "Reasoning-128K" in p["model"].name or "Nano" in p["model"].name
        assert p["context"] <= p["model"].max_context


def test_push_gives_a_reason_and_names_its_asks(variant, catalog):
    """Reader (read7): the push was the engine's template ("Let's change one thing ... What changes"). It now
    gives the interviewer's reason for the move and asks its three answers by name."""
    from solvers.interview import stage_run

    for seed in range(10):
        run = stage_run(variant(f"recurrent-state-inventory@{seed}"), catalog, 3)
        assert run is not None
        assert "Let's change one thing" not in run.say and "What changes" not in run.say, run.say
        assert "come back from cache" in run.say


def test_no_select_option_is_constant(variant):
    """Reader (read7): 'a state kept at every block would cost more than its KV cache' held in every draw (its
    ratio is the Mamba-to-attention layer ratio). Its place goes to 'a prompt a quarter this long would get no
    hit', which holds where the context is at most four blocks, and the dense cost moves to a why."""
    option = "A prompt a quarter this long would get no hit from the cache"
    truths = set()
    for seed in range(200):
        solution = variant(f"recurrent-state-inventory@{seed}")
        judged = solution.sheet.results["snapshot_policy"]
        assert "A state kept at every block would cost more than its KV cache" not in judged
        truths.add(judged[option])
        assert judged[option] == (solution.param("context").raw <= 4 * solution.expected["block_size"])
    assert truths == {True, False}


def test_recurrent_state_stage_three_restates_no_earlier_key(bank):
    """Reader (read12, @11 and @42): stage 3 asked state- or KV-dominated right after the opening's crossover
    (7,989) and the context (100,000) were shown, and its option "at twice this context its KV would outweigh its
    state" read the same comparison again. Stage 3 now asks the prefix-reuse judgement alone; the regime is the
    push's, and the new option asks about the retention knob."""
    question = bank.get("recurrent-state-inventory")
    assert "regime" not in question.stages[2].ask and "regime" in question.stages[3].ask
    pool = next(a for a in question.answers if a.key == "snapshot_policy").pool
    assert not any("twice this context" in option for option in pool)
    assert any("retention interval" in option for option in pool)


def test_recurrent_state_doubling_retention_is_judged_on_the_fewer_states(variant):
    """Default: 15 full blocks of 1,040 tokens, a state every 8 keeps 2 (195 MiB); every 16 keeps 1 (97.5 MiB),
    under the 256 MiB of KV. The 47B at retain 2 keeps 2 pages a layer (731 MiB); at 4, 1 (366 MiB), over its 163."""
    option = "Doubling the retention interval would leave its kept states under its KV cache"
    assert variant("recurrent-state-inventory@default").sheet.judged("snapshot_policy")[option] is True
    big = variant("recurrent-state-inventory@default+model=nemotron-h-47b+ssm_dtype=bf16+kv_dtype=fp8+context=16700"
                  "+retain=2")
    assert big.sheet.judged("snapshot_policy")[option] is False


def test_recurrent_state_push_moves_to_a_round_context(variant, catalog):
    """Reader (read12, @11): the push said "4,496 tokens" (4,500 rounded to a step of 16 the model never needs).
    Contexts round to two figures now: the push says 4,500."""
    from solvers.interview import stage_run

    pushed = stage_run(variant("recurrent-state-inventory@11"), catalog, 3)
    assert pushed is not None and pushed.solution.param("context").raw == 4500
    assert "4,500 tokens" in pushed.say


def test_recurrent_state_regime_is_not_asked_within_the_crossovers_tolerance(variant):
    """The crossover is graded to 2%: a push onto 6,200 tokens (0.55% under the default's 6,234) would ask a side a
    right-within-tolerance crossover cannot call, so the regime is refused there (validate found @136's push)."""
    refusals = variant("recurrent-state-inventory@default+context=6200").sheet.refusals_if_asked
    assert [keys for keys, _ in refusals] == [("regime",)]
    assert not variant("recurrent-state-inventory@default").sheet.refusals_if_asked
