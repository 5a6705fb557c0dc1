"""Serving questions: how a scheduler turns request lengths into slot use and throughput, and how
latency percentiles and SLOs turn throughput into goodput."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Reject, Sheet, Side, exp_of, log_of, max_of, min_of
from solvers.units import format_number, format_quantity

GAIN_BOUNDARY = 2  # a 2x gain: the longest request runs twice the mean, static utilisation 50%


def _length_symbols(s: Sheet, lengths: list[int]) -> list[sympy.Symbol]:
    # Zero-padded names keep sympy's sorted printing in batch order (L_02 before L_10).
    width = len(str(len(lengths)))
    return [s.given(f"L_{i:0{width}d}", length, "", f"output tokens of request {i}")
            for i, length in enumerate(lengths, start=1)]


def continuous_batching_padding(p, s: Sheet) -> None:
    lengths = list(p.lengths)
    B = s.given("B", len(lengths), "slots", "batch size")
    L = _length_symbols(s, lengths)
    t = s.param("t", "step")
    S = s.step("useful", "Useful slot-steps (tokens generated)", "S", sympy.Add(*L), "slot-steps",
               "each request occupies its slot for one step per output token")
    L_max = s.step("longest", "Steps the static batch runs", "L_max", max_of(*L), "steps",
                   "the batch releases its slots only when its longest request finishes")
    held = s.step("occupied", "Slot-steps the static batch holds", "O", B * L_max, "slot-steps",
                  "every slot stays assigned until the last step")
    waste = s.step("waste", "Padding slot-steps", "P", held - S, "slot-steps",
                   "slots whose request has finished keep stepping on padding")
    s.step("utilisation", "Static utilisation", "U", S / held, "%", "useful share of the slot-steps held")
    X_s = s.step("throughput_static", "Static batching: tokens per second", "X_static", S / (L_max * t),
                 "tokens/s", "the batch's useful tokens over the time it holds the GPU")
    X_c = s.step("throughput_continuous", "Iteration-level scheduling: tokens per second", "X_cont", B / t,
                 "tokens/s", "every slot does useful work every step; each user still streams at 1/t tokens/s")
    gain = s.step("gain", "Throughput gain of iteration-level scheduling", "G", X_c / X_s, "x",
                  "B tokens per step instead of S/L_max: the inverse of the static utilisation")
    s.step("wait_static", "Static: a queued request's wait for a slot", "W_static", L_max * t, "s",
           "no slot frees until the whole batch ends")
    L_min = s.step("shortest", "Steps until the first request ends", "L_min", min_of(*L), "steps",
                   "the shortest request frees its slot first")
    s.step("wait_continuous", "Iteration-level: a queued request's wait for a slot", "W_cont", L_min * t, "s",
           "the first slot to free takes it at the next step")
    G_star = s.given("G_star", GAIN_BOUNDARY, "x", "gain separating small from large")
    L_star = s.step("boundary_length", "Longest length at the boundary", "L_star", G_star * S / B, "steps",
                    "gain = L_max ÷ mean length, so the gain reaches G* when L_max = G*·S/B")

    s.assume("The request queue never runs dry: a freed slot takes a new request at the next step.")
    s.assume("A decode step takes the same time however many slots are busy (memory-bound decode, "
             "dominated by the weight read), so throughput is proportional to useful slot-steps and every "
             "user streams at one token per step under either scheme: the gain is capacity, not speed.")
    s.assume("Prefill of the incoming requests is ignored, and this batch's lengths stand for the mix. With "
             "slots refilled every step, new prompts arrive mid-batch: their prefill has to be interleaved "
             "with decode (Orca's selective batching, chunked prefill), and the KV cache of requests of "
             "unknown length has to grow on demand (paging): those become the next limits.")
    s.slip("/B: the padding of one average slot, not of the batch", 1 / len(lengths), on="waste")
    if s.value(waste) > 0:
        s.slip("every occupied slot-step counted as padding", s.value(held) / s.value(waste), on="waste")
    s.slip("padding counted as work: B tokens per step", s.value(gain), on="throughput_static")
    s.slip("the mean length, not the shortest", sum(lengths) / len(lengths) / min(lengths), on="wait_continuous")

    _gain_regime(s, gain, L_max, L_star)


def _gain_regime(s: Sheet, gain: sympy.Symbol, L_max: sympy.Symbol, L_star: sympy.Symbol) -> None:
    g, longest, limit = (format_number(s.value(x), 3) for x in (gain, L_max, L_star))
    s.regime_by(L_max, L_star, tie="above", above=Side(  # the prompt calls a gain of 2x or more large
        "large-gain",
        f"The longest request ({longest} steps) runs past {limit}, twice the mean length: most slot-steps "
        f"are padding, and refilling slots as they free up raises throughput {g}x at the same per-user speed.",
        "With near-uniform lengths the longest request is close to the mean, the static batch wastes little, "
        "and the gain falls toward 1x. Larger batches and heavier tails push the gain up: the batch always "
        "waits for its slowest member.",
        near=f"The longest request ({longest} steps) only just passes {limit}, twice the mean length: the gain "
             f"of {g}x sits near the 2x line, and a slightly shorter longest reply makes it small."),
        below=Side(
        "small-gain",
        f"The longest request ({longest} steps) stays within twice the mean length ({limit}): the static "
        f"batch keeps most slots busy and iteration-level scheduling gains only {g}x in throughput, though "
        "queued requests still get a slot sooner.",
        "A heavy tail (one reply much longer than the rest) or a larger batch lets the longest request pass "
        "twice the mean: the other slots then step on padding most of the time, and the gain passes 2x.",
        near=f"The longest request ({longest} steps) falls just short of {limit}, twice the mean length: a gain "
             f"of {g}x, a little under 2x; one longer reply in the batch makes it large."))


# --- slo-goodput ---------------------------------------------------------------------------

MIN_RATE_SHARE = 0.5  # the goal must hold up to half the prefill capacity: past that the queue, not prefill, decides
MAX_ATTAINMENT = 0.999  # fewer than 1 request in 1,000 missing leaves nothing to diagnose
TIE_SHARE = 0.005  # an arrival rate within 0.5% of the goodput would read as a tie


def _p99_means() -> sympy.Expr:
    """An exponential's 99th percentile, in means: ln 100."""
    return log_of(100)



