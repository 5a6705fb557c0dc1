"""Serving design and cost questions on the shared step-time model (steptime.py): what a
request costs in replica-seconds and dollars, where the bill comes from, and the levers on it.

Each question prices a replica (one TP group) by the time its work holds it: a prompt holds
it for its prefill step, an output token for its share of a decode step at the batch the
per-user speed target allows. A lever is judged by re-running the sheet's formulas in floats with
one input changed (ledger_time); a test holds the two to the same value.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import sympy

from solvers.conventions import convention_value
from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.collective import all_reduce_terms
from solvers.topics.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    peak_flops,
    require_context,
)
from solvers.topics.steptime import (
    DEFAULT_CONSTANTS,
    StepConstants,
    all_reduce_steps,
    decode_at_speed,
    engine,
    mean_decode_context,
    on_gpu,
    step_time,
    step_work,
    usable_hbm,
)
from solvers.units import format_number, format_quantity


def _pct(value: float) -> str:
    return format_quantity(value, "%", 3)


# --- serving-cost-ledger ------------------------------------------------------------------

LEVER_CUT = Fraction(1, 5)  # a lever "matters" when it cuts the cost per request by at least this share
CROWDED = 0.85  # a utilisation ceiling past which queueing delay grows fast (1/(1 − ρ))
# A replica decoding fewer requests than this spends its steps re-reading the weights for a handful of tokens
# (70B on TP 2 at batch 8-10, hundreds of replicas): anyone would deploy a wider TP group instead.
MIN_BATCH = 16


def serving_cost_ledger(p, s: Sheet) -> None:
    require_context(p.model, p.prompt + p.reply)
    e = engine(s, p.model, p.gpu, p.tp, DEFAULT_CONSTANTS, communication=p.tp > 1, kv_prerequisite=True)
    P_in = s.param("P_in", "prompt")
    L_out = s.param("L_out", "reply")
    v = s.param("v", "speed")
    lam = s.param("λ", "rate")
    u = s.param("u", "ceiling")
    c_gpu = s.param("c_GPU", "price")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)

    # Prefill: one prompt alone in a step, compute-bound for any prompt worth a ledger.
    pre = step_work(s, e, "pre", "prefill of one prompt", P_in, P_in**2 / 2, 0)
    t_pre = step_time(s, e, "pre", "prefill of one prompt", pre, key="prefill_time", communication=ar.of(P_in),
                      why="the prompt's math at the group's achievable compute, its all-reduces, the overhead")
    s.step("prefill_rate", "Prompt tokens per second per replica, prefilling", "X_pre", P_in / t_pre, "tokens/s",
           "one prompt per prefill step")

    S = mean_decode_context(s, P_in, L_out)
    decode = decode_at_speed(s, e, p.gpu, ar, S, 1 / v, "1/v per step")
    B, t_dec, pool = decode.batch, decode.step, decode.pool
    if s.value(B) < MIN_BATCH:
        raise Reject("the decode batch is a handful of requests: a wider TP group is the deployment")

    # The ledger: replica-seconds, replicas, dollars.
    c_p = s.step("prompt_token_cost", "Replica-seconds per prompt token", "c_p", t_pre / P_in, "us",
                 "the prefill step's time shared by its tokens")
    c_d = s.step("output_token_cost", "Replica-seconds per output token", "c_d", t_dec / B, "us",
                 "a decode step's time shared by the batch")
    r = s.step("cost_ratio", "Output token over prompt token, in replica-seconds", "r", c_d / c_p, "x",
               "how many prompt tokens one output token costs")
    T_req = s.step("replica_seconds", "Replica-seconds per request", "T_req", t_pre + L_out * c_d, "s",
                   "its prefill plus its reply's share of decode steps")
    share = s.step("prompt_share", "Prompt's share of replica-seconds", "f_P", t_pre / T_req, "%",
                   "the prefill's part of the request's time")
    busy = s.step("busy_replicas", "Replica-seconds per second at the peak rate", "R_busy", lam * T_req, "",
                  "requests per second × replica-seconds each: replicas busy on average")
    if s.value(busy) < 1:
        raise Reject("the peak keeps less than one replica busy: a fleet of one has no ledger to balance")
    n = s.step("replicas", "Replicas to run", "n", ceil_of(busy / u), "",
               "busy replicas over the utilisation ceiling, in whole replicas")
    cost_h = s.step("fleet_cost", "Fleet cost per hour", "C_h", n * e.TP * c_gpu, "$/h",
                    "replicas × GPUs each × price per GPU-hour")
    per_req = s.step("cost_per_request", "Dollars per request at the peak rate", "C_req", cost_h / lam, "$",
                     "the fleet's cost per second over requests per second")
    mtok = s.given("M_tok", 1e6, "tokens", "tokens in a million")
    s.step("cost_per_mtok", "Dollars per million tokens (prompt and reply)", "C_Mtok",
           per_req * mtok / (P_in + L_out), "$", "the request's cost spread over all its tokens")
    rate = e.TP * c_gpu / u  # what a replica-second costs once the ceiling's idle share is paid for
    s.step("prompt_price", "Cost-based price per million prompt tokens", "C_P", c_p * rate * mtok, "$",
           "a prompt token's replica-seconds at the ceiling's price")
    s.step("output_price", "Cost-based price per million output tokens", "C_O", c_d * rate * mtok, "$",
           "an output token's replica-seconds at the same price: r times the prompt's")
    mix = s.step("token_ratio", "Prompt tokens per output token", "P/O", P_in / L_out, "x",
                 "the request's token mix")
    x = s.step("share_rule", "Prompt's part over the reply's", "x", mix / r, "x",
               "(P/O) / r: the prompt's share is x / (1 + x), so x = 2 gives two thirds")

    _ledger_assumptions(s)
    s.slip("the bill split by token counts, not by replica-seconds", s.evaluate(P_in / (P_in + L_out)) / s.value(share),
           on="prompt_share")
    s.slip("busy replicas not divided by the utilisation ceiling",
           s.evaluate(ceil_of(busy)) / s.value(n), on=("replicas", "cost_per_request"))
    s.slip("an output token priced at a whole decode step", s.value(B), on="cost_ratio")
    _ledger_levers(s, e, u, v, P_in, L_out, ar, pool, lam, n)
    _ledger_regime(s, mix, r, share, x)


def _ledger_assumptions(s: Sheet) -> None:
    s.assume("A replica is one TP group. A prompt holds it for one prefill step of its own; an output token for "
             "1/B of a decode step at the batch the speed target allows (the cap the KV pool sets included). "
             "Chunked prefill would mix the two in one step but spend the same replica-seconds on each.")
    s.assume("Requests arrive at the peak rate given; the fleet is sized for it at the utilisation ceiling, "
             "which leaves the headroom queueing needs. Off-peak hours cost the same replicas unless the fleet "
             "scales down, so dollars per request are those at the peak.")
    s.assume("The GPU-hour price is an on-demand rental assumption (mid-2026: H100 SXM about $2-5, H200 about "
             "$2.5-7 a GPU-hour, as the references list); it scales every dollar figure and none of the "
             "replica-seconds.")


def ledger_time(g: dict[str, float], warm: float = 0.0) -> float:
    """Replica-seconds per request over the ceiling, in floats: the sheet's formulas, re-run for a lever
    (evaluating them symbolically with a given changed costs sympy seconds). `warm`: the share of each
    prompt read from a prefix cache instead of computed."""
    P, R, N, A = g["P"], g["R"], g["N"], g["A"]
    new = P * (1 - warm)
    t_pre = (max(g["W_gpu"] / g["br"], (2 * N * new + A * (P**2 - (P - new) ** 2) / 2) / g["fr"])
             + g["ar0"] + g["ar_tok"] * new + g["t_oh"])
    S = P + R / 2
    room = 1 / g["v"] - g["t_oh"] - g["ar0"]
    caps = ((room - g["W_gpu"] / g["br"]) / (g["KV"] * S / g["br"] + g["ar_tok"]),
            room / ((2 * N + A * S) / g["fr"] + g["ar_tok"]), g["pool"] / (g["KV"] * S))
    B = math.floor(min(caps))
    if B < 1:
        return math.inf
    t_dec = (max((g["W_gpu"] + g["KV"] * B * S) / g["br"], (2 * N * B + A * B * S) / g["fr"])
             + g["ar0"] + g["ar_tok"] * B + g["t_oh"])
    return (t_pre + R * t_dec / B) / g["u"]


LEVER_MARGIN = 0.01  # a lever whose cut lands within a point of LEVER_CUT is a coin toss for the candidate


def _ledger_levers(s: Sheet, e, u, v, P_in, L_out, ar, pool, lam, n) -> None:
    """Which single change cuts the cost per request by LEVER_CUT or more, judged on the replica-seconds a
    request is provisioned at the ceiling (T_req/u): the cost per request at scale. Whole replicas would let a
    small fleet's rounding decide (6 -> 5 replicas is 16.7% whatever the lever); the why shows them too."""
    value = s.evaluate
    g = {"P": value(P_in), "R": value(L_out), "N": value(e.N), "A": value(e.A), "W_gpu": value(e.W / e.TP),
         "br": value(e.byte_rate), "fr": value(e.flop_rate), "ar0": value(ar.fixed), "ar_tok": value(ar.per_token),
         "t_oh": value(e.t_oh), "v": value(v), "KV": value(e.KV), "pool": value(pool * e.KV), "u": value(u)}
    rate, now, before = value(lam), int(s.value(n)), ledger_time(g)

    def judge(option: str, why: str, warm: float = 0.0, **changed: float) -> None:
        after = ledger_time(g | changed, warm)
        cut = 1 - after / before
        if abs(cut - LEVER_CUT) < LEVER_MARGIN:
            raise Reject(f"'{option}' cuts the cost per request by {_pct(cut)}: too close to a fifth to call")
        replicas = math.ceil(rate * after)
        s.judge("levers", option, cut >= LEVER_CUT,
                f"{why}: the replica-seconds provisioned per request, at the ceiling, fall {_pct(cut)} (at this peak "
                f"{format_number(replicas)} replicas instead of {format_number(now)})")

    judge("half of every prompt served warm from a prefix cache",
          f"the prefill is {_pct(value(s.results['prompt_share']))} of the time and computes half the tokens",
          warm=0.5)
    judge("an fp8 KV cache", "half the KV bytes per context: a larger decode batch at the same speed",
          KV=g["KV"] / 2, pool=g["pool"])
    judge("a per-user speed target half as fast", "twice the step time: a larger batch shares each step",
          v=g["v"] / 2)
    judge("a GPU with 1.5× the HBM bandwidth at the same peak and price",
          "faster reads: decode steps shorten, a compute-bound prefill does not", br=1.5 * g["br"])
    judge("a GPU with twice the tensor peak at the same bandwidth and price",
          "faster math: the prefill shortens, memory-bound decode steps do not", fr=2 * g["fr"])
    judge("running replicas up to 85% busy", "less idle headroom paid per busy replica-second, bought with "
          "queueing delay", u=CROWDED)
    judged = s.judged("levers")
    if len(set(judged.values())) == 1:
        raise Reject("every lever cuts the bill by a fifth, or none does: nothing to tell apart")


