"""300 ms to the first audible clause, line by line."""
from __future__ import annotations

from solvers.conventions import convention_value
from solvers.derivation import Reject, Sheet, Side, floor_of, max_of, min_of
from solvers.models.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    hbm_bandwidth,
    hbm_bytes,
    matmul_peaks,
    require_context,
)
from solvers.models.cost import LAYOUTS
from solvers.models.steptime import (
    DEFAULT_CONSTANTS,
    all_reduce_steps,
    engine,
    step_time,
    step_work,
    usable_hbm,
)
from solvers.units import format_quantity

NO_LAYOUT = "none of them"


_WAITS = ("endpointing", "network")  # the lines that are not a model


# The lines in the budget's order (the answer's choices, hint 1): a tie for the largest goes to the first,
# so a wait ties ahead of any model and the regime's tie (not-a-model) agrees.
_LINES = {"endpointing": "endpointing", "network": "network", "asr": "ASR", "llm": "LLM", "tts": "TTS"}


def first_clause_time(model, gpu, tp: int, batch: int, context: float, turn: float, clause: int,
                      dtype: str = "bf16") -> float | None:
    """Seconds from the end of the user's turn to the LLM's first clause on a TP group, in floats (the
    sheet's formulas, for the layouts it does not derive); None where the weights (in `dtype`; the KV in
    bf16) crowd out the card's minimal KV pool or the batch's KV does not fit. The turn's prefill rides in one
    step with the other sessions' decode tokens, then clause − 1 steps."""
    c = DEFAULT_CONSTANTS
    N, A = model.params_b * 1e9, 4 * model.layers * model.heads * model.head_dim
    kv = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
    weights = dtype_bytes(dtype) * N / tp
    usable = GPU_MEMORY_UTILIZATION * hbm_bytes(gpu)
    crowded = weights > usable - convention_value("minimal-kv-pool") * hbm_bytes(gpu)
    if crowded or weights + kv * batch * context > usable:
        return None
    (fr, fr_att), br = (tp * c.compute * peak for peak in matmul_peaks(gpu, dtype, "bf16")), \
        c.bandwidth * hbm_bandwidth(gpu)
    if tp == 1:
        ar0 = ar_tok = 0.0
    else:
        ar0 = 2 * model.layers * convention_value("all-reduce-latency-nvlink") * 1e-6
        ar_tok = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden * 2 / (gpu.nvlink_gb_s * 1e9 / 2)
    reads = (weights + kv * batch * context) / br

    def step(tokens: float) -> float:
        return max(reads, 2 * N * tokens / fr + A * tokens * context / fr_att) + ar0 + ar_tok * tokens + c.overhead

    return step(batch - 1 + turn) + (clause - 1) * step(batch)


def _voice_llm(s: Sheet, p, tp: int, llm) -> None:
    """The LLM line's derivation on the smallest layout that makes it (the widest where none does): first
    clause, speed after it, and the sessions one replica carries within the line."""
    e = engine(s, p.model, p.gpu, tp, DEFAULT_CONSTANTS, dtype=p.dtype, communication=tp > 1, kv_prerequisite=True)
    B, S = s.param("B", "batch"), s.param("S", "context")
    T_u, k = s.param("T_u", "turn"), s.param("k", "clause")
    ar = all_reduce_steps(s, p.model, p.gpu, tp)
    first = step_work(s, e, "first", "step that prefills the turn", B - 1 + T_u, (B - 1 + T_u) * S, B * S)
    t_1 = step_time(s, e, "first", "step that prefills the turn", first, key="first_token",
                    communication=ar.of(B - 1 + T_u),
                    why="the turn's tokens ride with the other sessions' decode tokens in one step")
    dec = step_work(s, e, "dec", "decode step", B, B * S, B * S)
    t_d = step_time(s, e, "dec", "decode step", dec, key="decode_step", communication=ar.of(B))
    clause = s.step("first_clause", "LLM time to the first clause", "t_clause", t_1 + (k - 1) * t_d, "ms",
                    "the first token from the turn's step, then k − 1 decode steps")
    s.step("llm_slack", "Slack on the LLM line", "t_slack", llm - clause, "ms", "what the layout leaves unspent")
    s.step("per_user", "Per-user speed after the first clause", "v_user", 1 / t_d, "tokens/s",
           "the rest of the reply streams at one token per decode step")
    fixed = s.step("clause_fixed", "First-clause time that does not grow with the sessions", "t_0",
                   k * (e.W / (e.TP * e.byte_rate) + ar.fixed + e.t_oh) + ar.per_token * (T_u - 1), "ms",
                   "k weight reads, all-reduce latencies and overheads, and the turn's own all-reduce bytes")
    per_session = s.step("clause_per_session", "First-clause time each session adds", "t_1s",
                         k * (e.KV * S / e.byte_rate + ar.per_token), "ms",
                         "its context's KV read and its token's all-reduce bytes, in each of the k steps")
    by_line = s.step("sessions_by_line", "Sessions the line allows, by bandwidth", "B_line",
                     floor_of((llm - fixed) / per_session), "users",
                     "the line less the fixed part, in sessions, while every step stays memory-bound")
    by_pool = s.step("sessions_by_pool", "Sessions the KV pool holds", "B_pool",
                     floor_of((usable_hbm(s, p.gpu) - e.W / e.TP) / (e.KV * S)), "users", "the pool over one context")
    most = s.step("sessions", "Sessions per replica within the LLM line", "B_max", min_of(by_line, by_pool),
                  "users", "the tighter of the line and the pool")
    if s.value(most) < 1:
        raise Reject("not one session makes the LLM line on the widest layout: the model is too big for it")
    busiest = step_work(s, e, "max", "turn's step at that many sessions", most - 1 + T_u, (most - 1 + T_u) * S,
                        most * S)
    if s.evaluate(busiest.math) > s.evaluate(busiest.bytes / e.byte_rate):
        raise Reject("at the line's session count the turn's step is compute-bound: the linear solve does not hold")
    s.slip("clause priced as k prefill steps", s.evaluate(k * t_1 / clause), on="first_clause")
    s.assume("The conversation so far is in the prefix cache: a turn prefills only its own tokens, which attend "
             "to the whole context, in one step alongside the other sessions' decode tokens.")
    s.assume("Every session sits at the listed context; the first clause is the first k tokens the TTS can speak. "
             "Endpointing is the silence (or turn-detector) wait after the user stops; network is the round trip "
             "of the audio up and the first audio down; ASR and TTS are their final-transcript and first-chunk "
             "latencies.")
    s.assume("Layouts other than the one derived are timed by the same model (first_clause_time); a layout "
             "whose weights leave less than the card's minimal KV pool, or whose sessions' KV does not fit its "
             "usable HBM, cannot serve. Where no layout makes the line, TP 8 is derived: the sessions it holds "
             "within the line are what a replica can take.")


