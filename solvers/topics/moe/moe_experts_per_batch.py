"""Active parameters describe a token - how many experts does a batch read?."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from solvers.data import Record
from solvers.derivation import Reject, Sheet, max_of, min_of
from solvers.models.common import (
    given_active_params,
    given_config,
    given_hbm_bandwidth,
    given_model_params,
    given_peak_flops,
    given_weight_bytes,
)
from solvers.models.moe import GATED_MATRICES, moe_layers, parameter_count
from solvers.units import format_number, format_quantity


@dataclass(frozen=True)
class Experts:
    """A MoE model's routing on a sheet: experts per layer, picks per token, MoE layers, one expert's
    parameters, and the bytes of all routed experts."""

    E: sympy.Symbol
    k: sympy.Symbol
    L: sympy.Symbol
    h: sympy.Symbol
    p_e: sympy.Symbol
    X: sympy.Symbol


def routed_experts(s: Sheet, model: Record, b_w: sympy.Symbol) -> Experts:
    """Declare the routing figures and step the routed experts' bytes (what a batch may read)."""
    E = given_config(s, model, "experts")
    k = given_config(s, model, "experts_per_token")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers" + (
        f" ({model.layers} less {model.dense_layers} dense)" if model.get("dense_layers") else ""))
    h = given_config(s, model, "hidden")
    f = given_config(s, model, "expert_ffn")
    p_e = s.step("expert_params", "Parameters of one expert", "p_e", GATED_MATRICES * h * f, "",
                 "gate, up and down projections, each hidden × expert width")
    X = s.step("routed_bytes", "Bytes of all routed experts", "W_x", L * E * p_e * b_w, "GB",
               "every routed expert of every MoE layer")
    return Experts(E, k, L, h, p_e, X)


class miss_power(sympy.Function):
    """(1 − k/E)^B evaluated in floating point once its arguments are numbers: the exact rational power of
    a batch of thousands has tens of thousands of digits. Prints as the power it is."""

    @classmethod
    def eval(cls, base, exponent):
        if base.is_number and exponent.is_number:
            return sympy.Float(float(base) ** float(exponent), 17)
        return None

    def _sympystr(self, printer) -> str:
        return f"({printer._print(self.args[0])})**{printer._print(self.args[1])}"

    def _latex(self, printer) -> str:
        return f"\\left({printer._print(self.args[0])}\\right)^{{{printer._print(self.args[1])}}}"


def touched_share(s: Sheet, key: str, r: Experts, tokens: sympy.Expr, title: str, symbol: str,
                  why: str) -> sympy.Symbol:
    """The expected share of a layer's experts a batch of `tokens` touches (each expert missed by every
    token with probability (1 − k/E) per token)."""
    return s.step(key, title, symbol, 1 - miss_power(1 - r.k / r.E, tokens), "%", why)


READ_SHARE = sympy.Rational(95, 100)  # "nearly all experts read": the touched share the boundary asks for


LEVER = sympy.Rational(5, 4)  # a change "matters" when it moves the step time by this factor or more


DENSE_GAP = 2  # a dense model "twice as fast / slow" as this step


def _expert_step(r: Experts, b, phi, tokens, BW, P) -> sympy.Expr:
    """The routed experts of a step, each on its own roofline: one read of its weights against the math
    for the tokens that picked it."""
    return r.L * r.E * phi * max_of(r.p_e * b / BW, 2 * r.p_e * tokens / P)


def _shared_step(W_s, N_emb, b, B, BW, P) -> sympy.Expr:
    """Every weight outside the routed experts: one read serves all B tokens; each multiplies them but the
    input embedding table, whose rows are looked up, not multiplied."""
    return max_of(W_s / BW, 2 * (W_s / b - N_emb) * B / P)