def _ledger_regime(s: Sheet, mix, r, share, x) -> None:
    ratio, tokens, part = format_number(s.value(r), 3), format_number(s.value(mix), 3), _pct(s.value(share))
    rule = (f"the prompt's share is x/(1 + x) with x = (P/O)/r = {format_number(s.value(x), 3)}; "
            "P/O = 2r gives two thirds")
    s.regime_by(mix, r, tie="above", above=Side(
        "prompt-dominated",
        f"An output token costs {ratio} prompt tokens, and each request brings {tokens} prompt tokens per output "
        f"token: the prompt is {part} of the replica-seconds ({rule}). Prefill compute is where the money goes: "
        "prefix caching, fp8 GEMMs and shorter system prompts move the bill; decode tuning barely does.",
        "With replies long enough that P/O falls below r, decode steps take most of the time: then the batch the "
        "speed target allows, KV bytes and HBM bandwidth set the bill.",
        near=f"An output token costs {ratio} prompt tokens and requests bring {tokens} per output token: the prompt "
             f"is {part}, barely the larger part ({rule}). Both phases matter; a lever on either moves the bill."),
        below=Side(
        "reply-dominated",
        f"An output token costs {ratio} prompt tokens, but requests bring only {tokens} prompt tokens per output "
        f"token: the reply is {_pct(1 - s.value(share))} of the replica-seconds ({rule}). Decode sets the bill: "
        "a larger batch at the speed target (fp8 KV, more bandwidth, a looser target) is what cuts it.",
        "With prompts long enough that P/O exceeds r, prefill compute takes most of the time: then prefix caching "
        "and FLOP/s set the bill.",
        near=f"An output token costs {ratio} prompt tokens and requests bring {tokens} per output token: the reply "
             f"is {_pct(1 - s.value(share))}, barely the larger part ({rule}). Both phases matter."))


# --- cold-prefill-pools -------------------------------------------------------------------


class SquareRoot(sympy.Function):
    """√x left as written: sympy's sqrt of an exact rational looks for square factors (milliseconds)."""

    def _sympystr(self, printer) -> str:
        return f"sqrt({printer._print(self.args[0])})"

    def _eval_evalf(self, prec):
        number = self.args[0].evalf(prec)
        return sympy.Float(math.sqrt(number), prec) if number.is_Number else None


def square_root(x: sympy.Expr) -> sympy.Expr:
    """√x: a SquareRoot on a Sheet, Python's on a QuickSheet's numbers."""
    return math.sqrt(x) if isinstance(x, (int, float)) else SquareRoot(x)


MAX_WARM = 0.98  # a cache that must hit more than this of every prompt is not a plan anyone can promise