def _voice_regime(s: Sheet, lines, largest) -> None:
    waits = max_of(*(lines[name] for name in _WAITS))
    models = max_of(*(lines[name] for name in ("asr", "llm", "tts")))
    wait = s.step("largest_wait", "Largest line that is not a model", "t_wait", waits, "ms",
                  "endpointing or the network: time nobody's GPU can buy back")
    model = s.step("largest_model", "Largest model line", "t_model", models, "ms", "ASR, the LLM's line or TTS")
    name = _LINES[largest]
    s.regime_by(wait, model, tie="above", above=Side(
        "not-a-model",
        f"The largest line is {name}, {s.text(wait)}, against at most "
        f"{s.text(model)} for any model: a faster GPU cannot buy it back. Tune the "
        "endpointer (a turn detector instead of a long silence timeout), move the edge closer, and stream every "
        "stage so each starts on its predecessor's first output.",
        "If the waits shrink below the model lines (a semantic turn detector, an edge region), the LLM's line "
        "becomes the one to buy down: a smaller model, a wider TP group, speculative decoding.",
        near=f"The largest line is {name}, {s.text(wait)}, barely above the largest "
             f"model line ({s.text(model)}): waits and models share the budget almost "
             "evenly, so both the endpointer and the LLM tier are worth tuning."),
        below=Side(
        "a-model",
        f"A model line is the largest ({name}, {s.text(model)}), above the longest "
        f"wait ({s.text(wait)}). The LLM's line is whatever the budget leaves after the "
        "other four, so short waits hand it the slack: the budget is then bought with GPUs and model choices, "
        "and a tighter LLM line is a choice, not a given.",
        "With a longer endpointing wait or a farther network path the largest line stops being a model, and no "
        "GPU spend recovers it.",
        near=f"A model line is the largest ({name}), only just above the longest wait "
             f"({s.text(wait)}): both kinds of line need work."))


def solve(p, s: Sheet) -> None:
    require_context(p.model, p.context)
    lines = {name: s.param(f"t_{name}", name) for name in ("endpointing", "network", "asr", "tts")}
    budget = s.param("T_audio", "budget")
    llm = s.step("llm_line", "LLM line: what the budget leaves for the first clause", "t_LLM",
                 budget - sum(lines.values()), "ms", "the budget less endpointing, network, ASR and TTS first audio")
    lines["llm"] = llm
    if s.value(llm) <= 0:
        raise Reject("the other lines already spend the budget")
    largest = "endpointing"
    for name in _LINES:  # exact comparisons: only a strictly larger line displaces an earlier one
        if s.compare(lines[name], lines[largest]) > 0:
            largest = name
    s.choose("largest_line", _LINES[largest])

    times = {tp: first_clause_time(p.model, p.gpu, tp, p.batch, p.context, p.turn, p.clause, p.dtype)
             for tp in LAYOUTS}
    fits = [tp for tp, t in times.items() if t is not None and t <= s.value(llm)]
    for layout, name in LAYOUTS.items():
        t = times[layout]
        s.judge("layouts", name, layout in fits,
                "the weights and the sessions' KV do not fit" if t is None else
                f"first clause in {format_quantity(t, 'ms')} against {s.text(llm)}")
    s.judge("layouts", NO_LAYOUT, not fits, "every layout misses the line at this many sessions" if not fits
            else "at least one layout makes the line")
    # Where none makes it, the widest is derived: how far it misses, and how many sessions it could hold.
    tp = min(fits) if fits else max(LAYOUTS)
    s.choose("smallest_layout", LAYOUTS[tp] if fits else NO_LAYOUT)
    _voice_llm(s, p, tp, llm)
    _voice_regime(s, lines, largest)

