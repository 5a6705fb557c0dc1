"""model-runner-v2: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.by_hand import param_values

MRV2 = "model-runner-v2"


REMOVE = "turning off what keeps it on the V1 runner"
CPU_AS_V2 = "a host CPU twice as fast, shortening the step as far as Model Runner V2 would"


def test_model_runner_v2_default(variant):
    """Llama-3.1-8B fp8 on one B200, 8 sequences at 512 tokens: MRV2 would decode 5,976 tokens/s, 1.33x the old
    runner's (the tokens/s pinned in the question file), but a logits-processor plugin keeps it on the V1 runner,
    so the gain realised is none."""
    assert variant(f"{MRV2}@default").sheet.results["realized"] == 1


def test_model_runner_v2_opening_says_kv_dtype_and_a_recall_asks_for_triton(bank, variant):
    """The 1.339 ms reads KV in bf16 (fp8 KV gives 1.297 ms, past 3%): the opening says 'fp8 weights, bf16 KV'.
    Why V2 needs Triton, and the fallback list, are recalled (self-graded) before the select on the runner."""
    solution = variant(f"{MRV2}@default")
    assert "(fp8 weights, bf16 KV)" in solution.prompt
    fp8_kv = (8.03e9 + 8 * 512 * 131_072 / 2) / (0.8 * 8e12)
    assert fp8_kv < solution.sheet.results["gpu_step"] / 1.03
    stages = bank.get(MRV2).stages
    recall = next(i for i, stage in enumerate(stages) if stage.kind == "recall")
    select = next(i for i, stage in enumerate(stages) if "fallback" in stage.ask)
    assert set(stages[recall].ask) == {"why_triton", "fallback_list", "cpu_bound_signs"} and recall < select


def test_model_runner_v2_is_four_turns_asking_every_teaser_point(bank):
    """Two to four turns (the pushes for either side are one), the recall before the select it feeds, and the
    teaser's points each graded: the regime, what V2 delivers once the CPU time is saved (its tokens/s),
    persistent slots and GPU input preparation (the recall's checklist), the silent fallbacks (recalled, then
    judged)."""
    question = bank.get(MRV2)
    stages = question.stages
    turns = [i for i, stage in enumerate(stages) if not (stage.when and i and stages[i - 1].when)]
    assert 2 <= len(turns) <= 4
    asked = {key for stage in stages for key in stage.ask}
    assert {"regime", "throughput_new", "why_triton", "fallback_list", "fallback"} <= asked
    checklist = " ".join(question.answer("why_triton").points)
    assert "persistent row" in checklist and "Triton kernels" in checklist
    assert [stage.when for stage in stages if stage.push] == ["gpu-bound", "cpu-bound"]


def test_model_runner_v2_push_crosses_in_its_own_words_where_its_move_runs(variant, catalog):
    """Each side has its declared move (down to 8B in fp8 on one B200 from GPU-bound, up to 70B on two from
    CPU-bound), said in the interviewer's words; where it does not cross, the engine's push stands in with
    its own."""
    from solvers.interview import stage_run
    seen = set()
    for seed in range(24):
        solution = variant(f"{MRV2}@{seed}")
        side = solution.sheet.regime.name
        pushes = [i for i, stage in enumerate(solution.question.stages) if stage.push]
        runs = [run for run in (stage_run(solution, catalog, i) for i in pushes) if run is not None]
        assert len(runs) <= 1
        for run in runs:
            assert run.stage.when == side and run.regime != side
            declared = {name: value for name, value in run.stage.set if str(solution.param(name).raw) != value}
            ours = "the service moves to" in run.say
            assert ours == ({name: str(run.solution.param(name).raw) for name in run.moved} == declared)
            seen.add((side, ours))
    assert {("gpu-bound", True), ("cpu-bound", True)} <= seen and any(not ours for _, ours in seen)


def _gap_at(solution, batch: float) -> float:
    """The variant's GPU step re-timed at another batch (the solver's own GPU side, on a fresh sheet), less
    the old runner's CPU time there: negative where the CPU binds."""
    from types import SimpleNamespace

    from solvers.derivation import Sheet
    from solvers.topics.runner.model_runner_v2 import gpu_side
    values = param_values(solution) | {"batch": batch}
    sheet = Sheet(parameters={spec.name: (values[spec.name], spec.unit, spec.label or spec.name)
                              for spec in solution.question.parameters if isinstance(values[spec.name], (int, float))})
    gpu = sheet.value(gpu_side(sheet, SimpleNamespace(**values)).time)
    return gpu - (values["sched"] + values["prep"] + values["per_req"] * batch)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


