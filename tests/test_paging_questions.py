"""Checks for the KV paging questions: paged-block-size, tp-past-kv-heads,
sliding-window-savings, cow-block-sharing."""
from __future__ import annotations

import math

import pytest

from solvers.answers import CORRECT, WRONG
from solvers.engine import VariantError
from tests.oracles import link_each_way

GiB = 2**30
KIB = 1024

# Answers that are whole-number counts: a neighbouring whole number must never grade correct.
EXACT_COUNTS = {
    "paged-block-size": ("blocks_per_sequence", "prefix_recompute"),
    "sliding-window-savings": ("window_blocks",),
    "cow-block-sharing": ("blocks_with", "blocks_without", "tail_redone"),
}


def _params(solution) -> dict:
    return {param.name: param.value for param in solution.params}


# --- paged-block-size ----------------------------------------------------------------------


def test_paged_block_size_default(variant):
    """Llama-3-70B bf16 (320 KiB/token), blocks of 16, 256 sequences of 2,048 tokens (the keys are pinned in the
    question file): the mean empty slots, vLLM's page and the length where the waste reaches 4%."""
    results = variant("paged-block-size@default").sheet.results
    assert results["expected_waste"] == 7.5
    assert results["page_bytes"] == 64 * KIB  # vLLM's page: 2 x 16 x 8 x 128 x 2 B
    assert results["boundary_length"] == pytest.approx(180)  # 7.5 x 0.96 / 0.04


def test_paged_page_size_matches_vllm_formula(variant):
    """vLLM's page_size_bytes for Llama-3-8B in bf16: 2 x block_size x 8 KV heads x 128 x 2 B."""
    for block_size in (8, 16, 32, 64, 128, 256):
        results = variant(f"paged-block-size@default+model=llama-3-8b+block_size={block_size}").sheet.results
        assert results["page_bytes"] == 2 * block_size * 8 * 128 * 2


@pytest.mark.parametrize("block_size", [8, 16, 128])
def test_expected_waste_is_the_mean_over_all_endings(variant, block_size):
    """Enumerate every length over many blocks: the mean empty slots equal the solver's (B - 1)/2."""
    empty = [-length % block_size for length in range(1, 100 * block_size + 1)]
    expected = variant(f"paged-block-size@default+block_size={block_size}").sheet.results["expected_waste"]
    assert sum(empty) / len(empty) == pytest.approx(expected)
    assert max(empty) == block_size - 1


@pytest.mark.parametrize("seed", range(20))
def test_paged_block_size_matches_plain_arithmetic(variant, seed):
    solution = variant(f"paged-block-size@{seed}")
    p, expected = _params(solution), solution.expected
    model, block = p["model"], p["block_size"]
    per_token = 2 * model.layers * model.kv_heads * model.head_dim * {"bf16": 2, "fp8": 1}[p["kv_dtype"]]
    waste = (block - 1) / 2
    assert solution.sheet.results["worst_batch_waste"] == pytest.approx(p["batch"] * (block - 1) * per_token)
    assert expected["page_bytes"] == pytest.approx(block * per_token / model.layers)
    assert expected["batch_waste"] == pytest.approx(p["batch"] * waste * per_token)
    assert expected["blocks_per_sequence"] == math.ceil(p["mean_length"] / block)
    assert expected["prefix_recompute"] == p["prefix"] % block
    share = waste / (p["mean_length"] + waste)
    assert expected["waste_share"] == pytest.approx(share)
    assert (expected["regime"] == "waste-negligible") == (share < 0.04)


def test_paged_block_size_pinned_seed(variant):
    """Pinned again after the lengths narrowed to 400-3,000 tokens and the prompt to 50-2,000 (the keys are pinned
    in the question file)."""
    assert [p.raw for p in variant("paged-block-size@3").params] == ["llama-3-8b", "bf16", 128, 120, 480, 247, 4]


