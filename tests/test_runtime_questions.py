"""Golden checks for the runtime questions: kv-cache-tiers, h200-slower-than-h100,
moe-calibration-starvation, model-runner-v2."""
from __future__ import annotations

import pytest

DAY = 86400.0

# --- kv-cache-tiers ------------------------------------------------------------------------


def test_kv_cache_tiers_default(variant):
    """Llama-3-70B bf16 on TP 4 H100 (a 4,096-token prompt), one 3.84 TB 1-DWPD Gen5 drive per node."""
    r = variant("kv-cache-tiers@default").sheet.results
    flops = 2 * 70.55e9 * 4096 + 4 * 80 * 64 * 128 * 4096**2 / 2
    all_reduce = 2 * 80 * 10e-6 + 2 * 80 * 2 * 0.75 * 8192 * 2 * 4096 / 450e9
    t_re = (flops / (4 * 0.6 * 989.4e12) + all_reduce) / 4096
    assert r["recompute"] == pytest.approx(t_re)  # 70.8 us
    kv_gpu = 327_680 / 4
    assert r["fetch_dram"] == pytest.approx(kv_gpu / 50e9)  # 1.64 us
    assert r["fetch_ssd"] == pytest.approx(kv_gpu / (14e9 / 8))  # 46.8 us: one drive for eight GPUs
    assert r["value_hbm"] == pytest.approx(0.30 * t_re)
    assert r["value_ssd"] == pytest.approx(0.15 * (t_re - kv_gpu / 1.75e9))  # 3.6 us: it pays, barely
    assert r["write_rate"] == pytest.approx(8 * kv_gpu / t_re)  # 9.3 GB/s
    assert 7 < r["lifetime"] / DAY < 9  # about a week
    assert r["admit_share"] == pytest.approx(3.84e12 / DAY / r["write_rate"])  # 0.48%
    assert r["regime"] == "nvme-pays"
    assert r["admission"]["admit a block to the SSD on its second hit, if 1 in 1,000 prefilled blocks gets one"]
    assert not r["admission"]["admit a block to the SSD on its second hit, if 1 in 100 prefilled blocks gets one"]


def test_ssd_endurance_arithmetic():
    """The catalogue's figure: a 3.84 TB 1-DWPD drive written at 11 GB/s lasts about a week, and its
    warranted writes are the ~7 PB that 3.84 TB 1-DWPD datasheets print (Micron 7450 PRO: 7.0 PBW)."""
    tbw = 3.84e12 * 1 * 1826
    assert tbw == pytest.approx(7.0e15, rel=0.005)
    assert tbw / 11e9 / DAY == pytest.approx(7.38, abs=0.01)


def test_kv_cache_tiers_warranty_figures(variant):
    r = variant("kv-cache-tiers@default").sheet.results
    assert r["tbw"] == pytest.approx(3.84e12 * 1826)
    assert r["lifetime"] == pytest.approx(r["tbw"] / r["write_rate"])


def test_small_model_has_no_nvme_tier(variant):
    """The follow-up: Llama-3-8B on one GPU recomputes a token faster than one drive can return its KV."""
    r = variant("kv-cache-tiers@default+model=llama-3-8b+tp=1").sheet.results
    assert r["fetch_ssd"] == pytest.approx(131_072 / 1.75e9)  # 74.9 us
    assert r["recompute"] < r["fetch_ssd"]
    assert r["value_ssd"] < 0
    assert r["regime"] == "nvme-loses"
    assert r["admission"]["admit nothing: recompute what the faster tiers miss"]


@pytest.mark.parametrize("seed", range(40))
def test_kv_cache_tiers_properties(variant, seed):
    """Across draws: the regime is the sign of the NVMe tier's value; the admissible share is the
    lifetime over the 5-year warranty; the prefill with tiers never exceeds recomputing everything."""
    solution = variant(f"kv-cache-tiers@{seed}")
    r = solution.sheet.results
    assert (r["regime"] == "nvme-pays") == (r["value_ssd"] > 0)
    assert r["admit_share"] == pytest.approx(r["lifetime"] / (1826 * DAY))
    assert r["ttft_tiers"] < r["prefill_time"]
    assert r["design"]["keep an NVMe tier: its hits beat recomputing"] == (r["regime"] == "nvme-pays")


def test_longer_prompts_raise_the_recompute(variant):
    """The 'four times this long' judgement agrees with solving that prompt: attention adds per token."""
    short = variant("kv-cache-tiers@default+prompt=2048").sheet.results
    long = variant("kv-cache-tiers@default+prompt=8192").sheet.results
    assert long["recompute"] > short["recompute"]
    option = "the NVMe tier would pay for prompts four times this long"
    assert short["design"][option] == (long["recompute"] > long["fetch_ssd"])
