"""Serving questions: how a scheduler turns request lengths into slot use and throughput."""
from __future__ import annotations

import sympy

from solvers.derivation import Sheet, max_of
from solvers.units import format_number

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
    S = s.step("useful", "Useful slot-steps (tokens generated)", "S", sympy.Add(*L), "slot-steps",
               "each request occupies its slot for one step per output token")
    L_max = s.step("longest", "Steps the static batch runs", "L_max", max_of(*L), "steps",
                   "the batch releases its slots only when its longest request finishes")
    held = s.step("occupied", "Slot-steps the static batch holds", "O", B * L_max, "slot-steps",
               "every slot stays assigned until the last step")
    waste = s.step("waste", "Padding slot-steps", "P", held - S, "slot-steps",
                   "slots whose request has finished keep stepping on padding")
    s.step("utilisation", "Static utilisation", "U", S / held, "%", "useful share of the slot-steps held")
    gain = s.step("gain", "Throughput gain of iteration-level scheduling", "G", held / S, "x",
                  "refilled slots do useful work every step: B tokens per step instead of S/L_max")
    k = s.given("k", lengths.count(max(lengths)), "slots", "slots holding a request of the longest length")
    s.step("padding_slots", "Slots on padding in the final step", "B_pad", B - k, "slots",
           "only the longest requests are still generating")
    G_star = s.given("G_star", GAIN_BOUNDARY, "x", "gain separating small from large")
    L_star = s.step("boundary_length", "Longest length at the boundary", "L_star", G_star * S / B, "steps",
                    "gain = L_max ÷ mean length, so the gain reaches G* when L_max = G*·S/B")

    s.assume("The request queue never runs dry: a freed slot takes a new request at the next step.")
    s.assume("A decode step takes the same time however many slots are busy (memory-bound decode, "
             "dominated by the weight read), so throughput is proportional to useful slot-steps.")
    s.assume("Prefill of the incoming requests is ignored, and this batch's lengths stand for the mix.")
    s.slip("/B: the padding of one average slot, not of the batch", 1 / len(lengths))
    if s.value(waste) > 0:
        s.slip("every occupied slot-step counted as padding", s.value(held) / s.value(waste))

    _gain_regime(s, gain, L_max, L_star)


def _gain_regime(s: Sheet, gain: sympy.Symbol, L_max: sympy.Symbol, L_star: sympy.Symbol) -> None:
    g, longest, limit = (format_number(s.value(x), 3) for x in (gain, L_max, L_star))
    if s.value(L_max) > s.value(L_star):
        s.set_regime(
            "large-gain",
            f"The longest request ({longest} steps) runs past {limit}, twice the mean length: most slot-steps "
            f"are padding, and refilling slots as they free up raises throughput {g}x.",
            L_star, L_max,
            "With near-uniform lengths the longest request is close to the mean, the static batch wastes little, "
            "and the gain falls toward 1x. Larger batches and heavier tails push the gain up: the batch always "
            "waits for its slowest member.")
    else:
        s.set_regime(
            "small-gain",
            f"The longest request ({longest} steps) stays within twice the mean length ({limit}): the static "
            f"batch keeps most slots busy and iteration-level scheduling gains only {g}x.",
            L_star, L_max,
            "A heavy tail (one reply much longer than the rest) or a larger batch lets the longest request pass "
            "twice the mean: the other slots then step on padding most of the time, and the gain passes 2x.")