def cold_prefill_pools(p, s: Sheet) -> None:
    require_context(p.model, p.prompt)
    constants = StepConstants(compute=p.mfu, bandwidth=DEFAULT_CONSTANTS.bandwidth, overhead=DEFAULT_CONSTANTS.overhead)
    e = engine(s, p.model, p.gpu, p.tp, constants, communication=True, kv_prerequisite=True)
    T = s.param("T", "prompt")
    tau = s.param("τ", "ttft")
    L_out = s.param("L_out", "reply")
    tpot = s.param("TPOT", "tpot")
    lam = s.param("λ", "rate")
    u = s.param("u", "ceiling")
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)

    cold = step_work(s, e, "cold", "cold prefill", T, T**2 / 2, 0)
    s.step("peak_time", "Compute time of the cold prefill at peak", "t_peak", cold.flops / (e.TP * e.P), "s",
           "2·N·T + 2·L·d·T² FLOPs (A·T²/2 = 2·L·H·d_h·T²) over the group's dense peak")
    s.step("mfu_time", "Compute time at the prefill MFU", "t_MFU", cold.flops / e.flop_rate, "s",
           "the same FLOPs at the MFU a long prefill reaches")
    s.step("cold_allreduce", "All-reduces of the cold prefill", "t_AR", ar.of(T), "s",
           "two per layer of all T tokens' activations over NVLink, not overlapped (tp-all-reduce)")
    t_cold = step_time(s, e, "cold", "cold prefill", cold, key="cold_ttft", communication=ar.of(T),
                       why="its math at the MFU, then its all-reduces and the overhead: a TTFT floor before any queue")

    # A warm fraction h is read from the cache; the rest, (1−h)·T tokens, attends to the whole prompt:
    # t(h) = a·(1−h) + b·(1 − h²) + c, solved for t(h) = τ.
    a = s.step("linear_cost", "Time linear in the computed tokens", "a", 2 * e.N * T / e.flop_rate + ar.per_token * T,
               "s", "the weights' math and the all-reduce bytes of every prompt token")
    b = s.step("quadratic_cost", "Attention time of the whole cold prompt", "b", e.A * T**2 / (2 * e.flop_rate), "s",
               "A·T²/2 pairs; a warm prefix of h·T leaves T² − (hT)² of them to compute, over 2")
    c = s.step("fixed_cost", "Time paid whatever is cached", "c", e.t_oh + ar.fixed, "s",
               "the step overhead and the all-reduce latencies")
    y = s.step("cold_share", "Share of the prompt that may stay cold", "y",
               min_of(1, ((a + 2 * b) - square_root(max_of(0, (a + 2 * b)**2 - 4 * b * (tau - c)))) / (2 * b)), "%",
               "the smaller root of b·y² − (a + 2b)·y + (τ − c) = 0, with y = 1 − h; all of it where cold fits")
    h = s.step("warm_needed", "Warm fraction the prefix cache must reach", "h*", 1 - y, "%",
               "what the cache must serve of a typical prompt for its prefill to make the TTFT target")
    if s.value(h) > MAX_WARM:
        raise Reject("the prompt would have to be almost entirely cached")
    warm = step_work(s, e, "warm", "prefill at that warm fraction", y * T, (T**2 - (h * T)**2) / 2, h * T)
    t_warm = step_time(s, e, "warm", "prefill at that warm fraction", warm, key="warm_ttft",
                       communication=ar.of(y * T), why="the cold remainder's math, all-reduces and overhead")
    if s.evaluate(warm.bytes / e.byte_rate) > s.evaluate(warm.flops / e.flop_rate):
        raise Reject("the warm remainder's prefill is memory-bound: the quadratic's compute model does not hold")

    for busy in (lam * t_cold / u, lam * t_warm / u):
        # Sized to the target, the warm prefill takes τ exactly: λ·τ/u whole would leave the ceiling to float noise.
        if abs(s.evaluate(busy) - round(s.evaluate(busy))) < 1e-6 * s.evaluate(busy):
            raise Reject("a prefill pool lands on a whole number of replicas: a tie for the ceiling")
    n_cold = s.step("cold_prefill_replicas", "Prefill replicas if every prompt ran cold", "n_cold",
                    ceil_of(lam * t_cold / u), "", "λ × cold prefill time, over the utilisation ceiling")
    n_pre = s.step("prefill_replicas", "Prefill replicas at the warm fraction", "n_pre",
                   ceil_of(lam * t_warm / u), "", "λ × prefill time of the cold remainder, over the ceiling "
                   "(sized to the target, that time is τ itself)")
    s.step("gpus_saved", "Prefill GPUs the cache saves", "G_saved", (n_cold - n_pre) * e.TP, "GPUs",
                   "replicas no longer needed, times the GPUs in each")

    S = mean_decode_context(s, T, L_out)
    decode = decode_at_speed(s, e, p.gpu, ar, S, tpot, "the TPOT target")
    n_dec = s.step("decode_replicas", "Decode replicas", "n_dec",
                   ceil_of(lam * L_out * decode.step / decode.batch / u), "",
                   "λ × reply tokens × replica-seconds per output token, over the ceiling")
    _cold_assumptions(s)
    s.slip("attention left out (2·N·T only)", s.evaluate(2 * e.N * T / cold.flops), on="mfu_time")
    s.slip("attention counted without the causal half", s.evaluate((cold.flops + e.A * T**2 / 2) / cold.flops),
           on="mfu_time")
    s.slip("prefill pool sized cold", s.value(n_cold) / s.value(n_pre), on="prefill_replicas")
    _cold_judgements(s, e, T, t_cold, tau, n_pre, n_dec, n_cold, cold, ar)
    _cold_regime(s, t_cold, tau, h, n_pre, n_dec, s.evaluate(ar.of(T) / t_cold))


AR_SHARE = 0.2  # the all-reduces "matter" to a cold prefill past this share of its time


def _cold_assumptions(s: Sheet) -> None:
    s.assume("The MFU is the share of dense peak the prefill's GEMMs and attention reach; decode math runs at the "
             "same efficiency (it rarely binds). The TP all-reduces come on top, not overlapped (tp-all-reduce).")
    s.assume("A warm prefix is read from the prefix cache (vLLM automatic prefix caching, SGLang RadixAttention): "
             "its tokens skip the weights but the cold remainder still attends to them. Where the cache lives "
             "(HBM, host memory) and what it costs to route a session back to it are left out.")
    s.assume("The warm fraction is a share of each prompt's tokens. A request that misses the cache entirely "
             "pays the whole cold time, so the share of requests allowed to go fully cold is bounded by the "
             "percentile the TTFT target is held at.")
    s.assume("Every request brings the same prompt and reply lengths; prefill and decode run on separate pools "
             "of the same replicas (disaggregated, as DistServe or Mooncake), the KV handed over between them "
             "for free; queueing within the utilisation ceiling is left out of the TTFT.")