def _advantage(s: Sheet, model: Record, p, values: dict[str, float]) -> None:
    """Which statements about this step hold: the right set moves with the batch, from bytes (small batch)
    to FLOPs (past the crossover). The what-ifs are the step model again on other inputs, in plain numbers."""
    key, v = "advantage", values
    E, k, n, B = model.experts, model.experts_per_token, p.gpus, p.batch
    b, P, BW, p_e, L, emb = v["b"], v["P"], v["BW"], v["p_e"], moe_layers(model), v["N_emb"]

    def flops(weight_bytes: float, batch: float) -> float:  # 2 a weight a token, the looked-up embedding aside
        return 2 * (weight_bytes / b - emb) * batch

    def step(batch: float, expert_bytes: float = b) -> float:
        phi = 1 - (1 - k / E) ** batch
        tokens = batch * k / (E * phi)
        shared = max(v["W_s"] / BW, flops(v["W_s"], batch) / P)
        return (shared + L * E * phi * max(p_e * expert_bytes / BW, 2 * p_e * tokens / P)) / n

    def ms(seconds: float) -> str:
        return format_quantity(seconds, "ms")

    t, M, W, W_a = v["t"], v["M"], v["W"], v["W_a"]
    s.judge(key, "The step reads at least 25% fewer weight bytes than a dense model of the same total size",
            M <= 0.75 * W, f"{format_quantity(M, 'GB')} of {format_quantity(W, 'GB')}: "
            f"{format_number(100 * M / W, 3)}% of the weights")
    bound = B * k / E >= v["t_c"]
    s.judge(key, "An expert's GEMM is compute-bound at this batch", bound,
            f"B·k/E = {format_number(B * k / E, 3)} tokens per expert against the crossover of "
            f"{format_number(v['t_c'], 3)}")
    dense_total = max(W / BW, flops(W, B) / P) / n
    s.judge(key, "A dense model of the same total size would take at least twice as long for this step",
            dense_total >= DENSE_GAP * t, f"{ms(dense_total)} against {ms(t)}: "
            + ("its FLOPs follow the total parameters" if flops(W, B) / P > W / BW else
               "it waits on reading every weight"))
    dense_active = max(W_a / BW, flops(W_a, B) / P) / n
    s.judge(key, "A dense model of the active size would run this step at least twice as fast",
            DENSE_GAP * dense_active <= t, f"{ms(dense_active)} against {ms(t)}: "
            + ("at this batch both are bound by the same active FLOPs" if bound else
               "it reads only the active weights, the MoE every expert the batch picked"))
    lighter = step(B, b / 2)
    s.judge(key, "Experts stored at half the bytes (same tensor peak) would cut the step time by 20% or more",
            t >= float(LEVER) * lighter, f"{ms(lighter)} against {ms(t)}")
    doubled = step(2 * B)
    s.judge(key, "Twice the batch would cost less than 25% more step time", doubled < float(LEVER) * t,
            f"{ms(doubled)} against {ms(t)}: {format_number(doubled / t, 3)}x for twice the tokens")


def _experts_regime(s: Sheet, B, B95, B_c, phi, M, W, W_a, t_e) -> None:
    """Three sides along the batch: part of the experts read (bytes below the total), every expert read
    with the GEMMs still waiting on HBM (the worst: total bytes for active FLOPs), experts compute-bound."""
    share, ratio = format_number(100 * s.value(phi), 3) + "%", format_number(s.evaluate(M / W_a), 3) + "x"
    per = format_number(s.value(t_e), 3)
    saved = format_number(100 * (1 - s.evaluate(M / W)), 3) + "%"
    if s.compare(B, B95) < 0:
        s.set_regime(
            "some-experts-read",
            f"The step reads {share} of each layer's experts: {ratio} the active parameters' bytes already, yet "
            f"only {saved} less than the whole model's; the batch, not the active count, sets the reads.",
            B95, B,
            "Past B_95 every expert is read every step: the bytes are the total model's while the FLOPs stay the "
            "active parameters', and the step waits on HBM until each expert gets enough tokens.")
    elif s.compare(B, B_c) < 0:
        s.set_regime(
            "all-experts-read",
            f"Nearly every expert is read ({share}), each for about {per} tokens: the step pays the whole "
            f"model's bytes ({ratio} the active bytes) and its GEMMs still wait on HBM. Here a MoE costs like "
            "a dense model of its total size.",
            B_c, B,
            "Past B_c every expert's GEMM is compute-bound: the step's time follows the active FLOPs, and that "
            "is where the MoE beats a dense model of its total size.")
    else:
        s.set_regime(
            "experts-compute-bound",
            f"Each expert gets about {per} tokens, past the crossover: its weight read is amortised and the step "
            "is bound by the active parameters' FLOPs, the saving a MoE was built for.",
            B_c, B,
            "Below B_c the experts wait on HBM again: the step costs the weights' bytes, and the FLOP saving "
            "buys nothing.")


