"""Twenty models, two replicas each - how idle, and how to tier them."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.models.common import (
    GPU_MEMORY_UTILIZATION,
    hbm_bytes,
    require_context,
)
from solvers.models.cost import pct_text
from solvers.models.steptime import (
    DEFAULT_CONSTANTS,
    all_reduce_steps,
    decode_at_speed,
    engine,
    mean_decode_context,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of, rank_ceiling, rank_sum
from solvers.units import format_number

DEDICATED_BUSY = sympy.Rational(1, 2)  # a model earns its own replicas once it keeps half of one busy at peak


SHARED_HBM = sympy.Rational(1, 2)  # a shared replica keeps its models' weights in half its usable HBM, KV in the rest


def _tier_assumptions(s: Sheet) -> None:
    s.assume("Traffic over the models follows Zipf's law with the listed exponent; every model is the same "
             "architecture with its own weights (full fine-tunes), and every request has the listed lengths.")
    s.assume("Tiers: a model that keeps half a replica busy at peak gets its own replicas; one whose average rate "
             "falls below the cold threshold is loaded on demand; the rest share replicas that keep their weights "
             "resident in half of usable HBM. Queueing inside the ceiling and the swap cost of sharing are left out.")
    s.assume("A replica prefills its own model's prompts, one a step, between its decode steps: a full fine-tune's "
             "prompts can only run where its weights are. Chunked prefill would mix the two in one step but spend "
             "the same replica-seconds; the stalls a prefill puts between decode steps are left out of the TPOT.")
    s.assume("Shared replicas are sized at the single-model unit U, an optimistic bound: their KV pool has half the "
             "HBM, and requests for different full fine-tunes cannot share a decode step (each step reads one "
             "model's weights), so a real shared tier needs more replicas, or LoRA adapters over one base.")
    s.assume("The cold tier is sized by load alone. With a threshold in requests per second a cold model is still "
             "called every second or so, far more often than a weight load takes: in practice it would stay "
             "loaded (or thrash one replica); on-demand loading pays only for models called minutes apart.")


def _tier_judgements(s: Sheet, top, u, per_model, k, w, d, busy_sh, ded_share, n, saved, today) -> None:
    v = s.evaluate

    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    judge("the top model needs more than its two replicas at the ceiling", s.compare(top, per_model * u) > 0,
          f"it keeps {format_number(v(top), 3)} replicas busy against {format_number(v(per_model * u), 3)} "
          "its two allow at the ceiling")
    for_weights, for_load = ceil_of((w - d) / k), ceil_of(busy_sh / u)
    judge("the shared tier needs more replicas for weights than for load", s.compare(for_weights, for_load) > 0,
          f"{format_number(v(w - d))} models at {format_number(v(k))} a replica need {format_number(v(for_weights))}; "
          f"{format_number(v(busy_sh), 3)} busy replicas of load need {format_number(v(for_load))} at the ceiling")
    judge("more than half the models go cold", s.compare(2 * (n - w), n) > 0,
          f"{format_number(v(n - w))} of {format_number(v(n))}")
    judge("the dedicated tier carries most of the traffic", s.compare(2 * ded_share, 1) > 0,
          f"it carries {pct_text(v(ded_share))}")
    judge("tiering frees more than three quarters of today's GPUs", s.compare(4 * saved, 3 * today) > 0,
          f"{format_number(v(saved))} of {format_number(v(today))} GPUs")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _tier_regime(s: Sheet, b_r, avg_r, cold_rate, rank) -> None:
    """Three tiers, two boundaries: half a replica busy at peak (dedicated), the cold threshold on the average
    rate (cold). A shared model is shown against the nearer of the two, in ratio."""
    busy, r = s.text(b_r, 3), s.text(rank)
    rate, floor = s.text(avg_r, 3), s.text(cold_rate)
    line = s.given("b_ded", DEDICATED_BUSY, "", "busy replicas at peak that earn a model its own")
    dedicated = Side(
        "dedicated",
        f"The rank-{r} model keeps {busy} replicas busy at peak, at least half a replica: it pays for its own "
        "replicas, sized at the ceiling, and nothing from the long tail queues in front of it.",
        "Below half a replica of peak load a model's own replicas mostly idle: it belongs on shared replicas, "
        "or cold if it is rarely called at all.",
        near=f"The rank-{r} model keeps {busy} replicas busy at peak, just over the half-replica line: dedicated, "
             "but a shift in traffic would move it to the shared tier.")
    shared = Side(
        "shared",
        f"The rank-{r} model keeps only {busy} replicas busy at peak, under half a replica, and averages {rate}, "
        f"at or above the {floor} cold threshold: two replicas of its own would idle; it shares a replica whose "
        "weights stay resident.",
        "Past half a replica of peak load it earns dedicated replicas; under the cold threshold on average it is "
        "loaded on demand instead.",
        near=f"The rank-{r} model keeps {busy} replicas busy at peak and averages {rate}: shared, but close to a "
             "tier boundary, so a shift in traffic moves it.")
    cold = Side(
        "cold",
        f"The rank-{r} model averages only {rate}, under the {floor} cold threshold: it goes to the cold tier and "
        "pays a weight load on the request that finds it evicted.",
        "At or above the cold threshold on average it would keep its weights resident on a shared replica.",
        near=f"The rank-{r} model averages {rate}, just under the {floor} cold threshold: cold for now, the first "
             "to return to the shared tier as traffic grows.")
    if s.compare(b_r, line) >= 0:
        s.regime_by(b_r, line, tie="above", above=dedicated, below=shared)
    elif s.compare(avg_r, cold_rate) < 0:
        s.regime_by(avg_r, cold_rate, tie="above", above=shared, below=cold)
    elif s.compare(b_r * avg_r, cold_rate * line) > 0:  # nearer the dedicated line: b_r/line > cold_rate/avg_r
        s.regime_by(b_r, line, tie="above", above=dedicated, below=shared)
    else:
        s.regime_by(avg_r, cold_rate, tie="above", above=shared, below=cold)


def solve(p, s: Sheet) -> None:
    require_context(p.model, p.prompt + p.reply)
    e = engine(s, p.model, p.gpu, p.tp, DEFAULT_CONSTANTS, communication=p.tp > 1, kv_prerequisite=True)
    # First: a layout whose group cannot hold two models' weights is refused before any decode sizing.
    k = s.step("models_per_shared", "Models' weights one shared replica holds", "k",
               floor_of(SHARED_HBM * GPU_MEMORY_UTILIZATION * e.TP * hbm_bytes(p.gpu) / e.W), "",
               "half the group's usable HBM in weight copies, the rest left for KV")
    if s.value(k) < 2:
        raise Reject("a shared replica cannot hold two models' weights")
    n = s.param("n_models", "models")
    per_model = s.param("r_0", "replicas")
    Lam = s.param("Λ", "rate")
    alpha = s.param("s_Z", "zipf")
    peak = s.param("k_peak", "peak_ratio")
    u = s.param("u", "ceiling")
    rank = s.param("r", "rank")
    cold_rate = s.param("λ_cold", "cold_rate")
    load_bw = s.param("BW_load", "load_bandwidth")
    P_in, L_out, tpot = s.param("P_in", "prompt"), s.param("L_out", "reply"), s.param("TPOT", "tpot")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)
    S = mean_decode_context(s, P_in, L_out)
    decode = decode_at_speed(s, e, p.gpu, ar, S, tpot, "the TPOT target")
    # A full fine-tune's prompts can only be prefilled where its weights are: its replicas do both phases.
    pre = step_work(s, e, "pre", "prefill of one prompt", P_in, P_in**2 / 2, 0)
    t_pre = step_time(s, e, "pre", "prefill of one prompt", pre, key="prefill_time", communication=ar.of(P_in),
                      why="the prompt's math at the group's achievable compute, its all-reduces, the overhead")
    T_req = s.step("replica_seconds", "Replica-seconds per request", "T_req",
                   t_pre + L_out * decode.step / decode.batch, "s",
                   "its prefill step plus its reply's share of decode steps at the batch the TPOT target and the KV "
                   "pool allow")
    U = s.step("unit", "Requests/s one replica serves at the SLO", "U", 1 / T_req, "requests/s",
               "one replica-second over the replica-seconds each request holds")

    H = s.step("zipf_norm", "Zipf normaliser over the models", "H", rank_sum(lambda i: i**-alpha, 1, n), "",
               "model i gets Λ·i^(−α)/H of the traffic")
    busy_now = s.step("util_peak", "Fleet utilisation at peak, two replicas each", "ρ_peak", Lam / (n * per_model * U),
                      "%", "the peak rate over the fleet's capacity at the SLO")
    if s.compare(busy_now, u) > 0:
        raise Reject("today's fleet already runs above its ceiling at peak: not the idle fleet tiering is for")
    s.step("util_avg", "Fleet utilisation on average", "ρ_avg", Lam / (peak * n * per_model * U), "%",
           "the average rate is the peak over the peak-to-average ratio")
    top = s.step("top_busy", "Replicas the top model keeps busy at peak", "b_1", Lam / (H * U), "",
                 "its share of the peak over one replica's unit")
    d = s.step("dedicated", "Models that earn dedicated replicas", "n_ded",
               min_of(n, floor_of((Lam / (H * U * DEDICATED_BUSY)) ** (1 / alpha))), "",
               "ranks i with Λ·i^(−α)/(H·U) ≥ 1/2: half a replica busy at peak")
    w = s.step("warm", "Models kept warm (dedicated or shared)", "n_warm",
               min_of(n, floor_of((Lam / (H * peak * cold_rate)) ** (1 / alpha))), "",
               "ranks whose average rate stays at or above the cold threshold")
    if s.compare(w, d) < 0:
        raise Reject("a dedicated model would be cold on average: the thresholds contradict")
    s.step("shared", "Models in the shared tier", "n_sh", w - d, "", "warm but not dedicated")
    ded_share = s.step("dedicated_share", "Share of the traffic the dedicated models take", "f_ded",
                       rank_sum(lambda i: i**-alpha, 1, d) / H, "%", "their Zipf weights over the normaliser")
    s.step("cold", "Models in the cold tier", "n_cold", n - w, "", "loaded on demand")
    ded = s.step("dedicated_replicas", "Dedicated replicas", "R_ded",
                 rank_sum(lambda i: rank_ceiling(Lam * i**-alpha / (H * U * u)), 1, d), "",
                 "each dedicated model's peak busy replicas over the ceiling, in whole replicas")
    busy_sh = s.step("shared_busy", "Replicas the shared models keep busy at peak", "b_sh",
                     rank_sum(lambda i: Lam * i**-alpha / (H * U), d + 1, w), "", "their peak load in replica units")
    sh = s.step("shared_replicas", "Shared replicas", "R_sh",
                max_of(ceil_of(busy_sh / u), ceil_of((w - d) / k)), "",
                "enough for their load at the ceiling and for their weights to stay resident")
    busy_cold = s.step("cold_busy", "Replicas the cold models keep busy at peak", "b_cold",
                       rank_sum(lambda i: Lam * i**-alpha / (H * U), w + 1, n), "", "their peak load in replica units")
    cold_r = s.step("cold_replicas", "Cold-tier replicas", "R_cold", ceil_of(busy_cold / u), "",
                    "one replica that loads a cold model on demand, more only if their load needs it")
    gpus = s.step("gpus_after", "GPUs after tiering", "G_tier", e.TP * (ded + sh + cold_r), "GPUs",
                  "every tier's replicas times the GPUs in each")
    saved = s.step("gpus_saved", "GPUs saved against two replicas each", "G_saved", e.TP * n * per_model - gpus, "GPUs",
                   "today's fleet less the tiered one")
    if s.value(saved) <= 0:
        raise Reject("tiering saves no GPUs: the fleet is already as small as its load")
    s.step("cold_start", "Cold start: loading one model's weights", "t_load", e.W / (e.TP * load_bw), "s",
           "each GPU reads its share of the weights at the load bandwidth")
    b_r = s.step("rank_busy", "Replicas the ranked model keeps busy at peak", "b_r", Lam * rank**-alpha / (H * U), "",
                 "its Zipf share of the peak over one replica's unit")
    avg_r = s.step("rank_average", "Average rate of the ranked model", "λ_r", Lam * rank**-alpha / (H * peak),
                   "requests/s", "its Zipf share of the peak over the peak-to-average ratio")
    _tier_judgements(s, top, u, per_model, k, w, d, busy_sh, ded_share, n, saved, e.TP * n * per_model)
    _tier_assumptions(s)
    _tier_regime(s, b_r, avg_r, cold_rate, rank)

