"""A voice agent's budget to first audio, line by line."""
from __future__ import annotations

import sympy

from solvers.conventions import convention_value
from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms
from solvers.formulas.common import (
    dtype_bytes,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_matmul_peaks,
    given_model_params,
    given_usable_share,
    given_weight_bytes,
    require_context,
)
from solvers.formulas.cost import LAYOUTS
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    all_reduce_steps,
    engine,
    given_step_bandwidth,
    given_step_overhead,
    step_time,
    step_work,
    usable_hbm,
)
from solvers.sheetmath import floor_of, max_of, min_of
from solvers.units import format_quantity

NO_LAYOUT = "none of them"
NO_SESSION = "not one session makes the LLM line on the widest layout: the model is too big for it"


_WAITS = ("endpointing", "network")
# The step model sits 1.1-1.4x from measured systems (REALITY.md), and ASR/TTS figures are vendors' typical ones:
# a model line within 15% of the longest wait is not told apart from it, so such draws (and pushes) are refused.
REGIME_MARGIN = 0.15  # the lines that are not a model


# The lines in the budget's order (the answer's choices, hint 1): a tie for the largest goes to the first,
# so a wait ties ahead of any model and the regime's tie (not-a-model) agrees.
_LINES = {"endpointing": "endpointing", "network": "network", "asr": "ASR", "llm": "LLM", "tts": "TTS"}


def _layout_clause(s: Sheet, p, n: int, llm) -> tuple[bool, str]:
    """Whether TP `n` gives the first clause within the LLM's line, decided on the sheet: the step model of
    _voice_llm written for this width (the weights in the variant's dtype, the KV in bf16), with why. A layout
    whose weights leave less than the card's minimal KV pool, or whose sessions' KV does not fit its usable
    HBM, cannot serve. The turn's prefill rides in one step with the other sessions' decode tokens, then
    k − 1 decode steps."""
    TP = s.integer(n)
    N, b_w = given_model_params(s, p.model), given_weight_bytes(s, p.dtype)
    P, P_att = given_matmul_peaks(s, p.gpu, p.dtype, "bf16")
    BW = given_hbm_bandwidth(s, p.gpu)
    eta_c, eta_att = given_compute_efficiencies(s, p.gpu, p.dtype, "bf16")
    eta_bw, t_oh = given_step_bandwidth(s), given_step_overhead(s)
    L, H, d_h, H_kv = (given_config(s, p.model, name) for name in ("layers", "heads", "head_dim", "kv_heads"))
    KV_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes("bf16"), "bf16")
    M = given_hbm_bytes(s, p.gpu)
    usable = M * given_usable_share(s, "u_HBM")
    f_min = s.given("f_min", convention_value("minimal-kv-pool"), "%", "share of HBM left for KV at least "
                    "(minimal-kv-pool)")
    B, S = s.param("B", "batch"), s.param("S", "context")
    T_u, k = s.param("T_u", "turn"), s.param("k", "clause")
    weights = N * b_w / TP
    kv = KV_tok * max_of(1, floor_of(H_kv / TP)) / H_kv  # its KV heads, one at least (replicated past H_kv)
    if s.compare(weights, usable - f_min * M) > 0:
        return False, ("its share of the weights leaves less than the minimal KV pool (room for activations and "
                       "CUDA graphs besides the KV)")
    if s.compare(weights + kv * B * S, usable) > 0:
        return False, "the sessions' KV does not fit beside its share of the weights"
    ar = all_reduce_terms(s, p.model, p.gpu, n, tp_symbol=TP)
    reads = (weights + kv * B * S) / (eta_bw * BW)

    def step(tokens: sympy.Expr) -> sympy.Expr:
        math = 2 * N * tokens / (TP * eta_c * P) + 4 * L * H * d_h * tokens * S / (TP * eta_att * P_att)
        return max_of(reads, math) + ar.of(tokens) + t_oh

    clause = step(B - 1 + T_u) + (k - 1) * step(B)
    return s.compare(clause, llm) <= 0, f"first sentence in {format_quantity(s.evaluate(clause), 'ms')} against " \
        f"the {s.text(llm)} line"


