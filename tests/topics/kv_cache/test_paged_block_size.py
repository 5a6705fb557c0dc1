"""paged-block-size: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.answers import CORRECT
from solvers.engine import VariantError
from tests.by_hand import DTYPE_BYTES, GiB, param_values

# Answers that are whole-number counts: a neighbouring whole number must never grade correct.
EXACT_COUNTS = {
    "paged-block-size": ("prefix_recompute",),
    "sliding-window-savings": ("window_blocks",),
    "cow-block-sharing": ("blocks_with", "blocks_without", "tail_redone"),
}


def test_paged_block_size_default(variant):
    """Llama-3-70B bf16 (320 KiB/token), blocks of 16, 256 sequences of 2,048 tokens (the keys are pinned in the
    question file): the mean empty slots, the sequences they would hold and the length where the waste reaches 4%."""
    results = variant("paged-block-size@default").sheet.results
    assert results["expected_waste"] == 7.5
    assert results["sequences_lost"] == pytest.approx(256 * 7.5 / 2048)
    assert results["boundary_length"] == pytest.approx(180)  # 7.5 x 0.96 / 0.04


def test_no_per_replica_page_or_single_division_is_graded(variant, catalog):
    """Reader (read7): 'one block in one layer' (a replica's page no GPU gathers under TP) and 'blocks per layer'
    (a single division) were graded in stage 3 and the push. Neither is asked now; the pushes ask the
    concurrency the empty KV costs, which moves with the block."""
    from solvers.interview import stage_run

    solution = variant("paged-block-size@default")
    asked = {key for stage in solution.question.stages for key in stage.ask}
    assert not asked & {"page_bytes", "blocks_per_sequence"}
    run = stage_run(solution, catalog, 3)
    assert run is not None and "sequences_lost" in run.ask
    assert run.solution.expected["sequences_lost"] > 10 * solution.expected["sequences_lost"]


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
    p, expected = param_values(solution), solution.expected
    model, block = p["model"], p["block_size"]
    per_token = 2 * model.layers * model.kv_heads * model.head_dim * DTYPE_BYTES[p["kv_dtype"]]
    waste = (block - 1) / 2
    assert solution.sheet.results["worst_batch_waste"] == pytest.approx(p["batch"] * (block - 1) * per_token)
    assert expected["sequences_lost"] == pytest.approx(p["batch"] * waste / p["mean_length"])
    assert expected["batch_waste"] == pytest.approx(p["batch"] * waste * per_token)
    assert expected["prefix_recompute"] == p["prefix"] % block
    share = waste / (p["mean_length"] + waste)
    assert expected["waste_share"] == pytest.approx(share)
    assert (expected["regime"] == "waste-negligible") == (share < 0.04)


def test_paged_prefix_is_shorter_than_the_requests_it_opens(variant):
    """Review bug (@7: a 4,597-token system prompt in 680-token requests): every draw holds the prompt and a
    block of its own text, and an override that breaks it is refused."""
    for seed in range(60):
        p = param_values(variant(f"paged-block-size@{seed}"))
        assert p["prefix"] + p["block_size"] <= p["mean_length"], seed
    with pytest.raises(VariantError, match="prefix_shorter"):
        variant("paged-block-size@default+prefix=2000+mean_length=680")


@pytest.mark.parametrize("seed", range(20))
def test_paged_block_choice_matches_plain_arithmetic(variant, seed):
    solution = variant(f"paged-block-size@{seed}")
    p, judged = param_values(solution), solution.sheet.results["block_choice"]
    block, length, prefix = p["block_size"], p["mean_length"], p["prefix"]

    def share(size):
        return (size - 1) / 2 / (length + (size - 1) / 2)

    half, twice = (f"with {size} the block size the empty share would{still} be under {{waste_tolerance}}"
                   for size, still in (("half", ""), ("twice", " still")))
    assert judged[half] == (share(block / 2) < 0.04)
    assert judged[twice] == (share(2 * block) < 0.04)
    assert judged["half the block size would cache more of the system prompt"] == (
        prefix % (block // 2) < prefix % block)
    assert judged["twice the block size would prefill more of the system prompt again"] == (
        prefix % (2 * block) > prefix % block)


def test_option_c_varies_and_prompts_span_two_blocks(variant):
    """Reader (read7): 'twice the block size would leave the whole system prompt uncached' held only for prompts
    under 2B, almost never; and a prompt under one block made the recomputed tail equal the prompt. Draws now hold
    a prompt of two blocks or more, and the option asks whether 2B recomputes more of it (half the time)."""
    truths = set()
    for seed in range(80):
        solution = variant(f"paged-block-size@{seed}")
        p = param_values(solution)
        assert p["prefix"] >= 2 * p["block_size"], seed
        assert solution.expected["prefix_recompute"] != p["prefix"]
        truths.add(solution.sheet.results["block_choice"]["twice the block size would prefill more of the system "
                                                           "prompt again"])
    assert truths == {True, False}


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
    blocks = f"{int(solution.sheet.results['blocks_per_sequence']):,}"
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