def _cold_judgements(s: Sheet, e, T, t_cold, tau, n_pre, n_dec, n_cold, cold, ar) -> None:
    v = s.value
    seconds = format_quantity

    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    judge("a cold prompt makes the TTFT target", s.compare(t_cold, tau) <= 0,
          f"cold it takes {seconds(v(t_cold), 's')} against {seconds(v(tau), 's')}")
    fp8 = max_of(cold.bytes / e.byte_rate, cold.flops / (2 * e.flop_rate)) + ar.of(T) + e.t_oh
    judge("fp8 GEMMs at twice the peak would let a cold prompt make it", s.compare(fp8, tau) <= 0,
          f"half the math leaves {seconds(s.evaluate(fp8), 's')}: the all-reduces and overhead do not halve")
    by_pool = s.number("batch_by_pool") < min(s.number("batch_by_bandwidth"), s.number("batch_by_compute"))
    judge("the decode batch is capped by the KV pool, not the TPOT target", by_pool,
          f"the pool holds {format_number(s.number('batch_by_pool'), 3)} requests at this context; the target "
          f"allows {format_number(min(s.number('batch_by_bandwidth'), s.number('batch_by_compute')), 3)}")
    judge("the prefill pool needs more replicas than the decode pool", s.compare(n_pre, n_dec) > 0,
          f"{format_number(v(n_pre))} prefill against {format_number(v(n_dec))} decode replicas")
    judge("without the cache the prefill pool would be at least twice as large", s.compare(n_cold, 2 * n_pre) >= 0,
          f"{format_number(v(n_cold))} replicas cold against {format_number(v(n_pre))} warm")
    share = s.evaluate(ar.of(T) / t_cold)
    judge("the TP all-reduces are over a fifth of the cold prefill", share > AR_SHARE,
          f"they take {_pct(share)} of it")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _cold_regime(s: Sheet, t_cold, tau, h, n_pre, n_dec, ar_share: float) -> None:
    cold, target, warm = format_quantity(s.value(t_cold), "s"), format_quantity(s.value(tau), "s"), _pct(s.value(h))
    pools = (f"{format_number(s.value(n_pre))} prefill and {format_number(s.value(n_dec))} decode replicas. The "
             f"all-reduces are {_pct(ar_share)} of the cold time as tp-all-reduce counts them, unoverlapped: the "
             "card's pessimism, since engines overlap part of them with the GEMMs")
    s.regime_by(t_cold, tau, tie="below", above=Side(
        "warm-required",
        f"A cold prompt takes {cold} of prefill against a {target} TTFT target, before any queue: no amount of "
        f"replicas fixes one request's latency. The cache must serve {warm} of a typical prompt; sized on what "
        f"remains, the fleet is {pools}.",
        "Below the boundary a cold prompt makes the target on its own: the cache then saves GPUs, not latency, "
        "and a miss costs money rather than an SLO.",
        near=f"A cold prompt takes {cold} against a {target} target: just over it, so a modest warm share ({warm}) "
             f"or a faster GEMM gets there; the fleet is {pools}."),
        below=Side(
        "cold-fits",
        f"A cold prompt takes {cold} against a {target} TTFT target: it fits with no cache, so prefix hits are a "
        f"cost lever only. Sized cold, the fleet is {pools}.",
        "Past the boundary (a longer prompt, a tighter target, a slower group) the cold prefill alone misses the "
        "target: then the warm fraction becomes a requirement and misses become SLO violations.",
        near=f"A cold prompt takes {cold} against a {target} target, only just inside it: any queueing pushes a "
             f"cold request over, so the cache is nearly a requirement already; the fleet is {pools}."))


# --- slo-capacity-unit --------------------------------------------------------------------

BUY_MARGIN = 0.03  # the unit ratio is graded at 3%: a purchase decided by less than that is a coin toss
COUNT_REACH = 0.8  # routing by count "holds" when it reaches this share of the capacity routing by units gives
_CAPS = {"batch_by_pool": "the KV pool", "batch_by_bandwidth": "bandwidth at the TPOT target",
         "batch_by_compute": "compute at the TPOT target"}


def _binding(s: Sheet, tag: str) -> str:
    """Which of the three caps sets this GPU's batch (ties go to the first listed: memory, then reads)."""
    caps = {name: s.number(f"{name}_{tag}") for name in _CAPS}
    return _CAPS[min(caps, key=caps.__getitem__)]


def slo_capacity_unit(p, s: Sheet) -> None:
    old, new = p.old_gpu, p.new_gpu
    if old.id == new.id or hbm_bandwidth(new) <= hbm_bandwidth(old):
        raise Reject("not a newer generation: the second GPU must stream faster")
    require_context(p.model, p.prompt + p.reply)
    e_old = engine(s, p.model, old, p.tp, DEFAULT_CONSTANTS, communication=p.tp > 1, kv_prerequisite=True)
    e_new = on_gpu(s, e_old, new, "new")
    P_in = s.param("P_in", "prompt")
    L_out = s.param("L_out", "reply")
    tpot = s.param("TPOT", "tpot")
    n_old, n_new = s.param("n_old", "old_replicas"), s.param("n_new", "new_replicas")
    c_old, c_new = s.param("c_old", "old_price"), s.param("c_new", "new_price")
    S = mean_decode_context(s, P_in, L_out)

    units = {}
    for tag, gpu, e in (("old", old, e_old), ("new", new, e_new)):
        ar = all_reduce_terms(s, p.model, gpu, p.tp, group=tag)
        decode = decode_at_speed(s, e, gpu, ar, S, tpot, "the TPOT target", tag)
        units[tag] = s.step(f"unit_{tag}", f"Capacity unit: requests/s one {gpu.name} replica serves at the SLO",
                            f"U_{tag}", decode.rate / L_out, "requests/s",
                            "its output tokens per second at the TPOT target, over the reply length")
        s.choose(f"binds_{tag}", _binding(s, tag))
    U_old, U_new = units["old"], units["new"]
    ratio = s.step("unit_ratio", f"Capacity ratio, {new.name} over {old.name} replica", "ρ_U", U_new / U_old, "x",
                   "what one new replica is worth in old ones at the SLO")
    s.step("compute_ratio", "Datasheet compute ratio", "ρ_P", e_new.P / e_old.P, "x", "dense bf16 peaks")
    s.step("bandwidth_ratio", "Datasheet bandwidth ratio", "ρ_BW", e_new.BW / e_old.BW, "x", "HBM bandwidths")

    C = s.step("fleet_capacity", "Fleet capacity in units", "C", n_old * U_old + n_new * U_new, "requests/s",
               "each pool's replicas times its unit")
    s.step("new_share", f"Share of traffic to route to the {new.name} pool", "f_new", n_new * U_new / C, "%",
           "in proportion to capacity units, so both pools sit at the same share of their SLO capacity")
    by_count = s.step("count_routing_limit", "Rate at which routing by replica count breaks the SLO", "λ_count",
                      (n_old + n_new) * U_old, "requests/s",
                      f"an even split gives every replica λ/(n_old + n_new): the {old.name} pool saturates first")

    mtok = s.given("M_tok", 1e6, "tokens", "tokens in a million")
    cost_old = s.step("unit_cost_old", f"Dollars per million output tokens at the SLO, {old.name}", "D_old",
                      e_old.TP * c_old / (U_old * L_out) * mtok, "$", "a replica's price over its SLO output")
    cost_new = s.step("unit_cost_new", f"Dollars per million output tokens at the SLO, {new.name}", "D_new",
                      e_new.TP * c_new / (U_new * L_out) * mtok, "$", "the same for the new replica")
    s.step("replacement", f"{new.name} replicas that carry the {old.name} pool's load", "n_repl",
           ceil_of(n_old * U_old / U_new), "", "the old pool's capacity in new units, in whole replicas")
    price_ratio = s.step("price_ratio", "Price ratio per GPU-hour, new over old", "ρ_c", c_new / c_old, "x",
                         "what a new GPU-hour costs in old ones")
    if abs(s.value(ratio) / s.value(price_ratio) - 1) < BUY_MARGIN:
        raise Reject("the unit ratio and the price ratio agree within the unit ratio's tolerance: no verdict")
    _capacity_assumptions(s)
    s.slip("units taken as the datasheet bandwidth ratio", s.evaluate(e_new.BW / e_old.BW) / s.value(ratio),
           on="unit_ratio")
    s.slip("fleet capacity counted in old replicas", s.evaluate((n_old + n_new) * U_old / C), on="fleet_capacity")
    _capacity_judgements(s, ratio, e_old, e_new, C, by_count, n_old, U_old)
    _capacity_regime(s, old, new, cost_old, cost_new, ratio, price_ratio, C, by_count)