def test_paged_prefix_is_shorter_than_the_requests_it_opens(variant):
    """Review bug (@7: a 4,597-token system prompt in 680-token requests): every draw holds the prompt and a
    block of its own text, and an override that breaks it is refused."""
    for seed in range(60):
        p = _params(variant(f"paged-block-size@{seed}"))
        assert p["prefix"] + p["block_size"] <= p["mean_length"], seed
    with pytest.raises(VariantError, match="prefix_shorter"):
        variant("paged-block-size@default+prefix=2000+mean_length=680")


@pytest.mark.parametrize("seed", range(20))
def test_paged_block_choice_matches_plain_arithmetic(variant, seed):
    solution = variant(f"paged-block-size@{seed}")
    p, judged = _params(solution), solution.sheet.results["block_choice"]
    block, length, prefix = p["block_size"], p["mean_length"], p["prefix"]

    def share(size):
        return (size - 1) / 2 / (length + (size - 1) / 2)

    half, twice = (f"with {size} the block size the empty share would{still} be under {{waste_tolerance}}"
                   for size, still in (("half", ""), ("twice", " still")))
    assert judged[half] == (share(block / 2) < 0.04)
    assert judged[twice] == (share(2 * block) < 0.04)
    assert judged["half the block size would cache more of the system prompt"] == (
        prefix % (block // 2) < prefix % block)
    assert judged["twice the block size would leave the whole system prompt uncached"] == (prefix < 2 * block)


def test_the_worst_case_is_worked_not_asked(variant):
    """Review 3: the most empty KV was always twice the expected, a free answer. It stays a step of the worked
    solution; a candidate who gives the bound for the mean is told why."""
    solution = variant("paged-block-size@default")
    assert "worst_batch_waste" not in solution.expected
    assert solution.sheet.results["worst_batch_waste"] == 2 * solution.sheet.results["batch_waste"]
    grade = solution.grade_one("batch_waste", f"{2 * solution.expected['batch_waste'] / GiB} GiB")
    assert grade.slip == "x2: the worst case B − 1 instead of the expected (B − 1)/2"


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_the_regime_line_leaves_later_stages_unsaid(variant, catalog, seed):
    """Review 3: the opening's regime key named the kernel's gathers, the prefix matching and the blocks a
    sequence walks, which stages 2 and 3 ask. The key shown after the opening speaks of memory only."""
    from solvers.interview import opening

    solution = variant(f"paged-block-size@{seed}")
    line = dict(opening(solution).key_lines())["regime"].lower()
    blocks = f"{int(solution.expected['blocks_per_sequence']):,}"
    assert not any(word in line for word in ("kernel", "prefix", "gather", "page-table", "contiguous")), line
    assert f" {blocks} block" not in line, line


@pytest.mark.parametrize("seed", range(40))
def test_paged_block_size_push_crosses_to_the_other_side(variant, catalog, seed):
    """Each side's declared push (256-token blocks from the negligible side, 16 from the material side) lands on
    the other side of the 4% bar: every mean length (400 to 2,900) sits between the two boundaries, 12 × 15 = 180
    and 12 × 255 = 3,060 tokens. A draw the push cannot take (a prompt with no room for a 256-token block, or a
    pushed share within 3% of the bar) hands over to the engine's push."""
    from solvers.interview import stage_run
    from solvers.stagebar import push_refusal

    solution = variant(f"paged-block-size@{seed}")
    stages = solution.question.stages
    ours = [i for i, stage in enumerate(stages) if stage.push and stage.when == solution.regime_name]
    assert len(ours) == 1
    if push_refusal(solution, catalog, stages[ours[0]]) is None:
        run = stage_run(solution, catalog, ours[0])
        assert run is not None and run.regime != solution.regime_name, seed
        assert run.solution.param("block_size").raw == (256 if solution.regime_name == "waste-negligible" else 16)


@pytest.mark.parametrize("qid", sorted(EXACT_COUNTS))
def test_whole_number_counts_reject_their_neighbours(variant, qid):
    for seed in range(20):
        solution = variant(f"{qid}@{seed}")
        for key in EXACT_COUNTS[qid]:
            count = int(solution.expected[key])
            assert solution.grade_one(key, str(count)).verdict == CORRECT
            for neighbour in (count - 1, count + 1):
                if neighbour >= 0:
                    assert solution.grade_one(key, str(neighbour)).verdict != CORRECT, (qid, seed, key, neighbour)


# --- tp-past-kv-heads ----------------------------------------------------------------------


def test_tp_past_kv_heads_default(variant):
    """Qwen3-235B-A22B fp8 on TP 8 of GB200, 128 requests of 32K (the keys are pinned in the question file): the
    steps beside them, and the duplicate asked as the group's total, not per GPU as the answers before it."""
    solution = variant("tp-past-kv-heads@default")
    results = solution.sheet.results
    assert results["kv_proj_weights"] == 2 * 94 * 4096 * 4 * 128  # k_proj and v_proj of all 94 layers: 0.39 GB
    assert results["kv_total"] == 376 * GiB
    assert results["kv_heads_per_gpu"] == 1
    assert results["copies"] == 2
    assert "beyond one copy" in solution.question.stages[1].say
    assert "summed over the whole TP group" in solution.question.answer("duplicate").label


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
    p, expected = _params(solution), solution.expected
    model, tp = p["model"], p["tp"]
    element = {"bf16": 2, "fp8": 1}[p["dtype"]]
    tokens = p["context"] * p["batch"]
    heads = max(1, model.kv_heads // tp)
    per_gpu = 2 * model.layers * heads * model.head_dim * element * tokens
    total = 2 * model.layers * model.kv_heads * model.head_dim * element * tokens
    assert expected["kv_per_gpu"] == pytest.approx(per_gpu)
    assert expected["duplicate"] == pytest.approx(tp * per_gpu - total)
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
    p, results = _params(solution), solution.sheet.results
    assert p["tp"] <= p["gpu"].nvlink_domain
    if p["tp"] > p["model"].kv_heads:
        assert p["batch"] % (p["tp"] // p["model"].kv_heads) == 0
        weights = p["model"].params_b * 1e9 * {"bf16": 2, "fp8": 1}[p["dtype"]]
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


def test_tp_past_kv_heads_pinned_seed(variant):
    """Pinned again: the draws now stay inside one scale-up domain (the keys are pinned in the question file)."""
    solution = variant("tp-past-kv-heads@1")
    assert [p.raw for p in solution.params] == [8, "qwen3-235b-a22b", "mi300x", "fp8", 100, 29952, 15]


def test_tp_past_kv_heads_checks_the_fit(variant):
    """Review bug (@43: 551 GiB of KV per GPU): weights plus KV must fit the usable HBM (90%, usable-hbm card),
    and every draw does."""
    with pytest.raises(VariantError, match="do not fit"):
        variant("tp-past-kv-heads@default+gpu=h100-sxm+tp=4")
    for seed in range(40):
        results = variant(f"tp-past-kv-heads@{seed}").sheet.results
        assert results["headroom"] >= 0
        assert results["held_per_gpu"] == pytest.approx(results["weights_per_gpu"] + results["kv_per_gpu"])


def test_tp_past_kv_heads_keeps_each_model_within_its_context(variant):
    """Qwen3-235B-A22B serves 32K natively: the context-within-model rule applies (the parameter is `context`)."""
    with pytest.raises(VariantError, match="32,768"):
        variant("tp-past-kv-heads@default+batch=16+context=65536")
    for seed in range(60):
        p = _params(variant(f"tp-past-kv-heads@{seed}"))
        assert p["context"] <= p["model"].max_context, seed


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
    p, results = _params(solution), solution.sheet.results
    model, gpu, tp, R = p["model"], p["gpu"], p["tp"], p["batch"]
    bandwidth = gpu.hbm_tb_s * 1e12 * STEP_BW
    t_w, t_kv = results["weights_per_gpu"] / bandwidth, results["kv_per_gpu"] / bandwidth
    latency = 2 * model.layers * 10e-6
    per_token = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / float(link_each_way(gpu, tp))
    math_time = _step_math(p)
    wide = max(t_w + t_kv, math_time) + latency + per_token * R + STEP_OVERHEAD
    assert results["step_tp"] == pytest.approx(wide, rel=1e-9)
    rest = latency + per_token * R + STEP_OVERHEAD
    after = {
        "the KV cache quantised to half its bytes": max(t_w + t_kv / 2, math_time) + rest,
        "the weights quantised to half their bytes": max(t_w / 2 + t_kv, math_time) + rest,
        "half the requests in flight": max(t_w + t_kv / 2, math_time / 2) + latency + per_token * R / 2
        + STEP_OVERHEAD,
        "the all-reduces fully overlapped with the reads": wide - latency - per_token * R,
    }
    judged = results["levers"]
    for option, step in after.items():
        expected = None if abs(1 - step / wide - 0.15) < 0.02 else step <= 0.85 * wide * (1 + 1e-12)
        assert judged[option] == expected, option


def test_nothing_copied_leaves_the_duplicate_without_slips(variant):
    """Reader: at the heads the duplicate is 0 GiB and its 'x layers' slip was 0 GiB too, so a right answer matched
    a slip. With nothing copied no slip is offered on it; past the heads both are."""
    assert "duplicate" not in variant("tp-past-kv-heads@default+tp=4").sheet.slips
    assert len(variant("tp-past-kv-heads@default").sheet.slips["duplicate"]) == 2


def test_the_push_to_the_heads_asks_what_the_opening_did_not_settle(variant):
    """Reader: cutting TP back to the heads asked KV per GPU, which the opening's key had already said stays put.
    The push asks the split, the weights and the all-reduces, each of which moves."""
    stage = variant("tp-past-kv-heads@default").question.stages[3]
    assert stage.ask == ("regime", "weights_per_gpu", "allreduce")
    before, after = variant("tp-past-kv-heads@default"), variant("tp-past-kv-heads@default+tp=4")
    assert all(after.expected[key] != before.expected[key] for key in stage.ask)


def test_within_the_kv_heads_capping_changes_nothing(variant):
    results = variant("tp-past-kv-heads@default+tp=4").sheet.results
    assert results["pp_stages"] == 1 and results["comm_capped"] == results["allreduce"]


@pytest.mark.parametrize("seed", ["default", *range(20)])
def test_capped_layout_step_matches_plain_arithmetic(variant, seed):
    """Both decode steps re-derived in plain Python from the printed parameters and hardware.yaml."""
    solution = variant(f"tp-past-kv-heads@{seed}")
    p, results = _params(solution), solution.sheet.results
    model, gpu, tp, R = p["model"], p["gpu"], p["tp"], p["batch"]
    if tp <= model.kv_heads:
        assert results["faster_layout"] == "the same layout"
        return
    T, S = model.kv_heads, tp // model.kv_heads
    element = {"bf16": 2, "fp8": 1}[p["dtype"]]
    L_s = math.ceil(model.layers / S)
    kv_total = 2 * model.layers * model.kv_heads * model.head_dim * element * p["context"] * R
    m = R // S
    ring = 2 * model.layers * (10e-6 + 2 * (T - 1) / T * m * model.hidden * 2 / float(link_each_way(gpu, T)))
    comm = S * L_s / model.layers * ring + (S - 1) * m * model.hidden * 2 / float(link_each_way(gpu, tp))
    weights = model.params_b * 1e9 * element * L_s / (model.layers * T)
    reads = S * (weights + kv_total / T * L_s / model.layers * m / R) / (gpu.hbm_tb_s * 1e12 * STEP_BW)
    step = max(reads, _step_math(p)) + comm + STEP_OVERHEAD
    assert results["comm_capped"] == pytest.approx(comm, rel=1e-9)
    assert results["step_capped"] == pytest.approx(step, rel=1e-9)
    faster = "TP at the heads plus stages" if step < results["step_tp"] else "TP as drawn"
    assert results["faster_layout"] == faster


def test_tp_past_kv_heads_takes_kv_bytes_per_token_as_given(variant):
    sheet = variant("tp-past-kv-heads@default").sheet
    assert sheet.prerequisites == {"kv-bytes-per-token"}
    assert sheet.results["kv_per_token_gpu"] == 23.5 * KIB  # the per-GPU share is still derived: one head of four


# --- sliding-window-savings ----------------------------------------------------------------


def test_sliding_window_default_is_about_half(variant):
    """gpt-oss-120b: half of 36 layers at a 128-token window, 128K context (the keys are pinned in the question
    file): past a 128-token context the windows save."""
    assert variant("sliding-window-savings@default").sheet.results["boundary_context"] == 128


def _layer_kinds(model_id: str, layers: int) -> list[bool]:
    """True for a sliding-window layer, from each model's published layer pattern (HF modelling code)."""
    if model_id.startswith("gemma-3"):
        return [(i + 1) % 6 != 0 for i in range(layers)]  # every sixth layer global
    return [i % 2 == 0 for i in range(layers)]  # Gemma 2 and gpt-oss alternate, windowed first


@pytest.mark.parametrize("model_id, layers, windowed, window", [
    ("gemma-3-27b", 62, 52, 1024), ("gemma-2-9b", 42, 21, 4096), ("gemma-2-27b", 46, 23, 4096),
    ("gpt-oss-120b", 36, 18, 128), ("gpt-oss-20b", 24, 12, 128),
])
def test_sliding_window_configs_match_published_patterns(catalog, model_id, layers, windowed, window):
    """Reference data: Gemma-3 27B has 62 layers, 10 global, window 1024; Gemma-2 is 1:1 at 4096."""
    model = catalog.get("models", model_id)
    assert (model.layers, model.sliding_window_layers, model.sliding_window) == (layers, windowed, window)
    assert sum(_layer_kinds(model_id, layers)) == windowed


@pytest.mark.parametrize("seed", range(20))
def test_sliding_window_saving_matches_a_per_layer_sum(variant, seed):
    """Sum each layer's KV over the published layer pattern, and vLLM's sliding-window block bound."""
    solution = variant(f"sliding-window-savings@{seed}")
    p, expected = _params(solution), solution.expected
    model, context, block = p["model"], p["context"], p["block_size"]
    per_layer_token = 2 * model.kv_heads * model.head_dim * {"bf16": 2, "fp8": 1}[p["kv_dtype"]]
    kinds = _layer_kinds(p["model"].id, model.layers)
    kept = sum(min(model.sliding_window, context) if sliding else context for sliding in kinds) * per_layer_token
    full = model.layers * context * per_layer_token
    assert expected["kv_full"] == pytest.approx(full)
    assert expected["kv_windowed"] == pytest.approx(kept)
    assert expected["saving"] == pytest.approx(1 - kept / full, abs=1e-12)
    if context > model.sliding_window:
        # vLLM SlidingWindowSpec.max_memory_usage_bytes, one decode token per step: cdiv(W - 1 + 1, B) + 1 pages.
        assert expected["window_blocks"] == -(-model.sliding_window // block) + 1
    else:
        assert expected["window_blocks"] == -(-context // block)  # nothing has slid out yet
    windowed_keep = sum(kinds) * min(model.sliding_window, context)
    full_keep = (model.layers - sum(kinds)) * context
    assert (expected["regime"] == "layer-ratio") == (full_keep > windowed_keep)


def test_sliding_window_refuses_a_context_at_the_crossover(variant):
    """Gemma-3-27B's layers keep equal KV at 52 × 1,024 / 10 = 5,324.8 tokens; at 5,400 the full layers keep more
    tokens, but in 16-token blocks the two tie (338 × 10 = 65 × 52): within 2% is refused. Gemma-2 at its window
    (4,096) is no toss, since every layer keeps the whole request; 4,000 tokens, 2.3% under Gemma-3's line, stands."""
    for context in (5300, 5400):
        with pytest.raises(VariantError, match="too close to call"):
            variant(f"sliding-window-savings@default+model=gemma-3-27b+context={context}")
    assert variant("sliding-window-savings@default+model=gemma-3-27b+context=5500").expected["regime"] == "layer-ratio"
    assert variant("sliding-window-savings@default+model=gemma-3-27b+context=5200").expected["regime"] == "window"
    assert variant("sliding-window-savings@default+model=gemma-2-9b+context=4096").expected["regime"] == "window"


def test_sliding_window_pinned_seed(variant):
    """Seed 1 draws these parameters (its keys are pinned in the question file); W/B blocks without the mid-block
    extra grades wrong."""
    solution = variant("sliding-window-savings@1")
    assert [p.raw for p in solution.params] == ["gemma-3-27b", 8000, "fp8", 16, 2]
    assert solution.grade_one("window_blocks", "64").verdict == WRONG


def test_sliding_window_allocator_is_judged_on_the_context(variant):
    """Review nit: the allocator select had two key sets in 200 draws. It follows the context (the window inside
    it or not) and the layer ratio (a 1:1 pattern never doubles the requests a pool holds: it caps below 2x)."""
    sets = set()
    for seed in range(60):
        solution = variant(f"sliding-window-savings@{seed}")
        judged = solution.sheet.results["allocator"]
        twice = "the same pool holds at least {more} as many such requests with the windows freed"
        model = solution.param("model").value
        assert judged[twice] == (1 / (1 - solution.expected["saving"]) >= 2)
        if model.sliding_window_layers * 2 == model.layers:
            assert judged[twice] is False
        sets.add(frozenset(option for option, holds in judged.items() if holds))
    assert len(sets) >= 3


def test_sliding_window_push_crosses_or_moves_the_lever(variant, catalog):
    """The push: a Gemma draw moves its context across its boundary (4,096 or 5,325 tokens); gpt-oss-120b at the
    default, whose boundary (128 tokens) lies below any request, moves to Gemma-3 (5 windowed layers of 6)."""
    from solvers.interview import stage_run

    solution = variant("sliding-window-savings@default")
    pushed = stage_run(solution, catalog, 2)
    assert pushed is not None and pushed.moved == ("model",)
    assert pushed.solution.expected["saving"] == pytest.approx(52 / 62 * (1 - 1024 / 131072))
    gemma = variant("sliding-window-savings@default+model=gemma-3-27b+context=3000")
    assert gemma.expected["regime"] == "window"
    across = stage_run(gemma, catalog, 2)
    assert across is not None and across.moved == ("context",) and across.regime == "layer-ratio"


def test_sliding_window_takes_kv_bytes_per_token_as_given(variant):
    sheet = variant("sliding-window-savings@default").sheet
    assert sheet.prerequisites == {"kv-bytes-per-token"}
    assert "kv_per_token" not in sheet.results  # no longer derived here


# --- cow-block-sharing ---------------------------------------------------------------------


def test_cow_tail_cost_depends_on_the_variant(variant):
    """Review bug: "when does the first copy happen" was first-decode-step in 95% of draws. Now the engine decides
    it, and no key is the answer of nine draws in ten."""
    keys = [variant(f"cow-block-sharing@{seed}").expected["tail_cost"] for seed in range(60)]
    assert max(keys.count(key) for key in set(keys)) < 0.9 * len(keys)
    assert {"a-copy-at-the-first-decode-step", "a-recompute-at-prefill"} <= set(keys)


def _simulate_block_manager(prompt: int, output: int, samples: int, block: int) -> tuple[int, int, int | None]:
    """A reference-counted block manager with copy-on-write (vLLM v0's rule), token by token.

    Returns (blocks held at the end, copies made, decode step of the first copy)."""
    refs: dict[int, int] = {}

    def allocate() -> int:
        refs[len(refs)] = 1
        return len(refs) - 1

    prompt_blocks = [allocate() for _ in range(-(-prompt // block))]
    for block_id in prompt_blocks:
        refs[block_id] = samples
    tables = [list(prompt_blocks) for _ in range(samples)]
    copies, first_copy = 0, None
    for step in range(1, output + 1):
        length = prompt + step - 1  # tokens each sample holds before writing this one
        for table in tables:
            if length % block == 0:
                table.append(allocate())
            elif refs[table[-1]] > 1:
                refs[table[-1]] -= 1
                table[-1] = allocate()
                copies += 1
                first_copy = first_copy or step
    held = {block_id for table in tables for block_id in table}
    return len(held), copies, first_copy


def _simulate_prefix_cache(prompt: int, output: int, samples: int, block: int) -> tuple[int, int]:
    """vLLM v1: samples as requests in turn; the first's full prompt blocks go into a prefix cache, later ones
    match at most prompt - 1 tokens of it in whole blocks. Returns (blocks held at the end, tokens prefilled
    again)."""
    cache: dict[int, int] = {}  # block index in the prompt -> block id
    held: set[int] = set()
    recomputed, next_id = 0, 0
    for sample in range(samples):
        hit = 0
        while (hit + 1) * block <= prompt - 1 and hit in cache:
            hit += 1
        table = [cache[i] for i in range(hit)]
        if sample:
            recomputed += prompt - hit * block
        while len(table) * block < prompt + output:
            table.append(next_id)
            next_id += 1
        for i in range(prompt // block):  # full prompt blocks are hashed once computed
            cache.setdefault(i, table[i])
        held.update(table)
    return len(held), recomputed


@pytest.mark.parametrize("overrides", [
    "", "+prompt=992", "+prompt=1001+output=5000", "+samples=2+output=20", "+block_size=32+prompt=4097+output=3",
    "+samples=16+prompt=100+output=16000",
])
@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v1"])
def test_cow_matches_a_simulated_block_manager(variant, overrides, engine):
    solution = variant(f"cow-block-sharing@default{overrides}+engine={engine}")
    p, expected, results = _params(solution), solution.expected, solution.sheet.results
    sizes = [int(p[k]) for k in ("prompt", "output", "samples", "block_size")]
    if engine == "vllm-v0":
        held, copies, first_copy = _simulate_block_manager(*sizes)
        assert results["copies"] == copies
        assert expected["tail_redone"] == copies * (p["prompt"] % p["block_size"])  # each copy carries the tail
        assert (expected["tail_cost"] == "a-copy-at-the-first-decode-step") == (first_copy == 1)
    else:
        held, recomputed = _simulate_prefix_cache(*sizes)
        assert expected["tail_redone"] == recomputed
        assert expected["tail_cost"] == "a-recompute-at-prefill"
    assert expected["blocks_with"] == held
    assert expected["blocks_without"] == p["samples"] * -(-(p["prompt"] + p["output"]) // p["block_size"])


def test_cow_refuses_a_saving_within_its_tolerance_of_the_line(variant):
    """2 samples, prompt 32, block 16, output 32 save exactly 25%, half the 50% ceiling, and a saving graded within
    2% could be called either way: refused (the review's @37 sat at a margin of 0.98). One block more is kept."""
    with pytest.raises(VariantError, match="too close to call"):
        variant("cow-block-sharing@default+samples=2+prompt=32+output=32+block_size=16")
    kept = variant("cow-block-sharing@default+samples=2+prompt=48+output=32+block_size=16").sheet.results
    assert kept["saving"] == pytest.approx(1 - 7 / 10)  # 3 shared + 2 × 2 own of 2 × 5


@pytest.mark.parametrize("seed", range(30))
def test_cow_push_crosses_to_the_other_side(variant, catalog, seed):
    """Long rollouts (16,000 tokens, past any prompt drawn) leave under half the ceiling; 20-token answers to a prompt
    of at least 100 keep over half. The memory saved does not move with the outputs: the shared blocks stay."""
    from solvers.interview import stage_run

    solution = variant(f"cow-block-sharing@{seed}")
    runs = [run for i, stage in enumerate(solution.question.stages) if stage.push
            if (run := stage_run(solution, catalog, i)) is not None]
    assert len(runs) == 1 and runs[0].regime != solution.regime_name, seed
    assert runs[0].solution.expected["saved_bytes"] == pytest.approx(solution.expected["saved_bytes"])


def test_cow_pinned_seed(variant):
    """Seed 1 draws these parameters (its keys are pinned in the question file)."""
    assert [p.raw for p in variant("cow-block-sharing@1").params][:6] == ["llama-3-70b", "fp8", 16, 16, 392, 339]
