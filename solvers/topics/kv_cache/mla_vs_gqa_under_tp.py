"""MLA vs GQA per GPU - the small cache that does not split."""
from __future__ import annotations

from dataclasses import replace

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.kvlayout import fp8_latent_note
from solvers.formulas.steptime import engine, step_time, step_work, usable_hbm
from solvers.sheetmath import ceil_of, floor_of, max_of
from solvers.units import format_number, format_quantity


def _node_requests(s: Sheet, usable, W, kv, C, G, tp) -> float:
    """Requests the node holds with `kv` bytes a token on each GPU of TP-`tp` replicas (0 where the weights
    leave no room)."""
    room = usable - W / tp
    if s.compare(room, 0) <= 0:
        return 0.0
    return s.evaluate(G / tp * floor_of(room / (kv * C)))


DP_LEVER = ("data-parallel attention for the MLA model, each GPU keeping the whole attention weights and only its "
            "own requests' latents")
FP8_MLA = "an fp8 latent for the MLA model alone (GQA's cache left as it is)"
FP8_GQA = "an fp8 cache for the GQA model alone (the latent left as it is)"
LONGER = "requests twice as long, for both"


def _reversals(s: Sheet, p, usable, e, kv_g, kv_m, C, G, req_g, req_m) -> None:
    """One criterion for every option: with this change alone, does the other layout now hold more requests on the
    node? A change that favours the side already ahead can only widen its lead. No option moves the TP: the push
    does, and a lever's verdict at TP/2 or 2·TP would answer it."""
    key = "mla_levers"
    g_now, m_now = s.value(req_g), s.value(req_m)
    gqa_ahead = g_now > m_now
    ahead, behind = ("GQA", "MLA") if gqa_ahead else ("MLA", "GQA")

    def verdict(g: float, m: float) -> tuple[bool, str]:
        flips = m > g if gqa_ahead else g > m
        lead_now, lead = (g_now - m_now, g - m) if gqa_ahead else (m_now - g_now, m - g)
        said = (f"{behind} now holds more" if flips else f"it only widens {ahead}'s lead" if lead > lead_now
                else "the two now hold as many" if g == m else f"{ahead} still holds more")
        return flips, f"GQA {format_number(g)}, MLA {format_number(m)} on the node: {said}"

    # Data-parallel attention: every GPU copies the attention weights whole and keeps only its own
    # requests' latents; the MLP stays tensor-parallel.
    m = p.model
    N_att = s.given("N_att", m.layers * 2 * m.hidden * (m.heads + m.kv_heads) * m.head_dim, "",
                    "attention parameters (q, o, and k, v at the GQA size the retrofit keeps)")
    W_att = N_att * e.W / e.N
    room_dp = usable - (e.W - W_att) / e.TP - W_att
    dp_total = s.evaluate(G * floor_of(max_of(room_dp, 0) / (kv_m * C)))
    flips, why = verdict(g_now, dp_total)
    s.judge(key, DP_LEVER, flips,
            f"each GPU copies {format_quantity(s.evaluate(W_att), 'GB')} of attention weights and keeps only its "
            f"own requests' latents: {why}")
    if p.kv_dtype == "fp8":
        s.judge(key, FP8_MLA, None, "the cache is fp8 already")
        s.judge(key, FP8_GQA, None, "the cache is fp8 already")
    else:
        flips, why = verdict(g_now, _node_requests(s, usable, e.W, kv_m / 2, C, G, e.TP))
        s.judge(key, FP8_MLA, flips, "half-size latents: " + why)
        flips, why = verdict(_node_requests(s, usable, e.W, kv_g / 2, C, G, e.TP), m_now)
        s.judge(key, FP8_GQA, flips, "half-size GQA heads: " + why)
    s.judge(key, LONGER, False,
            "both caches grow with the context and share one room: each count about halves, and the layout whose "
            "token takes less of a GPU stays ahead", fact=True)
    if not any(s.judged(key).values()):  # a push onto this variant asks no levers: only the opening's draw is refused
        s.refuse_if_asked([key], "no lever turns the layouts around on this node: nothing to choose between")