def _voice_llm(s: Sheet, p, tp: int, llm) -> sympy.Symbol:
    """The LLM line's derivation on the smallest layout that makes it (the widest where none does): first
    clause, speed after it, and the sessions one replica carries within the line. Returns the first clause's
    time: what the LLM takes, which is set against the other lines."""
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
    clause = s.step("first_clause", "LLM time to the first sentence", "t_clause", t_1 + (k - 1) * t_d, "ms",
                    "the first token from the turn's step, then k − 1 decode steps")
    s.step("llm_slack", "Slack on the LLM line", "t_slack", llm - clause, "ms", "what the layout leaves unspent")
    s.step("per_user", "Per-user speed after the first sentence", "v_user", 1 / t_d, "tokens/s",
           "the rest of the reply streams at one token per decode step")
    fixed = s.step("clause_fixed", "First-sentence time that does not grow with the sessions", "t_0",
                   k * (e.W / (e.TP * e.byte_rate) + ar.fixed + e.t_oh) + ar.per_token * (T_u - 1), "ms",
                   "k weight reads, all-reduce latencies and overheads, and the turn's own all-reduce bytes")
    per_session = s.step("clause_per_session", "First-sentence time each session adds", "t_1s",
                         k * (e.KV * S / e.byte_rate + ar.per_token), "ms",
                         "its context's KV read and its token's all-reduce bytes, in each of the k steps")
    # The clause is max(reads, turn's math) + (k − 1)·max(reads, decode math) + the rest: within the line exactly
    # when every pairing of the sides is. Reads with decode math never binds alone (the turn's math is larger).
    by_line = s.step("sessions_by_line", "Sessions the line allows, by bandwidth", "B_line",
                     floor_of((llm - fixed) / per_session), "users",
                     "the line less the fixed part, in sessions, every step on its reads")
    if s.value(by_line) < 1:  # the sessions are the least of the bounds: refused before the costlier ones
        raise Reject(NO_SESSION)
    m_tok = s.step("", "Math of one token at the context", "t_F1", e.math_time(2 * e.N, e.A * S), "us",
                   "2N through the weights and attention over the context, at the group's achievable FLOP/s")
    by_compute = s.step("sessions_by_compute", "Sessions the line allows, by compute", "B_cmp",
                        floor_of((llm - k * (ar.fixed + e.t_oh) - (T_u - 1) * (m_tok + ar.per_token))
                                 / (k * (m_tok + ar.per_token))), "users",
                        "every step on its math: k·B + T_u − 1 tokens' math and all-reduce bytes, with k latencies "
                        "and overheads")
    read_w, read_kv = e.W / (e.TP * e.byte_rate), e.KV * S / e.byte_rate
    by_mixed = s.step("sessions_by_mixed", "Sessions the line allows, the turn's step on its math", "B_mix",
                      floor_of((llm - (T_u - 1) * (m_tok + ar.per_token) - (k - 1) * read_w - k * (ar.fixed + e.t_oh))
                               / (m_tok + (k - 1) * read_kv + k * ar.per_token)), "users",
                      "the turn's step on its math, the k − 1 decode steps on their reads")
    by_pool = s.step("sessions_by_pool", "Sessions the KV pool holds", "B_pool",
                     floor_of((usable_hbm(s, p.gpu) - e.W / e.TP) / (e.KV * S)), "users", "the pool over one context")
    most = s.step("sessions", "Sessions per replica within the LLM line", "B_max",
                  min_of(by_line, by_compute, by_mixed, by_pool), "users",
                  "the tightest of the line's sides and the pool")
    if s.value(most) < 1:
        raise Reject(NO_SESSION)
    s.slip("sentence priced as k prefill steps", s.evaluate(k * t_1 / clause), on="first_clause")
    s.assume("The conversation so far is in the prefix cache: a turn prefills only its own tokens, which attend "
             "to the whole context (its FLOPs by attention-flops), in one step alongside the other sessions' "
             "decode tokens.")
    s.assume("Every session sits at the listed context; TTS speaks whole sentences (as sentence-aggregating "
             "pipelines such as Pipecat do), so the LLM's line ends at the first sentence's k tokens. "
             "Endpointing is the silence (or turn-detector) wait after the user stops; network is the round trip "
             "of the audio up and the first audio down; ASR and TTS are their final-transcript and first-chunk "
             "latencies.")
    s.assume("Sessions are those speaking at once: every session counted decodes on every step. A voice agent "
             "talks perhaps a third to a half of a call, so a replica enrols two to three times as many calls.")
    s.assume("The overhead is charged on each of the k steps, as an engine without CUDA graphs or overlapped "
             "scheduling pays it; a graphed engine's lower overhead shortens the sentence by k times the difference.")
    s.assume("The budget and the silence endpointer are shipping cascaded agents': they end a turn after 300-800 ms "
             "of silence (LiveKit and OpenAI Realtime server VAD 500 ms by default, Pipecat's VAD 0.8 s) and land "
             "at 500-1,000 ms voice to voice, later with a 405B. A semantic turn detector ends a turn it judges "
             "finished sooner, about 100-250 ms after the user stops.")
    s.assume("Layouts other than the one derived are timed by the same model, wider ones with their "
             "all-reduces (one GPU has none), on this sheet's givens; a layout "
             "whose weights leave less than the card's minimal KV pool, or whose sessions' KV does not fit its "
             "usable HBM, cannot serve. Where no layout makes the line, TP 8 is derived: the sessions it holds "
             "within the line are what a replica can take.")
    return clause


