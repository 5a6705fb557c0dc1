"""tp-past-kv-heads: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from tests.by_hand import DTYPE_BYTES, GiB, KiB, param_values
from tests.oracles import link_each_way


def test_tp_past_kv_heads_default(variant):
    """Qwen3-235B-A22B fp8 on TP 8 of GB200, 128 requests of 32K (the keys are pinned in the question file): the
    steps beside them, and the duplicate asked as the group's total, not per GPU as the answers before it."""
    solution = variant("tp-past-kv-heads@default")
    results = solution.sheet.results
    assert results["kv_proj_weights"] == 2 * 94 * 4096 * 4 * 128  # k_proj and v_proj of all 94 layers: 0.39 GB
    assert results["kv_total"] == 329 * GiB  # 128 × 28,672 tokens × 94 KiB
    assert results["kv_heads_per_gpu"] == 1
    assert results["copies"] == 2
    # Reader 7, finding 5: stage 2 no longer asks the KV beyond one copy, a multiplication of stage 1's key.
    assert "beyond one copy" not in solution.question.stages[1].say
    assert "duplicate" not in {a.key for a in solution.question.answers}


def test_kv_per_gpu_stops_at_the_kv_heads_while_weights_keep_falling(variant):
    by_tp = {tp: variant(f"tp-past-kv-heads@default+tp={tp}").sheet.results for tp in (4, 8, 16)}
    assert by_tp[4]["kv_per_gpu"] == by_tp[8]["kv_per_gpu"] == by_tp[16]["kv_per_gpu"]
    for tp in (4, 8):  # past them the replicated K and V projections stop the weights halving
        assert by_tp[2 * tp]["weights_per_gpu"] < by_tp[tp]["weights_per_gpu"] < 2 * by_tp[2 * tp]["weights_per_gpu"]
    assert by_tp[4]["duplicate"] == 0
    assert by_tp[16]["duplicate"] == 3 * by_tp[16]["kv_total"]  # four copies of every head
    assert by_tp[4]["regime"] == "kv-split"  # TP equal to the KV heads still splits them


