"""What max-context reservation wastes, and the capacity paging returns."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value
from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.common import GPU_MEMORY_UTILIZATION, given_hbm_bytes, given_usable_share
from solvers.formulas.scheduling import require_realistic_tp
from solvers.formulas.steptime import engine, step_time, step_work
from solvers.sheetmath import floor_of, min_of
from solvers.units import format_number


def _reservation(p, s: Sheet) -> dict[str, sympy.Symbol]:
    """One request's slots under max-context reservation, averaged over its decode."""
    M = s.param("M", "max_context")
    L_p = s.param("L_p", "prompt_mean")
    L_o = s.param("L_o", "output_mean")
    used = s.step("used", "Slots holding tokens, averaged over a request's decode", "U", L_p + L_o / 2, "tokens",
                  "the prompt is there from the start; the output grows from nothing to L_o")
    reserved = s.step("reserved", "Slots reserved for tokens not yet generated", "R", L_o / 2, "tokens",
                      "they will be used, but later: on average half the output is still to come")
    frag = s.step("fragmentation", "Slots never used (internal fragmentation)", "F", M - L_p - L_o, "tokens",
                  "the request stops well short of the maximum it reserved")
    s.step("waste_share", "Share of the reservation wasted", "W_res", (reserved + frag) / M, "%",
           "reserved-but-not-yet-used plus never-used, over the reservation")
    boundary = s.step("boundary_output", "Output length where reservation equals fragmentation", "L_o_star",
                      2 * (M - L_p) / 3, "tokens", "solve L_o/2 = M − L_p − L_o for L_o")
    return {"M": M, "prompt": L_p, "output": L_o, "used": used, "reserved": reserved, "frag": frag,
            "boundary": boundary}


# The mean request leaves room under the maximum for the longer ones of the mix. 0.85 rather than a roomier
# 0.75: the reservation-dominated regime needs requests that fill most of their reservation.
MEAN_REQUEST_SHARE = 0.85


MIN_BATCH = 8  # a pool of fewer requests is a layout question (more GPUs), not a paging one
MAX_OUTPUT_PER_PROMPT = 20  # a workload averaging a tiny prompt and a reply 20+ times longer is not a real mix


def _paging_judgements(s: Sheet, waste, gain, final_gain, preempted) -> None:
    """What this workload says about reservation and paging, judged on its numbers."""
    s.judge("holds", "paging fits more than {gain_bar} the requests reservation does",
            s.compare(gain, s.param("g_bar", "gain_bar")) > 0, f"the gain is {s.text(gain)}")
    s.judge("holds", "paging leaves under {low_waste} of a request's slots empty",
            s.compare(waste, s.param("f_low", "low_waste")) < 0,
            f"{s.text(waste)} of a paged request's slots sit empty: (block − 1)/2 against all the request holds, so "
            "long requests in small blocks waste least")
    s.judge("holds", "even with every request at its final length, paging fits more than {final_bar} the requests "
            "reservation does", s.compare(final_gain, s.param("g_end", "final_bar")) > 0,
            f"at the final length paging fits {s.text(final_gain)} the requests reservation does")
    s.judge("holds", "admitted on the average with no headroom, a pool whose requests all reached full length together "
            "would preempt over {preempt_bar} of them", s.compare(preempted, s.param("f_bar", "preempt_bar")) > 0,
            f"{s.text(preempted)} of the requests admitted on the average no longer fit at full length: about "
            "half the output over prompt plus output. The worst case: staggered requests rarely peak together, so "
            "in steady state preemption comes from bursts of long outputs, which a watermark's headroom absorbs")
    s.judge("holds", "paging is free at decode: the block table adds no work to the attention kernel", False,
            "every key and value is found through the block table, one lookup a block: the vLLM paper measured "
            "its attention kernel 20-26% slower than FasterTransformer's contiguous one (sec. 7.1). Attention is "
            "part of a step, and the batch paging admits repays it many times over", fact=True)


def _waste_regime(s: Sheet, res: dict[str, sympy.Symbol]) -> None:
    reserved, frag = (s.text(res[k]) for k in ("reserved", "frag"))
    s.regime_by(res["reserved"], res["frag"], tie="below", above=Side(
        "reservation-dominated",
        f"Outputs run long enough to fill most of the maximum: the slots held for tokens still to come "
        f"({reserved} on average) outweigh the slots never used ({frag}).",
        "With shorter outputs, or a generous maximum context, most of each reservation is never touched: "
        "the waste is fragmentation, and paging returns many times the capacity."), below=Side(
        "fragmentation-dominated",
        f"Requests stop far short of the maximum they reserve: the slots never used ({frag}) outweigh "
        f"those held for tokens still to come ({reserved} on average).",
        "When outputs fill most of the maximum context, the bigger waste is slots reserved for tokens that "
        "arrive later; paging still removes it, but there is less to win."))