MEET = re.compile(r"meet near a batch of ([\d,.]+) at this context: (below|above) it the CPU binds")


BETWEEN = re.compile(r"the CPU binds only between batches of ([\d,.]+) and ([\d,.]+)")


EVERY = re.compile(r"the (CPU|GPU) binds at every batch from 1 to ([\d,]+)")


@pytest.mark.parametrize("code", [f"{MRV2}@{seed}" for seed in range(20)]
                         + [f"{MRV2}@7303+model=llama-3-70b+tp=2", f"{MRV2}@7202+model=llama-3-70b+tp=2",
                            f"{MRV2}@default+model=llama-3-70b+tp=2", f"{MRV2}@default+batch=64+context=256"])
def test_model_runner_v2_crossing_batch_is_where_the_step_meets_the_cpu(variant, code):
    """The regime names the batch where, at this context, the GPU's step (reads or math, whichever is longer,
    plus the all-reduces) equals the old runner's CPU time: re-timing the step just either side of it finds
    the sides swap as stated; where it names none, the stated side binds from a batch of 1 to the cap."""
    solution = variant(code)
    summary = solution.sheet.regime.summary
    # @7303's push meets the CPU at 162 only with its all-reduces in the step (the reads alone said 62.8).
    assert (MEET.search(summary) is not None) or code != f"{MRV2}@7303+model=llama-3-70b+tp=2"
    if meet := MEET.search(summary):
        at = _number(meet.group(1))
        below, above = _gap_at(solution, at * 0.99), _gap_at(solution, at * 1.01)
        assert (below < 0 < above) if meet.group(2) == "below" else (above < 0 < below)
    elif between := BETWEEN.search(summary):
        low, high = _number(between.group(1)), _number(between.group(2))
        assert _gap_at(solution, low * 0.99) > 0 > _gap_at(solution, (low + high) / 2)
        assert _gap_at(solution, high * 1.01) > 0
    else:
        every = EVERY.search(summary)
        assert every is not None, summary
        cap = _number(every.group(2))
        cap_seqs = solution.param("max_num_seqs").raw
        assert cap <= cap_seqs
        for batch in np.geomspace(1, cap, 9):
            assert (_gap_at(solution, batch) < 0) == (every.group(1) == "CPU")


@pytest.mark.parametrize("features, on_v1", [
    ("prefix caching and EAGLE-3 speculative decoding", False),
    ("prefix caching and ngram speculative decoding", True),
    ("structured outputs and ngram speculative decoding", True),
    ("prefix caching and structured outputs", False),
    ("prefix caching and an image built without Triton", True),
    ("ngram speculative decoding and a custom logits processor", True),
])
def test_runner_choice_follows_the_unsupported_list(bank, catalog, features, on_v1):
    """vllm/config/vllm.py: ngram drafting, custom logits processors and a missing Triton
    send a dense model to the V1 runner when VLLM_USE_V2_MODEL_RUNNER is unset; EAGLE-3 and structured
    outputs do not. The runner is not asked (the recall's list would give it away): it shows in the step
    the levers are judged against, and in whether turning a feature off is a lever at all."""
    from solvers.engine import solve_values
    from solvers.sampling import default_values
    question = bank.get(MRV2)
    _, sheet = solve_values(question, default_values(question) | {"features": features}, catalog)
    assert (sheet.results["fallback"][REMOVE] is not None) == on_v1
    assert sheet.results["realized"] == (1 if on_v1 else sheet.results["speedup"])
    assert "runner" not in {answer.key for answer in question.answers}


