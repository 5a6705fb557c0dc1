"""Static batches wait for their longest request."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, Side
from solvers.sheetmath import max_of, min_of
from solvers.units import format_number


def _length_symbols(s: Sheet, lengths: list[int]) -> list[sympy.Symbol]:
    # Zero-padded names keep sympy's sorted printing in batch order (L_02 before L_10).
    width = len(str(len(lengths)))
    return [s.given(f"L_{i:0{width}d}", length, "", f"output tokens of request {i}")
            for i, length in enumerate(lengths, start=1)]


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


def solve(p, s: Sheet) -> None:
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
    G_star = s.param("G_star", "gain_boundary")
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
    if s.compare(waste, 0) > 0:
        s.slip("every occupied slot-step counted as padding", s.value(held) / s.value(waste), on="waste")
    s.slip("padding counted as work: B tokens per step", s.value(gain), on="throughput_static")
    s.slip("the mean length, not the shortest", sum(lengths) / len(lengths) / min(lengths), on="wait_continuous")

    _gain_regime(s, gain, L_max, L_star)

