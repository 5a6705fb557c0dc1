"""flash-attention-exp-bound: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import re

import pytest

from solvers.engine import VariantError
from tests.by_hand import param_values


def test_exp_bound_default_reproduces_64_over_d(variant):
    """H100 bf16, d = 128 (the ratios and ceilings are pinned in the question file): the softmax takes 64/d of the
    matmul's clocks in exps and 32/d in FP32 work, as long as the matmul at d = 96, the regime's boundary."""
    assert variant("flash-attention-exp-bound@default").sheet.results["boundary_head_dim"] == 96


def test_exp_bound_matches_the_fa3_paper(variant):
    """FA3 sec. 3.1: 989 TFLOPS of matmul against 3.9 TFLOPS of exp (256x), 512x more matmul FLOPs than
    exponentials at d = 128, so the exponentials can take half the matmul's cycles; FA3's measured 740 TFLOP/s
    (75%) lies above what a kernel with the softmax in series can reach, FA2's ~35% below it."""
    results = variant("flash-attention-exp-bound@default").sheet.results
    assert 989.4 / 3.865 == pytest.approx(256, rel=0.01)
    assert results["exp_ratio"] == pytest.approx(256 / 512)
    assert 0.35 * 989.4e12 < results["serial_tflops"] < 740e12


@pytest.mark.parametrize("seed", range(30))
def test_exp_bound_ratios_follow_the_per_sm_rates(variant, seed):
    solution = variant(f"flash-attention-exp-bound@{seed}")
    p, r = param_values(solution), solution.expected
    gpu, d = p["gpu"], p["head_dim"]
    tensor = gpu.bf16_flop_per_clk_sm if p["dtype"] == "bf16" else gpu.fp8_flop_per_clk_sm
    exp_ratio = tensor / (4 * d * gpu.mufu_per_clk_sm)
    softmax = exp_ratio + tensor * p["fp32_ops"] / (4 * d * gpu.fp32_fma_per_clk_sm)
    assert gpu.name.startswith("H")  # Hopper only: FA3's techniques are sm_90a's
    assert r["exp_ratio"] == pytest.approx(exp_ratio)
    assert r["overlap_ceiling"] == pytest.approx(min(1, 1 / softmax))
    assert r["regime"] == ("matmul-bound" if softmax <= 1 else "softmax-bound")