@pytest.mark.parametrize("seed", range(20))
def test_tp_past_kv_heads_follows_vllm_head_rule(variant, seed):
    """vLLM's get_num_kv_heads and QKVParallelLinear: max(1, H_kv // TP) heads per GPU, with their K and V
    projections; pipeline stages of whole layers (the busiest holds ceil(L / stages)). Plain Python."""
    solution = variant(f"tp-past-kv-heads@{seed}")
    p, expected = param_values(solution), solution.expected
    model, tp = p["model"], p["tp"]
    element = DTYPE_BYTES[p["dtype"]]
    tokens = p["context"] * p["batch"]
    heads = max(1, model.kv_heads // tp)
    per_gpu = 2 * model.layers * heads * model.head_dim * element * tokens
    total = 2 * model.layers * model.kv_heads * model.head_dim * element * tokens
    assert expected["kv_per_gpu"] == pytest.approx(per_gpu)
    assert solution.sheet.results["duplicate"] == pytest.approx(tp * per_gpu - total)
    tp_capped = min(tp, model.kv_heads)
    stage_layers = math.ceil(model.layers / (tp // tp_capped))
    assert expected["kv_per_gpu_pp"] == pytest.approx(total / tp_capped * stage_layers / model.layers)
    kv_proj_one_head = 2 * model.layers * model.hidden * model.head_dim * element  # k_proj + v_proj, one head
    others = model.params_b * 1e9 * element - kv_proj_one_head * model.kv_heads
    assert expected["weights_per_gpu"] == pytest.approx(others / tp + kv_proj_one_head * heads)
    assert (expected["regime"] == "kv-replicated") == (tp > model.kv_heads)


@pytest.mark.parametrize("seed", range(40))
def test_every_draw_isolates_the_copies_from_the_network(variant, seed):
    """Reader: past the KV heads and past the NVLink domain coincided in every draw, so the capped layout won by
    avoiding the NIC. Now every TP group fits one scale-up domain, the micro-batches hold whole requests, and
    the capped layout is faster exactly where the batch's KV outweighs the weights (the reads decide: both
    layouts pay the same number of all-reduce calls inside the domain)."""
    solution = variant(f"tp-past-kv-heads@{seed}")
    p, results = param_values(solution), solution.sheet.results
    assert p["tp"] <= p["gpu"].nvlink_domain
    if p["tp"] > p["model"].kv_heads:
        assert p["batch"] % (p["tp"] // p["model"].kv_heads) == 0
        weights = p["model"].params_b * 1e9 * DTYPE_BYTES[p["dtype"]]
        capped = results["faster_layout"] == "TP at the heads plus stages"
        assert capped == (results["kv_total"] > weights), seed


def test_the_copies_decide_in_both_directions(variant):
    """Inside one NVL72 rack: Qwen3's 404 GB of KV outweighs its 235 GB of weights (the stages win); 405B's 135 GB of
    KV does not outweigh its 406 GB (TP 16 wins). Both steps are pinned in the question file."""
    assert variant("tp-past-kv-heads@default").expected["faster_layout"] == "TP at the heads plus stages"
    wide = variant("tp-past-kv-heads@default+model=llama-3.1-405b+tp=16+batch=32+context=16384")
    assert wide.expected["faster_layout"] == "TP as drawn"


def test_pipeline_stages_take_whole_layers(variant):
    """Llama-3.1-405B at TP 32 on GB200: TP 8 x 4 stages, and 126 layers give the busiest stage 32, not 31.5."""
    results = variant("tp-past-kv-heads@default+model=llama-3.1-405b+tp=32+batch=32+context=16384").sheet.results
    assert results["pp_stages"] == 4
    assert results["stage_layers"] == 32
    assert results["kv_per_gpu_pp"] == pytest.approx(results["kv_total"] / 8 * 32 / 126)


def test_tp_past_kv_heads_checks_the_fit(variant):
    """Review bug (@43: 551 GiB of KV per GPU): weights plus KV must fit the usable HBM (90%, usable-hbm card).
    Every drawn layout does; the push asks whether its narrower TP still does (reader 7, finding 1), and where it
    does not nothing decodes."""
    short = variant("tp-past-kv-heads@default+gpu=h100-sxm+tp=4")
    assert short.expected["fits"] == "does not fit" and short.expected["tokens_per_gpu"] == 0
    assert variant("tp-past-kv-heads@default+tp=4").expected["fits"] == "fits"
    for seed in range(40):
        solution = variant(f"tp-past-kv-heads@{seed}")
        results = solution.sheet.results
        assert results["headroom"] >= 0 and solution.expected["fits"] == "fits"
        assert results["held_per_gpu"] == pytest.approx(results["weights_per_gpu"] + results["kv_per_gpu"])


def test_the_push_cuts_tp_to_half_or_all_the_heads_and_asks_fit_and_tokens_per_gpu(variant):
    """Reader 7, finding 1: the push always landed on TP = H_kv (weights a lookup, the all-reduce barely moving)
    and never asked the fit or what each GPU delivers. It now cuts TP to 4: Qwen3's 4 heads or half of Llama's 8,
    and asks the split, the fit and tokens/s per GPU; over draws both landings and both fits occur."""
    stage = variant("tp-past-kv-heads@default").question.stages[3]
    assert stage.ask == ("regime", "fits", "tokens_per_gpu")
    landed, fits = set(), set()
    for seed in range(120):
        base = variant(f"tp-past-kv-heads@{seed}")
        if base.regime_name != "kv-replicated":
            continue
        pushed = variant(f"tp-past-kv-heads@{seed}+tp=4")
        model = param_values(base)["model"]
        landed.add(4 / model.kv_heads)
        fits.add(pushed.expected["fits"])
        assert pushed.regime_name == "kv-split"
        p, results = param_values(base), base.sheet.results
        assert results["tokens_per_gpu"] == pytest.approx(p["batch"] / results["step_tp"] / p["tp"])
    assert landed == {0.5, 1.0} and fits == {"fits", "does not fit"}


def test_tp_past_kv_heads_keeps_each_model_within_its_context(variant):
    """Qwen3-235B-A22B serves 32K natively: the context-within-model rule applies (the parameter is `context`)."""
    with pytest.raises(VariantError, match="32,768"):
        variant("tp-past-kv-heads@default+batch=16+context=65536")
    for seed in range(60):
        p = param_values(variant(f"tp-past-kv-heads@{seed}"))
        assert p["context"] <= p["model"].max_context - 2048, seed  # reader 7, finding 6: Qwen3 within 30K


def test_an_amd_group_names_its_own_fabric(variant):
    """Review: MI300X's fabric was called NVLink. hardware.yaml names it; the key and the givens say it, and the
    mesh gives TP 8 seven links and the capped TP 4 three (64 GB/s each way apiece)."""
    solution = variant("tp-past-kv-heads@1")
    assert "Infinity Fabric" in solution.sheet.regime.other_side
    assert not any("NVLink" in g.label for g in solution.sheet.givens)
    links = {g.symbol: g.value for g in solution.sheet.givens if str(g.symbol).startswith("BW_link")}
    assert sorted(float(v) for v in links.values()) == pytest.approx([192e9, 448e9])


def test_the_opening_key_gives_away_no_later_answer(variant):
    """The regime is the opening's key: it must not quote the copies, the all-reduces or the capped layout that
    later stages ask."""
    solution = variant("tp-past-kv-heads@default")
    summary = solution.sheet.regime.summary
    for key in ("duplicate", "allreduce", "kv_per_gpu_pp"):
        assert solution.sheet.text(solution.sheet.symbol(_symbol(solution, key))) not in summary, key
    assert "capped" not in summary


def _symbol(solution, key: str) -> str:
    return next(step.symbol for step in solution.sheet.steps if step.key == key)


# The step model's cards: 80% of HBM bandwidth (step-bandwidth), 2 ms a step (step-overhead), 60% of the bf16
# peak and 50% of the fp8 one (step-compute, step-compute-fp8).
STEP_BW, STEP_OVERHEAD, STEP_COMPUTE = 0.8, 2e-3, {"bf16": 0.6, "fp8": 0.5}


def _untouched(p, share: float, tokens: float) -> float:
    """Bytes of routed experts, of `share` of the model's layers and experts, that no one of `tokens` tokens picks
    (each picks k of E uniformly): a MoE decode step skips them. Zero for a dense model."""
    model = p["model"]
    if not model.get("experts"):
        return 0.0
    routed = model.layers * model.experts * 3 * model.hidden * model.expert_ffn * DTYPE_BYTES[p["dtype"]]
    return routed * share * (1 - model.experts_per_token / model.experts) ** tokens


def _step_math(p) -> float:
    model, gpu = p["model"], p["gpu"]
    active = model.get("active_params_b", model.params_b) * 1e9
    peak = gpu[f"{p['dtype']}_dense_tflops"] * 1e12 * STEP_COMPUTE[p["dtype"]]
    return 2 * active * p["batch"] / (p["tp"] * peak)


@pytest.mark.parametrize("seed", ["default", *range(30)])
def test_step_levers_match_plain_arithmetic(variant, seed):
    """Each lever re-prices TP's decode step (reads of weights and KV at 80% of HBM bandwidth, or the math where
    longer; the all-reduces' latency and bytes; 2 ms of overhead) in plain Python: it holds where it saves 15% or
    more; one within 2 points of the line is not listed."""
    solution = variant(f"tp-past-kv-heads@{seed}")
    p, results = param_values(solution), solution.sheet.results
    model, gpu, tp, R = p["model"], p["gpu"], p["tp"], p["batch"]
    bandwidth = gpu.hbm_tb_s * 1e12 * STEP_BW
    t_w, t_kv = (results["weights_per_gpu"] - _untouched(p, 1 / tp, R)) / bandwidth, results["kv_per_gpu"] / bandwidth
    t_w_half = (results["weights_per_gpu"] - _untouched(p, 1 / tp, R / 2)) / bandwidth
    latency = 2 * model.layers * 10e-6
    per_token = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / float(link_each_way(gpu, tp))
    math_time = _step_math(p)
    wide = max(t_w + t_kv, math_time) + latency + per_token * R + STEP_OVERHEAD
    assert results["step_tp"] == pytest.approx(wide, rel=1e-9)
    rest = latency + per_token * R + STEP_OVERHEAD
    after = {
        "the KV cache quantised to half its bytes": max(t_w + t_kv / 2, math_time) + rest,
        "the weights quantised to half their bytes": max(t_w / 2 + t_kv, math_time) + rest,
        "half the requests in flight": max(t_w_half + t_kv / 2, math_time / 2) + latency + per_token * R / 2
        + STEP_OVERHEAD,
        "the all-reduces fully overlapped with the reads": wide - latency - per_token * R,
    }
    judged = results["levers"]
    for option, step in after.items():
        expected = None if abs(1 - step / wide - 0.15) < 0.02 else step <= 0.85 * wide * (1 + 1e-12)
        assert judged[option] == expected, option


def test_within_the_kv_heads_capping_changes_nothing(variant):
    results = variant("tp-past-kv-heads@default+tp=4").sheet.results
    assert results["pp_stages"] == 1 and results["comm_capped"] == results["allreduce"]


@pytest.mark.parametrize("seed", ["default", *range(20)])
def test_capped_layout_step_matches_plain_arithmetic(variant, seed):
    """Both decode steps re-derived in plain Python from the printed parameters and hardware.yaml."""
    solution = variant(f"tp-past-kv-heads@{seed}")
    p, results = param_values(solution), solution.sheet.results
    model, gpu, tp, R = p["model"], p["gpu"], p["tp"], p["batch"]
    if tp <= model.kv_heads:
        assert results["faster_layout"] == "the same layout"
        return
    T, S = model.kv_heads, tp // model.kv_heads
    element = DTYPE_BYTES[p["dtype"]]
    L_s = math.ceil(model.layers / S)
    kv_total = 2 * model.layers * model.kv_heads * model.head_dim * element * p["context"] * R
    m = R // S
    ring = 2 * model.layers * (10e-6 + 2 * (T - 1) / T * m * model.hidden * 2 / float(link_each_way(gpu, T)))
    comm = S * L_s / model.layers * ring + (S - 1) * m * model.hidden * 2 / float(link_each_way(gpu, tp))
    weights = model.params_b * 1e9 * element * L_s / (model.layers * T) - _untouched(p, L_s / (model.layers * T), m)
    reads = S * (weights + kv_total / T * L_s / model.layers * m / R) / (gpu.hbm_tb_s * 1e12 * STEP_BW)
    step = max(reads, _step_math(p)) + comm + STEP_OVERHEAD
    assert results["comm_capped"] == pytest.approx(comm, rel=1e-9)
    assert results["step_capped"] == pytest.approx(step, rel=1e-9)
    faster = "TP at the heads plus stages" if step < results["step_tp"] else "TP as drawn"
    assert results["faster_layout"] == faster


def test_tp_past_kv_heads_takes_kv_bytes_per_token_as_given(variant):
    sheet = variant("tp-past-kv-heads@default").sheet
    assert sheet.prerequisites == {"kv-bytes-per-token"}
    assert sheet.results["kv_per_token_gpu"] == 23.5 * KiB  # the per-GPU share is still derived: one head of four


def test_a_moe_step_reads_only_the_experts_its_tokens_pick(variant):
    """Reader (read12): Qwen3-235B-A22B's 128 experts were read whole every step, though 16 tokens picking 8 each
    touch 64% of them (mla-tp-duplication already counted touched experts). Its step now reads 19.32 GB of weights
    a GPU, not 29.42, and the step is 7.93 ms, not 9.51 (the key is pinned in the question file)."""
    results = variant("tp-past-kv-heads@default+batch=16+context=16384").sheet.results
    assert results["touched"] == pytest.approx(1 - (120 / 128) ** 16)
    skipped = 227_096_395_776 / 8 * (120 / 128) ** 16  # a GPU's eighth of the experts no token picks
    assert results["weights_read"] == pytest.approx(results["weights_per_gpu"] - skipped)
    assert results["step_tp"] == pytest.approx(7.9318e-3, rel=1e-4)
    dense = variant("tp-past-kv-heads@default+model=llama-3.1-405b+tp=16+batch=32+context=16384").sheet.results
    assert "touched" not in dense  # a dense model reads all its weights


def test_kv_and_weights_are_asked_in_one_unit(variant):
    """Reader (read12): the opening asked "GB of weights and GiB of KV", and the fit check added the two. Both are
    in GB now."""
    solution = variant("tp-past-kv-heads@default")
    units = {spec.key: spec.unit for spec in solution.question.answers if spec.key in
             ("weights_per_gpu", "kv_per_gpu", "kv_per_gpu_pp")}
    assert set(units.values()) == {"GB"}
    assert "GiB" not in solution.prompt


def test_the_lever_stage_says_an_moe_step_reads_the_experts_it_picks(variant):
    """r14 (a re-derivation): @9400 (Qwen3 MoE) read every expert each step and missed 'half the requests' (25.9%
    shorter when a step reads only the experts its tokens pick, as the key prices it). The stage says so."""
    stage = next(s for s in variant("tp-past-kv-heads@9400").question.stages if "levers" in s.ask)
    assert "An MoE step reads only the experts its tokens pick" in " ".join(stage.say.split())
