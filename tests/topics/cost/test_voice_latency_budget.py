"""voice-latency-budget: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.engine import VariantError
from solvers.formulas.common import GPU_MEMORY_UTILIZATION
from solvers.interview import stage_run
from tests.by_hand import value_of
from tests.topics.cost.replica_by_hand import ETA_C8, SEEDS, Replica


def clause_by_hand(solution, tp, batch=None):
    """Seconds to the first clause on TP `tp`: the turn's step (its tokens beside the other sessions' decode
    tokens), then k − 1 decode steps; None where the weights leave under 10% of HBM for KV (minimal-kv-pool)
    or the sessions' KV does not fit. fp8 weights: one byte each, at the fp8 peak; the KV stays bf16."""
    model, gpu = value_of(solution, "model"), value_of(solution, "gpu")
    g = Replica(model, gpu, tp)
    if value_of(solution, "dtype") == "fp8":
        g.weights /= 2
        g.fr = tp * ETA_C8 * gpu.fp8_dense_tflops * 1e12
    B = value_of(solution, "batch") if batch is None else batch
    S, T_u, k = value_of(solution, "context"), value_of(solution, "turn"), value_of(solution, "clause")
    usable = gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION
    if g.weights > usable - 0.1 * gpu.hbm_mib * 2**20 or g.weights + g.kv * B * S > usable:
        return None
    return g.step(B - 1 + T_u, (B - 1 + T_u) * S, B * S) + (k - 1) * g.step(B, B * S, B * S)


@pytest.mark.parametrize("seed", range(15))
def test_voice_layouts_match_plain_arithmetic(variant, seed):
    """Every layout's verdict and the derived layout's clause time, by hand."""
    from solvers.formulas.cost import LAYOUTS

    solution = variant(f"voice-latency-budget@{seed}")
    results = solution.sheet.results
    line = results["llm_line"]
    for tp, name in LAYOUTS.items():
        t = clause_by_hand(solution, tp)
        assert results["layouts"][name] == (t is not None and t <= line), name
    making = [tp for tp, name in LAYOUTS.items() if results["layouts"][name]]
    assert results["layouts"]["none of them"] == (not making)
    derived = min(making) if making else 8
    assert results["first_clause"] == pytest.approx(clause_by_hand(solution, derived), rel=1e-9)


def test_voice_sessions_closed_form_against_the_step_model(variant):
    """The linear solves for sessions within the line (every pairing of the steps' two sides) agree with timing
    the clause directly: the count makes the line, one more session breaks it (where the line, not the pool,
    binds), over seeds whose turn's step waits on its math too."""
    from solvers.formulas.cost import LAYOUTS

    checked, sides = 0, set()
    # Seed 75 adds a draw whose turn's step waits on its math (the mixed side binds). The all-math side cannot bind
    # at the drawn contexts (2,000 tokens and up): a session's KV read per step outlasts a token's math there.
    for seed in [*SEEDS, 75]:
        solution = variant(f"voice-latency-budget@{seed}")
        results = solution.sheet.results
        tp = next((tp for tp, name in LAYOUTS.items() if name == results["smallest_layout"]), 8)
        most = int(results["sessions"])
        assert clause_by_hand(solution, tp, most) <= results["llm_line"] * (1 + 1e-12)
        if results["sessions"] < results["sessions_by_pool"]:
            assert clause_by_hand(solution, tp, most + 1) > results["llm_line"]
            checked += 1
        sides |= {key for key in ("sessions_by_line", "sessions_by_compute", "sessions_by_mixed")
                  if results[key] == results["sessions"]}
    assert checked >= 10
    assert sides == {"sessions_by_line", "sessions_by_mixed"}  # each side that can bind binds somewhere


# A 600 ms LLM line (a 1,000 ms budget, a 300 ms endpointer) whose sentence takes 195.6 ms on one B200 in fp8.
SLACK = "voice-latency-budget@default+budget=1000+endpointing=300+gpu=b200+dtype=fp8"


@pytest.mark.parametrize("code", [f"voice-latency-budget@{seed}" for seed in range(40)]
                         + [SLACK, "voice-latency-budget@default+endpointing=300"])
def test_voice_largest_line_is_the_first_of_the_largest_in_the_budget_order(variant, code):
    """The label's rule by hand: every line at what it takes (the LLM at its first clause on the derived layout,
    not the line the others leave it), a tie to the first in the answer's list (a wait before any model, so the
    regime's tie agrees); whether it is a model follows from it."""
    solution = variant(code)
    us = {name: round(1e6 * value_of(solution, name)) for name in ("endpointing", "network", "asr", "tts")}
    lines = {"endpointing": us["endpointing"], "network": us["network"], "ASR": us["asr"],
             "LLM": 1e6 * solution.sheet.results["first_clause"], "TTS": us["tts"]}
    assert list(lines) == list(solution.question.answer("largest_line").choices)
    largest = next(name for name, t in lines.items() if t == max(lines.values()))
    assert solution.expected["largest_line"] == largest
    assert solution.expected["regime"] == ("a-model" if largest in ("ASR", "LLM", "TTS") else "not-a-model")