def _layout_regime(s: Sheet, kv_g, kv_m, n_star, n_flip, req_g, req_m) -> None:
    gqa, mla = format_number(s.value(req_g)), format_number(s.value(req_m))
    crossover, flip = format_number(s.value(n_star), 3), format_number(s.value(n_flip))
    # One room for both, so the per-GPU shares decide: the margin printed is the latent against GQA's slice per GPU
    # (a 12% larger latent reads "1.125x above"), not the TP against a power of two, which read "1x" at the flip.
    s.regime_by(kv_m, kv_g, tie="above", above=Side(
        "gqa-holds-more",
        # The summary is the key shown before the push: the crossover TP it would give away stays on the other side.
        f"Each GPU's slice of the GQA heads is smaller than the whole latent every GPU "
        f"keeps: the node holds {gqa} GQA requests against {mla} with MLA, though MLA's token is the smaller.",
        f"Below TP {flip} (the shares are equal at {crossover}; fewer GPUs per replica, or a smaller latent "
        "rank) the GQA share per GPU grows past the latent and MLA's compact cache holds more. Data-parallel "
        "attention removes MLA's copies instead of narrowing TP."),
        below=Side(
        "mla-holds-more",
        f"A GPU still holds more GQA heads than the latent is worth: the node holds {mla} "
        f"MLA requests against {gqa} GQA.",
        f"From TP {flip} (the shares are equal at {crossover}) each GPU's slice of the GQA heads is smaller "
        "than the whole latent every GPU keeps, and GQA holds more requests despite its larger token."))


