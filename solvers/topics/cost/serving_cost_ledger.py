"""The serving ledger - where the bill for a chat request comes from."""
from __future__ import annotations

import math
from fractions import Fraction

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    compute_efficiency,
    matmul_peaks,
    require_context,
)
from solvers.formulas.cost import ledger_time, pct_text
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    all_reduce_steps,
    decode_at_speed,
    engine,
    mean_decode_context,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of
from solvers.units import format_number

LEVER_CUT = Fraction(1, 5)  # a lever "matters" when it cuts the cost per request by at least this share
# A bill whose prompt and reply shares sit within this of each other (x = (P/O)/r within it of 1) is a coin toss:
# the output token's cost is graded to 5%, so such draws are refused rather than called.
SPLIT_MARGIN = Fraction(1, 20)

# A replica decoding fewer requests than this spends its steps re-reading the weights for a handful of tokens
# (70B on TP 2 at batch 8-10, hundreds of replicas): anyone would deploy a wider TP group instead.
MIN_BATCH = 16


def _ledger_assumptions(s: Sheet) -> None:
    s.assume("A replica is one TP group. A prompt holds it for one prefill step of its own; an output token for "
             "1/B of a decode step at the batch the speed target allows (the cap the KV pool sets included). "
             "Pricing the phases apart leans against mixed batching: chunked prefill mixed into memory-bound "
             "decode steps can hide part of the prefill's math under the decode's reads (a step costs the longer "
             "of the two, not their sum), less what the unoverlapped all-reduces and a step already at the speed "
             "target claw back.")
    s.assume("Attention's FLOPs are counted per query-key pair (attention-flops): the prefill's grow with P²/2, a "
             "decode token's with its context. An fp8 KV cache, one of the levers, runs attention at the fp8 peak "
             "(matmul-precision).")
    s.assume("Requests arrive at the peak rate given; the fleet is sized for it at the utilisation ceiling, "
             "which leaves the headroom queueing needs. The dollars per request are the peak hour's, a lower bound "
             "for the day: a fleet that does not scale down pays the same replicas for fewer requests off-peak.")
    s.assume("The GPU-hour price is an on-demand rental assumption (mid-2026: H100 SXM about $2-5, H200 about "
             "$2.5-7 a GPU-hour, as the references list); it scales every dollar figure and none of the "
             "replica-seconds.")


LEVER_MARGIN = 0.01  # a lever whose cut lands within a point of LEVER_CUT is a coin toss for the candidate


def _ledger_levers(s: Sheet, e, gpu, u, v, P_in, L_out, ar, pool, lam, n) -> None:
    """Which single change cuts the cost per request by LEVER_CUT or more, judged on the replica-seconds a
    request is provisioned at the ceiling (T_req/u): the cost per request at scale. Whole replicas would let a
    small fleet's rounding decide (6 -> 5 replicas is 16.7% whatever the lever); the why shows them too."""
    value = s.evaluate
    g = {"P": value(P_in), "R": value(L_out), "N": value(e.N), "A": value(e.A), "W_gpu": value(e.W / e.TP),
         "br": value(e.byte_rate), "fr": value(e.flop_rate), "fr_att": value(e.attention_rate),
         "ar0": value(ar.fixed), "ar_tok": value(ar.per_token),
         "t_oh": value(e.t_oh), "v": value(v), "KV": value(e.KV), "pool": value(pool * e.KV), "u": value(u)}
    rate, now, before = value(lam), int(s.value(n)), ledger_time(g)

    def judge(option: str, why: str, warm: float = 0.0, **changed: float) -> None:
        after = ledger_time(g | changed, warm)
        cut = 1 - after / before
        if abs(cut - LEVER_CUT) < LEVER_MARGIN:
            raise Reject(f"'{option}' cuts the cost per request by {pct_text(cut)}: too close to a fifth to call")
        replicas = math.ceil(rate * after)
        s.judge("levers", option, cut >= LEVER_CUT,
                f"{why}: the replica-seconds provisioned per request, at the ceiling, fall {pct_text(cut)} "
                f"(at this peak "
                f"{format_number(replicas)} replicas instead of {format_number(now)})")

    judge("half of every prompt served warm from a prefix cache",
          f"the prefill is {pct_text(value(s.results['prompt_share']))} of the time and computes half the tokens",
          warm=0.5)
    # An fp8 cache runs fp8 attention (the card's matmul-precision): half the KV bytes and attention's peak.
    fp8_attention = value(e.TP) * compute_efficiency("fp8") * matmul_peaks(gpu, "bf16", "fp8")[1]
    judge("an fp8 KV cache", "half the KV bytes per context, and attention at the fp8 peak: a larger decode batch "
          "at the same speed", KV=g["KV"] / 2, pool=g["pool"], fr_att=fp8_attention)
    judge("a batch tier at half the per-user speed", "twice the step time: a larger batch shares each step",
          v=g["v"] / 2)
    judge("a GPU with {faster_reads} the HBM bandwidth at the same peak and price",
          "faster reads: decode steps shorten, a compute-bound prefill does not",
          br=s.value(s.param("k_br", "faster_reads")) * g["br"])
    judge("a GPU with twice the tensor peak at the same bandwidth and price",
          "faster math: the prefill shortens, memory-bound decode steps do not", fr=2 * g["fr"],
          fr_att=2 * g["fr_att"])
    judged = s.judged("levers")
    if len(set(judged.values())) == 1:
        raise Reject("every lever cuts the bill by a fifth, or none does: nothing to tell apart")


