"""What the scheduling questions share, on the step-time model (steptime.py): step constants, the
checks a realistic draw passes, chunk caps, and the TP advice."""
from __future__ import annotations

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.collective import crosses_domain, tp_all_reduce
from solvers.formulas.common import fabric_name, model_params, require_context
from solvers.formulas.steptime import (
    Engine,
    StepConstants,
    all_reduce_steps,
    engine,
    step_time,
    step_work,
)
from solvers.sheetmath import floor_of
from solvers.units import format_number


def step_constants(p, overhead: bool = True) -> StepConstants:
    """The step-time model's constants as the question file states them."""
    return StepConstants(compute=p.compute_eff, bandwidth=p.bandwidth_eff,
                         overhead=p.overhead if overhead else None)


def tokens_text(s: Sheet, sym: sympy.Symbol) -> str:
    return format_number(s.value(sym))


# A model this small fits one GPU in bf16 with room for its KV cache; nobody splits it more than two ways,
# and on more GPUs its per-GPU step gets so short that the all-reduces and the overhead dominate it.
SMALL_MODEL_PARAMS = 20e9


SMALL_MODEL_MAX_TP = 2


def require_realistic_tp(model: Record, tp: int, gpu: Record) -> None:
    if model_params(model) < SMALL_MODEL_PARAMS and tp > SMALL_MODEL_MAX_TP:
        raise Reject(f"{model.name} is not served over {tp} GPUs")
    if gpu.get("vendor") == "AMD" and 1 < tp < 8:
        # An xGMI mesh gives each GPU one link to each peer: a smaller ring gets a fraction of the aggregate
        # that collective.tp_all_reduce takes as the link.
        raise Reject(f"{gpu.name} reaches half its xGMI aggregate only in a ring over all eight GPUs")


def require_tpot_room(s: Sheet, e: Engine, decode_bytes: sympy.Symbol, tpot: sympy.Symbol) -> None:
    """Reject a draw where the decode batch alone cannot step within the TPOT target."""
    if s.evaluate(e.bytes_within(tpot) - decode_bytes) <= 0:
        raise Reject("the decode batch alone misses the TPOT target")


def streams_and_targets(p, s: Sheet):
    """The engine, the running decode streams and the two SLOs: what both prefill questions start from."""
    require_realistic_tp(p.model, p.tp, p.gpu)
    require_context(p.model, p.prompt)
    e = engine(s, p.model, p.gpu, p.tp, step_constants(p), communication=p.tp > 1, kv_prerequisite=True)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    tau = s.param("TPOT", "tpot")
    T_f = s.param("T_f", "ttft")
    return e, B, S, tau, T_f


def chunk_cap(s: Sheet, e: Engine, p, B, L_p, tau, dec, key: str, title: str):
    """The largest chunk a TPOT-long step can carry next to the decode batch, every chunk token priced
    at attention to its whole prompt. Returns (chunk, cost of a chunked step besides its chunk, the
    all-reduce terms)."""
    ar = all_reduce_steps(s, p.model, p.gpu, p.tp)
    t_x = s.step("per_step_cost", "Cost of a chunked step besides its chunk", "t_x",
                 e.t_oh + ar.fixed + ar.per_token * B + dec.flops / e.flop_rate, "ms",
                 "overhead, all-reduce latencies and the decode batch's math and all-reduce bytes: the step is "
                 "compute-bound once a chunk rides in it")
    f_c = s.step("chunk_token_flops", "FLOPs per chunk token, priced at the whole prompt", "f_c",
                 2 * e.N + e.A * L_p, "TFLOP", "its weights, plus attention to every token of its prompt: no chunk "
                 "token costs more, so no step breaks the target")
    t_c = s.step("chunk_token_time", "Time per chunk token", "t_c", f_c / e.flop_rate + ar.per_token, "us",
                 "its math at the group's achievable compute, plus its activations in the all-reduces")
    c_max = s.step(key, title, "c_max", floor_of((tau - t_x) / t_c), "tokens",
                   "what the TPOT target leaves after the fixed cost, in chunk tokens")
    if s.value(c_max) < 1:
        raise Reject("no prompt token fits in a step under the TPOT target")
    if s.compare(dec.bytes / e.byte_rate, (dec.flops + c_max * f_c) / e.flop_rate) > 0:
        raise Reject("a step with a full chunk is still memory-bound")
    return c_max, t_x, t_c, ar


def solo_prefill(s: Sheet, e: Engine, p, prompt: sympy.Expr, ttft: sympy.Symbol) -> sympy.Symbol:
    """The prompt prefilled alone on an idle group, in one step: what a prefill-only replica of the same GPUs
    gives it. A TTFT target shorter than that is refused: no budget can meet it."""
    solo = step_work(s, e, "solo", "prefill alone on an idle group", prompt, prompt**2 / 2, 0)
    t_ar_solo = tp_all_reduce(s, p.model, p.gpu, p.tp, prompt, tag="solo", label="prefill alone")
    t_solo = step_time(s, e, "solo", "prefill alone on an idle group", solo, key="solo_ttft",
                       communication=t_ar_solo, why="no decode batch and no TPOT cap: the whole prompt in one step, "
                       "what a prefill-only replica of the same GPUs gives it")
    if s.compare(t_solo, ttft) > 0:
        raise Reject("the TTFT target is shorter than the prompt's prefill alone on the group")
    return t_solo


def tp_advice(p) -> str:
    """More compute for a prompt: a wider TP group while it stays in the scale-up domain, else a prefill pool."""
    if crosses_domain(p.gpu, 2 * p.tp):
        return (f"a separate prefill pool (TP past {p.tp} would leave the {p.gpu.name} {fabric_name(p.gpu)} domain "
                "and put the all-reduces on the NIC)")
    return "a wider TP group or a separate prefill pool"

