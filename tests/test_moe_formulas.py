"""The MoE helper (solvers/formulas/moe.py): parameter counts against published figures and the
experts a batch touches against a seeded simulation."""
from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.formulas.moe import parameter_count
from tests.oracles import batch_for_share, experts_touched


def test_deepseek_v3_fields_give_671b_total_and_37b_active(catalog):
    """The config fields alone (58 MoE layers of 256 routed + 1 shared expert of 3 x 7168 x 2048, 3 dense MLPs,
    MLA projections, embeddings) give the technical report's 671B total and 37B active."""
    count = parameter_count(catalog.get("models", "deepseek-v3"))
    assert count.routed == 58 * 256 * 3 * 7168 * 2048  # 653.9B
    assert count.total == pytest.approx(671e9, rel=1e-3)
    assert count.active == pytest.approx(37.5e9, rel=2e-3)


@pytest.mark.parametrize(("model", "total_rel", "active_rel"), [
    ("mixtral-8x7b", 1e-3, 1e-3), ("qwen3-235b-a22b", 1e-3, 0.01), ("kimi-k2", 1e-4, 1e-3)])
def test_published_total_and_active_counts(catalog, model, total_rel, active_rel):
    """Mixtral's paper (46.7B / 12.9B), Qwen3's card (235B / 22B); Kimi K2's entry holds the config count, which
    its README rounds to 1T / 32B."""
    entry = catalog.get("models", model)
    count = parameter_count(entry)
    assert count.total == pytest.approx(entry.params_b * 1e9, rel=total_rel)
    assert count.active == pytest.approx(entry.active_params_b * 1e9, rel=active_rel)


@pytest.mark.parametrize("model", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_counts_leave_out_the_input_embedding(catalog, model):
    """The gpt-oss card counts active parameters without the embedding table (a lookup, not a matmul):
    5.13B and 3.61B; the helper counts it, as DeepSeek, Mixtral and Qwen do."""
    entry = catalog.get("models", model)
    count = parameter_count(entry)
    assert count.total == pytest.approx(entry.params_b * 1e9, rel=2e-3)  # biases and sinks left out
    assert count.active - entry.vocab * entry.hidden == pytest.approx(entry.active_params_b * 1e9, rel=5e-3)


def test_experts_touched_matches_the_catalogue():
    """DeepSeek-V3: ~163 of 256 experts at batch 32, 95% from a batch of ~94."""
    assert experts_touched(256, 8, 32) == pytest.approx(163.3, abs=0.05)
    assert batch_for_share(256, 8, 0.95) == pytest.approx(94.36, abs=0.01)


@pytest.mark.parametrize(("experts", "k", "batch"), [(256, 8, 32), (8, 2, 5), (128, 4, 300)])
def test_experts_touched_matches_a_seeded_simulation(experts, k, batch):
    """Tokens drawing k distinct experts each, 4,000 seeded trials: the mean distinct count is the closed form
    (each token misses a given expert with probability 1 - k/E exactly)."""
    rng = np.random.default_rng(experts * 1000 + batch)
    trials = 4000
    picks = np.argsort(rng.random((trials, batch, experts)), axis=2)[:, :, :k]
    seen = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(seen, picks.reshape(trials, -1), True, axis=1)
    counts = seen.sum(axis=1)
    standard_error = counts.std() / math.sqrt(trials)
    assert abs(counts.mean() - experts_touched(experts, k, batch)) < 4 * standard_error + 1e-9
