"""Static batches wait for their longest request."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import max_of, min_of
from solvers.units import figures_against, format_number


def _length_symbols(s: Sheet, lengths: list[int]) -> list[sympy.Symbol]:
    # Zero-padded names keep sympy's sorted printing in batch order (L_02 before L_10).
    width = len(str(len(lengths)))
    return [s.given(f"L_{i:0{width}d}", length, "", f"output tokens of request {i}")
            for i, length in enumerate(lengths, start=1)]


# Throughputs within the answers' 2% of each other would make the call turn on rounding: such draws are refused.
TOO_CLOSE = 0.03
# Overlapped refill work that outlasts the step: refilled throughput within this of the static batch's is refused
# where the lever is asked (the candidate has the exact lengths). Work no longer than the step needs no margin: it
# is hidden, and refilling then gains G > 1 at the same step, whatever G is.
LEVER_TIE = 0.01


def _switch_regime(s: Sheet, c: sympy.Symbol, c_star: sympy.Symbol, gain: sympy.Symbol, refilled: sympy.Symbol,
                   static: sympy.Symbol) -> None:
    cost, limit, g = s.text(c), s.text(c_star), format_number(s.value(gain), 3)
    if abs(s.value(refilled) / s.value(static) - 1) < TOO_CLOSE:
        raise Reject("refilled and static throughput within 3%: the cost sits at break-even")
    s.regime_by(c, c_star, tie="above", below=Side(  # at break-even throughput is equal: switching does not pay
        "pays",
        f"Refilling gains {g}x at the same step; its {cost} a step stays under the {limit} that would eat the "
        "gain (the step time × (gain − 1)), so switching pays.",
        "With near-uniform lengths the gain falls toward 1x and even a few ms a step of scheduling eats it; a "
        "shorter step (a smaller model) makes the same cost a larger share."),
        above=Side(
        "does-not-pay",
        f"Refilling would gain {g}x at the same step, but the {cost} a step the GPU waits for it is more than "
        f"the {limit} the gain buys (the step time × (gain − 1)): on this engine the static batch delivers more. "
        "The lever is that overhead, not static batching.",
        "A heavy tail of long replies (or a larger batch) raises the gain, and an engine that schedules ahead "
        "of the GPU hides the cost per step: either puts the switch in profit."))


def _choose_lever(s: Sheet, c: sympy.Symbol, t: sympy.Symbol, gain: sympy.Symbol) -> None:
    """What puts refilling in profit: overlapped with the step (async scheduling), the GPU waits max(t, c) a step
    and refilled slots deliver B / max(t, c) against the static batch's B / (t·G). Work no longer than the step is
    hidden whatever G is; work that outlasts it pays only while c < t·G, else it must shrink too."""
    key = "lever"
    cost, step, g = s.text(c), s.text(t), s.text(gain)
    if s.compare(c, t) <= 0:
        s.choose(key, "overlap-it", f"its {cost} of refill work hides behind the {step} step: refilled slots then "
                 f"deliver the full {g} at the same step")
        return
    ratio = s.value(gain) * s.value(t) / s.value(c)
    if abs(ratio - 1) < LEVER_TIE:
        s.refuse_if_asked([key], f"overlapped, refilled and static throughput within {LEVER_TIE:.0%}")
    shown = format_number(ratio, figures_against(ratio, 1))
    if s.compare(gain * t, c) > 0:  # refilled slots deliver more than the static batch: B / c against B / (t·G)
        s.choose(key, "overlap-it", f"its {cost} of refill work outlasts the {step} step, so the GPU waits {cost} "
                 f"a step even overlapped, but that is still under the step × gain: {shown}x the static batch")
    else:
        s.choose(key, "overlap-and-cut-it", f"its {cost} of refill work outlasts the {step} step: overlapped, the "
                 f"GPU still waits {cost} a step and refilled slots deliver only {shown}x the static batch; the work "
                 "must shrink below the step too")


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
    c = s.param("c", "refill_cost")
    L_min = s.step("shortest", "Steps until the first request ends", "L_min", min_of(*L), "steps",
                   "the shortest request frees its slot first")
    s.step("wait_continuous", "Iteration-level: a queued request's wait for a slot", "W_cont", L_min * (t + c), "s",
           "the first slot to free takes it at the next step; each step carries the refilling engine's cost")
    c_star = s.step("break_even_cost", "Cost per step that eats the gain", "c_star", t * (gain - 1), "ms",
                    "B/(t + c) = S/(L_max·t) when c = t·(G − 1): a higher cost per step and static batches win")
    X_net = s.step("throughput_refilled", "Iteration-level scheduling at its cost: tokens per second", "X_net",
                   B / (t + c), "tokens/s", "every slot busy, each step longer by the engine's cost")

    s.assume("The request queue never runs dry: a freed slot takes a new request at the next step.")
    s.assume("Refilling costs a fixed time every step (scheduling the new requests, building the step's inputs, "
             "paged-KV bookkeeping), whatever the step's length, and the GPU waits for it: an engine that schedules "
             "between steps, as vLLM did before async scheduling. Only what a static batch's step does not also "
             "pay counts (sampling, detokenising and the launch are paid by both): 1 to 10 ms at 4 to 8 slots, the "
             "top of it a Python scheduler's (vLLM before v0.6 spent 29% of its wall time scheduling and building "
             "inputs against 38% on the GPU, Llama-3-8B on one H100, at far larger batches). Engines that "
             "schedule step n+1 while the GPU runs step n (vLLM's async scheduling, SGLang's overlap scheduler) "
             "and replay the step from a captured CUDA graph hide it while it is shorter than the step. A static "
             "batch schedules once per batch.")
    s.assume("A decode step takes the same time however many slots are busy (memory-bound decode, "
             "dominated by the weight read), so throughput is proportional to useful slot-steps and every "
             "user streams at one token per step under either scheme: the gain is capacity, not speed.")
    s.assume("Prefill of the incoming requests is ignored, and this batch's lengths stand for the mix. With "
             "slots refilled every step, new prompts arrive mid-batch: their prefill has to be interleaved "
             "with decode (Orca's selective batching, chunked prefill), and the KV cache of requests of "
             "unknown length has to grow on demand (paging): those become the next limits.")
    s.assume("Anyscale's 23x (2023) set vLLM, with paged KV and far larger batches than static batching fits, "
             "against static batches in Hugging Face's server: most of it is batch size, not the padding gain "
             "this question isolates.")
    s.slip("/B: the padding of one average slot, not of the batch", 1 / len(lengths), on="waste")
    if s.compare(waste, 0) > 0:
        s.slip("every occupied slot-step counted as padding", s.value(held) / s.value(waste), on="waste")
    s.slip("padding counted as work: B tokens per step", s.value(gain), on="throughput_static")
    s.slip("the mean length, not the shortest", sum(lengths) / len(lengths) / min(lengths), on="wait_continuous")

    _switch_regime(s, c, c_star, gain, X_net, X_s)
    _choose_lever(s, c, t, gain)