def _capacity_assumptions(s: Sheet) -> None:
    s.assume("The pools decode only (prefill runs elsewhere): a replica's unit is the requests per second its "
             "decode batch finishes at the TPOT target, every request at the mean context. Both pools use the same "
             "TP and the card's step model; each GPU's all-reduces run over its own NVLink.")
    s.assume("GPU-hour prices are on-demand rental assumptions (mid-2026: A100 $0.8-3, H100 $2-5, H200 $2.5-7, "
             "B200 $4.5-6), as the references list; the buying verdict turns on their ratio.")


def _capacity_judgements(s: Sheet, ratio, e_old, e_new, C, by_count, n_old, U_old) -> None:
    r, v = s.results, s.value
    units = format_number(v(ratio), 3)

    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    judge("a new replica is worth more old ones than the bandwidth ratio", s.compare(ratio, e_new.BW / e_old.BW) > 0,
          f"{units} against {format_number(s.evaluate(e_new.BW / e_old.BW), 3)}")
    judge("a new replica is worth more old ones than the compute ratio", s.compare(ratio, e_new.P / e_old.P) > 0,
          f"{units} against {format_number(s.evaluate(e_new.P / e_old.P), 3)}")
    judge("the old GPU's batch is capped by its KV pool", r["binds_old"] == _CAPS["batch_by_pool"],
          f"its batch is set by {r['binds_old']}")
    judge("the new GPU's batch is capped by its KV pool", r["binds_new"] == _CAPS["batch_by_pool"],
          f"its batch is set by {r['binds_new']}")
    judge("routing by replica count leaves over half the new pool idle at the old pool's limit",
          s.compare(ratio, 2) > 0, f"each new replica then runs at 1/{units} of its unit")
    judge("routing by replica count reaches 80% of the fleet's capacity in units",
          s.compare(by_count, COUNT_REACH * C) >= 0,
          f"{format_quantity(v(by_count), 'requests/s')} against {format_quantity(v(C), 'requests/s')}")
    judge("the old pool carries over half the fleet's capacity", s.compare(2 * n_old * U_old, C) > 0,
          f"{_pct(s.evaluate(n_old * U_old / C))} of it")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _capacity_regime(s: Sheet, old, new, cost_old, cost_new, ratio, price_ratio, C, by_count) -> None:
    a_new = "An" if new.name[0] in "AEFHILMNORSX" else "A"  # "an H200", said as letters
    units, prices = format_number(s.value(ratio), 3), format_number(s.value(price_ratio), 3)
    dollars = (f"{format_quantity(s.value(cost_new), '$')} against {format_quantity(s.value(cost_old), '$')} per "
               "million output tokens at the SLO")
    routing = (f"Routed by replica count the fleet takes {format_quantity(s.value(by_count), 'requests/s')} before "
               f"the {old.name} pool breaks its TPOT; routed by units, {format_quantity(s.value(C), 'requests/s')}.")
    s.regime_by(ratio, price_ratio, tie="below", above=Side(
        "buy-new",
        f"{a_new} {new.name} replica is worth {units} {old.name} replicas at the SLO and costs {prices}× as much: "
        f"{dollars}. Buy the next capacity unit on the new GPU. " + routing,
        f"If the new GPU cost more than {units}× the old per hour, the old GPU would be the cheaper unit; a new "
        "SLO or context length moves what caps each batch, and with it the unit ratio itself.",
        near=f"{a_new} {new.name} replica is worth {units} {old.name} replicas and costs {prices}× as much: {dollars}, "
             "close enough that a price change or a new SLO flips the purchase. " + routing),
        below=Side(
        "buy-old",
        f"{a_new} {new.name} replica is worth only {units} {old.name} replicas at the SLO but costs {prices}× as much: "
        f"{dollars}. The older GPU is the cheaper capacity unit. " + routing,
        f"Once the new GPU costs less than {units}× the old per hour, it becomes the cheaper unit; a new SLO or "
        "context length moves what caps each batch, and with it the unit ratio itself.",
        near=f"{a_new} {new.name} replica is worth {units} {old.name} replicas and costs {prices}× as much: {dollars}, "
             "close enough that a price change or a new SLO flips the purchase. " + routing))


# --- voice-latency-budget -----------------------------------------------------------------

LAYOUTS = {1: "one GPU", 2: "TP 2", 4: "TP 4", 8: "TP 8"}
NO_LAYOUT = "none of them"
_WAITS = ("endpointing", "network")  # the lines that are not a model
_LINES = {"endpointing": "endpointing", "network": "network", "asr": "ASR", "llm": "LLM", "tts": "TTS"}


def first_clause_time(model, gpu, tp: int, batch: int, context: float, turn: float, clause: int,
                      dtype: str = "bf16") -> float | None:
    """Seconds from the end of the user's turn to the LLM's first clause on a TP group, in floats (the
    sheet's formulas, for the layouts it does not derive); None where the weights (in `dtype`; the KV in
    bf16) crowd out the card's minimal KV pool or the batch's KV does not fit. The turn's prefill rides in one
    step with the other sessions' decode tokens, then clause − 1 steps."""
    c = DEFAULT_CONSTANTS
    N, A = model.params_b * 1e9, 4 * model.layers * model.heads * model.head_dim
    kv = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
    weights = dtype_bytes(dtype) * N / tp
    usable = GPU_MEMORY_UTILIZATION * hbm_bytes(gpu)
    crowded = weights > usable - convention_value("minimal-kv-pool") * hbm_bytes(gpu)
    if crowded or weights + kv * batch * context > usable:
        return None
    fr, br = tp * c.compute * peak_flops(gpu, dtype), c.bandwidth * hbm_bandwidth(gpu)
    if tp == 1:
        ar0 = ar_tok = 0.0
    else:
        ar0 = 2 * model.layers * convention_value("all-reduce-latency-nvlink") * 1e-6
        ar_tok = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / (gpu.nvlink_gb_s * 1e9 / 2)
    reads = (weights + kv * batch * context) / br

    def step(tokens: float) -> float:
        return max(reads, (2 * N * tokens + A * tokens * context) / fr) + ar0 + ar_tok * tokens + c.overhead

    return step(batch - 1 + turn) + (clause - 1) * step(batch)


