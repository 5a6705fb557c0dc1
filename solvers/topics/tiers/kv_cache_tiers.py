"""HBM, DRAM or NVMe - what a KV-cache tier is worth, and how fast it wears out."""
from __future__ import annotations

from dataclasses import replace

from solvers.conventions import scale_up_domain
from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms, tp_all_reduce
from solvers.formulas.common import given_matmul_peaks
from solvers.formulas.steptime import StepConstants, engine, step_time, step_work
from solvers.sheetmath import max_of, min_of
from solvers.units import format_number, format_quantity

WARRANTY_DAYS = 1826  # a 5-year drive warranty: 5 × 365 days plus one leap day


TOO_CLOSE = 0.1  # fetch within 10% of recompute: which side wins would turn on the step model's constants
NEAR_TIE = 0.05  # two listed figures within the graded values' 5% tolerance: which is larger is not asked


SECOND_HIT_OPTION = "admit a block to the SSD on its second hit, if one in {second_hit} prefilled blocks gets one"
FP8_OPTION = "with an fp8 KV cache, an NVMe hit would cost at most a quarter of its recompute"
OVERLAP_OPTION = "read layer by layer while the misses recompute, the NVMe reads would hide entirely"
LONG_OPTION = "for prompts four times this long, an NVMe hit would cost at most half its recompute"
RETAIN_OPTION = "written through, a block stays on the drives at least half an hour before it is overwritten"
CAP_OPTION = "cap SSD writes at the drives' warranted rate, whatever the hit pattern"


def _engine(s: Sheet, p):
    # The step overhead is paid whether a prefix is fetched or recomputed: it cancels, so it is left out.
    return engine(s, p.model, p.gpu, p.tp, StepConstants(overhead=None), dtype=p.dtype, communication=p.tp > 1,
                  kv_prerequisite=True)


def _prefill(s: Sheet, p, e, D, tag: str, label: str, key: str = "", why: str = ""):
    """Time of prefilling a D-token prompt from scratch by the step-time model, TP all-reduces included:
    (the time, the step's work, the all-reduce time)."""
    work = step_work(s, e, tag, label, D, D**2 / 2, 0)
    comm = tp_all_reduce(s, p.model, p.gpu, p.tp, D, tag=tag, label=label)
    return step_time(s, e, tag, label, work, key=key, why=why, communication=comm), work, comm


