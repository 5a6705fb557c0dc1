"""One long prompt against everyone's TPOT (chunked prefill)."""
from __future__ import annotations

from dataclasses import replace

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.common import GPU_MEMORY_UTILIZATION, fabric_name, hbm_bytes
from solvers.formulas.scheduling import (
    chunk_cap,
    require_tpot_room,
    solo_prefill,
    streams_and_targets,
    tokens_text,
    tp_advice,
)
from solvers.formulas.steptime import (
    Engine,
    growing_steps_time,
    require_fit,
    step_time,
    step_work,
)
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_number, format_quantity

# A TTFT target is real when the step model can meet it at all (the prompt alone on the group) and not so loose
# that nothing is traded: past this many times the prompt's own prefill, no budget on these GPUs misses it.
LOOSEST_TTFT = sympy.Rational(5, 2)
# The graded TTFT's tolerance: a draw whose TTFT at half the budget (which the candidate works out, ungraded) sits
# this close to the target is refused, as a candidate inside the tolerance could judge it either way.
HAIRLINE = sympy.Rational(3, 100)
# A select option's TTFT this close to the target is not listed (reader 10: options at 3-4% of the target, drawn at
# 1-2.5x the solo time, clustered there): the candidate's estimate of an ungraded option carries the graded TTFT's
# tolerance and more.
OPTION_MARGIN = sympy.Rational(5, 100)
HALF = "chunks half the size of the TPOT-capped chunk, for smoother streams"
THREE = "chunks three quarters the size of the TPOT-capped chunk"
# r11 (read11 report 2): "a prefill-only replica of half as many GPUs" read as more hardware or as these GPUs taken off
# decode: it is said to be added hardware. The split of these GPUs the reader asked for never makes both targets
# (0 of 200 draws: the decode half breaks the TPOT or the memory in every draw), so it is no option: the added
# half's why prices it. "The same GPUs" keeps every conflict draw gradeable (nothing beside the streams makes the
# TTFT there): it is said to be twice the hardware, a declared fact, and its why is the figure, not a definition.
ADDED = "adding a prefill-only group of half as many GPUs, the streams staying on this one, the KV handed over"
SECOND = "adding a prefill-only group as large as this one (double the GPUs), the KV handed over"

# Below this a chunk is mostly the step's fixed cost: no engine configures a budget that small (vLLM's smallest
# usual max_num_batched_tokens is 256 past the decodes; Sarathi-Serve ran 512 to 2,048).
SMALLEST_CHUNK = 256


def _chunked_ttft(s: Sheet, e: Engine, ar, B, S, P_in, chunk, tag: str, label: str) -> sympy.Symbol:
    """The prompt's chunks of `chunk` tokens step after step, each at the slower of its reads and its math (the
    chunk attends to the chunks before it), plus its fixed costs: the TTFT they give."""
    n = s.step(f"chunks{tag}", f"Steps to prefill the prompt{label}", f"n{tag}", ceil_of(P_in / chunk), "steps",
               "the prompt sliced into chunks of at most that many tokens")
    m = n - 1  # full chunks before the last
    first = step_work(s, e, f"first{tag}", f"step of the first chunk{label}", B + chunk,
                      B * S + chunk**2 / 2, B * S)
    t_full = growing_steps_time(s, e, f"full_chunks{tag}", f"steps of the full chunks{label}", m, first,
                                e.A * chunk**2, communication=ar.of(B + chunk))
    r = s.step(f"last_chunk{tag}", f"Tokens of the last chunk{label}", f"c_last{tag}", P_in - m * chunk, "tokens",
               "what the full chunks leave of the prompt")
    last = step_work(s, e, f"last{tag}", f"step of the last chunk{label}", B + r,
                     B * S + m * chunk * r + r**2 / 2, B * S)
    t_last = step_time(s, e, f"last{tag}", f"step of the last chunk{label}", last, communication=ar.of(B + r),
                       why="the slower of the reads and the math: a short last chunk still reads every weight and "
                       "the streams' KV")
    return s.step(f"ttft{tag}", f"TTFT of the long prompt{label}", f"TTFT{tag}", t_full + t_last, "s",
                  "its chunks' steps one after another")