def voice_latency_budget(p, s: Sheet) -> None:
    require_context(p.model, p.context)
    lines = {name: s.param(f"t_{name}", name) for name in ("endpointing", "network", "asr", "tts")}
    budget = s.param("T_audio", "budget")
    llm = s.step("llm_line", "LLM line: what the budget leaves for the first clause", "t_LLM",
                 budget - sum(lines.values()), "ms", "the budget less endpointing, network, ASR and TTS first audio")
    lines["llm"] = llm
    if s.value(llm) <= 0:
        raise Reject("the other lines already spend the budget")
    largest = max(lines, key=lambda name: (s.value(lines[name]), name in _WAITS))
    s.choose("largest_line", _LINES[largest])

    times = {tp: first_clause_time(p.model, p.gpu, tp, p.batch, p.context, p.turn, p.clause, p.dtype)
             for tp in LAYOUTS}
    fits = [tp for tp, t in times.items() if t is not None and t <= s.value(llm)]
    for layout, name in LAYOUTS.items():
        t = times[layout]
        s.judge("layouts", name, layout in fits,
                "the weights and the sessions' KV do not fit" if t is None else
                f"first clause in {format_quantity(t, 'ms')} against {format_quantity(s.value(llm), 'ms')}")
    s.judge("layouts", NO_LAYOUT, not fits, "every layout misses the line at this many sessions" if not fits
            else "at least one layout makes the line")
    # Where none makes it, the widest is derived: how far it misses, and how many sessions it could hold.
    tp = min(fits) if fits else max(LAYOUTS)
    s.choose("smallest_layout", LAYOUTS[tp] if fits else NO_LAYOUT)
    _voice_llm(s, p, tp, llm)
    _voice_regime(s, lines, largest)


def _voice_llm(s: Sheet, p, tp: int, llm) -> None:
    """The LLM line's derivation on the smallest layout that makes it (the widest where none does): first
    clause, speed after it, and the sessions one replica carries within the line."""
    e = engine(s, p.model, p.gpu, tp, DEFAULT_CONSTANTS, dtype=p.dtype, communication=tp > 1, kv_prerequisite=True)
    B, S = s.param("B", "batch"), s.param("S", "context")
    T_u, k = s.param("T_u", "turn"), s.param("k", "clause")
    ar = all_reduce_steps(s, p.model, p.gpu, tp)
    first = step_work(s, e, "first", "step that prefills the turn", B - 1 + T_u, (B - 1 + T_u) * S, B * S)
    t_1 = step_time(s, e, "first", "step that prefills the turn", first, key="first_token",
                    communication=ar.of(B - 1 + T_u),
                    why="the turn's tokens ride with the other sessions' decode tokens in one step")
    dec = step_work(s, e, "dec", "decode step", B, B * S, B * S)
    t_d = step_time(s, e, "dec", "decode step", dec, key="decode_step", communication=ar.of(B))
    clause = s.step("first_clause", "LLM time to the first clause", "t_clause", t_1 + (k - 1) * t_d, "ms",
                    "the first token from the turn's step, then k − 1 decode steps")
    s.step("llm_slack", "Slack on the LLM line", "t_slack", llm - clause, "ms", "what the layout leaves unspent")
    s.step("per_user", "Per-user speed after the first clause", "v_user", 1 / t_d, "tokens/s",
           "the rest of the reply streams at one token per decode step")
    fixed = s.step("clause_fixed", "First-clause time that does not grow with the sessions", "t_0",
                   k * (e.W / (e.TP * e.byte_rate) + ar.fixed + e.t_oh) + ar.per_token * (T_u - 1), "ms",
                   "k weight reads, all-reduce latencies and overheads, and the turn's own all-reduce bytes")
    per_session = s.step("clause_per_session", "First-clause time each session adds", "t_1s",
                         k * (e.KV * S / e.byte_rate + ar.per_token), "ms",
                         "its context's KV read and its token's all-reduce bytes, in each of the k steps")
    by_line = s.step("sessions_by_line", "Sessions the line allows, by bandwidth", "B_line",
                     floor_of((llm - fixed) / per_session), "users",
                     "the line less the fixed part, in sessions, while every step stays memory-bound")
    by_pool = s.step("sessions_by_pool", "Sessions the KV pool holds", "B_pool",
                     floor_of((usable_hbm(s, p.gpu) - e.W / e.TP) / (e.KV * S)), "users", "the pool over one context")
    most = s.step("sessions", "Sessions per replica within the LLM line", "B_max", min_of(by_line, by_pool),
                  "users", "the tighter of the line and the pool")
    if s.value(most) < 1:
        raise Reject("not one session makes the LLM line on the widest layout: the model is too big for it")
    busiest = step_work(s, e, "max", "turn's step at that many sessions", most - 1 + T_u, (most - 1 + T_u) * S,
                        most * S)
    if s.evaluate(busiest.flops / e.flop_rate) > s.evaluate(busiest.bytes / e.byte_rate):
        raise Reject("at the line's session count the turn's step is compute-bound: the linear solve does not hold")
    s.slip("clause priced as k prefill steps", s.evaluate(k * t_1 / clause), on="first_clause")
    s.assume("The conversation so far is in the prefix cache: a turn prefills only its own tokens, which attend "
             "to the whole context, in one step alongside the other sessions' decode tokens.")
    s.assume("Every session sits at the listed context; the first clause is the first k tokens the TTS can speak. "
             "Endpointing is the silence (or turn-detector) wait after the user stops; network is the round trip "
             "of the audio up and the first audio down; ASR and TTS are their final-transcript and first-chunk "
             "latencies.")
    s.assume("Layouts other than the one derived are timed by the same model (first_clause_time); a layout "
             "whose weights leave less than the card's minimal KV pool, or whose sessions' KV does not fit its "
             "usable HBM, cannot serve. Where no layout makes the line, TP 8 is derived: the sessions it holds "
             "within the line are what a replica can take.")