def _design(s: Sheet, p, e, work, D, times, values, comm, hits) -> None:
    """Which tiers save most here, and how far the NVMe tier sits from the line: where it pays, what would
    still keep it paying; where it loses, what would make it pay. A what-if whose truth the side already
    settles (a paying tier paying with fp8; a losing one still losing at half the read rate) is not asked."""
    def us(value: float) -> str:
        return format_quantity(value, "us")

    t_re, t_dram, t_ssd = times
    ssd = s.value(t_ssd)
    pays = s.compare(t_re, t_ssd) > 0
    v_H, v_D, v_S = values
    settled = "not asked: the tier already loses, and this only makes it lose more"

    def larger(a, b) -> bool | None:
        """a > b, or None (not asked) where the two sit within the graded values' tolerance of each other."""
        x, y = float(s.evaluate(a)), float(s.evaluate(b))
        return None if abs(x - y) < NEAR_TIE * max(abs(x), abs(y)) else s.compare(a, b) > 0

    near = ": within 5%, not asked"

    def quicker(a, b) -> bool | None:
        """a < b, or None (not asked) where the two times sit within the fetch's 3% tolerance of each other."""
        x, y = float(s.evaluate(a)), float(s.evaluate(b))
        return None if abs(x - y) < 0.03 * max(x, y) else s.compare(a, b) < 0

    holds = larger(v_D, v_H)
    s.judge("design", "the DRAM tier saves more per prompt token than the HBM tier", holds,
            f"{s.text(v_D)} against {s.text(v_H)}" + (near if holds is None else
                                                      ": the hit rates weigh more than the fetch"))
    holds = larger(v_S, v_D) if pays else None  # a losing tier saves less than any paying one
    s.judge("design", "the NVMe tier saves more per prompt token than the DRAM tier", holds,
            f"{s.text(v_S)} against {s.text(v_D)}" + (near if holds is None and pays else
                                                      "" if pays else ": not asked, a losing tier saves nothing"))
    # A tier that loses is bypassed: it saves nothing rather than costing.
    holds = larger(v_H, v_D + max_of(v_S, 0))
    s.judge("design", "the HBM tier saves more per prompt token than the DRAM and NVMe tiers together", holds,
            f"{s.text(v_H)} against {format_quantity(s.evaluate(v_D + max_of(v_S, 0)), 'us')}"
            + (near if holds is None else ""))
    # An fp8 cache halves the fetch and, by matmul-precision, moves attention's recompute to the fp8 peak.
    _, P_fp8 = given_matmul_peaks(s, p.gpu, p.dtype, "fp8", attention_symbol="P_fp8")
    fp8_math = replace(e, P_att=P_fp8).math_time(2 * e.N * D, e.A * D**2 / 2)
    re_fp8 = (max_of(work.bytes / e.byte_rate, fp8_math) + comm) / D
    s.judge("design", FP8_OPTION, quicker(t_ssd / 2, re_fp8 / 4) if pays else None, settled if not pays else
            f"half the bytes: {us(ssd / 2)} a token against a quarter of the fp8 recompute, "
            f"{us(s.evaluate(re_fp8 / 4))} (attention at the fp8 peak)")
    # Overlapped (LMCache, Mooncake: layer by layer), the prompt waits for the longer of the NVMe reads and the
    # misses' recompute: the reads hide entirely where h_SSD·t_SSD <= h_miss·t_re.
    h_H, h_D, h_S = hits
    h_miss = 1 - h_H - h_D - h_S
    read, hide = h_S * t_ssd, h_miss * t_re
    s.judge("design", OVERLAP_OPTION, quicker(read, hide),
            f"{us(s.evaluate(read))} of NVMe reads a prompt token against {us(s.evaluate(hide))} of the misses' "
            "recompute to hide behind")
    s.judge("design", "the NVMe tier would still pay with drives at half the read rate",
            quicker(2 * t_ssd, t_re) if pays else None, settled if not pays else
            f"the fetch doubles to {us(2 * ssd)} a token against {s.text(t_re)}")
    s.judge("design", "the NVMe tier would still pay with a quarter of the drives",
            quicker(4 * t_ssd, t_re) if pays else None, settled if not pays else
            f"the fetch grows fourfold to {us(4 * ssd)} a token against {s.text(t_re)}")
    faster = (max_of(work.bytes / e.byte_rate, work.math / 2) + comm) / D
    s.judge("design", "the NVMe tier would still pay on a GPU with twice the tensor peak (same HBM, same drives)",
            quicker(t_ssd, faster) if pays else None, settled if not pays else
           
            f"the recompute drops to {us(s.evaluate(faster))} a token; the fetch stays {s.text(t_ssd)}")
    # The same prefill at four times the prompt: the weights' share per token falls, attention's grows.
    D4 = 4 * D
    comm4 = all_reduce_terms(s, p.model, p.gpu, p.tp).of(D4)
    long = (max_of(work.bytes / e.byte_rate, e.math_time(2 * e.N * D4, e.A * D4**2 / 2)) + comm4) / D4
    s.judge("design", LONG_OPTION, quicker(t_ssd, long / 2),
            f"the fetch stays {s.text(t_ssd)} against {us(s.evaluate(long / 2))}, half the recompute at "
            f"{format_number(4 * s.value(D))} tokens ({us(s.evaluate(long))}: attention's share grows)")
    if all(s.judged("design").values()):
        raise Reject("every design option holds: nothing to tell apart")


def _admission(s: Sheet, p, admit, held, write) -> None:
    """What holds for the drives' writes: a second-hit rule within the warranty's budget (the traffic's reuse
    drawn), how long write-through keeps a block, and the cap (whether the tier pays is stage 2's)."""
    cap = s.text(admit)
    share = 1 / p.second_hit
    near = abs(s.evaluate(admit) - share) < 0.03 * max(s.evaluate(admit), share)  # within the share's tolerance
    s.judge("admission", SECOND_HIT_OPTION, None if near else s.compare(admit * p.second_hit, 1) >= 0,
            f"1 in {p.second_hit} is {format_quantity(share, '%')} of the prefilled KV, against the {cap} the "
            "warranty allows" + (": within 3%, not asked" if near else ""))
    # A write-through tier is a FIFO over the drives: it keeps a block for its capacity over the write rate.
    kept = held / write
    s.judge("admission", RETAIN_OPTION, s.compare(kept, 1800) >= 0,
            f"the drives turn over every {format_quantity(s.evaluate(kept) / 60, 'min')}: their "
            f"{format_quantity(s.evaluate(held), 'TB')} at {s.text(write)}")
    s.judge("admission", CAP_OPTION, True,
            "a hit pattern that shifts would otherwise wear the drives out early; the cap degrades to fewer hits",
            fact=True)


