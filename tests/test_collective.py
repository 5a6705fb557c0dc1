"""TP all-reduces (solvers/formulas/collective.py): the ring over the link the group shares."""
from __future__ import annotations

import pytest

from solvers.derivation import Reject, Sheet
from solvers.engine import VariantError
from solvers.formulas.collective import crosses_domain, tp_all_reduce
from solvers.formulas.steptime import StepConstants, engine, step_time, step_work
from solvers.realism import constraints_for


def ring(layers, tokens, hidden, tp, bandwidth, latency):
    return 2 * layers * (latency + 2 * (tp - 1) / tp * tokens * hidden * 2 / bandwidth)


def test_a_20k_prefill_at_tp8_pays_about_29_percent_for_its_all_reduces(catalog):
    """The issue's figure: Llama-3-70B, 20K-token prefill, TP 8 on H100 SXM (450 GB/s NVLink each
    way), at the step-time model's 60% of peak: the all-reduces add about 29% to the step."""
    model, gpu = catalog.get("models", "llama-3-70b"), catalog.get("gpus", "h100-sxm")
    s = Sheet()
    e = engine(s, model, gpu, 8, StepConstants(overhead=None))
    prompt = s.given("T_p", 20_000, "tokens")
    t_ar = tp_all_reduce(s, model, gpu, 8, prompt, tag="pre", label="prefill")
    work = step_work(s, e, "pre", "prefill", prompt, prompt**2 / 2, 0)
    bare = step_time(s, e, "bare", "prefill without communication", work)
    with_comm = step_time(s, e, "comm", "prefill", work, communication=t_ar)
    assert s.value(t_ar) == pytest.approx(ring(80, 20_000, 8192, 8, 450e9, 10e-6))
    assert s.value(with_comm) / s.value(bare) == pytest.approx(1.29, abs=0.01)


def test_one_gpu_has_no_all_reduce_and_the_card_latency_depends_on_the_link(catalog):
    model, h100, gb200 = (catalog.get("models", "llama-3.1-405b"), catalog.get("gpus", "h100-sxm"),
                          catalog.get("gpus", "gb200"))
    assert tp_all_reduce(Sheet(), model, h100, 1, 100, tag="d", label="decode step") == 0
    assert not crosses_domain(h100, 8) and crosses_domain(h100, 16) and not crosses_domain(gb200, 16)
    with pytest.raises(Reject, match="leaves the H100 SXM NVLink domain"):
        tp_all_reduce(Sheet(), model, h100, 16, 100, tag="d", label="decode step")
    s = Sheet()
    crossing = tp_all_reduce(s, model, h100, 16, 100, tag="d", label="decode step",
                             nic=catalog.get("nics", "connectx-7"))
    assert s.value(crossing) == pytest.approx(ring(126, 100, 16384, 16, 50e9, 50e-6))
    s = Sheet()
    inside = tp_all_reduce(s, model, gb200, 16, 100, tag="d", label="decode step")
    assert s.value(inside) == pytest.approx(ring(126, 100, 16384, 16, 900e9, 10e-6))


def test_tp_within_scale_up_reads_the_gpus_own_domain(catalog):
    (rule,) = constraints_for({"tp"}, (), frozenset())
    h100, gb200 = catalog.get("gpus", "h100-sxm"), catalog.get("gpus", "gb200")
    assert rule.check({"tp": 16, "gpu": gb200}) is None
    assert "8-GPU NVLink domain" in rule.check({"tp": 16, "gpu": h100})
    assert rule.check({"tp": 8}) is None and rule.check({"tp": 16}) is not None


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_mesh_fabric_gives_a_narrow_group_only_the_links_among_its_gpus(catalog, tp):
    """MI300X's Infinity Fabric is 7 direct links of 64 GB/s each way, no switch: a TP group of n uses the n − 1
    links among its members (64, 192, 448 GB/s). NVLink's switch gives any group its full 450 GB/s."""
    model, mi300x, h100 = (catalog.get("models", "llama-3-70b"), catalog.get("gpus", "mi300x"),
                           catalog.get("gpus", "h100-sxm"))
    s = Sheet()
    mesh = tp_all_reduce(s, model, mi300x, tp, 100, tag="d", label="decode step")
    assert s.value(mesh) == pytest.approx(ring(80, 100, 8192, tp, 64e9 * (tp - 1), 10e-6))
    s = Sheet()
    switched = tp_all_reduce(s, model, h100, tp, 100, tag="d", label="decode step")
    assert s.value(switched) == pytest.approx(ring(80, 100, 8192, tp, 450e9, 10e-6))


@pytest.mark.parametrize("code", ["weight-read-intensity@default+gpu=mi300x+tp=4",
                                  "datasheet-speedup-regimes@default+new_gpu=mi300x+gpus=4"])
def test_an_xgmi_ring_spans_all_eight_gpus(variant, code):
    """The all-reduces take half the xGMI aggregate as the link, which only a ring over all eight MI300X
    reaches: TP 2 and 4 on MI300X are refused, TP 8 is served."""
    with pytest.raises(VariantError, match="xGMI"):
        variant(code)
    assert variant(code.replace("tp=4", "tp=8").replace("gpus=4", "gpus=8")).expected["regime"]