def _voice_regime(s: Sheet, lines, largest) -> None:
    waits = max_of(*(lines[name] for name in _WAITS))
    models = max_of(*(lines[name] for name in ("asr", "llm", "tts")))
    wait = s.step("largest_wait", "Largest line that is not a model", "t_wait", waits, "ms",
                  "endpointing or the network: time nobody's GPU can buy back")
    model = s.step("largest_model", "Largest model line", "t_model", models, "ms", "ASR, the LLM's line or TTS")
    name = _LINES[largest]
    s.regime_by(wait, model, tie="above", above=Side(
        "not-a-model",
        f"The largest line is {name}, {format_quantity(s.value(wait), 'ms')}, against at most "
        f"{format_quantity(s.value(model), 'ms')} for any model: a faster GPU cannot buy it back. Tune the "
        "endpointer (a turn detector instead of a long silence timeout), move the edge closer, and stream every "
        "stage so each starts on its predecessor's first output.",
        "If the waits shrink below the model lines (a semantic turn detector, an edge region), the LLM's line "
        "becomes the one to buy down: a smaller model, a wider TP group, speculative decoding.",
        near=f"The largest line is {name}, {format_quantity(s.value(wait), 'ms')}, barely above the largest "
             f"model line ({format_quantity(s.value(model), 'ms')}): waits and models share the budget almost "
             "evenly, so both the endpointer and the LLM tier are worth tuning."),
        below=Side(
        "a-model",
        f"A model line is the largest ({name}, {format_quantity(s.value(model), 'ms')}), above the longest "
        f"wait ({format_quantity(s.value(wait), 'ms')}). The LLM's line is whatever the budget leaves after the "
        "other four, so short waits hand it the slack: the budget is then bought with GPUs and model choices, "
        "and a tighter LLM line is a choice, not a given.",
        "With a longer endpointing wait or a farther network path the largest line stops being a model, and no "
        "GPU spend recovers it.",
        near=f"A model line is the largest ({name}), only just above the longest wait "
             f"({format_quantity(s.value(wait), 'ms')}): both kinds of line need work."))


# --- multi-model-fleet-tiering ------------------------------------------------------------

DEDICATED_BUSY = sympy.Rational(1, 2)  # a model earns its own replicas once it keeps half of one busy at peak
SHARED_HBM = sympy.Rational(1, 2)  # a shared replica keeps its models' weights in half its usable HBM, KV in the rest


class FiniteSum(sympy.Sum):
    """A sum over a few ranks, evaluated term by term in floats: sympy's Sum.evalf runs Euler-Maclaurin on
    exact radicals, several times slower for twenty terms."""

    def _eval_evalf(self, prec):
        (index, low, high), = self.limits
        if not (low.is_number and high.is_number and float(low).is_integer() and float(high).is_integer()):
            return None  # bounds not yet known; a whole float (20.0) counts
        # Each term in Python floats (math.ceil for a ceiling): sympy's ceiling of a float, built per term,
        # costs a millisecond, and an exact radical inside one more.
        ranks = range(int(low), int(high) + 1)
        return sympy.Float(math.fsum(_float_term(self.function, index, float(k)) for k in ranks), prec)


class RankCeiling(sympy.Function):
    """ceiling(x) inside a rank sum, left as written: sympy's ceiling of an expression in the rank index
    works through the index's assumptions each time the sheet puts values in (milliseconds a sum)."""

    def _sympystr(self, printer) -> str:
        return f"ceiling({printer._print(self.args[0])})"

    def _eval_evalf(self, prec):
        number = self.args[0].evalf(prec)
        return sympy.Float(math.ceil(number), prec) if number.is_Number else None


def rank_ceiling(x: sympy.Expr) -> sympy.Expr:
    """ceil(x) for a rank sum's term: a RankCeiling on a Sheet, Python's on a QuickSheet's numbers."""
    return ceil_of(x) if isinstance(x, (int, float)) else RankCeiling(x)


_FLOAT_OPS = {sympy.Add: math.fsum, sympy.Mul: math.prod, sympy.Pow: lambda a: a[0] ** a[1],
              RankCeiling: lambda a: math.ceil(a[0])}


def _float_term(expr: sympy.Expr, index: sympy.Symbol, k: float) -> float:
    """A sum's term at rank k in floats: the few node kinds a rank sum holds (numbers, +, ×, powers, ceilings)."""
    if expr == index:
        return k
    if expr.is_Number:
        return float(expr)
    return _FLOAT_OPS[expr.func]([_float_term(arg, index, k) for arg in expr.args])