def _tier_regime(s: Sheet, p, t_re, t_ssd) -> None:
    re, ssd = s.text(t_re), s.text(t_ssd)
    s.regime_by(t_re, t_ssd, tie="below", above=Side(
        "nvme-pays",
        f"Recomputing a token takes {re} and fetching it from the NVMe drives {ssd}: an SSD hit saves time, so "
        "the tier earns its place, and the question becomes how fast writing it through wears the drives out.",
        "Below the line (a small model, a faster GPU, fewer drives) an SSD hit costs more than the recompute it "
        "replaces: the tier should not exist, and DRAM is the last tier worth having."),
        below=Side(
        "nvme-loses",
        f"Recomputing a token takes {re}, fetching it from the NVMe drives {ssd}: {p.model.name} computes its "
        "KV faster than the drives can return it, so every SSD hit makes the prefill slower. The tier should "
        "not exist; the HBM and DRAM tiers carry the reuse.",
        "Above the line (a bigger model per GPU, more drives, fp8 KV) an SSD hit saves time, and the question "
        "becomes endurance: a write-through tier wears its drives out in days."))


def solve(p, s: Sheet) -> None:
    e = _engine(s, p)
    D = s.param("D", "prompt")
    h_H, h_D, h_S = (s.param(sym, name) for sym, name in (("h_HBM", "hit_hbm"), ("h_DRAM", "hit_dram"),
                                                          ("h_SSD", "hit_ssd")))
    B_h = s.param("B_host", "host_link")
    R, n_d, C, dwpd = (s.param(sym, name) for sym, name in (("R_ssd", "ssd_read"), ("n_d", "drives"),
                                                            ("C", "ssd_tb"), ("DWPD", "dwpd")))
    G = s.given("G", scale_up_domain(p.gpu), "GPUs", "GPUs in the node")

    t_full, work, comm = _prefill(s, p, e, D, "pre", "prefill of the whole prompt", key="prefill_time",
                            why="every token recomputed: the slower of the weight reads and the math, then the "
                                "all-reduces" if p.tp > 1 else
                                "every token recomputed: the slower of the weight reads and the math")
    t_re = s.step("recompute", "Recompute time per prompt token", "t_re", t_full / D, "us",
                  "the prefill averaged over its tokens: what a hit in any tier saves before its fetch is paid")
    t_dram = s.step("fetch_dram", "DRAM fetch time per token", "t_DRAM", e.KV / B_h, "us",
                    "each GPU copies its own share of the token's KV over its own host link, all in parallel")
    B_s = s.step("ssd_per_gpu", "NVMe read bandwidth per GPU", "B_SSD", n_d * R / G, "GB/s",
                 "the node's drives serve all its GPUs, which fetch at the same time")
    t_ssd = s.step("fetch_ssd", "NVMe fetch time per token", "t_SSD", e.KV / B_s, "us",
                   "each GPU's share of the token's KV at its share of the drives' read bandwidth")
    for tier, fetch in (("DRAM", t_dram), ("SSD", t_ssd)):
        if abs(s.evaluate(fetch / t_re) - 1) < TOO_CLOSE:
            raise Reject(f"the {tier} fetch is within 10% of the recompute: too close to call")
    v_H = s.step("value_hbm", "HBM tier: time saved per prompt token", "v_HBM", h_H * t_re, "us",
                 "a hit in HBM is already where attention reads it: it saves the whole recompute")
    v_D = s.step("value_dram", "DRAM tier: time saved per prompt token", "v_DRAM", h_D * (t_re - t_dram), "us",
                 "its hit rate times recompute less fetch")
    pays = s.compare(t_re, t_ssd) > 0
    v_S = s.step("value_ssd", "NVMe tier: time saved per prompt token", "v_SSD", h_S * (t_re - t_ssd), "us",
                 "its hit rate times recompute less fetch; "
                 + ("positive: each hit beats recomputing" if pays else
                    "negative: every hit is slower than recomputing"))
    s.step("ttft_tiers", "Prefill time of the prompt with the tiers that pay", "t_tiers",
           D * (t_re - v_H - max_of(v_D, 0) - max_of(v_S, 0)), "ms",
           "a tier that loses is bypassed (its hits recomputed), so it saves nothing rather than costing")

    # Write-through: every token the node prefills leaves its KV for the SSD tier, as fast as the drives take it.
    made = s.step("kv_produced", "KV the node's prefills produce for the SSD", "R_KV", G * e.KV / t_re, "GB/s",
                  "every GPU of the node prefilling: its share of each token's KV, one token per t_re")
    W_s = s.param("W_ssd", "ssd_write")
    cap = s.step("write_capacity", "What the drives can write", "R_cap", n_d * W_s, "GB/s",
                 "every drive at its sequential write rate")
    write = s.step("write_rate", "Write-through rate into the NVMe tier", "R_w", min_of(made, cap), "GB/s",
                   "what the prefills produce, up to what the drives can write: past that the tier keeps only "
                   "the blocks it has time to write")
    Y = s.given("Y", WARRANTY_DAYS, "", "days in a 5-year warranty (5 × 365 + one leap day)")
    day = s.given("t_day", 86400, "h", "one day")
    tbw = s.step("tbw", "Bytes the drives are warranted to take", "TBW", n_d * C * dwpd * Y, "PB",
                 "DWPD full-drive writes every day of the warranty, on every drive")
    capped = s.compare(made, cap) > 0
    s.step("lifetime", "Time to write the warranted bytes", "T_life", tbw / write, "days",
           "the warranty's bytes at the write-through rate"
           + (f"; the drives' write rate caps it (at the prefills' full {s.text(made)} it would be "
              f"{format_quantity(s.evaluate(tbw / made), 'days')})" if capped else ""))
    s.step("prompts_held", "Returning prompts whose KV the node's drives hold", "n_held",
           n_d * C / (e.KV * e.TP * D), "requests",
           "the drives' capacity over a prompt's KV: its tokens times every TP shard of a token's KV")
    budget = s.step("write_budget", "Write rate that lasts the warranty", "R_max", n_d * C * dwpd / day, "MB/s",
                    "DWPD drive capacities a day, spread over the day")
    admit = s.step("admit_share", "Largest share of prefilled KV the SSD may take", "a_max", min_of(budget / made, 1),
                   "%", "the warranty's rate over the rate the prefills produce KV, at most all of it")

    _design(s, p, e, work, D, (t_re, t_dram, t_ssd), (v_H, v_D, v_S), comm, (h_H, h_D, h_S))
    _admission(s, p, admit, n_d * C, write)
    s.assume("The step-time model's fixed overhead per step is left out: a step pays it whether its prefix is "
             "fetched or recomputed, so it cancels from every tier's worth.")
    s.assume("Hit rates are marginal: the share of the prompt's tokens found in that tier and in no faster one. "
             "A fetch is on the request's critical path and is not overlapped with the misses' recompute: the "
             "bound for a tier read before the prefill starts. LMCache and Mooncake load layer by layer while the "
             "misses compute, so a hit then costs the longer of the two, not the sum (one design option asks it).")
    s.assume("A hit is valued at the prompt's average recompute per token, attention's D/2 pairs included: this "
             "slightly overstates what a prefix hit saves, since the suffix still attends over the cached prefix.")
    s.assume("The drives hold KV at the datasheet's capacity (no filesystem or over-provisioning overhead); the "
             "drives' share of the node's read rate reaches each GPU under its host path (a Gen5 switch's uplink "
             "shared by two GPUs), so the drives, not PCIe, set the fetch.")
    s.assume(f"Write-through is the upper bound: all {p.gpu.nvlink_domain} GPUs of the node prefill misses "
             "back to back (a prefill node, or a prefill-heavy load), and every prefilled block goes to the SSD "
             "as fast as the drives' sequential write rate allows (the rest is dropped, not queued). Decode's new "
             "tokens are not written.")
    s.assume("Drive endurance as the datasheet's DWPD over a 5-year warranty: TBW = capacity × DWPD × 1826 days. "
             "Write amplification inside the drive is taken as 1 (sequential block writes); random writes wear "
             "it faster.")
    s.assume("Host DRAM bandwidth is per GPU with all GPUs copying at once; on an HGX board two GPUs share a PCIe "
             "switch's uplink to the CPU, which is why the figure can be half of a Gen5 x16 link's.")
    s.slip("the node's SSD bandwidth taken for each GPU (not shared)", 1 / p.gpu.nvlink_domain, on="fetch_ssd")
    s.slip(f"the whole token's KV per GPU (the TP {p.tp} split forgotten)", p.tp, on=("fetch_dram", "fetch_ssd"))
    s.slip("recompute at one GPU's compute (the TP group forgotten)", p.tp, on="recompute")
    s.slip("DWPD taken over the whole warranty, not per day", 1 / WARRANTY_DAYS, on="lifetime")
    s.slip("one drive's endurance for all of them", 1 / p.drives, on="lifetime")
    _tier_regime(s, p, t_re, t_ssd)