def _serial_kernel_share(f_gemm: float, r_sm: float, scores: int = 4096, block: int = 128) -> float:
    """A kernel that keeps the softmax in series, stepped block by block: each K/V block's GEMMs at f of the
    peak, then its softmax; the share of the peak it measures is the GEMMs' time at peak over the total."""
    t_mm = 1.0  # one score's GEMM time at the peak
    clock = 0.0
    for _ in range(scores // block):
        clock += block * t_mm / f_gemm  # QKᵀ and PV of the block
        clock += block * r_sm * t_mm  # its softmax, the tensor cores idle
    return scores * t_mm / clock


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_exp_bound_old_kernel_split_reproduces_its_measurement(variant, seed):
    """The GEMM share the key charges the old kernel, run with the softmax in series, measures the stated
    share; the softmax's and the slow GEMMs' idle shares add to the whole; the measurement sits clear of the
    serial ceiling (the solver refuses draws within 10% of it)."""
    solution = variant(f"flash-attention-exp-bound@{'default' if seed is None else seed}")
    r = solution.expected
    measured = solution.sheet.results["measured_share"]
    assert _serial_kernel_share(r["gemm_share"], r["softmax_ratio"]) == pytest.approx(measured, rel=1e-9)
    gemm_idle = 1 / r["gemm_share"] - 1
    assert r["idle_softmax_share"] + gemm_idle / (1 / measured - 1) == pytest.approx(1)
    assert measured <= 0.9 * r["serial_ceiling"] + 1e-12
    assert r["gemm_share"] < 1


@pytest.mark.parametrize("seed", range(60))
def test_exp_bound_old_kernel_options_follow_its_figures(variant, seed):
    """Each listed option about the old kernel holds exactly when its figures say so, and none is listed
    within 3% of its line."""
    solution = variant(f"flash-attention-exp-bound@{seed}")
    r = solution.expected
    judged = solution.sheet.results["fa2_causes"]
    u, f, s = solution.sheet.results["measured_share"], r["gemm_share"], r["idle_softmax_share"]
    serial, sm = r["serial_ceiling"], r["softmax_ratio"]
    tests = {
        "its GEMMs run at under half the tensor peak": (f, 0.5, f < 0.5),
        "the softmax accounts for most of the time its tensor cores sit idle": (s, 0.5, s > 0.5),
        "full-rate asynchronous MMAs and TMA, the softmax still in series, would at least double its TFLOP/s":
            (serial, 2 * u, serial >= 2 * u),
        "overlapping its softmax with its own slow GEMMs would beat full-rate GEMMs with the softmax in series":
            (min(f, 1 / sm), serial, min(f, 1 / sm) > serial),
    }
    for option, (a, b, holds) in tests.items():
        if abs(a / b - 1) < 0.03:
            assert judged[option] is None, option
            assert option not in solution.shown["fa2_causes"]
        else:
            assert judged[option] is holds, option


@pytest.mark.parametrize("seed", range(60))
def test_exp_bound_technique_options_follow_the_ratios_not_the_regime(variant, seed):
    """Each FA3 option holds exactly when its own line, recomputed in floats, says so, and is not listed within 3%
    of it (read3-R1: at a power-of-two head dim the exponentials sit exactly on half or all of the matmul time):
    the exponentials alone against the QKᵀ half, overlap against the softmax in series (over half), twice the
    rate overlapped (over half), the idle share overlapped against 30%."""
    for code in (f"flash-attention-exp-bound@{seed}", f"flash-attention-exp-bound@{seed}+head_dim=64"):
        try:
            solution = variant(code)
        except VariantError:
            continue
        r = solution.expected
        judged = solution.sheet.results["fa3_techniques"]
        e, sm = r["exp_ratio"], r["softmax_ratio"]
        lines = {
            "intra-warpgroup pipelining alone could hide the exponentials (not the FP32 ops) behind the next block's "
            "QKᵀ GEMM, half the matmuls": (e, 0.5, e <= 0.5),
            "perfect overlap would lift its TFLOP/s over the softmax-in-series ceiling by over half":
                ((1 + sm) * min(1, 1 / sm), 1.5, (1 + sm) * min(1, 1 / sm) > 1.5),
            "twice this variant's tensor rate would raise its perfectly overlapped TFLOP/s by over half":
                (2 * min(1, 1 / (2 * sm)) / min(1, 1 / sm), 1.5, 2 * min(1, 1 / (2 * sm)) / min(1, 1 / sm) > 1.5),
            "even perfectly overlapped, the tensor cores would sit idle over {idle_line} of the time":
                (1 - min(1, 1 / sm), 0.3, 1 - min(1, 1 / sm) > 0.3),
        }
        for option, (a, b, holds) in lines.items():
            if abs(a / b - 1) < 0.03:
                assert judged[option] is None, option
            else:
                assert judged[option] is holds, option


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_exp_bound_push_crosses_from_either_side(variant, catalog, seed):
    """Matmul-bound draws are pushed to d = 64, softmax-bound ones to d = 256, in their own dtype and nothing else
    moved (no new measurement of the old kernel: the push asks none of its figures): each crosses, and the pushed
    variant is one the solver accepts, in every draw."""
    from solvers.interview import stage_run

    solution = variant(f"flash-attention-exp-bound@{'default' if seed is None else seed}")
    index = next(i for i, stage in enumerate(solution.question.stages)
                 if stage.push and stage.when == solution.regime_name)
    run = stage_run(solution, catalog, index)
    assert run is not None and run.declared
    assert run.regime != solution.regime_name
    assert param_values(run.solution)["head_dim"] == (64 if solution.regime_name == "matmul-bound" else 256)
    moved = {name for name, value in param_values(run.solution).items() if value != param_values(solution)[name]}
    assert moved <= {"head_dim"}
    asked = {key for stage in solution.question.stages if stage.push for key in stage.ask}
    assert not asked & {"gemm_share", "idle_softmax_share", "fa2_causes"}


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_exp_bound_recall_comes_before_any_technique_is_named(variant, seed):
    """The recall of FA3's techniques is the second stage: the opening's words and key lines (its step whys and
    regime line) name none of them, so the candidate recalls them unprompted."""
    solution = variant(f"flash-attention-exp-bound@{'default' if seed is None else seed}")
    stages = solution.question.stages
    assert stages[1].kind == "recall" and stages[1].ask == ("fa3_list",)
    opening = stages[0]
    words = [opening.say, solution.sheet.regime.summary if solution.sheet.regime else ""]
    words += [step.why for step in solution.sheet.steps if step.key in opening.ask]
    words += [solution.sheet.choice_whys.get(key, "") for key in opening.ask]
    for text in words:
        for name in ("ping-pong", "pipelin", "WGMMA", r"\bTMA\b", "mma.sync", "warp special"):
            assert not re.search(name, text, re.IGNORECASE), (name, text)


@pytest.mark.parametrize("seed", [None, *range(30)])
def test_exp_bound_selects_do_not_restate_the_recall(variant, catalog, seed):
    """read12: the old kernel's select listed 'mma.sync cannot feed Hopper's tensor cores; WGMMA can' and the push's
    'producer warps issuing TMA loads hide the K/V tile loads', both true in every draw and both the recall's key
    the candidate had just been shown. Neither select now declares a fact or names a recalled technique."""
    from solvers.interview import stage_run

    solution = variant(f"flash-attention-exp-bound@{'default' if seed is None else seed}")
    index = next(i for i, stage in enumerate(solution.question.stages)
                 if stage.push and stage.when == solution.regime_name)
    pushed = stage_run(solution, catalog, index).solution
    for sol, key in ((solution, "fa2_causes"), (pushed, "fa3_techniques")):
        assert not sol.sheet.facts.get(key)
        for option in sol.shown[key]:
            assert not re.search(r"WGMMA|\bTMA loads|producer warps", option), option


def test_exp_bound_old_kernel_is_the_teams_own_in_fp8(variant):
    """read12: in fp8 the old kernel was said to be 'built like FA2' at a measured TFLOP/s, but FA2 has no fp8
    path. The stage presents it as the team's own FA2-style kernel in the variant's dtype."""
    solution = variant("flash-attention-exp-bound@default+dtype=fp8+measured=356.2")
    say = solution.question.stages[2].say
    assert "in-house" in say and "{dtype}" in say
    assert "built like FA2" not in say


def test_exp_bound_no_parameter_label_names_an_answer_key(variant):
    """read12: the idle line was labelled 'idle share the fa3_techniques select asks about', a select's key in the
    parameter table the candidate reads."""
    solution = variant("flash-attention-exp-bound@default")
    keys = {answer.key for answer in solution.question.answers}
    for param in solution.params:
        assert not any(key in str(param.label) for key in keys if "_" in key), param.label
