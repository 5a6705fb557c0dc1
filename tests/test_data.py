"""hardware.yaml and models.yaml: validated, sourced, dense peaks, user additions."""
from __future__ import annotations

import pytest

from solvers.data import SCHEMA, load_catalog


def test_shipped_data_is_clean(catalog):
    assert catalog.problems == []
    gpus, models, nics = (catalog.collections[k] for k in ("gpus", "models", "nics"))
    assert {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "gb200", "mi300x"} <= set(gpus)
    assert {"connectx-7", "connectx-8"} <= set(nics)
    assert {"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mixtral-8x7b", "qwen2.5-72b", "deepseek-v3"} <= set(models)


@pytest.mark.parametrize("gpu, bf16, fp8, tb_s", [
    ("a100-sxm-80gb", 312, None, 2.039), ("h100-sxm", 989.4, 1978.9, 3.35), ("h200-sxm", 989.4, 1978.9, 4.8),
    ("b200", 2250, 4500, 8), ("mi300x", 1307.4, 2614.9, 5.3),
])
def test_dense_peaks_match_reference_data(catalog, gpu, bf16, fp8, tb_s):
    entry = catalog.get("gpus", gpu)
    assert entry.bf16_dense_tflops == bf16
    assert entry.get("fp8_dense_tflops") == fp8
    assert entry.hbm_tb_s == tb_s


def test_h100_dense_peak_from_first_principles(catalog):
    # 132 SMs x 4,096 dense BF16 FLOP per clock x 1.83 GHz: the datasheet's sparse 1,979 is twice this.
    assert catalog.get("gpus", "h100-sxm").bf16_dense_tflops == pytest.approx(132 * 4096 * 1.83e9 / 1e12, rel=1e-3)


def test_llama_405b_has_eight_kv_heads(catalog):
    assert catalog.get("models", "llama-3.1-405b").kv_heads == 8


def test_every_figure_has_a_source(catalog):
    for collection, entries in catalog.collections.items():
        for key, entry in entries.items():
            assert entry.get("source"), f"{collection}.{key} has no source"


def test_user_entries_are_added_and_validated(tmp_path):
    (tmp_path / "hardware.yaml").write_text(
        "gpus:\n"
        "  my-gpu: {name: My GPU, vendor: Me, bf16_dense_tflops: 100, hbm_gb: 24, hbm_tb_s: 1, source: my bench}\n"
        "  no-source: {name: X, vendor: Me, bf16_dense_tflops: 100, hbm_gb: 24, hbm_tb_s: 1}\n"
        "  bad-type: {name: Y, vendor: Me, bf16_dense_tflops: fast, hbm_gb: 24, hbm_tb_s: 1, source: s}\n")
    catalog = load_catalog(user_dir=tmp_path)
    assert "my-gpu" in catalog.collections["gpus"]
    assert "h100-sxm" in catalog.collections["gpus"]
    assert not {"no-source", "bad-type"} & set(catalog.collections["gpus"])
    assert any("no-source" in p and "no source" in p for p in catalog.problems)
    assert any("bad-type.bf16_dense_tflops" in p for p in catalog.problems)


def test_unreadable_user_file_is_a_problem_not_a_crash(tmp_path):
    (tmp_path / "models.yaml").write_text("models: [oops\n")
    catalog = load_catalog(user_dir=tmp_path)
    assert catalog.problems and "models.yaml" in catalog.problems[0]
    assert "llama-3-70b" in catalog.collections["models"]


def test_schema_names_units_in_fields():
    assert all(not name.endswith("tflops") or "dense" in name for name in SCHEMA["gpus"])


PER_SM_GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200")


@pytest.mark.parametrize("key", PER_SM_GPUS)
def test_per_sm_figures_rebuild_the_dense_peaks(catalog, key):
    """SMs x tensor FLOP per clock per SM x the tensor clock = the datasheet's dense peak, per dtype."""
    gpu = catalog.get("gpus", key)
    per_clock = gpu.sms * gpu.tensor_clock_ghz * 1e9 / 1e12
    assert gpu.bf16_dense_tflops == pytest.approx(gpu.bf16_flop_per_clk_sm * per_clock, rel=1e-3)
    if "fp8_dense_tflops" in gpu:
        assert gpu.fp8_dense_tflops == pytest.approx(gpu.fp8_flop_per_clk_sm * per_clock, rel=1e-3)


def test_fa3_special_function_throughput(catalog):
    """FlashAttention-3 sec. 3.1: H100 SXM5 has 3.9 TFLOPS of special functions (16 x 132 x 1.83 GHz)."""
    gpu = catalog.get("gpus", "h100-sxm")
    assert gpu.mufu_per_clk_sm * gpu.sms * gpu.tensor_clock_ghz * 1e9 == pytest.approx(3.9e12, rel=0.01)


def test_tmem_is_128_lanes_by_512_columns_of_32_bits(catalog):
    assert catalog.get("gpus", "b200").tmem_kib_sm * 1024 == 128 * 512 * 4
    assert catalog.get("gpus", "b200").regfile_kib_sm * 1024 == 65536 * 4