def _chunk_remedies(s: Sheet, T_f, tau, t_solo, split, options) -> None:
    """Which other budgets meet the TTFT target (each keeps its own TPOT: the smaller ones the target, the slipped
    one the target let slip while this prompt prefills). Whether the TPOT-capped budget meets it is the regime, so it
    is no option; a TTFT within its tolerance of the target is not asked. The split is judged on both targets: the
    prompt alone on half the GPUs against the TTFT, and the streams on the other half against the TPOT."""
    target = s.text(T_f)
    for option, ttft, how in options:
        near = (s.compare(ttft, (1 - OPTION_MARGIN) * T_f) > 0
                and s.compare(ttft, (1 + OPTION_MARGIN) * T_f) < 0)
        holds = s.compare(ttft, T_f) <= 0
        s.judge("remedies", option, None if near else holds,
                f"{how}: the first token after {s.text(ttft)}, against {target}"
                + (": within 5%, not asked" if near else ""))
    t_pre, t_dec, fits = split
    s.judge("remedies", SECOND, True,
            f"alone on a group like this one the prompt takes {format_quantity(s.value(t_solo), 's')}, inside "
            f"{target} (the targets drawn here are ones such a group meets, by the step model, not at peak): it always "
            "makes it, at double the GPUs", fact=True)
    split = (f"splitting this group instead would also leave the streams on half of it, stepping in {s.text(t_dec)} "
             f"against {s.text(tau)}" + ("" if fits else ", with the weights and the KV past its memory"))
    near = (s.compare(t_pre, (1 - OPTION_MARGIN) * T_f) > 0 and s.compare(t_pre, (1 + OPTION_MARGIN) * T_f) < 0)
    s.judge("remedies", ADDED, None if near else s.compare(t_pre, T_f) <= 0,
            f"the prompt alone in one step at half the compute: the first token after {s.text(t_pre)}, against "
            f"{target}" + (": within 5%, not asked" if near else "") + f"; {split}")


def _chunk_regime(s: Sheet, p, ttft, T_f, t_p, t_x, n, c_max, P_in, t_solo) -> None:
    budget, steps = tokens_text(s, c_max), tokens_text(s, n)
    took, target, alone = s.text(ttft), s.text(T_f), format_quantity(s.value(t_solo), "s")
    by_tpot = Side(
        "both-met",
        f"At the TPOT-capped chunk of {budget} tokens the prompt takes {steps} steps and its first token comes "
        f"after {took}, inside the {target} TTFT target: the TPOT target sets the budget and the TTFT target has "
        "slack.",
        "A longer prompt, a tighter TTFT target, a tighter TPOT target or a busier decode batch (more chunks, each "
        "paying the step's fixed cost again) pushes the TTFT past its target: then the budget the TTFT needs "
        "exceeds what TPOT allows, and one of the two SLOs must give, or the prompt goes to a prefill-only "
        f"replica ({alone} there).")
    if s.compare(ttft, T_f) <= 0:
        by_ttft_summary = ""
    elif s.compare(T_f - t_p, t_x) < 0:
        by_ttft_summary = (f"At the TPOT-capped chunk of {budget} tokens the first token comes after {took}, past "
                           f"the {target} TTFT target, and even one chunked step's fixed cost on top of the prompt's "
                           f"own time breaks it: no budget beside the streams meets both SLOs. Alone on a "
                           f"second, prefill-only group of these GPUs it takes {alone}.")
    else:
        n_max = s.step("ttft_steps", "Most steps the TTFT target allows", "n_max",
                       floor_of((T_f - t_p) / t_x), "steps",
                       "what the target leaves after the prompt's own time, in fixed costs of a compute-bound step")
        c_min = s.step("ttft_chunk", "Smallest chunk that meets the TTFT target", "c_min",
                       ceil_of(P_in / n_max), "tokens", "the prompt in at most n_max chunks")
        by_ttft_summary = (f"At the TPOT-capped chunk of {budget} tokens the first token comes after {took}, past "
                           f"the {target} TTFT target: meeting it takes chunks of about {s.text(c_min)}, so the "
                           "TTFT target would set the budget and the running streams' TPOT would break while this "
                           f"prompt is prefilled. A second, prefill-only group of these GPUs gives it {alone}.")
    by_ttft = Side(
        "conflict", by_ttft_summary,
        "A shorter prompt, a looser TTFT target or more compute per step (a lighter decode batch, "
        f"{tp_advice(p)}) brings the TTFT under its target at the TPOT-capped chunk; then TPOT alone sets the "
        "budget.")
    s.regime_by(ttft, T_f, tie="below", above=by_ttft, below=by_tpot)
    if s.compare(ttft, (1 - HAIRLINE) * T_f) > 0 and s.compare(ttft, (1 + HAIRLINE) * T_f) < 0:
        # Reader 10 (@7's push: 2.537 s against 2.5 s): a TTFT inside its graded tolerance lands on either side.
        s.refuse_if_asked(["regime"], "the TTFT under the budget is within 3% of the target: too close to call")