def rank_sum(term: Callable[[sympy.Expr], sympy.Expr], low, high) -> sympy.Expr:
    """Σ term(i) over the ranks low..high: a FiniteSum the sheet prints as one; on a QuickSheet's numbers
    (the follow-up scan) a plain sum of floats, since a sympy Sum built per scan point costs milliseconds."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return sum((term(k) for k in range(round(low), round(high) + 1)), 0.0)
    i = sympy.Symbol("i", integer=True, positive=True)
    return FiniteSum(term(i), (i, low, high))


def multi_model_fleet_tiering(p, s: Sheet) -> None:
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
                   "its prefill step plus its reply's share of decode steps at the TPOT batch")
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
    if s.value(w) < s.value(d):
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
          f"it carries {_pct(v(ded_share))}")
    judge("tiering frees more than three quarters of today's GPUs", s.compare(4 * saved, 3 * today) > 0,
          f"{format_number(v(saved))} of {format_number(v(today))} GPUs")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _tier_regime(s: Sheet, b_r, avg_r, cold_rate, rank) -> None:
    """Three tiers, two boundaries: half a replica busy at peak (dedicated), the cold threshold on the average
    rate (cold). A shared model is shown against the nearer of the two, in ratio."""
    busy, r = format_number(s.value(b_r), 3), format_number(s.value(rank))
    rate, floor = format_quantity(s.value(avg_r), "requests/s", 3), format_quantity(s.value(cold_rate), "requests/s")
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
    elif s.value(b_r) / s.value(line) > s.value(cold_rate) / s.value(avg_r):  # nearer the dedicated line
        s.regime_by(b_r, line, tie="above", above=dedicated, below=shared)
    else:
        s.regime_by(avg_r, cold_rate, tie="above", above=shared, below=cold)


# --- cost-audit-rollout -------------------------------------------------------------------

THIN = 0.25  # a gate passed with less than this margin is one the canary must confirm at peak


def cost_audit_rollout(p, s: Sheet) -> None:
    """Dollars per million output tokens for every ledger row; a row is a real win only if it is cheaper by more
    than the noise, meets the p99 TPOT SLO and loses no more quality than the gate allows."""
    slo = s.param("TPOT_SLO", "slo")
    gate = s.param("q_gate", "gate")
    noise = s.param("ε", "noise")
    mtok = s.given("M_tok", 1e6, "tokens", "tokens in a million")
    rows = p.ledger
    costs, checks = [], []
    for index, row in enumerate(rows):
        price = s.given(f"c_{index}", row["$/GPU-h"] / 3600, "$/h", f"{row['change']}: price per GPU-hour")
        tps = s.given(f"X_{index}", row["tokens/s per GPU"], "tokens/s", f"{row['change']}: tokens/s per GPU")
        tpot = s.given(f"τ_{index}", row["p99 TPOT (ms)"] * 1e-3, "ms", f"{row['change']}: p99 TPOT")
        quality = s.given(f"q_{index}", row["quality (pts)"], "", f"{row['change']}: quality delta (points)")
        key = "baseline_cost" if index == 0 else f"cost_{index}"
        costs.append(s.step(key, f"Dollars per million output tokens: {row['change']}", f"D_{index}",
                            price / tps * mtok, "$", "a GPU-hour's price over the tokens that GPU-hour produces"))
        checks.append((row["change"], tpot, quality))
    base = costs[0]
    candidates = list(range(1, len(rows)))
    cheapest = min(candidates, key=lambda i: s.value(costs[i]))
    s.choose("headline", rows[cheapest]["change"])
    if s.compare(costs[cheapest], base) >= 0:
        raise Reject("no row is cheaper than the baseline: nothing to audit")
    s.step("headline_cost", "The headline: the cheapest row", "D_min", costs[cheapest], "$",
           "what a ledger sorted by cost puts on top")
    real, headline_fails = [], []
    for i in candidates:
        change, tpot, quality = checks[i]
        saving = 1 - costs[i] / base
        passes = {"the noise floor": s.compare(saving, noise) > 0, "the p99 TPOT SLO": s.compare(tpot, slo) <= 0,
                  "the quality gate": s.compare(-quality, gate) <= 0}
        if all(passes.values()):
            real.append(i)
        failed = [name for name, ok in passes.items() if not ok]
        if i == cheapest:
            headline_fails = failed
        s.judge("real_wins", change, not failed,
                f"saves {_pct(s.evaluate(saving))}, p99 {format_quantity(s.value(tpot), 'ms')}, quality "
                f"{format_number(s.value(quality), 2)} pts" + (f": fails {', '.join(failed)}" if failed else ""))
    if not real:
        raise Reject("no real win to roll out")
    if len(real) == len(candidates):
        raise Reject("every row is a real win: nothing to audit")
    if len(headline_fails) > 1 or "the noise floor" in headline_fails:
        # The cheapest row saves a quarter or more, and no row of the generator's fails both gates.
        raise Reject("the headline fails more than one gate, or the noise: the regime names one")
    best = min(real, key=lambda i: s.value(costs[i]))
    s.choose("rollout", rows[best]["change"])
    s.step("rollout_saving", "Saving of the row to roll out", "f_save", 1 - costs[best] / base, "%",
           "the cheapest row that passes every gate, against the baseline")
    _rollout_margins(s, checks[best], slo, gate)
    _audit_regime(s, rows[cheapest]["change"], checks[cheapest], slo, gate)
    s.assume("The ledger's rows are shadow measurements at production traffic; a row's cost is its GPU-hour price "
             "over the output tokens one GPU produces in that hour (prefill and idle time are in both alike).")
    s.assume("A win must clear three gates: cheaper than the baseline by more than the run-to-run noise, p99 TPOT "
             "within the SLO, and a quality delta no worse than the gate on the eval suite.")
    s.assume("Every row but fp8 keeps the model's math (a larger batch only reorders sums in batch-variant kernels; "
             "speculative decoding is lossless against its target model): their quality deltas are eval noise, "
             "within the stated noise either way, still held to the gate as measured.")


def _rollout_margins(s: Sheet, check, slo, gate) -> None:
    """The two gates whose margin a canary can erode: p99 headroom 1 − p99/SLO and the share of the quality
    gate left, (gate + delta)/gate. (The rolled-out row is the cheapest that passes: its saving clears the noise
    by far, so that gate is never the thin one.)"""
    _, tpot, quality = check
    margins = {"the p99 TPOT SLO": s.evaluate(1 - tpot / slo), "the quality gate": s.evaluate((gate + quality) / gate)}
    for name, margin in margins.items():
        s.judge("thin_gates", name, margin < THIN, f"margin {_pct(margin)}")
    wide = all(m >= THIN for m in margins.values())
    s.judge("thin_gates", "none: both margins are wide", wide,
            f"both gates pass by {_pct(THIN)} or more" if wide else "at least one gate is thin")


def _audit_regime(s: Sheet, name: str, check, slo, gate) -> None:
    """Three regimes, one per verdict on the headline: a real win, or misleading because it misses the SLO, or
    because it fails the quality gate. Each gate's use is p99/SLO or quality lost/gate (above 1 it fails); the
    regime is read against the gate the headline fails, or where it fails none, the one it uses most."""
    _, tpot, quality = check
    slo_use = s.step("headline_slo_use", "Headline's p99 over the SLO", "g_SLO", tpot / slo, "x",
                     "above 1 it misses the SLO")
    quality_use = s.step("headline_quality_use", "Headline's quality lost over the gate", "g_q", -quality / gate, "x",
                         "above 1 it fails the quality gate (a gain counts as negative use)")
    one = s.given("g_1", 1, "x", "a gate used to its limit")
    real = Side(
        "real",
        f"The cheapest row, {name}, passes every gate (p99 {format_quantity(s.value(tpot), 'ms')} against a "
        f"{format_quantity(s.value(slo), 'ms')} SLO, quality {s.value(quality):+.1f} points against a "
        f"{format_number(s.value(gate))}-point gate): the headline is a real win; roll it out behind a canary.",
        "A p99 over the SLO or a quality drop past the gate would make the same headline a misleading win.",
        near=f"The cheapest row, {name}, passes every gate, but one sits near its limit: a real win on paper that "
             "the canary must confirm at peak.")
    misses = Side(
        "misses-slo",
        f"The cheapest row, {name}, runs its p99 TPOT at {format_number(s.value(slo_use), 3)}× the SLO: a ledger "
        "sorted by dollars would roll out a change the latency gate exists to stop (a cheaper GPU or a bigger "
        "batch buys its tokens with latency).",
        "Under a looser SLO the same row would be the real win to roll out.",
        near=f"The cheapest row, {name}, misses the SLO by a hair ({format_number(s.value(slo_use), 3)}× it): "
             "re-measure before arguing about it, but do not roll it out on this ledger.")
    fails = Side(
        "fails-quality",
        f"The cheapest row, {name}, loses {format_number(s.value(quality_use), 3)}× the quality the gate allows: "
        "it is cheaper because it changed the model's math, and the eval suite says by too much.",
        "Under a looser quality gate (or a better calibration) the same row would be the real win.",
        near=f"The cheapest row, {name}, fails the quality gate by a hair ({format_number(s.value(quality_use), 3)}× "
             "it): a re-run of the eval may flip it, but not this ledger.")
    if s.compare(quality_use, one) > 0:  # it fails quality (and, by the solver's check, only quality)
        by_quality = True
    elif s.compare(slo_use, one) > 0:
        by_quality = False
    else:  # a real win: read against the gate it uses most
        by_quality = s.compare(quality_use, slo_use) > 0
    if by_quality:
        s.regime_by(quality_use, one, tie="below", above=fails, below=real)
    else:
        s.regime_by(slo_use, one, tie="below", above=misses, below=real)