def _latency_model(s: Sheet) -> dict[str, sympy.Symbol]:
    """The prefill queue (M/M/1) and the decode pool's TPOT, as the model predicts them."""
    S, rho, T, t0, theta, P = (s.param(sym, name) for sym, name in (
        ("S", "prefill_mean"), ("ρ", "load"), ("T_SLO", "ttft_slo"), ("t_0", "tpot_floor"),
        ("θ", "tpot_tail"), ("P_SLO", "tpot_slo")))
    p99_means = _p99_means()
    mu = s.step("capacity", "Prefill capacity", "μ", 1 / S, "requests/s",
                "one prompt at a time: a busy server finishes 1/S prompts per second")
    lam = s.step("arrival_rate", "Arrival rate (= throughput served)", "λ", rho * mu, "requests/s",
                 "the server is busy ρ of the time; below capacity it serves every arrival, so this is "
                 "also the throughput a dashboard shows")
    s.step("ttft_p50", "Median TTFT", "TTFT_50", log_of(2) / (mu - lam), "s",
           "in an M/M/1 queue, wait plus own service is exponential with rate μ − λ: median = ln 2 / (μ − λ)")
    ttft99 = s.step("ttft_p99", "p99 TTFT", "TTFT_99", p99_means / (mu - lam), "s",
                    "the exponential's 99th percentile: ln 100 ≈ 4.6 mean times, and the mean is 1/(μ − λ)")
    s.step("tpot_p50", "Median TPOT", "TPOT_50", t0 + theta * log_of(2), "ms",
           "the floor plus the median of the exponential excess")
    s.step("tpot_p99", "p99 TPOT", "TPOT_99", t0 + theta * p99_means, "ms",
           "the floor plus the excess's 99th percentile")
    a_ttft = s.step("ttft_attainment", "Share meeting the TTFT SLO", "A_TTFT", 1 - exp_of(-(mu - lam) * T),
                    "%", "the exponential's CDF at the SLO")
    a_tpot = s.step("tpot_attainment", "Share meeting the TPOT SLO", "A_TPOT", 1 - exp_of(-(P - t0) / theta),
                    "%", "the excess must stay within the SLO minus the floor")
    knee = s.step("knee_load", "Highest load at which p99 TTFT meets its SLO", "ρ_99", 1 - p99_means / (mu * T),
                  "%", "solve ln 100 / (μ − λ) = T_SLO for λ/μ: p99 TTFT grows as 1/(1 − ρ), so it crosses the "
                  "SLO well before the server runs out of capacity")
    return {"S": S, "rho": rho, "T": T, "mu": mu, "lam": lam, "ttft99": ttft99, "a_ttft": a_ttft,
            "a_tpot": a_tpot, "knee": knee}