def solve(p, s: Sheet) -> None:
    gqa = p.model
    e = engine(s, gqa, p.gpu, p.tp, dtype=p.weight_dtype, kv_dtype=p.kv_dtype, communication=True,
               kv_prerequisite=True)
    kv_g = e.KV  # kv_per_token_gpu: TP splits the GQA cache by KV head
    H_kv = s.given("H_kv", gqa.kv_heads, "", "KV heads")
    d_h = s.given("d_h", gqa.head_dim, "", "head dim")
    d_c = s.param("d_c", "kv_lora_rank")
    d_r = s.param("d_r", "rope_dim")
    kv_m = s.step("kv_gpu_mla", "MLA: KV bytes per token on each GPU", "KV_gpu_MLA",
                  s.symbol("L") * (d_c + d_r) * s.symbol("b_kv"), "KiB",
                  "one latent and RoPE key a layer, no K/V pair: it belongs to every head at once, so each TP rank "
                  "keeps all of it")
    n_star = s.step("tp_crossover", "TP at which the two per-GPU shares are equal", "n_star",
                    2 * H_kv * d_h / (d_c + d_r), "GPUs",
                    "2·H_kv·d_h/n = d_c + d_r per layer: a boundary, not a layout")
    n_flip = s.step("tp_flip", "Smallest deployable TP at which GQA's share is the smaller", "n_flip",
           2 ** ceil_of(sympy.log(n_star, 2)), "GPUs", "TP degrees come in powers of two; this n* is not one")

    usable = usable_hbm(s, p.gpu)
    room = s.step("room", "KV room per GPU (the same weights either way)", "F", usable - e.W / e.TP, "GB",
                  "usable memory less this GPU's 1/TP of the weights")
    C = s.param("C", "context")
    G = s.param("G", "gpus_per_node")
    per_g = s.step("per_replica_gqa", "GQA: requests one replica holds", "U_GQA", floor_of(room / (kv_g * C)),
                   "requests", "every GPU of the replica holds its heads' share of every request")
    per_m = s.step("per_replica_mla", "MLA: requests one replica holds", "U_MLA", floor_of(room / (kv_m * C)),
                   "requests", "every GPU of the replica holds every request's whole latent")
    if s.value(per_g) < 1 or s.value(per_m) < 1:
        raise Reject("a replica holds no request of this length")
    if s.compare(per_g, per_m) == 0:  # "which holds more" has no answer; whole requests can round both alike
        raise Reject("both layouts hold the same requests")
    req_g = s.step("requests_gqa", "GQA: requests the node holds", "R_GQA", G / e.TP * per_g, "requests",
                   "G/TP replicas fill the node")
    req_m = s.step("requests_mla", "MLA: requests the node holds", "R_MLA", G / e.TP * per_m, "requests",
                   "G/TP replicas fill the node")

    # Each decode step reads every request's cache once; absorbed MLA attends over the latent itself.
    H = s.given("H_q", gqa.heads, "", "query heads")
    L = s.symbol("L")
    A_m = s.step("attention_pair_flops_mla", "MLA: attention FLOPs per query-key pair", "A_MLA",
                 2 * L * H * (2 * d_c + d_r), "FLOP",
                 "absorbed MLA: scores over d_c + d_r, values over d_c, a multiply-add each, every head and layer")
    e_m = replace(e, KV=kv_m, A=A_m)
    for tag, eng, users, name in (("gqa", e, per_g, "GQA"), ("mla", e_m, per_m, "MLA")):
        work = step_work(s, eng, tag, f"{name} decode step", users, users * C, users * C)
        t_ar = tp_all_reduce(s, gqa, p.gpu, p.tp, users, tag=tag, label=f"{name} decode step")
        step_time(s, eng, tag, f"{name} decode step at that batch", work, key=f"tpot_{tag}",
                              communication=t_ar)

    s.assume(f"The MLA variant is {gqa.name} retrofitted with multi-head latent attention (as TransMLA and "
             f"MHA2MLA convert GQA models): a latent of {format_number(p.kv_lora_rank)} plus a {p.rope_dim}-dim "
             "RoPE key per layer, the same layers, heads and weights (the K/V projections change, a few percent "
             "of the parameters, taken as equal).")
    s.assume("MLA decodes in the absorbed form (DeepSeek-V2, section 2.1.3; vLLM and SGLang MLA kernels): each "
             "query head scores against the latent and RoPE key and sums values in the latent, 2·(2·d_c + d_r) "
             "FLOPs per query-key pair per head per layer instead of GQA's 4·d_h.")
    if p.kv_lora_rank < 512:  # read12: a 128 latent for a 70B-class model is a what-if, not a shipped config
        s.assume(f"A latent of {format_number(p.kv_lora_rank)} compresses harder than the released conversions, "
                 "which keep DeepSeek's 512 (TransMLA, to reuse its kernels); MHA2MLA reports quality falling as the "
                 "rank shrinks. The rank here is a what-if for the memory arithmetic, not a claim about quality.")
    fp8_latent_note(s, p.kv_dtype)
    s.assume(f"Both run TP {p.tp} replicas over the node's {format_number(p.gpus_per_node)} GPUs, attention "
             "tensor-parallel too; data-parallel attention for the MLA variant is mla-tp-duplication's subject.")
    s.slip("the MLA latent split over TP like KV heads", 1 / p.tp, on="kv_gpu_mla")
    s.slip(f"x{p.tp}: the whole GQA token per GPU, not its share", p.tp, on="kv_per_token_gpu")
    s.slip("MLA counted with K and V separately", 2.0, on="kv_gpu_mla")
    s.slip("the MLA latent split over TP like KV heads", on="requests_mla",
           factor=s.evaluate(G / e.TP * floor_of(room * e.TP / (kv_m * C))) / s.value(req_m))
    s.slip("one replica only: the other G/TP − 1 forgotten", 1 / (p.gpus_per_node / p.tp), on=("requests_gqa",
                                                                                            "requests_mla"))
    _reversals(s, p, usable, e, kv_g, kv_m, C, G, req_g, req_m)
    _layout_regime(s, kv_g, kv_m, n_star, n_flip, req_g, req_m)