def test_model_runner_v2_pins_the_release_its_fallbacks_belong_to(bank, variant):
    """The logits-processor fallback is v0.28.0's (vllm/config/vllm.py lists custom logits processors, passed
    in or installed as a plugin); PR #56497 took them off that list afterwards, so the stage that asks for the
    levers names the release, and MRV2's CPU time is a given of a stage, not a hidden constant."""
    question = bank.get(MRV2)
    runner = next(stage for stage in question.stages if "fallback" in stage.ask)
    assert "vLLM v0.28.0" in runner.say and any("{v2_cpu}" in stage.say for stage in question.stages)
    assert any("v0.28.0" in ref and "custom logits processors" in ref for ref in question.references)
    assert any("#56497" in ref for ref in question.references)


@pytest.mark.parametrize("seed", range(30))
def test_model_runner_v2_properties(variant, seed):
    """Each lever is judged by re-timing the step of the runner vLLM builds with that lever pulled: the
    step is the slower of the GPU's work and the CPU's, whichever runner runs."""
    solution = variant(f"{MRV2}@{seed}")
    r = solution.sheet.results
    cpu_new = r["cpu_new"]
    old, new = max(r["gpu_step"], r["cpu_old"]), max(r["gpu_step"], cpu_new)
    assert r["speedup"] == pytest.approx(old / new)
    assert (r["regime"] == "cpu-bound") == (r["speedup"] > 1)
    # The graded figure is V2's tokens/s: the batch over V2's step, the old runner's exactly where GPU-bound.
    batch = solution.param("batch").raw
    assert r["throughput_new"] == pytest.approx(batch / new)
    assert (r["throughput_new"] == pytest.approx(batch / old)) == (r["regime"] == "gpu-bound")
    slips = {slip.label: slip.factor for slip in solution.sheet.slips["throughput_new"]}
    assert slips["CPU and GPU times added (no async overlap)"] == pytest.approx(new / (r["gpu_step"] + cpu_new))
    assert ("the old runner's step kept (its CPU time still in it)" in slips) == (r["regime"] == "cpu-bound")
    levers = r["fallback"]
    on_v1 = levers[REMOVE] is not None  # the lever is listed only where the V1 runner is built
    run, cpu_run = (old, r["cpu_old"]) if on_v1 else (new, cpu_new)
    assert r["tpot_run"] == pytest.approx(run)
    if on_v1:
        assert levers[REMOVE] == (new < old)
    assert levers["a host CPU twice as fast"] == (max(r["gpu_step"], cpu_run / 2) < run)
    assert levers["setting VLLM_USE_V2_MODEL_RUNNER to force Model Runner V2"] is False
    assert r["throughput_run"] == pytest.approx(batch / run)
    if on_v1:
        assert levers[CPU_AS_V2] == (r["cpu_old"] > r["gpu_step"] and max(r["gpu_step"], r["cpu_old"] / 2) <= new)
    if levers["GPUs with twice the HBM bandwidth"]:
        assert r["gpu_step"] > cpu_run


def test_model_runner_v2_select_carries_more_than_the_regime(variant):
    """read7 #1: the levers were the stage-1 regime's one bit (a faster CPU and turning the feature off true exactly
    where CPU-bound). 'A CPU twice as fast, by as much as V2' splits the CPU-bound draws that run V1: at the
    default 1.78 ms halved is 0.89 ms, under the GPU's 1.339 ms (true); where the halved CPU still outlasts
    the GPU it shortens the step less than V2 (false)."""
    seen = set()
    for seed in range(80):
        try:
            r = variant(f"{MRV2}@{seed}").sheet.results
        except Exception:  # noqa: BLE001 - a refused draw
            continue
        if r["regime"] == "cpu-bound" and r["fallback"][REMOVE] is not None:
            seen.add(r["fallback"][CPU_AS_V2])
    assert seen == {True, False}
    assert variant(f"{MRV2}@default").sheet.results["fallback"][CPU_AS_V2] is True


