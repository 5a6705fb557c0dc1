"""Throughput against goodput under TTFT and TPOT SLOs."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.sheetmath import exp_of, log_of
from solvers.units import format_quantity

MIN_RATE_SHARE = 0.3  # the goal must hold up to 30% of the prefill capacity: below that prefill, not the queue, decides


MAX_ATTAINMENT = 0.999  # fewer than 1 request in 1,000 missing leaves nothing to diagnose


TIE_SHARE = sympy.Rational(3, 100)  # within the goodput's own 3% tolerance of it, the verdict would read as a tie


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
    mu = s.value(model["mu"])
    if s.value(lam_star) < MIN_RATE_SHARE * mu:
        raise Reject("the goal fails below 30% of the prefill capacity: prefill is too slow for the TTFT SLO, "
                     "the queue is not the story")
    if s.value(both) > MAX_ATTAINMENT:
        raise Reject("nearly every request meets both SLOs: nothing to diagnose")
    if s.compare(abs(model["lam"] / lam_star - 1), TIE_SHARE) < 0:
        raise Reject("the arrival rate is within 3% of the goodput: the verdict would read as a tie")


LEVER_TIE = sympy.Rational(3, 100)  # p99 TTFT within this of its SLO (p99's own tolerance) is too near to call


ALREADY = "p99 TTFT already meets its SLO at today's load"


MISSES = "more than one request in a hundred waits past the TTFT SLO today"


SPLIT = "splitting today's traffic over two such instances would put p99 TTFT within its SLO"


DECODE_LEVER = "halving the decode pool's TPOT excess would shorten p99 TTFT"


def _ttft_levers(p, mu, lam):
    """Each prefill lever alone, at today's arrival rate: (option, the rate μ' − λ' of the TTFT exponential). The
    levers' sizes are the question's fixed parameters, which the options print."""
    within = " would put p99 TTFT within its SLO"
    return ((ALREADY, mu - lam),
            ("prefill time per prompt cut by {big_cut}" + within, mu / (1 - exact(p.big_cut)) - lam),
            ("prefill time per prompt cut by {small_cut}" + within, mu / (1 - exact(p.small_cut)) - lam),
            ("shedding {shed} of arrivals at admission" + within, mu - lam * (1 - exact(p.shed))),
            ("shedding {big_shed} of arrivals at admission" + within, mu - lam * (1 - exact(p.big_shed))),
            # A second instance, the traffic split evenly: two M/M/1 queues each at half today's rate.
            (SPLIT, mu - lam / 2))


def _judge_levers(s: Sheet, p, model: dict[str, sympy.Symbol]) -> None:
    """Which lever brings p99 TTFT within its SLO follows from how far past the knee the load sits."""
    T, ttft99 = model["T"], model["ttft99"]
    p99_means = _p99_means()
    needed = p99_means / T  # the rate μ − λ at which p99 TTFT equals the SLO
    slo = s.text(T)
    if s.compare(abs(ttft99 / T - 1), LEVER_TIE) < 0:
        raise Reject("p99 TTFT is within 3% of its SLO: whether it meets it would read as a tie")
    met = s.compare(ttft99, T) <= 0
    for option, rate in _ttft_levers(p, model["mu"], model["lam"]):
        p99 = format_quantity(s.evaluate(p99_means / rate), "s")
        lead = "today" if option == ALREADY else f"μ − λ becomes {format_quantity(s.evaluate(rate), 'requests/s')}"
        if met and option != ALREADY:  # nothing to put within the SLO: a lever would hold by default
            s.judge("ttft_levers", option, None, f"p99 TTFT already meets its SLO today: {lead}, p99 TTFT {p99}")
            continue
        if s.compare(abs(p99_means / rate / T - 1), LEVER_TIE) < 0:  # a lever landing on the SLO: not listed
            s.judge("ttft_levers", option, None, f"{lead}: p99 TTFT {p99}, within 3% of {slo}, too near to call")
            continue
        s.judge("ttft_levers", option, s.compare(rate, needed) >= 0, f"{lead}: p99 TTFT {p99} against {slo}")
    # The p99 read as a share of requests: past the SLO exactly when more than 1 in 100 miss it (e^(−(μ−λ)T) > 1%).
    # With "already meets", one of the two always holds: a draw where no lever reaches the SLO still has a key.
    missed = exp_of(-(model["mu"] - model["lam"]) * T)
    # The share itself is not printed: with the TPOT share, it would give away the attainment asked next.
    s.judge("ttft_levers", MISSES, s.compare(missed, sympy.Rational(1, 100)) > 0,
            f"p99 TTFT is {s.text(ttft99)} against {slo}: past it exactly when more than 1 in 100 wait past it")
    s.judge("ttft_levers", DECODE_LEVER, False,
            f"TTFT ends with prefill, on other GPUs: p99 TTFT stays {s.text(ttft99)}",
            fact=True)


def _goodput_regime(s: Sheet, lam, lam_star, attainment, target, knee, ttft99, slo) -> None:
    shown = {name: s.text(sym) for name, sym, unit in (
        ("rate", lam, "requests/s"), ("limit", lam_star, "requests/s"), ("attainment", attainment, "%"),
        ("target", target, "%"), ("knee", knee, "%"))}
    # Meeting the goal is not meeting every percentile: with a goal under 99%, p99 TTFT can sit past its SLO.
    tail = (f" p99 TTFT, {s.text(ttft99)}, is past its {s.text(slo)} all the same: the goal counts requests, and "
            f"{shown['target']} leaves room for a tail past the SLO." if s.compare(ttft99, slo) > 0 else "")
    shown["past"] = format_quantity(s.evaluate(lam / lam_star - 1), "%")
    shown["shed"] = format_quantity(s.evaluate(1 - lam_star / lam), "%")
    s.regime_by(lam, lam_star, tie="below", below=Side(
        "goal-met",
        f"Arrivals of {shown['rate']} stay within the goodput of {shown['limit']}: {shown['attainment']} of "
        f"requests meet both SLOs, against a goal of {shown['target']}." + tail,
        "Past that rate the server still serves every request, so throughput keeps rising, but the "
        f"queue's TTFT tail grows as 1/(μ − λ) (p99 TTFT passes its SLO above {shown['knee']} load) and the "
        "attainment falls through the goal long before capacity.",
        near=f"Arrivals of {shown['rate']} sit just under the goodput of {shown['limit']}: {shown['attainment']} "
             f"of requests meet both SLOs against {shown['target']}, with little headroom, since TTFT's tail "
             "grows as 1/(μ − λ): a few percent more traffic breaks the goal." + tail),
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


def solve(p, s: Sheet) -> None:
    if p.load >= 1:
        raise Reject("a prefill server busy all the time has a queue that grows without bound: no TTFT to speak of")
    model = _latency_model(s)
    a_ttft, a_tpot, mu, lam, T = (model[k] for k in ("a_ttft", "a_tpot", "mu", "lam", "T"))
    target = s.param("g_goal", "target")
    if s.compare(a_tpot, target) <= 0:
        raise Reject("TPOT alone misses the target: no arrival rate meets it")
    both = s.step("attainment", "SLO attainment: share of requests meeting both SLOs", "A", a_ttft * a_tpot, "%",
                  "prefill and decode run on separate GPUs, so a request's TTFT and TPOT are independent: "
                  "a request that misses either SLO does not count")
    lam_star = s.step("max_rate", "Goodput: highest arrival rate that meets the goal", "λ_max",
                      mu + log_of(1 - target / a_tpot) / T, "requests/s",
                      "solve (1 − e^(−(μ−λ)·T_SLO))·A_TPOT = g_goal for λ; DistServe calls this rate the goodput")
    _check_draw(s, model, both, lam_star)
    _judge_levers(s, p, model)

    s.assume("Prefill runs on its own GPUs as one first-come-first-served server with Poisson arrivals and "
             "exponential prefill times (prompt lengths roughly exponential): an M/M/1 queue. TTFT ends with "
             "the prefill; the KV transfer and the first decode step are left out. A real prefill instance "
             "batches prompts up to a token budget rather than serving one at a time, and DistServe models it "
             "as M/D/1 (fixed prompt length); exponential service gives a heavier tail than either, so the "
             "knee and the goodput here are on the cautious side. Two instances are two such queues, the "
             "traffic split evenly (a shared queue, M/M/2, would do a little better).")
    s.assume("Decode runs on other GPUs, so the prefill queue does not slow it: a request's TPOT is independent "
             "of its TTFT, a fixed floor plus an exponential excess from interference. TPOT is per request (its "
             "decode time over its output tokens, as vLLM's benchmark reports it); the per-token inter-token "
             "latency (ITL) has a longer tail, since one prefill stall lands on a single token.")
    s.assume("Goodput in DistServe's sense: the highest request rate at which the SLO attainment still meets "
             "the goal. The share of requests meeting both SLOs is the attainment.")
    s.slip("the mean, not the median (an exponential's mean is its median / ln 2)", 1 / math.log(2), on="ttft_p50")
    s.slip("the queue ignored: the prefill time alone", 1 - p.load, on=("ttft_p50", "ttft_p99"))
    tail99 = p.tpot_tail * math.log(100)
    s.slip("the floor left out of the p99 TPOT", tail99 / (p.tpot_floor + tail99), on="tpot_p99")
    s.slip("the worse single SLO taken for both together", on="attainment",
           factor=min(s.value(a_ttft), s.value(a_tpot)) / s.value(both))
    s.slip("the mean TTFT held to the SLO, not the p99", on="knee_load",
           factor=s.evaluate((1 - 1 / (mu * T)) / model["knee"]))
    _goodput_regime(s, lam, lam_star, both, target, model["knee"], model["ttft99"], T)

