"""Seeded sampling: reproducible, rounded before solving, defaults, overrides and codes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.bank import load_bank, parse_question
from solvers.engine import VariantCode, VariantError, make_variant
from solvers.sampling import draw_values

TOY = parse_question(Path("toy.yaml"), """\
id: toy
title: Toy
group: F
topic: memory
solver: memory.kv_bytes_per_token
prompt: "x"
parameters:
  pick: {choice: [a, b, c], weights: [1, 1, 8], default: a}
  count: {int: [1, 8], default: 2}
  size: {loguniform: [1000, 1000000], round: {sig: 2}, default: 5000}
  chunk: {uniform: [256, 8192], round: {step: 256}, default: 512}
  lengths: {generate: lognormal_ints, args: {n: $count, median: 100, sigma: 1.0}, default: [100, 120]}
answers:
  - {key: a, label: A, rel: 0.02}
""")


def test_same_seed_same_values():
    first = draw_values(TOY, np.random.default_rng(7))
    second = draw_values(TOY, np.random.default_rng(7))
    assert first == second
    assert draw_values(TOY, np.random.default_rng(8)) != first


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_draws_are_rounded_and_in_range(seed):
    values = draw_values(TOY, np.random.default_rng(seed))
    assert values["pick"] in ("a", "b", "c")
    assert 1 <= values["count"] <= 8
    assert 1000 <= values["size"] <= 1_000_000
    assert float(f"{values['size']:.1e}") == values["size"]
    assert values["chunk"] % 256 == 0 and 256 <= values["chunk"] <= 8192
    assert len(values["lengths"]) == values["count"] and all(isinstance(v, int) for v in values["lengths"])


def test_weights_shift_the_draws():
    picks = [draw_values(TOY, np.random.default_rng(s))["pick"] for s in range(400)]
    assert 0.7 < picks.count("c") / len(picks) < 0.9


def test_rounding_keeps_inside_the_range():
    spec = TOY.parameter("chunk")
    assert spec.rounded(8191.0) == 8192
    assert spec.rounded(130.0) == 256


def test_variant_code_round_trip():
    code = VariantCode.parse("kv-bytes-per-token@42+context=4096+kv_dtype=fp8")
    assert code.seed == 42 and code.overrides == (("context", "4096"), ("kv_dtype", "fp8"))
    assert VariantCode.parse(str(code)) == code
    assert VariantCode.parse("kv-bytes-per-token@default").seed is None
    for bad in ["kv-bytes-per-token", "kv@-1", "kv@x", "KV@1", "kv@1+context"]:
        with pytest.raises(VariantError):
            VariantCode.parse(bad)


def test_overrides_apply_and_bad_ones_are_refused(bank, catalog):
    solution = make_variant(bank, catalog, VariantCode.parse("kv-bytes-per-token@default+context=4096"))
    assert solution.param("context").raw == 4096
    assert solution.expected["kv_per_request"] == pytest.approx(327_680 * 4096)
    for bad in ["nope=1", "context=-5", "context=3 ms", "model=gpt-9", "kv_dtype=int3"]:
        with pytest.raises(VariantError):
            make_variant(bank, catalog, VariantCode.parse(f"kv-bytes-per-token@default+{bad}"))
    with pytest.raises(VariantError, match="unknown question"):
        make_variant(bank, catalog, VariantCode.parse("no-such-question@1"))


def test_prompt_shows_the_rounded_values_the_solver_used(variant):
    solution = variant("weight-read-intensity@7")
    tokens = solution.param("prompt")
    assert tokens.shown in solution.prompt
    assert next(g for g in solution.sheet.givens if g.symbol == "T").value == tokens.raw


def test_generated_tables_render_aligned_in_the_prompt():
    from solvers.sampling import format_table

    table = format_table([{"port": "leaf1/p3", "pauses sent": 120000, "pauses received": 0},
                          {"port": "spine2/p7", "pauses sent": 5, "pauses received": 98000}])
    lines = table.splitlines()
    assert lines[0].startswith("| port") and len({len(line) for line in lines}) == 1
    assert "120,000" in table and lines[2].endswith("0 |")


def test_an_override_regenerates_what_depends_on_it(bank, catalog):
    """pause-storm-origin@4 with another window gets a counter table drawn for that window."""
    from solvers.engine import VariantCode, make_variant

    base = make_variant(bank, catalog, VariantCode("pause-storm-origin", 4))
    window = base.param("window").raw
    other = 60 if window != 60 else 30  # a storm that long outlasts the NIC's 8 s: the fixes select has a fix
    moved = make_variant(bank, catalog, VariantCode.parse(f"pause-storm-origin@4+window={other}"))
    assert moved.param("fabric").raw != base.param("fabric").raw
    assert 0 < moved.expected["lost_share"] <= 1  # not the 357% of links lost that a stale table gave
    again = make_variant(bank, catalog, VariantCode.parse(f"pause-storm-origin@4+window={other}"))
    assert again.param("fabric").raw == moved.param("fabric").raw


RANGED = [spec for question in load_bank().questions.values() for spec in question.parameters if spec.ranged]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RANGED), st.floats(0, 1), st.sampled_from([-1, 1]))
def test_a_what_if_step_moves_to_a_value_a_draw_could_give(spec, where, direction):
    """One key press in the what-if explorer: a value rounded as draws are, in range, on the side
    pressed; it stays put only at that end of the range."""
    value = spec.rounded(spec.low + where * (spec.high - spec.low))
    moved = spec.step(value, direction)
    assert spec.low <= moved <= spec.high and spec.rounded(moved) == moved
    if moved == value:
        assert spec.rounded(spec.high if direction > 0 else spec.low) == value
    else:
        assert (moved - value) * direction > 0


def test_a_step_rounding_would_swallow_still_reaches_the_end_of_the_range():
    """spec-decode-tail's batch_low: 1 to 16 at one significant figure. From 10 the next round value
    up is 20, past the top: the step goes to the top, 16, rather than staying at 10."""
    spec = load_bank().get("spec-decode-tail").parameter("batch_low")
    assert (spec.low, spec.high, spec.sig) == (1, 16, 1)
    assert spec.step(10, 1) == 16 and spec.step(16, -1) == 10 and spec.step(16, 1) == 16