def test_model_runner_v2_grades_what_the_deployment_decodes(bank, variant):
    """read7 #2: the point that the silent fallback leaves this deployment at 1x is graded: stage 3 asks the
    tokens/s as deployed (the V1 runner's 8 / 1.78 ms = 4,494 at the default) beside V2's 5,976."""
    stage = next(stage for stage in bank.get(MRV2).stages if "fallback" in stage.ask)
    assert {"throughput_run", "throughput_new"} <= set(stage.ask)
    r = variant(f"{MRV2}@default").sheet.results
    assert r["throughput_run"] == pytest.approx(4494.4, rel=1e-4)
    assert r["throughput_new"] == pytest.approx(5976.5, rel=1e-4)


def test_model_runner_v2_draws_no_dual_batch_overlap_on_a_dense_model(bank):
    """read7 #3: dual batch overlap hides MoE all-to-all under DP/EP; on a dense 8B at TP 1 it is no real
    deployment, so it is no longer a drawn trigger (it stays on the recall's list of fallbacks)."""
    features = bank.get(MRV2).parameter("features")
    assert not any("dual batch overlap" in str(choice) for choice in features.choices)


def test_model_runner_v2_pushes_ask_the_levers_again(bank, variant):
    """read7 #6: after the push the levers are judged again: from CPU-bound to 70B on TP 2 taking the plugin out
    no longer pays. read7 #7: the CPU sum at TP > 1 is named an upper bound (the engine core pipelines)."""
    pushes = [stage for stage in bank.get(MRV2).stages if stage.push]
    assert all("fallback" in stage.ask for stage in pushes)
    r = variant(f"{MRV2}@default+model=llama-3-70b+tp=2").sheet.results
    assert r["regime"] == "gpu-bound" and r["fallback"][REMOVE] is False
    assumptions = " ".join(variant(f"{MRV2}@default").sheet.assumptions)
    assert "upper bound" in assumptions and "not measured" in assumptions


def test_bartlett_hessian_has_the_wishart_mean():
    """The simulation's Hessians from Bartlett's decomposition average to E[2XᵀX/n] = 2Σ, as drawing the
    tokens themselves does."""
    from solvers.formulas.calibration import SIM_WIDTH, calibration_hessian, population
    rng, _, root, _ = population(1, SIM_WIDTH)
    mean = np.mean([calibration_hessian(rng, root, 256) for _ in range(400)], axis=0)
    target = 2 * root @ root.T
    assert np.linalg.norm(mean - target) / np.linalg.norm(target) < 0.03


def test_the_cpu_lever_against_v2_reads_one_way(bank):
    """read12 #2: 'a host CPU twice as fast, by as much as Model Runner V2 would' read either as a CPU sped up by
    as much as MRV2 would speed it, or as one that shortens the step as far as MRV2 would; the key means the second,
    and the label now says so."""
    pool = bank.get("model-runner-v2").answer("fallback").pool
    assert CPU_AS_V2 in pool and not any("by as much as" in option for option in pool)
    assert CPU_AS_V2 == "a host CPU twice as fast, shortening the step as far as Model Runner V2 would"


def test_the_recall_asks_how_a_trace_shows_the_cpu_bound(bank, variant, catalog):
    """read12 #6: a strong interviewer asks how you would know a deployment is CPU-bound before crediting any fix for
    it; the recall now asks it (GPU gaps between steps, a saturated Python thread, a step that grows with the batch
    by the CPU's share and not with the KV reads), before the stage that prices the levers."""
    from solvers.interview import stage_run
    points = " ".join(bank.get("model-runner-v2").answer("cpu_bound_signs").points)
    assert "Nsight Systems" in points and "py-spy" in points and "not by the KV reads" in points
    run = stage_run(variant("model-runner-v2@default"), catalog, 1)
    assert run is not None and "cpu_bound_signs" in run.ask and "trace" in run.say
