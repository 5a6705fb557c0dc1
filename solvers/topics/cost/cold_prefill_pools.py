"""A cold long-prompt prefill, the warm share it forces, and two pools."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import (
    given_nic,
    require_context,
)
from solvers.formulas.cost import pct_text
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    StepConstants,
    all_reduce_steps,
    decode_at_speed,
    engine,
    mean_decode_context,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of, sqrt_of
from solvers.units import format_number, format_quantity

MAX_WARM = 0.98  # a cache that must hit more than this of every prompt is not a plan anyone can promise


# The most a new session's first (cold) turn may take over the prefill's share of the target: the first turn is the
# one every user meets, so a target it misses by an order of magnitude is none a product would set (refuses ~6%).
FIRST_TURN_MISS = 8
FP8_OPTION = ("with fp8 weight GEMMs at {fp8_gain} the bf16 GEMMs' rate (attention still bf16), a new session's first, "
              "all-cold turn makes it")
SHIP_OPTION = "the KV handover keeps a prefill replica's NICs over a twentieth busy"
COLD_OPTION = "sized for throughput alone, the cold prefill pool would be at least twice the one you run"
CACHE_OPTION = "the prefill pool's size is set by the live prefixes its HBM must hold, not by its compute"
NIC_SHARE = sympy.Rational(1, 20)  # read10: a tenth held in 5 of 200 draws once the pool holds every cycle
TTFT_TOLERANCE = 0.03  # the cold time is graded at 3%: a verdict on the target decided by less is a coin toss
AR_SHARE = sympy.Rational(1, 5)  # the all-reduces "matter" to a cold prefill past this share of its time


def _replicas(s: Sheet, n) -> str:
    return "replica" if s.compare(n, 1) == 0 else "replicas"


def _cold_assumptions(s: Sheet) -> None:
    s.assume("The MFU (the question's 'share of peak') is the share of dense peak the prefill's GEMMs and "
             "attention (its causal pairs as attention-flops counts them) reach; decode math runs at the "
             "same efficiency (it rarely binds). The TP all-reduces come on top, not overlapped (tp-all-reduce).")
    s.assume("A warm prefix is read from the prefix cache (vLLM automatic prefix caching, SGLang RadixAttention): "
             "its tokens skip the weights but the cold remainder still attends to them. Its capacity is counted in "
             "the prefill replicas' HBM beside the weights, and the pool is sized so that its caches hold every "
             "live session's prefix (a prefix evicted before its session returns would go cold and miss the "
             "target). A host-memory tier (Mooncake's DRAM pool) would hold them for less and is left out.")
    s.assume("The warm fraction is a share of each prompt's tokens. A request that misses the cache entirely "
             "pays the whole cold time, so the share of requests allowed to go fully cold is bounded by the "
             "percentile the TTFT target is held at.")
    s.assume("A session's prompt keeps its length T: each turn resends the same context (instructions, tools, "
             "documents, the history kept) with the turn's T_new tokens new at its end, in place of the last "
             "turn's, so all but those are the prefix already cached. A history that grew every turn would warm "
             "all but the new tokens just the same, but its prompts would not stay T.")
    s.assume("Every request brings the same prompt and reply lengths; prefill and decode run on separate pools "
             "of the same replicas (disaggregated, as DistServe or Mooncake); the KV handover is counted as the "
             "rate it needs between the pools, not in the TTFT (it streams layer by layer behind the prefill).")
    s.assume("Each session's prefix is its own. Agents usually share a long system and tool prefix, which the cache "
             "holds once; that shared part would shrink every session's cached KV, and so the pool's HBM sizing.")
    s.assume("Measured beside this model (REALITY row 3): TensorRT-LLM's first-token latency for a 2,048-token "
             "Llama-2-70B prompt on 4 × A100 at TP 4 is 377 ms, where the bank's step model gives 424 ms "
             "(chunked-prefill-budget): the cold prefill here is the same model, about 12% slow there.")
    s.assume("A prompt is prefilled in one step (one set of all-reduce latencies, no chunking): engines chunk "
             "long prefills, which adds a few milliseconds of latency per chunk, not the FLOPs.")
    s.assume("A session's prefix stays cached for one turn's cycle: its prefill, its reply streaming at the "
             "decode step, then the think time before the next turn. The think time is drawn after the reply "
             "ends; a session cannot come back before its reply has streamed.")
    s.assume("A share of the TTFT target is kept for queueing: at the pool's ceiling a prompt waits behind others, "
             "and a prefill sized to the whole target would miss it whenever it waited at all.")
    s.assume("With prefill and decode split, a session's last turn sits in the decode replica's KV until its reply "
             "ends; the decode pool is sized to its running batch and frees a finished request's KV, so the prefill "
             "replica keeps its own copy of the prompt's prefix (Mooncake keeps it in a shared tier), the router "
             "sends a session back to the replica that holds it, and every turn ships its whole prompt's KV to "
             "decode. A decode pool that kept sessions between turns would ship only the new tokens' KV.")
    s.assume("The KV handover leaves a prefill replica over its GPUs' NICs, one each at line rate (RDMA, as "
             "Mooncake's transfer engine and NIXL send it); Mooncake measures 47-87% of line rate on 40 GB payloads.")
    s.assume("The TTFT target is the product's, the same whatever the prompt's length: an interactive agent loop "
             "waits on every turn, so a longer history must not slow the reply. That is what makes the cache a "
             "requirement rather than a saving.")
    s.assume(f"fp8 weight GEMMs run at {s.text(s.symbol('g_8'))} the bf16 GEMMs' achieved rate, not twice it: FP8 "
             "has twice the peak but reaches less of it (the step model's 50% of FP8 peak against 60% of bf16 is "
             "1.67x; TensorRT-LLM's 70B FP8 TTFT is about 42% of the FP8 peak, Azure's GB200 FP8 GEMMs 55%).")


def _cold_judgements(s: Sheet, e, T, t_cold, tau, n_pre, n_cold, ar, gain, busy) -> None:
    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    # fp8 weights: the weight GEMMs at `gain` times the bf16 rate and half the weight bytes; attention keeps the
    # bf16 cache's peak (matmul-precision), and the all-reduces and overhead stay.
    fp8 = max_of(e.W / (2 * e.TP) / e.byte_rate, e.math_time(2 * e.N * T / gain, e.A * T**2 / 2)) + ar.of(T) + e.t_oh
    judge(FP8_OPTION, s.compare(fp8, tau) <= 0,
          f"the weight GEMMs at {s.text(gain)} the rate leave {format_quantity(s.evaluate(fp8), 's')} against "
          f"{s.text(tau)}: attention over the bf16 cache keeps its peak (matmul-precision), and the all-reduces "
          "and overhead do not shrink")
    judge(SHIP_OPTION, s.compare(busy, NIC_SHARE) > 0,
          f"they are {pct_text(s.evaluate(busy))} busy: every turn ships the whole prompt's KV for a prefill of only "
          "its new tokens, so the wire's share grows with the warm share")
    by_pool = s.compare(s.symbol("B_pool"), min_of(s.symbol("B_mem"), s.symbol("B_cmp"))) < 0
    judge("the decode batch is capped by the KV pool, not the TPOT target", by_pool,
          f"the pool holds {format_number(s.number('batch_by_pool'), 3)} requests at this context; the target "
          f"allows {format_number(min(s.number('batch_by_bandwidth'), s.number('batch_by_compute')), 3)}")
    judge(COLD_OPTION, s.compare(n_cold, 2 * n_pre) >= 0,
          f"{s.text(n_cold)} replicas cold (sized for throughput alone) against {s.text(n_pre)}")
    judge("the TP all-reduces are over a fifth of the cold prefill", s.compare(ar.of(T), AR_SHARE * t_cold) > 0,
          f"they take {pct_text(s.evaluate(ar.of(T) / t_cold))} of it")
    if len(set(s.judged("facts").values())) == 1:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _cold_regime(s: Sheet, t_cold, tau) -> None:
    """Whether a cold prompt makes the target, said without the warm share or the pools a later stage asks."""
    cold, target = format_quantity(s.value(t_cold), "s"), s.text(tau)
    s.regime_by(t_cold, tau, tie="below", above=Side(
        "warm-required",
        f"A cold prompt takes {cold} of prefill against the {target} the TTFT target leaves it after queueing: "
        "more replicas of this size add throughput, not one request's speed, so the prefix cache must serve part "
        "of every prompt (or the prompt is split over more GPUs: context parallelism across replicas).",
        "Below the boundary a cold prompt makes the target on its own: the cache then saves GPUs, not latency, "
        "and a miss costs money rather than an SLO.",
        near=f"A cold prompt takes {cold} against a {target} target: just over it, so a modest warm share or a "
             "faster GEMM gets there."),
        below=Side(
        "cold-fits",
        f"A cold prompt takes {cold} against the {target} the TTFT target leaves it after queueing: it fits with "
        "no cache, so prefix hits are a cost lever only.",
        "Past the boundary (a longer prompt, a tighter target, a slower group) the cold prefill alone misses the "
        "target: then the warm fraction becomes a requirement and misses become SLO violations.",
        near=f"A cold prompt takes {cold} against the {target} left after queueing, only just inside it: a queue "
             "longer than the allowance pushes a cold request over, so the cache is nearly a requirement already."))


def solve(p, s: Sheet) -> None:
    require_context(p.model, p.prompt)
    constants = StepConstants(compute=p.mfu, bandwidth=DEFAULT_CONSTANTS.bandwidth, overhead=DEFAULT_CONSTANTS.overhead)
    e = engine(s, p.model, p.gpu, p.tp, constants, communication=True, kv_prerequisite=True)
    T = s.param("T", "prompt")
    tau = s.param("τ", "ttft")
    q = s.param("q", "queue_share")
    appended = s.param("T_new", "appended")
    gap = s.param("t_gap", "gap")
    L_out = s.param("L_out", "reply")
    tpot = s.param("TPOT", "tpot")
    lam = s.param("λ", "rate")
    u = s.param("u", "ceiling")
    gain = s.param("g_8", "fp8_gain")
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

    tau_p = s.step("prefill_budget", "Prefill's share of the TTFT target", "τ_p", (1 - q) * tau, "s",
                   "the target less the share kept for queueing behind other prompts at the pool's ceiling")
    if abs(s.value(t_cold) / s.value(tau_p) - 1) < TTFT_TOLERANCE:
        raise Reject("the cold prefill lands within its graded tolerance of the TTFT target: no clear verdict")
    if s.compare(t_cold, FIRST_TURN_MISS * tau_p) > 0:
        # read11 (@77, @7): a 65K or 126K prompt against a target its cold first turn misses 10-16 times over.
        raise Reject(f"a new session's first, cold turn misses the target more than {FIRST_TURN_MISS} times over: "
                     "no product sets a TTFT target that every new session misses by an order of magnitude")
    # A warm fraction h is read from the cache; the rest, (1−h)·T tokens, attends to the whole prompt:
    # t(h) = a·(1−h) + b·(1 − h²) + c, solved for t(h) = τ.
    a = s.step("linear_cost", "Time linear in the computed tokens", "a", 2 * e.N * T / e.flop_rate + ar.per_token * T,
               "s", "the weights' math and the all-reduce bytes of every prompt token")
    b = s.step("quadratic_cost", "Attention time of the whole cold prompt", "b", e.A * T**2 / (2 * e.flop_rate), "s",
               "A·T²/2 pairs; a warm prefix of h·T leaves T² − (hT)² of them to compute, over 2")
    c = s.step("fixed_cost", "Time paid whatever is cached", "c", e.t_oh + ar.fixed, "s",
               "the step overhead and the all-reduce latencies")
    y = s.step("cold_share", "Share of the prompt that may stay cold", "y",
               min_of(1, ((a + 2 * b) - sqrt_of(max_of(0, (a + 2 * b)**2 - 4 * b * (tau_p - c)))) / (2 * b)), "%",
               "the smaller root of b·y² − (a + 2b)·y + (τ − c) = 0, with y = 1 − h; all of it where cold fits")
    h = s.step("warm_needed", "Warm fraction the prefix cache must reach", "h_min", 1 - y, "%",
               "what the cache must serve of a typical prompt for its prefill to fit its share of the target")
    if s.value(h) > MAX_WARM:
        raise Reject("the prompt would have to be almost entirely cached")
    # What sessions reach: a returning session's prompt is its last prompt plus the turn's new tokens, so all but
    # those are warm where its prefix is still cached. The pool is sized at that share, not at the least one.
    h_real = s.step("warm_real", "Warm share a returning session brings", "h_s", 1 - appended / T, "%",
                    "all of the prompt but the turn's new tokens is its last prompt, cached")
    if s.compare(h_real, h) < 0:
        raise Reject("the turn's new tokens alone miss the prefill's share of the target: no cache can make it")
    if s.compare(h_real - h, sympy.Rational(3, 100)) < 0:
        raise Reject("the sessions' warm share is within 3 points of the least the target needs: too close to call")
    s.step("warm_margin", "A returning session's warm share over the least the target needs", "Δh", h_real - h, "%",
           "positive: a warm turn makes the target on its own prefix (draws where it would not, or by under 3 "
           "points, are refused)")
    y_r = 1 - h_real
    warm = step_work(s, e, "warm", "prefill of a returning session", y_r * T, (T**2 - (h_real * T)**2) / 2,
                     h_real * T)
    t_warm = step_time(s, e, "warm", "prefill of a returning session", warm, key="warm_ttft",
                       communication=ar.of(y_r * T), why="the new tokens' math, all-reduces and overhead")
    if s.compare(warm.bytes / e.byte_rate, warm.flops / e.flop_rate) > 0:
        raise Reject("the warm remainder's prefill is memory-bound: the quadratic's compute model does not hold")

    for busy in (lam * t_cold / u, lam * t_warm / u):
        # A busy figure on a whole number of replicas would leave the ceiling to float noise.
        if abs(s.evaluate(busy) - round(s.evaluate(busy))) < 1e-6 * s.evaluate(busy):
            raise Reject("a prefill pool lands on a whole number of replicas: a tie for the ceiling")
    n_cold = s.step("cold_prefill_replicas", "Prefill replicas if every prompt ran cold", "n_cold",
                    ceil_of(lam * t_cold / u), "", "λ × cold prefill time, over the utilisation ceiling")

    S = mean_decode_context(s, T, L_out)
    decode = decode_at_speed(s, e, p.gpu, ar, S, tpot, "the TPOT target")
    # What the cache costs: a replica's HBM beside its weights holds whole prompts' KV (each GPU its heads' share),
    # and a session returns warm only where its prefix is still held a gap later (r12: the pool was sized on
    # compute alone, every session warm, while its caches held 62 of 117.5 live prefixes at @61027).
    n_cache = s.step("cached_prompts", "Prompts whose KV one replica keeps beside its weights", "N_cache",
                     floor_of(decode.pool / T), "", "the KV pool's tokens over one prompt: the prefixes a replica "
                     "can keep warm for returning sessions")
    # A prefix is held from its prefill until the session's next turn: the prefill, the reply streaming at the
    # decode step, then the think time (read10: λ × think time alone counted sessions back every 8.1 s whose
    # replies took 24.4 s to stream, @7).
    cycle = s.step("session_cycle", "A session's turn, prompt to next prompt", "t_cyc",
                   t_warm + L_out * decode.step + gap, "s",
                   "its warm prefill, its reply streaming a token a decode step, then the think time before "
                   "its next turn")
    live = s.step("live_sessions", "Sessions whose prefix must stay cached", "N_live", lam * cycle, "",
                  "Little's law: λ turns a second, each session's prefix held for one turn's cycle")
    n_compute = s.step("prefill_compute_replicas", "Prefill replicas the warm prefills keep busy", "n_comp",
                       ceil_of(lam * t_warm / u), "", "λ × a returning session's prefill time, over the ceiling")
    n_hold = s.step("prefill_cache_replicas", "Prefill replicas whose caches hold every live prefix", "n_hold",
                    ceil_of(live / n_cache), "", "the live sessions over the prompts one replica's HBM keeps, "
                    "each session routed back to the replica that holds its prefix")
    n_warm = s.step("warm_prefill_replicas", "Prefill replicas, every returning session warm", "n_warm",
                    max_of(n_compute, n_hold), "", "enough compute for the warm prefills and enough HBM for every "
                    "live prefix: the larger")
    # Where a cold prompt makes the target the cache is a cost lever: a pool that must hold more prefixes than
    # recomputing them costs runs cold. Where it misses, every session must come back warm, whatever that costs.
    if s.compare(t_cold, tau_p) <= 0:
        n_pre = s.step("prefill_replicas", "Prefill replicas, the cheaper plan", "n_pre", min_of(n_warm, n_cold), "",
                       "a cold prompt makes the target: the warm pool where it is smaller, else run every prompt "
                       "cold")
    else:
        n_pre = s.step("prefill_replicas", "Prefill replicas, every returning session warm", "n_pre",
                       max_of(n_compute, n_hold), "",
                       "a cold prompt misses the target: every session must return warm, whatever the cache costs")
    saved = s.step("gpus_saved", "Prefill GPUs the cache saves", "G_saved", (n_cold - n_pre) * e.TP, "GPUs",
                   "replicas no longer needed, times the GPUs in each")
    if s.compare(saved, 0) < 0:
        s.refuse_if_asked(["gpus_saved"], "the pool that holds every live prefix outnumbers a cold one: the cache "
                          "costs GPUs here, and saves none")
    pool_cache = s.step("pool_cache", "Prefixes the prefill pool's HBM holds", "N_pool", n_pre * n_cache, "",
                        "every prefill replica's cache, with each session routed back to its replica")
    s.step("warm_prefix_bytes", "KV of one prompt's warm prefix", "KV_warm", h * T * s.symbol("KV_tok"), "GB",
           "the warm share of the prompt, in KV bytes: what the cache keeps for each returning session")
    s.step("kv_transfer", "KV the prefill pool ships to the decode pool", "BW_PD", lam * T * s.symbol("KV_tok"),
           "GB/s", "every request's prompt KV, once, from the replica that prefilled it to the one that decodes it")
    nic = given_nic(s, p.nic)
    ship = s.step("ship_time", "Time to ship one prompt's KV over its prefill replica's NICs", "t_ship",
                  T * s.symbol("KV_tok") / (e.TP * nic), "ms",
                  "the whole prompt's KV, every head, over the replica's NICs, one a GPU")
    busy = s.step("nic_busy", "Share of a prefill replica's NIC time the handover takes", "ρ_NIC",
                  lam * ship / n_pre, "%", "λ prompts a second over the pool's replicas, each on the wire t_ship")
    if abs(s.value(busy) / float(NIC_SHARE) - 1) < 0.03:
        raise Reject("the handover keeps the NICs within 3% of a twentieth busy: too close to call")
    s.step("decode_replicas", "Decode replicas", "n_dec", ceil_of(lam * L_out * decode.step / decode.batch / u), "",
           "λ × reply tokens × replica-seconds per output token, over the ceiling")
    _cold_assumptions(s)
    s.slip("attention left out (2·N·T only)", s.evaluate(2 * e.N * T / cold.flops), on="mfu_time")
    s.slip("attention counted without the causal half", s.evaluate((cold.flops + e.A * T**2 / 2) / cold.flops),
           on="mfu_time")
    s.slip("prefill pool sized cold", s.value(n_cold) / s.value(n_pre), on="prefill_replicas")
    s.slip("prefill pool sized on compute alone, its caches short of the live prefixes",
           s.value(n_compute) / s.value(n_pre), on="prefill_replicas")
    warm_plan = s.compare(n_pre, n_warm) == 0
    by_cache = warm_plan and s.compare(n_hold, n_compute) > 0
    s.judge("facts", CACHE_OPTION, by_cache,
            f"{format_number(s.evaluate(live), 3)} live sessions over {s.text(n_cache)} prompts a replica need "
            f"{s.text(n_hold)} {_replicas(s, n_hold)}; the warm prefills keep {s.text(n_compute)} busy"
            + (f"; the pool runs {s.text(n_pre)}, its caches holding {s.text(pool_cache)} prefixes" if warm_plan
               else f"; running every prompt cold takes {s.text(n_cold)}, fewer"))
    _cold_judgements(s, e, T, t_cold, tau_p, n_pre, n_cold, ar, gain, busy)
    s.assume(f"The all-reduces are {pct_text(s.evaluate(ar.of(T) / t_cold))} of the cold time as tp-all-reduce counts "
             "them, unoverlapped: the card's pessimism, since engines overlap part of them with the GEMMs.")
    _cold_regime(s, t_cold, tau_p)