def _voice_regime(s: Sheet, taken, largest: str) -> None:
    """Waits against models, each line at what it takes: the LLM at its first clause on the derived layout,
    not at the line the others leave it (its slack is no one's time)."""
    waits = max_of(*(taken[name] for name in _WAITS))
    models = max_of(*(taken[name] for name in ("asr", "llm", "tts")))
    wait = s.step("largest_wait", "Largest line that is not a model", "t_wait", waits, "ms",
                  "endpointing or the network: time nobody's GPU can buy back")
    model = s.step("largest_model", "Largest model line, the LLM at its first sentence", "t_model", models, "ms",
                   "ASR, the LLM's first sentence on its layout, or TTS")
    name = _LINES[largest]
    if abs(s.value(model) / s.value(wait) - 1) < REGIME_MARGIN:
        raise Reject("the largest wait and the largest model line agree within the step model's own error: "
                     "which is larger is not a verdict")
    s.regime_by(wait, model, tie="above", above=Side(
        "not-a-model",
        f"The largest line is {name}, {s.text(wait)}, against at most {s.text(model)} for any model, the LLM "
        "counted at what its first sentence takes: a faster GPU cannot buy it back. Tune the endpointer (a turn "
        "detector instead of a long silence timeout), move the edge closer, and stream every stage so each "
        "starts on its predecessor's first output.",
        "If the waits shrink below the model lines (a semantic turn detector, an edge region), the models "
        "become the lines to buy down: a smaller model, a wider TP group, speculative decoding, a faster TTS.",
        near=f"The largest line is {name}, {s.text(wait)}, barely above the largest model line "
             f"({s.text(model)}): waits and models share the budget almost evenly, so both the endpointer and "
             "the model tiers are worth tuning."),
        below=Side(
        "a-model",
        f"A model takes the largest line ({name}, {s.text(model)}), above the longest wait ({s.text(wait)}): "
        "here the budget is bought with GPUs and model choices (a wider layout, a smaller model, speculative "
        "decoding, a faster TTS), with prefill started on the ASR's partial transcript (preemptive generation), "
        "or with a first sentence shorter than k (a short acknowledgement), not with the endpointer.",
        "With a longer endpointing wait or a farther network path the largest line stops being a model, and no "
        "GPU spend recovers it.",
        near=f"A model takes the largest line ({name}, {s.text(model)}), only just above the longest wait "
             f"({s.text(wait)}): both kinds of line need work."))


def solve(p, s: Sheet) -> None:
    require_context(p.model, p.context)
    lines = {name: s.param(f"t_{name}", name) for name in ("endpointing", "network", "asr", "tts")}
    budget = s.param("T_audio", "budget")
    llm = s.step("llm_line", "LLM line: what the budget leaves for the first sentence", "t_LLM",
                 budget - sum(lines.values()), "ms", "the budget less endpointing, network, ASR and TTS first audio")
    if s.value(llm) <= 0:
        raise Reject("the other lines already spend the budget")

    verdicts = {tp: _layout_clause(s, p, tp, llm) for tp in LAYOUTS}
    fits = [tp for tp, (makes, _) in verdicts.items() if makes]
    for layout, name in LAYOUTS.items():
        s.judge("layouts", name, layout in fits, verdicts[layout][1])
    s.judge("layouts", NO_LAYOUT, not fits, "every layout misses the line at this many sessions" if not fits
            else "at least one layout makes the line")
    # Where none makes it, the widest is derived: how far it misses, and how many sessions it could hold.
    tp = min(fits) if fits else max(LAYOUTS)
    below = tp // 2 if tp // 2 in LAYOUTS else None  # the layout one step narrower: why it misses
    s.choose("smallest_layout", LAYOUTS[tp] if fits else NO_LAYOUT,
             (verdicts[tp][1] if fits else f"even TP 8 misses: {verdicts[tp][1]}")
             + (f"; {LAYOUTS[below]}: {verdicts[below][1]}" if fits and below is not None else ""))
    taken = {**lines, "llm": _voice_llm(s, p, tp, llm)}

    largest = "endpointing"
    for name in _LINES:  # exact comparisons: only a strictly larger line displaces an earlier one
        if s.compare(taken[name], taken[largest]) > 0:
            largest = name
    clause = f"{s.text(taken['llm'])} of its {s.text(llm)} line"
    s.choose("largest_line", _LINES[largest],
             f"the LLM's first sentence, {clause}, outlasts every other line" if largest == "llm" else
             f"{s.text(taken[largest])}, against the LLM's first sentence at {clause}")
    _voice_regime(s, taken, largest)
