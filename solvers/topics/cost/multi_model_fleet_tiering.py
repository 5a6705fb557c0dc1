"""Twenty models, two replicas each - how idle, and how to tier them."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    require_context,
)
from solvers.formulas.cost import pct_text
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    MIN_DECODE_BATCH,
    all_reduce_steps,
    engine,
    mean_decode_context,
    step_time,
    step_work,
    usable_hbm,
)
from solvers.sheetmath import ceil_of, exp_of, floor_of, max_of, min_of, rank_ceiling, rank_sum
from solvers.units import format_number

DEDICATED_BUSY = sympy.Rational(1, 2)  # a model earns its own replicas once it keeps half of one busy at peak


SHARED_HBM = sympy.Rational(1, 2)  # a shared replica keeps its models' weights in half its usable HBM, KV in the rest
UNIT_TOLERANCE = 0.03  # the unit's grading tolerance: a batch this far either way is as right as the key's
# A cold start plus TTFT within the cold start's own 3% tolerance of the budget is too near to call: not listed.
COLD_TIE = sympy.Rational(3, 100)


def _tier_assumptions(s: Sheet) -> None:
    s.assume("Traffic over the models follows Zipf's law with the listed exponent; every model is the same "
             "architecture with its own weights (full fine-tunes), and every request has the listed lengths.")
    s.assume("Tiers: a model that keeps half a replica busy at peak gets its own replicas, sized at the ceiling, so "
             "the models that carry the traffic never queue behind the tail; the rest share replicas that keep "
             "their weights resident in half of usable HBM. Queueing inside the ceiling is left out, and the shared "
             "tier is sized as a fluid (its busy time over the ceiling), a lower bound on packing whole models.")
    s.assume("A replica prefills its own model's prompts (a full fine-tune's prompts can only run where its weights "
             "are) by chunked prefill: every step carries the decode batch and, in steady state, P_in/L_out prompt "
             "tokens per decoding request, and the batch is the largest the KV pool holds whose whole step fits the "
             "TPOT target. A prompt prefilled whole between decode steps would stall every decoding request past the "
             "target. Prompts take a step's prompt tokens first come, first served (as vLLM's and SGLang's chunked "
             "prefill schedule them), a prompt starting on a fresh step; its first token comes with its last chunk.")
    s.assume("Draws where two replicas a model would run past the ceiling at peak, or where tiering would save no "
             "GPUs, are refused: the question tiers a fleet sized past its load. So are draws whose batch, moved by "
             "the unit's 3% either way, would take a prompt's chunks over another whole count of steps: the TTFT "
             "would turn on rounding.")
    s.assume("A shared replica cannot batch two full fine-tunes in one decode step (a step reads one model's "
             "weights): it takes its resident models in turn, each model with requests in flight getting a step of "
             "its own once per TPOT. A model's requests in flight at peak are Poisson with mean b = λ·L_out·TPOT "
             "(Little's law), so it is in flight 1 − e^(−b) of the time and pays the step's fixed part (its "
             "weights' read, the all-reduce latencies, the overhead) that often, and each request's KV read and "
             "all-reduce bytes every step; its prompts' math is added on top of the reads. The steps are read-bound "
             "at these batches (draws where the busiest shared model's step would be compute-bound are refused).")
    s.assume("Time-slicing is sized by its mean: a replica's round of turns fits the TPOT while its busy time stays "
             "under the ceiling, and the tier is sized by that mean busy time. When more of a replica's models "
             "have requests in flight at once than on average, or their batches bunch, the round outruns the TPOT "
             "and every model on that replica decodes slower for a while; a request also waits up to a round for "
             "its model's turn before its first chunk (left out of the TTFT). Both are left to the ceiling's "
             "headroom, so this errs low on the shared replicas, as the fluid packing does; adding the prompts' "
             "math on top of the reads, where a read-bound step would hide it, errs high. The single-model unit "
             "(every shared model's requests batched as one model's, the LoRA case) would err lower still.")
    s.assume("Sizing is N+0: a model with one dedicated replica, and each shared model (its weights resident on one "
             "replica), has no failover. Today's two replicas a model are also its redundancy; a production tiering "
             "would keep at least two replicas for a model with an SLO (or warm spares for the shared tier), so the "
             "GPUs saved here are an upper bound.")
    s.assume("Loading a model on demand is not a tier here: a request that finds its model evicted waits a whole "
             "weight load (each GPU its share at the load bandwidth) on top of its TTFT. LoRA adapters over one base "
             "remove that cost and the time-slicing: one base's weights, and one decode step for every adapter's "
             "requests (the adapters' own reads and math left out).")


def _tier_judgements(s: Sheet, top, u, per_model, k, n_sh, busy_sh, ded_share, saved, today, ttft, budget, t_load,
                     r_lora, r_sh) -> None:
    v = s.evaluate

    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    judge("the top model needs more than its two replicas at the ceiling", s.compare(top, per_model * u) > 0,
          f"it keeps {format_number(v(top), 3)} replicas busy against {format_number(v(per_model * u), 3)} "
          "its two allow at the ceiling")
    for_weights, for_load = ceil_of(n_sh / k), ceil_of(busy_sh / u)
    judge("the shared tier needs more replicas for weights than for load", s.compare(for_weights, for_load) > 0,
          f"{format_number(v(n_sh))} models at {format_number(v(k))} a replica need {format_number(v(for_weights))}; "
          f"{format_number(v(busy_sh), 3)} busy replicas of load need {format_number(v(for_load))} at the ceiling")
    judge("the dedicated tier carries most of the traffic", s.compare(2 * ded_share, 1) > 0,
          f"it carries {pct_text(v(ded_share))}")
    quarters = f"{format_number(v(saved))} of {format_number(v(today))} GPUs"
    if s.compare(abs(4 * saved / (3 * today) - 1), COLD_TIE) < 0:  # r14 @9300: 240 of 320, on the line exactly
        s.judge("facts", "tiering frees more than three quarters of today's GPUs", None,
                f"{quarters}: within 3% of three quarters, a replica either way from the other side")
    else:
        judge("tiering frees more than three quarters of today's GPUs", s.compare(4 * saved, 3 * today) > 0, quarters)
    cold_why = f"a {s.text(t_load, 3)} load plus the {s.text(ttft, 3)} TTFT, against {s.text(budget)}"
    if s.compare(abs((t_load + ttft) / budget - 1), COLD_TIE) < 0:  # read12: @77 keyed true on 2.476 s against 2.5 s
        s.judge("facts", "loading a tail model on demand would keep its first token within {cold_budget}", None,
                f"{cold_why}: within 3%, too near to call on a load bandwidth this rough")
    else:
        judge("loading a tail model on demand would keep its first token within {cold_budget}",
              s.compare(t_load + ttft, budget) <= 0, cold_why)
    judge("LoRA adapters over one base would at least halve the shared tier's replicas",
          s.compare(2 * r_lora, r_sh) <= 0,
          f"{format_number(v(r_lora))} replicas batching every adapter's requests at the unit, against "
          f"{format_number(v(r_sh))}")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _tier_regime(s: Sheet, b_r, rank) -> None:
    """Two tiers, one boundary: half a replica busy at peak."""
    busy, r = s.text(b_r, 3), s.text(rank)
    line = s.given("b_ded", DEDICATED_BUSY, "", "busy replicas at peak that earn a model its own")
    s.regime_by(b_r, line, tie="above", above=Side(
        "dedicated",
        f"The rank-{r} model keeps {busy} replicas busy at peak, at least half a replica: it pays for its own "
        "replicas, sized at the ceiling, and nothing from the long tail queues in front of it.",
        "Below half a replica of peak load a model's own replicas mostly idle: it belongs on the shared replicas.",
        near=f"The rank-{r} model keeps {busy} replicas busy at peak, just over the half-replica line: dedicated, "
             "but a shift in traffic would move it to the shared tier."),
        below=Side(
        "shared",
        f"The rank-{r} model keeps only {busy} replicas busy at peak, under half a replica: two replicas of its "
        "own would idle; it shares a replica that keeps its weights resident and steps it in turn.",
        "Past half a replica of peak load it earns dedicated replicas.",
        near=f"The rank-{r} model keeps {busy} replicas busy at peak: shared, but close to the half-replica line, "
             "so a rise in traffic moves it."))


def solve(p, s: Sheet) -> None:
    require_context(p.model, p.prompt + p.reply)
    e = engine(s, p.model, p.gpu, p.tp, DEFAULT_CONSTANTS, communication=p.tp > 1, kv_prerequisite=True)
    n = s.param("n_models", "models")
    per_model = s.param("r_0", "replicas")
    Lam = s.param("Λ", "rate")
    alpha = s.param("s_Z", "zipf")
    budget = s.param("T_cold", "cold_budget")
    u = s.param("u", "ceiling")
    rank = s.param("r", "rank")
    load_bw = s.param("BW_load", "load_bandwidth")
    P_in, L_out, tpot = s.param("P_in", "prompt"), s.param("L_out", "reply"), s.param("TPOT", "tpot")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)
    S = mean_decode_context(s, P_in, L_out)
    usable = usable_hbm(s, p.gpu)
    k = s.step("models_per_shared", "Models' weights one shared replica holds", "k",
               floor_of(SHARED_HBM * usable * e.TP / e.W), "",
               "half the group's usable HBM in weight copies, the rest left for KV")
    if s.value(k) < 2:
        raise Reject("a shared replica cannot hold two models' weights")
    # A full fine-tune's prompts can only be prefilled where its weights are: its replicas do both phases, the
    # prompts chunked into the decode steps (chunked prefill), so every step stays within the TPOT target.
    r = s.step("prompt_per_decode", "Prompt tokens a step carries per decoding request", "ρ_P", P_in / L_out, "tokens",
               "in steady state a replica admits a prompt for every reply it finishes: P_in prompt tokens for every "
               "L_out decode tokens")
    assert e.t_oh is not None  # the default constants model the overhead
    room = s.step("step_room", "Step time the target leaves for the kernels", "t_room", tpot - e.t_oh - ar.fixed,
                  "ms", "the TPOT target, less the overhead and the all-reduce latencies")
    per_tok = ar.per_token * (1 + r)
    b_mem = s.step("batch_by_bandwidth", "Batch at the target, by bandwidth", "B_mem",
                   (room - e.W / (e.TP * e.byte_rate)) / (e.KV * S / e.byte_rate + per_tok), "requests",
                   "the time left after the weights' read, in one mean context's KV read (and the all-reduce bytes "
                   "of its token and its prompt share)")
    b_cmp = s.step("batch_by_compute", "Batch at the target, by compute", "B_cmp",
                   room / (e.math_time(2 * e.N * (1 + r), e.A * (S + r * P_in / 2)) + per_tok), "requests",
                   "the time left, in one decode token's math at the mean context plus its share of prompt tokens, "
                   "each attending to half its prompt on average (and their all-reduce bytes)")
    pool = s.step("pool_tokens", "Tokens the KV pool holds", "K", (usable - e.W / e.TP) / e.KV,
                  "tokens", "usable HBM less the weights' share, in KV per token")
    b_pool = s.step("batch_by_pool", "Batch the KV pool holds", "B_pool", pool / S, "requests",
                    "the pool over the mean context")
    B = s.step("batch", "Decode batch per replica", "B", floor_of(min_of(b_mem, b_cmp, b_pool)), "requests",
               "the tightest of the three caps, in whole requests")
    if s.value(B) < MIN_DECODE_BATCH:
        raise Reject("the TPOT target leaves too few decode slots beside the prompts")
    b_exact = min(s.value(b_mem), s.value(b_cmp), s.value(b_pool))
    if len({math.ceil(p.reply / math.floor(b_exact * f)) for f in (1 - UNIT_TOLERANCE, 1 + UNIT_TOLERANCE)}) > 1:
        # @9613 (old draw): B = 329 puts a 380-token prompt in 2 steps; 330 (prefill attention left out) in 1
        raise Reject("a batch within the unit's 3% of another whole count of steps to a prompt's last chunk: the "
                     "TTFT would turn on rounding")
    mix = step_work(s, e, "mix", "step at that batch with its prompt chunk", B * (1 + r), B * (S + r * P_in / 2),
                    B * S)
    t_mix = step_time(s, e, "mix", "step at that batch with its prompt chunk", mix, key="decode_step",
                      communication=ar.of(B * (1 + r)),
                      why="the slower of the reads and the math, then the all-reduces and the overhead: within the "
                          "TPOT target by construction")
    s.step("per_user", "Per-user speed at that batch", "v_user", 1 / t_mix, "tokens/s", "one token per step each")
    U = s.step("unit", "Requests/s one replica serves at the SLO", "U", B / (L_out * t_mix), "requests/s",
               "Little's law: B requests in decode, each for L_out steps")
    ttft = s.step("ttft", "Time to first token on a busy replica", "TTFT", ceil_of(L_out / B) * t_mix, "ms",
           "a step carries B·ρ_P prompt tokens; a prompt takes them from a step's start (chunked prefill serves "
           "its prompts first come, first served), so it needs L_out/B steps' chunks, in whole steps, its first "
           "token coming with its last chunk (its wait for admission left out)")

    H = s.step("zipf_norm", "Zipf normaliser over the models", "H", rank_sum(lambda i: i**-alpha, 1, n), "",
               "model i gets Λ·i^(−α)/H of the traffic")
    busy_now = s.step("util_peak", "Fleet utilisation at peak, two replicas each", "ρ_peak", Lam / (n * per_model * U),
                      "%", "the peak rate over the fleet's capacity at the SLO")
    if s.compare(busy_now, u) > 0:
        raise Reject("today's fleet already runs above its ceiling at peak: not the idle fleet tiering is for")
    top = s.step("top_busy", "Replicas the top model keeps busy at peak", "b_1", Lam / (H * U), "",
                 "its share of the peak over one replica's unit")
    d = s.step("dedicated", "Models that earn dedicated replicas", "n_ded",
               min_of(n, floor_of((Lam / (H * U * DEDICATED_BUSY)) ** (1 / alpha))), "",
               "ranks i with Λ·i^(−α)/(H·U) ≥ 1/2: half a replica busy at peak")
    if s.value(d) < 1:
        raise Reject("no model keeps half a replica busy at peak: nothing earns replicas of its own")
    if s.value(d) >= s.value(n) - 1:
        raise Reject("fewer than two models left to share")
    n_sh = s.step("shared", "Models in the shared tier", "n_sh", n - d, "", "every model not dedicated")
    ded_share = s.step("dedicated_share", "Share of the traffic the dedicated models take", "f_ded",
                       rank_sum(lambda i: i**-alpha, 1, d) / H, "%",
                       f"ranks 1 to {s.text(d)}: their Zipf weights over the normaliser")
    ded = s.step("dedicated_replicas", "Dedicated replicas", "R_ded",
                 rank_sum(lambda i: rank_ceiling(Lam * i**-alpha / (H * U * u)), 1, d), "",
                 "each dedicated model's peak busy replicas over the ceiling, in whole replicas")
    s.step("dedicated_gpus", "GPUs of the dedicated tier", "G_ded", e.TP * ded, "GPUs",
           "its replicas times the GPUs in each")
    # A shared replica steps each resident model with requests in flight once per TPOT (one model's weights a step).
    t_fix = s.step("step_fixed", "Fixed part of a decode step", "t_fix",
                   e.W / (e.TP * e.byte_rate) + ar.fixed + e.t_oh, "ms",
                   "the weights' read, the all-reduce latencies and the overhead: any batch's step pays them")
    t_tok = s.step("step_per_request", "A decode step's time per request in it", "t_req",
                   e.KV * S / e.byte_rate + ar.per_token, "ms",
                   "its KV read at the mean context and its all-reduce bytes (the step is read-bound at these batches)")
    busiest = p.rate / (s.value(H) * (s.value(d) + 1) ** p.zipf) * p.reply * p.tpot  # rank d + 1's requests in flight
    kv_per_request = s.evaluate(e.KV * S)
    if busiest * (2 * s.evaluate(e.N) + s.evaluate(e.A * S)) / s.evaluate(e.flop_rate) > \
            (s.evaluate(e.W / e.TP) + busiest * kv_per_request) / s.evaluate(e.byte_rate):
        raise Reject("the busiest shared model's decode step would be compute-bound")
    t_c = s.step("prompt_token_time", "A prompt token's time in a shared model's step", "t_c",
                 e.math_time(2 * e.N, e.A * P_in / 2) + ar.per_token, "us",
                 "its math, attending to half its prompt on average, and its all-reduce bytes, added to the step's "
                 "reads (a bound: in a step that waits on its reads the math would hide under them)")
    busy_sh = s.step("shared_busy", "Replicas the shared models keep busy at peak", "b_sh",
                     rank_sum(lambda i: Lam * i**-alpha / H * (P_in * t_c + L_out * t_tok)
                              + (1 - exp_of(-Lam * i**-alpha / H * L_out * tpot)) * t_fix / tpot, d + 1, n), "",
                     "each model's prompts and its requests' share of the steps, plus its own step's fixed part once "
                     "per TPOT for the share of the time it has requests in flight (Poisson, mean λ·L_out·TPOT)")
    sh = s.step("shared_replicas", "Shared replicas", "R_sh",
                max_of(ceil_of(busy_sh / u), ceil_of(n_sh / k)), "",
                "enough for their load at the ceiling and for their weights to stay resident")
    gpus = s.step("gpus_after", "GPUs after tiering", "G_tier", e.TP * (ded + sh), "GPUs",
                  "both tiers' replicas times the GPUs in each")
    today = e.TP * n * per_model
    saved = s.step("gpus_saved", "GPUs saved against two replicas each", "G_saved", today - gpus, "GPUs",
                   "today's fleet less the tiered one")
    if s.value(saved) <= 0:
        raise Reject("tiering saves no GPUs: the fleet is already as small as its load")
    t_load = s.step("cold_start", "Cold start: loading one model's weights", "t_load", e.W / (e.TP * load_bw), "s",
                    "each GPU reads its share of the weights at the load bandwidth")
    r_lora = s.step("lora_replicas", "Shared replicas with LoRA adapters over one base", "R_LoRA",
                    ceil_of(rank_sum(lambda i: Lam * i**-alpha / H, d + 1, n) / (U * u)), "",
                    "one base's weights, every adapter's requests batched in one step: their rate over the unit at "
                    "the ceiling")
    b_r = s.step("rank_busy", "Replicas the ranked model keeps busy at peak", "b_r", Lam * rank**-alpha / (H * U), "",
                 "its Zipf share of the peak over one replica's unit")
    _tier_judgements(s, top, u, per_model, k, n_sh, busy_sh, ded_share, saved, today, ttft, budget, t_load, r_lora, sh)
    _tier_assumptions(s)
    _tier_regime(s, b_r, rank)