def solve(p, s: Sheet) -> None:
    if p.prompt_mean + p.output_mean > MEAN_REQUEST_SHARE * p.max_context:
        raise Reject("the mean request leaves no room under the maximum context for longer requests")
    if p.output_mean > MAX_OUTPUT_PER_PROMPT * p.prompt_mean:
        raise Reject(f"a mean reply over {MAX_OUTPUT_PER_PROMPT} times the mean prompt is not a realistic mix")
    require_realistic_tp(p.model, p.tp, p.gpu)
    res = _reservation(p, s)
    e = engine(s, p.model, p.gpu, p.tp, communication=p.tp > 1, kv_prerequisite=True)
    M = given_hbm_bytes(s, p.gpu, "M_HBM")
    u = given_usable_share(s)
    pool = s.step("pool_bytes", "KV pool per GPU", "K", M * u - e.W / e.TP, "GB",
                  "usable HBM less this GPU's share of the weights")
    f_min = convention_value("minimal-kv-pool")
    if s.evaluate(pool) < f_min * s.value(M):
        raise Reject("the weights leave less than the minimal KV pool on each GPU")
    slots = s.step("pool_tokens", "Token slots in the pool", "K_tok", floor_of(pool / e.KV), "tokens",
                   "each GPU's pool over its share of one token's keys and values: every GPU holds every token")
    before = s.step("requests_before", "Requests that fit with max-context reservation", "N_res",
                    floor_of(slots / res["M"]), "requests", "every request holds the maximum from admission on")
    if s.value(before) < 1:
        raise Reject("the pool cannot hold one max-context reservation")
    s.step("", "Slots no reservation can use (external fragmentation)", "X", slots - before * res["M"], "tokens",
           "the pool's remainder after whole contiguous reservations; with reservations of different sizes, "
           "gaps open between them as requests come and go")
    bs = s.param("S_b", "block_size")
    tail = s.step("", "Empty slots in the last block, on average", "E", (bs - 1) / 2, "tokens",
                  "a sequence's length is as likely to end anywhere within its last block")
    paged = s.step("paged_allocation", "Slots a paged request holds, on average", "A_pg", res["used"] + tail,
                   "tokens", "the block table maps its blocks anywhere in the pool, allocated as tokens arrive: "
                   "only the last one is partly empty")
    waste = s.step("paged_waste", "Share of block slots empty with paging", "W_pg", tail / paged, "%",
                   "the partly filled last block is all that is left of the waste")
    if s.compare(waste, s.param("f_paper", "paper_waste")) >= 0:  # blocks as long as the requests: under 1% of draws
        raise Reject("blocks too large for these requests: the paper's under-4% paged waste would not hold")
    after = s.step("requests_after", "Requests that fit with paging", "N_pg", floor_of(slots / paged),
                   "requests", "the pool over what a request holds on average")
    gain = s.step("capacity_gain", "Capacity paging returns", "G", after / before, "x",
                  "requests in flight with paging over requests with reservation")
    final = s.step("", "Slots a paged request holds at its last token", "A_end", res["prompt"] + res["output"] + tail,
                   "tokens", "prompt and the whole output, in whole blocks")
    at_end = s.step("requests_final", "Requests that fit if all reach their final length at once", "N_end",
                    floor_of(slots / final), "requests",
                    "admit more than this and a pool that fills up must preempt someone to let the others grow")
    final_gain = s.step("final_gain", "Capacity paging returns at the final length", "G_end", at_end / before, "x",
                        "requests at full length with paging over requests with reservation")
    preempted = s.step("preempted_share", "Share preempted if all grow to full length", "P_pre",
                       (after - at_end) / after, "%", "admitted on the average, the requests that no longer fit "
                       "once everyone holds prompt, whole output and tail")
    cap = s.param("B_max", "seq_cap")
    run = s.step("batch_run", "Batch a step runs", "B_run", min_of(after, cap), "requests",
                 "the pool's count, or the engine's cap on sequences a step where that is smaller")
    if s.compare(run, MIN_BATCH) < 0:
        raise Reject("the pool holds too few requests to batch")
    work = step_work(s, e, "paged", "decode step at that batch", run, run * res["used"], run * res["used"])
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, run, tag="paged", label="decode step at that batch")
    # read12: on one GPU there is nothing to all-reduce, and the line said so all the same
    then = "then the all-reduces and the step's overhead" if p.tp > 1 else "then the step's overhead"
    step_time(s, e, "paged", "decode step at that batch", work, key="tpot_paged", communication=t_ar,
              why="one token for every request in the batch: each GPU reads its weights and every request's KV, "
                  f"or does the math, whichever is longer, {then}")

    s.assume("Every request is the mean one: its prompt and output lengths are the means, and averages over "
             "its decode stand for a pool of requests at all stages (long requests staying longer is ignored).")
    s.assume("Reservation: each request holds the maximum context from admission to completion, contiguous; "
             "with equal reservations the only external fragmentation is the pool's remainder.")
    s.assume("Paging: blocks are allocated on demand through a per-request block table, anywhere in the pool; "
             "the last block's fill is uniform, so it is (block − 1)/2 slots short on average. KV cache in bf16; "
             "no prefix sharing. Admitting on the average leaves no growth headroom: vLLM then preempts "
             "(recomputes or swaps) the newest request when a block cannot be allocated.")
    s.assume(f"The pool is {format_number(GPU_MEMORY_UTILIZATION * 100)}% of each GPU's HBM less its share of the "
             "bf16 weights; activations, CUDA graphs and NCCL buffers are left out. The batch's TPOT is the bank's "
             "step model at the mean request's context; the block-table lookups' cost to the attention kernel "
             "(the vLLM paper's 20-26%, on a part of the step) is left out.")
    s.slip("reserved-for-later slots counted as used", on="waste_share",
           factor=s.value(res["frag"]) / s.evaluate(res["reserved"] + res["frag"]))
    if p.block_size > 1:  # with one-token blocks nothing is empty, whatever the lengths
        s.slip("the final lengths counted as used, not the average over the decode", on="paged_waste",
               factor=s.value(paged) / s.value(final))
    s.slip("the final lengths counted as used, not the average over the decode", on="requests_after",
           factor=s.evaluate(floor_of(slots / final)) / s.value(after))
    if p.block_size > 1:
        s.slip("half a block empty (B/2), not (B − 1)/2", on="paged_waste",
               factor=s.evaluate((bs / 2) / (res["used"] + bs / 2)) / s.value(waste))
    _paging_judgements(s, waste, gain, final_gain, preempted)
    _waste_regime(s, res)