def _check_draw(s: Sheet, model: dict[str, sympy.Symbol], both, lam_star) -> None:
    """Keep draws whose limit comes from the queue, that are not trivially met, and whose verdict is no tie."""
    mu, lam = s.value(model["mu"]), s.value(model["lam"])
    if s.value(lam_star) < MIN_RATE_SHARE * mu:
        raise Reject("the goal fails below half the prefill capacity: prefill is too slow for the TTFT SLO, "
                     "the queue is not the story")
    if s.value(both) > MAX_ATTAINMENT:
        raise Reject("nearly every request meets both SLOs: nothing to diagnose")
    if abs(lam / s.value(lam_star) - 1) < TIE_SHARE:
        raise Reject("the arrival rate is within 0.5% of the goodput: the verdict would read as a tie")


ALREADY = "p99 TTFT already meets its SLO at today's load"
HALVED = "prefill time per prompt halved would put p99 TTFT within its SLO"
DECODE_LEVER = "halving the decode pool's TPOT excess would shorten p99 TTFT"


def _ttft_levers(mu, lam):
    """Each prefill lever alone, at today's arrival rate: (option, the rate μ' − λ' of the TTFT exponential)."""
    within = " would put p99 TTFT within its SLO"
    return ((ALREADY, mu - lam),
            ("a second prefill server like this one, arrivals split between the two," + within, mu - lam / 2),
            ("prefill time per prompt cut by 20%" + within, mu * 5 / 4 - lam),
            ("prefill time per prompt cut by 10%" + within, mu * 10 / 9 - lam),
            (HALVED, 2 * mu - lam),
            ("shedding 10% of arrivals at admission" + within, mu - lam * 9 / 10))


def _judge_levers(s: Sheet, model: dict[str, sympy.Symbol]) -> None:
    """Which lever brings p99 TTFT within its SLO follows from how far past the knee the load sits."""
    T, ttft99 = model["T"], model["ttft99"]
    p99_means = _p99_means()
    needed = p99_means / T  # the rate μ − λ at which p99 TTFT equals the SLO
    slo = format_quantity(s.value(T), "s")
    for option, rate in _ttft_levers(model["mu"], model["lam"]):
        p99 = format_quantity(s.evaluate(p99_means / rate), "s")
        lead = "today" if option == ALREADY else f"μ − λ becomes {format_quantity(s.evaluate(rate), 'requests/s')}"
        # Halving the prefill always suffices: draws whose knee sits below half the capacity are refused, so
        # the rate needed is at most μ/2, and 2μ − λ > μ.
        s.judge("ttft_levers", option, s.compare(rate, needed) >= 0, f"{lead}: p99 TTFT {p99} against {slo}",
                fact=option == HALVED)
    s.judge("ttft_levers", DECODE_LEVER, False,
            f"TTFT ends with prefill, on other GPUs: p99 TTFT stays {format_quantity(s.value(ttft99), 's')}",
            fact=True)