def solve(p, s: Sheet) -> None:
    """How many experts a step of B tokens reads, its bytes against the active parameters', and the batch at
    which an expert's GEMM turns compute-bound: where a MoE's saving over a dense model comes from."""
    model = p.model
    N = given_model_params(s, model)
    b = given_weight_bytes(s, p.weight_dtype)
    B = s.param("B", "batch")
    n = s.param("n", "gpus")
    P = given_peak_flops(s, p.gpu, p.weight_dtype)
    BW = given_hbm_bandwidth(s, p.gpu)
    r = routed_experts(s, model, b)
    W = s.step("weights", "Bytes of all weights", "W", N * b, "GB", "the total parameter count, each stored once")
    if s.compare(W, r.X) <= 0:
        raise Reject(f"{model.name}'s total is no larger than its routed experts")
    W_s = s.step("shared_bytes", "Bytes outside the routed experts", "W_s", W - r.X, "GB",
                 "attention, " + ("dense MLPs, shared experts, " if model.get("dense_layers") else "")
                 + "routers and embeddings: every token uses them")
    N_emb = s.step("embedding_params", "Parameters of the input embedding table", "N_emb",
                   s.given("V", model.vocab, "", "vocabulary size") * r.h, "",
                   "a row looked up per token, not multiplied: read with the shared weights, no math")
    count = parameter_count(model)
    N_a = given_active_params(s, model)
    W_a = s.step("active_bytes", "Bytes of one token's active parameters", "W_act", N_a * b, "GB",
                 f"what 'active parameters' predicts a token reads (the config's shapes give "
                 f"{format_number(count.active / 1e9, 3)}B: the shared weights plus k of E experts per layer)")
    phi = touched_share(s, "touched_share", r, B, "Share of a layer's experts the step reads", "φ",
                        "an expert is skipped only if all B tokens pick elsewhere: (1 − k/E)^B")
    s.step("touched", "Experts read per MoE layer", "E_read", r.E * phi, "experts",
           f"{format_number(p.batch)} tokens pick {format_number(p.batch * model.experts_per_token)} slots, "
           "but many land on the same expert")
    q = s.given("q", READ_SHARE, "%", "touched share taken as 'nearly all experts read'")
    B95 = s.step("batch_95", "Batch at which 95% of the experts are read", "B_95",
                 sympy.log(1 - q) / sympy.log(1 - r.k / r.E), "tokens", "solve 1 − (1 − k/E)^B = 95% for B")
    M = s.step("step_bytes", "Weight bytes the step reads", "M", W_s + phi * r.X, "GB",
               "the shared weights once, plus every expert some token picked")
    s.step("bytes_ratio", "Step bytes against the active parameters' bytes", "R", M / W_a, "x",
           "what 'active parameters' would predict for the reads, against what the batch pulls in")
    t_e = s.step("tokens_per_expert", "Mean tokens per expert read", "t_e", B * r.k / (r.E * phi), "tokens",
                 "B·k picks spread over the experts read")
    t_star = s.step("expert_crossover", "Tokens per expert at which its GEMM turns compute-bound", "t_c",
                    b * P / (2 * BW), "tokens", "2·t FLOPs per weight against b bytes per weight: 2t/b = P/BW")
    B_c = s.step("batch_compute", "Batch at which experts turn compute-bound", "B_c", t_star * r.E / r.k, "tokens",
                 "B·k/E tokens per expert on average reach the crossover")
    shared_t = _shared_step(W_s, N_emb, b, B, BW, P)
    t_x = _expert_step(r, b, phi, t_e, BW, P)
    t = s.step("step_time", "Time of the step", "t", (shared_t + t_x) / n, "ms",
               f"shared weights and experts, each on its roofline, spread over {format_number(p.gpus)} GPUs")
    s.step("per_user", "Tokens per second per decoding sequence", "X_user", 1 / t, "tokens/s",
           "one token per sequence per step")
    s.step("throughput", "Tokens per second", "X", B / t, "tokens/s", "B tokens per step")
    _advantage(s, model, p, {name: s.value(sym) for name, sym in
                             (("b", b), ("P", P), ("BW", BW), ("p_e", r.p_e), ("W_s", W_s), ("W", W), ("W_a", W_a),
                              ("N_emb", N_emb),
                              ("M", M), ("t", t), ("t_c", t_star))})
    _experts_regime(s, B, B95, B_c, phi, M, W, W_a, t_e)

    s.assume("Tokens pick their experts independently and uniformly (a balanced router): the expected count "
             "E·(1 − (1 − k/E)^B); a skewed router reads fewer distinct experts but loads the hot ones more "
             "(ep-load-skew).")
    s.assume("Weight reads only: the KV cache and attention over the context are left out; every weight outside "
             "the routed experts (the embedding table included) is read once per step, and every one but the input "
             "embedding table (a lookup) does 2 FLOPs a token: the output head multiplies, the input table does not.")
    s.assume("Roofline at datasheet peaks (dense-peaks, roofline-time), applied to the shared weights and to each "
             "expert separately: one expert's idle tensor cores do not serve another expert's tokens. The "
             f"{format_number(p.gpus)} GPUs share the reads and the math evenly; "
             "communication is left out (moe-dispatch-bytes).")
    s.slip("experts counted as B·k, as if no two tokens shared one", s.evaluate(min_of(B * r.k, r.E) / (r.E * phi)),
           on="touched")
    s.slip("every expert read, whatever the batch", 1 / s.value(phi), on="touched")
    s.slip("only the active parameters read", s.evaluate(W_a / M), on="step_bytes")
    s.slip("bytes of every parameter", s.evaluate(W / M), on="step_bytes")
    s.slip("tokens per expert as B·k/E over all experts", s.value(phi), on="tokens_per_expert")