def solve(p, s: Sheet) -> None:
    e, B, S, tau, T_f = streams_and_targets(p, s)
    P_in = s.param("P_in", "prompt")
    require_fit(s, e, p.gpu, B * S + P_in)

    dec = step_work(s, e, "dec", "decode-only step", B, B * S, B * S)
    t_ar_dec = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode-only step")
    step_time(s, e, "dec", "decode-only step", dec, key="decode_step", communication=t_ar_dec,
              why="the streams' usual gap between tokens")
    full = step_work(s, e, "full", "step that prefills the whole prompt", B + P_in, B * S + P_in**2 / 2, B * S)
    t_ar_full = tp_all_reduce(s, p.model, p.gpu, p.tp, B + P_in, tag="full", label="step that prefills the prompt")
    stall = step_time(s, e, "full", "step that prefills the whole prompt", full, key="stall",
                      communication=t_ar_full, why="every running stream waits this long for its next token")
    require_tpot_room(s, e, dec.bytes, tau)
    if s.compare(stall, tau) <= 0:
        raise Reject("the unchunked prompt already steps within the TPOT target")

    t_solo = solo_prefill(s, e, p, P_in, T_f)
    if s.compare(T_f, LOOSEST_TTFT * t_solo) > 0:
        raise Reject(f"the TTFT target is more than {LOOSEST_TTFT} times the prompt's prefill alone")

    c_max, t_x, t_c, ar = chunk_cap(s, e, p, B, P_in, tau, dec, "chunk",
                                     "Largest chunk that keeps a step within the TPOT target")
    if s.compare(c_max, P_in) >= 0:
        raise Reject("the TPOT-capped chunk holds the whole prompt: nothing to chunk")
    if s.compare(c_max, SMALLEST_CHUNK) < 0:
        raise Reject(f"the TPOT-capped chunk is under {SMALLEST_CHUNK} tokens: a step of mostly fixed cost, a "
                     "budget no engine configures")
    if s.compare(e.A * c_max / 2, HAIRLINE * (2 * e.N + e.A * P_in)) > 0:
        # The worst step's exact causal count, c·(P − c/2) pairs, would allow a chunk past the tolerance.
        raise Reject("the chunk is so large a share of the prompt that its causal count moves the budget")
    s.step("token_budget", "Per-step token budget", "τ_tok", B + c_max, "tokens",
           "decode tokens count against the budget too (vLLM's max_num_batched_tokens)")
    F_p = s.step("prompt_flops", "FLOPs of the prompt itself", "F_p", 2 * e.N * P_in + e.A * P_in**2 / 2, "TFLOP",
                 "chunking does not change the prompt's own work: P²/2 pairs under the causal mask")
    t_p = s.step("prompt_compute", "The prompt's own time", "t_p", F_p / e.flop_rate + ar.per_token * P_in, "s",
                 "its math and its activations' all-reduce bytes: a floor under its TTFT, however it is sliced")
    ttft = _chunked_ttft(s, e, ar, B, S, P_in, c_max, "", " under the budget")
    half = s.step("half_chunk", "Half the TPOT-capped chunk", "c_half", floor_of(c_max / 2), "tokens",
                  "a smaller budget makes every mixed step shorter than the TPOT target")
    ttft_half = _chunked_ttft(s, e, ar, B, S, P_in, half, "_half", " at half the chunk")
    three = s.step("three_quarter_chunk", "Three quarters of the TPOT-capped chunk", "c_¾", floor_of(3 * c_max / 4),
                   "tokens", "a budget with some headroom under the TPOT target")
    ttft_three = _chunked_ttft(s, e, ar, B, S, P_in, three, "_three", " at three quarters of the chunk")
    # A prefill-only replica of half the GPUs: the prompt alone in one step at TP/2, its all-reduces on the smaller
    # ring (none at TP 1); the KV hand-off is left out (an assumption prices it).
    e_half = replace(e, TP=e.TP / 2)
    solo_half = step_work(s, e_half, "solo_half", "prefill alone on half the GPUs", P_in, P_in**2 / 2, 0)
    ar_half = tp_all_reduce(s, p.model, p.gpu, p.tp // 2, P_in, tag="solo_half", label="prefill on half the GPUs",
                            tp_symbol=e.TP / 2)
    t_half = step_time(s, e_half, "solo_half", "prefill alone on half the GPUs", solo_half, key="half_ttft",
                       communication=ar_half, why="the prefill half of a split group: the whole prompt in one step at "
                       "half the compute")
    # The split: the other half of the group decodes the streams at TP/2, each GPU holding twice the weights and
    # twice the KV (8 KV heads over TP/2 GPUs), the prompt's KV handed over to it.
    e_dec = replace(e, TP=e.TP / 2, KV=2 * e.KV)
    dec_half = step_work(s, e_dec, "dec_half", "decode step on the other half", B, B * S, B * S)
    ar_dec_half = tp_all_reduce(s, p.model, p.gpu, p.tp // 2, B, tag="dec_half", label="decode step on the other half",
                                tp_symbol=e.TP / 2)
    t_dec_half = step_time(s, e_dec, "dec_half", "decode step on the other half", dec_half, communication=ar_dec_half,
                           why="the streams' step with half the group's bandwidth and compute")
    fits_half = s.compare(e_dec.W / e_dec.TP + e_dec.KV * (B * S + P_in),
                          hbm_bytes(p.gpu) * GPU_MEMORY_UTILIZATION) <= 0
    n = s.symbol("n")

    s.assume("The budget prices every chunk token at attention to the whole prompt, a little above the worst "
             "step's exact causal count, so no step breaks the TPOT target; the TTFT counts each chunk's exact "
             "work (it attends to the chunks before it).")
    s.assume("Each chunk's step is priced on both sides of the roofline: a chunk whose math is shorter than the "
             "step's reads (the weights and the streams' KV) waits on them. The chunk's reads of its own "
             "prompt's earlier KV are left out next to the decode streams' reads.")
    s.assume(f"Only this prompt is waiting; the decode streams are priced at their context as drawn over the "
             f"{format_number(s.value(n))} steps its chunks take: each grows by one token a step, small next to the "
             "weights each step reads, and a stream that finishes meanwhile only shortens the steps.")
    kv = p.prompt * float(s.evaluate(e.KV))  # bytes of the prompt's KV on each GPU
    s.assume(f"A prefill-only replica hands the prompt's KV to the decode replica: {format_number(kv / 1e9, 3)} GB a "
             f"GPU, {format_number(kv / (p.gpu.nvlink_gb_s * 1e9 / 2) * 1e3, 2)} ms over {fabric_name(p.gpu)} to a "
             f"replica in the same domain, {format_number(kv / 50e9 * 1e3, 2)} ms over a 400 Gb/s NIC a GPU "
             "across nodes; it is not counted against the TTFT.")
    s.assume(f"The TTFT target is one the group can meet with the prompt alone, timed by this step model (not at "
             f"datasheet peak), and at most {format_number(LOOSEST_TTFT)} times that: a looser one leaves the two "
             "targets nothing to trade.")
    s.slip("budget without the decode tokens", s.value(c_max) / (s.value(B) + s.value(c_max)), on="token_budget")
    s.slip("stall counted as the prompt's math alone (no decode work, no overhead)", on="stall",
           factor=s.evaluate(F_p / e.flop_rate) / s.value(stall))
    s.slip("TTFT as chunks × TPOT target (every chunk priced at the whole prompt)", on="ttft",
           factor=s.evaluate(n * tau) / s.value(ttft))
    if p.tp > 1:
        s.slip("stall without the TP all-reduces", on="stall", factor=s.evaluate(stall - t_ar_full) / s.value(stall))
        s.slip("budget without the TP all-reduces", on="token_budget",
               factor=s.evaluate(B + floor_of((tau - e.t_oh - dec.flops / e.flop_rate) * e.flop_rate
                                                 / (2 * e.N + e.A * P_in))) / s.evaluate(B + c_max))
    _chunk_remedies(s, T_f, tau, t_solo, (t_half, t_dec_half, fits_half), (
        (HALF, ttft_half,
         f"chunks of {s.text(half)}, each paying the step's fixed cost again"),
        (THREE, ttft_three, f"chunks of {s.text(three)}")))
    _chunk_regime(s, p, ttft, T_f, t_p, t_x, n, c_max, P_in, t_solo)