def slo_goodput(p, s: Sheet) -> None:
    model = _latency_model(s)
    a_ttft, a_tpot, mu, lam, T = (model[k] for k in ("a_ttft", "a_tpot", "mu", "lam", "T"))
    target = s.param("g_goal", "target")
    if s.value(a_tpot) <= s.value(target):
        raise Reject("TPOT alone misses the target: no arrival rate meets it")
    both = s.step("attainment", "SLO attainment: share of requests meeting both SLOs", "A", a_ttft * a_tpot, "%",
                  "prefill and decode run on separate GPUs, so a request's TTFT and TPOT are independent: "
                  "a request that misses either SLO does not count")
    lam_star = s.step("max_rate", "Goodput: highest arrival rate that meets the goal", "λ_max",
                      mu + log_of(1 - target / a_tpot) / T, "requests/s",
                      "solve (1 − e^(−(μ−λ)·T_SLO))·A_TPOT = g_goal for λ; DistServe calls this rate the goodput")
    _check_draw(s, model, both, lam_star)
    _judge_levers(s, model)

    s.assume("Prefill runs on its own GPUs as one first-come-first-served server with Poisson arrivals and "
             "exponential prefill times (prompt lengths roughly exponential): an M/M/1 queue. TTFT ends with "
             "the prefill; the KV transfer and the first decode step are left out.")
    s.assume("Decode runs on other GPUs, so the prefill queue does not slow it: a request's TPOT is independent "
             "of its TTFT, a fixed floor plus an exponential excess from interference. TPOT is per request (its "
             "decode time over its output tokens, as vLLM's benchmark reports it); the per-token inter-token "
             "latency (ITL) has a longer tail, since one prefill stall lands on a single token.")
    s.assume("Goodput in DistServe's sense: the highest request rate at which the SLO attainment still meets "
             "the goal. The share of requests meeting both SLOs is the attainment.")
    s.slip("the mean, not the median (an exponential's mean is its median / ln 2)", 1 / math.log(2), on="ttft_p50")
    s.slip("the mean, not the median (an exponential's mean is its median / ln 2)", on="tpot_p50",
           factor=(p.tpot_floor + p.tpot_tail) / (p.tpot_floor + p.tpot_tail * math.log(2)))
    s.slip("the queue ignored: the prefill time alone", 1 - p.load, on=("ttft_p50", "ttft_p99"))
    tail99 = p.tpot_tail * math.log(100)
    s.slip("the floor left out of the p99 TPOT", tail99 / (p.tpot_floor + tail99), on="tpot_p99")
    s.slip("the worse single SLO taken for both together", on="attainment",
           factor=min(s.value(a_ttft), s.value(a_tpot)) / s.value(both))
    s.slip("the mean TTFT held to the SLO, not the p99", on="knee_load",
           factor=s.evaluate((1 - 1 / (mu * T)) / model["knee"]))
    _goodput_regime(s, lam, lam_star, both, target, model["knee"])


def _goodput_regime(s: Sheet, lam, lam_star, attainment, target, knee) -> None:
    shown = {name: format_quantity(s.value(sym), unit) for name, sym, unit in (
        ("rate", lam, "requests/s"), ("limit", lam_star, "requests/s"), ("attainment", attainment, "%"),
        ("target", target, "%"), ("knee", knee, "%"))}
    shown["past"] = format_quantity(s.evaluate(lam / lam_star - 1), "%")
    shown["shed"] = format_quantity(s.evaluate(1 - lam_star / lam), "%")
    s.regime_by(lam, lam_star, tie="below", below=Side(
        "healthy",
        f"Arrivals of {shown['rate']} stay within the goodput of {shown['limit']}: {shown['attainment']} of "
        f"requests meet both SLOs, against a goal of {shown['target']}.",
        "Past that rate the server still serves every request, so throughput keeps rising, but the "
        f"queue's TTFT tail grows as 1/(μ − λ) (p99 TTFT passes its SLO above {shown['knee']} load) and the "
        "attainment falls through the goal long before capacity.",
        near=f"Arrivals of {shown['rate']} sit just under the goodput of {shown['limit']}: {shown['attainment']} "
             f"of requests meet both SLOs against {shown['target']}, with little headroom, since TTFT's tail "
             "grows as 1/(μ − λ): a few percent more traffic breaks the goal."),
        above=Side(
        "throughput-high-goodput-low",
        f"The server keeps up with {shown['rate']}, so throughput looks fine, but the queue puts so many TTFTs "
        f"past the SLO that only {shown['attainment']} of requests meet both, short of {shown['target']}: "
        f"the goodput, the highest rate that meets the goal, is {shown['limit']}.",
        "Below that rate (admission control, more prefill GPUs, or faster prefill) the queue shortens and "
        "the attainment clears the goal; the throughput given up is the price of the tail.",
        near=f"Arrivals of {shown['rate']} run only {shown['past']} past the goodput of {shown['limit']}, yet just "
             f"{shown['attainment']} of requests meet both SLOs against {shown['target']}: TTFT's tail grows as "
             f"1/(μ − λ), so a little excess traffic costs many requests, and {shown['shed']} less restores "
             "the goal."))