def test_voice_largest_line_counts_the_llm_at_its_clause_not_its_slack(variant):
    """The LLM's 600 ms line is the largest budgeted, but its sentence takes 195.6 ms on one B200: the 300 ms
    endpointer is the largest line."""
    solution = variant(SLACK)
    results = solution.sheet.results
    assert results["llm_line"] == pytest.approx(0.600)
    assert results["first_clause"] == pytest.approx(12 * (91.52e9 / 6.4e12 + 0.002), rel=1e-3)
    assert (solution.expected["largest_line"], solution.expected["regime"]) == ("endpointing", "not-a-model")


def test_voice_push_turns_the_llm_into_the_largest_line(variant, catalog):
    """The push from a wait-bound budget is a semantic turn detector at 150 ms (the reader: the old push moved a
    60-250 ms endpointer to 60 ms and an edge region): at @default the LLM's line grows from 200 to 550 ms, TP 4
    (226.6 ms) now makes it, and its sentence outlasts the 150 ms detector."""
    solution = variant("voice-latency-budget@default")
    pushes = [stage_run(solution, catalog, i) for i, stage in enumerate(solution.question.stages) if stage.push]
    asked = [run for run in pushes if run is not None]
    assert len(asked) == 1 and asked[0].moved == ("endpointing",)
    assert "turn detector" in asked[0].say and "Let's change" not in asked[0].say
    expected = asked[0].solution.expected
    assert (expected["regime"], expected["largest_line"], expected["smallest_layout"]) == ("a-model", "LLM", "TP 4")
    assert expected["llm_line"] == pytest.approx(0.550)


def test_voice_draws_are_shipping_budgets_and_both_regimes_occur(variant):
    """The reader: a fixed 300 ms budget and a 60-250 ms silence endpointer are no shipping agent's. Budgets draw
    600-1,200 ms and silence endpointing 300-600 ms (LiveKit and OpenAI Realtime 500 ms, Pipecat 0.8 s); with
    first sentences of 10-30 tokens, long contexts and a 405B a model is still the largest line in >= 10% of
    draws."""
    regimes = []
    for seed in range(200):
        solution = variant(f"voice-latency-budget@{seed}")
        assert 0.6 <= value_of(solution, "budget") <= 1.2
        assert 0.3 <= value_of(solution, "endpointing") <= 0.6
        assert 10 <= value_of(solution, "clause") <= 30
        regimes.append(solution.expected["regime"])
    assert min(regimes.count("a-model"), regimes.count("not-a-model")) >= 20


def test_voice_turn_detector_push_crosses(variant, catalog):
    """The turn detector's 150 ms crosses a wait-bound draw to a model-bound one in >= 90% of them (the rest hand
    over to the engine's push)."""
    crossed = asked = 0
    for seed in range(120):
        solution = variant(f"voice-latency-budget@{seed}")
        if solution.expected["regime"] != "not-a-model":
            continue
        run = next(r for i, st in enumerate(solution.question.stages) if st.push and st.when == "not-a-model"
                   if (r := stage_run(solution, catalog, i)) is not None)
        asked += 1
        crossed += run.moved == ("endpointing",) and run.solution.expected["regime"] == "a-model"
    assert crossed >= 0.9 * asked


def test_voice_regime_is_never_a_hairline(variant, catalog):
    """The reader's @12012: an 86 ms endpointer against a 92.42 ms clause, pushed to 93 ms, flipped the regime
    on 0.6 ms. A model line within 15% of the longest wait is refused, in draws and in pushes alike."""
    for seed in range(60):
        solution = variant(f"voice-latency-budget@{seed}")
        for run in [solution] + [r.solution for i, st in enumerate(solution.question.stages) if st.push
                                 if (r := stage_run(solution, catalog, i)) is not None]:
            results = run.sheet.results
            assert abs(results["largest_model"] / results["largest_wait"] - 1) >= 0.15
    with pytest.raises(VariantError, match="step model's own error"):
        variant("voice-latency-budget@default+endpointing=300+tts=290")  # TTS 3% under the wait: refused


def test_voice_layout_rejections_name_the_rule_that_binds(variant):
    """@default, TP 2 on H100: 70.5 GB of weights a GPU leaves less than the card's minimal KV pool, though the
    16 sessions' KV would fit; the reason says so instead of "the weights and the sessions' KV do not fit"."""
    why = variant("voice-latency-budget@default").sheet.reasons["layouts"]["TP 2"]
    assert "minimal KV pool" in why and "do not fit" not in why



def test_voice_all_reduce_is_the_nccl_ring(variant):
    """Each token's all-reduce bytes follow NCCL's ring bus bandwidth, 2(n−1)/n of the message over each GPU's
    link (nccl-tests PERFORMANCE.md): at TP 8 a Llama-3-70B token moves 2·80·(14/8)·8,192·2 B = 4.59 MB over
    450 GB/s of NVLink each way, 10.2 us, beside 10 us of latency per call."""
    results = variant("voice-latency-budget@default").sheet.results
    assert results["allreduce_per_token"] == pytest.approx(2 * 80 * (2 * 7 / 8) * 8192 * 2 / 450e9)
    assert results["allreduce_latency_per_step"] == pytest.approx(2 * 80 * 10e-6)