def _ledger_regime(s: Sheet, mix, r, share, x) -> None:
    ratio, tokens, part = format_number(s.value(r), 3), format_number(s.value(mix), 3), s.text(share, 3)
    rule = (f"the prompt's share is x/(1 + x) with x = (P/O)/r = {format_number(s.value(x), 3)}; "
            "P/O = 2r gives two thirds")
    s.regime_by(mix, r, tie="above", above=Side(
        "prompt-dominated",
        f"An output token costs {ratio} prompt tokens, and each request brings {tokens} prompt tokens per output "
        f"token: the prompt is {part} of the replica-seconds ({rule}), so the prefill's compute is where most of "
        "the money goes.",
        "With replies long enough that P/O falls below r, decode steps take most of the time: then the batch the "
        "speed target allows, KV bytes and HBM bandwidth set the bill.",
        near=f"An output token costs {ratio} prompt tokens and requests bring {tokens} per output token: the prompt "
             f"is {part}, barely the larger part ({rule}). Both phases matter; a lever on either moves the bill."),
        below=Side(
        "reply-dominated",
        f"An output token costs {ratio} prompt tokens, but requests bring only {tokens} prompt tokens per output "
        f"token: the reply is {pct_text(1 - s.value(share))} of the replica-seconds ({rule}), so the decode steps, "
        "and the batch that shares each, set the bill.",
        "With prompts long enough that P/O exceeds r, prefill compute takes most of the time: then prefix caching "
        "and FLOP/s set the bill.",
        near=f"An output token costs {ratio} prompt tokens and requests bring {tokens} per output token: the reply "
             f"is {pct_text(1 - s.value(share))}, barely the larger part ({rule}). Both phases matter."))


def solve(p, s: Sheet) -> None:
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
                     "the fleet's cost per second over requests per second: the peak hour's, the day's cheapest")
    s.step("cost_per_kreq", "Cost of a thousand requests at the peak", "C_1k", 1000 * per_req, "$",
           "a thousand requests' share of the fleet's bill")
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

    if s.compare(x, 1 + SPLIT_MARGIN) < 0 and s.compare(x * (1 + SPLIT_MARGIN), 1) > 0:
        raise Reject("the prompt and the reply split the bill within 5% of even: too close to call")

    _ledger_assumptions(s)
    s.slip("the bill split by token counts, not by replica-seconds", s.evaluate(P_in / (P_in + L_out)) / s.value(share),
           on="prompt_share")
    s.slip("busy replicas not divided by the utilisation ceiling",
           s.evaluate(ceil_of(busy)) / s.value(n), on=("replicas", "cost_per_kreq"))
    s.slip("an output token priced at a whole decode step", s.value(B), on="cost_ratio")
    s.slip("the price without the ceiling's idle share", s.value(u), on="output_price")
    _ledger_levers(s, e, p.gpu, u, v, P_in, L_out, ar, pool, lam, n)
    _ledger_regime(s, mix, r, share, x)

