"""The step-time model shared by the serving questions.

One engine step of a tensor-parallel group runs every scheduled token through the model
once: one decode token per running stream and, in the same step, the prefill tokens of a
prompt or of a chunk of one. The model times it as

    t = max(bytes per GPU / achievable bandwidth, math time of the group) + overhead

    bytes per GPU = W / TP + KV_gpu × (cached tokens the decode streams attend to)
    math time     = 2·N × (tokens through the weights) / (TP·η_c·P)
                    + A × (query-key pairs of attention) / (TP·η_att·P_att)

where A = 4·L·H·d_h: QKᵀ and PV each take a multiply-add per head dimension, per query
head, per layer. P is the dense peak of the weights' dtype and P_att that of the KV cache's
(the card's matmul-precision, common.given_matmul_peaks); where they are the same figure the
math time is the step's FLOPs over one rate. Every GPU of the group reads its share of the weights and of the KV heads
(kvcache.kv_bytes_per_token_per_gpu, replication included) and does 1/TP of the FLOPs;
communication between the GPUs comes on top where a question adds it (collective.tp_all_reduce,
passed to step_time as `communication`; all_reduce_steps splits it into a fixed and a per-token part
for a question that solves for a batch or a chunk). A question after the foundations takes the KV
bytes per token from kv-bytes-per-token (engine(..., kv_prerequisite=True), `requires:` in its file).

Its three constants are named assumptions with defaults (StepConstants): the achievable
fraction of peak compute (by the precision each matmul runs at: step-compute, step-compute-fp8),
the achievable fraction of HBM bandwidth and a fixed per-step overhead (scheduling, sampling,
kernel-launch gaps). A question may draw its own values and pass them in, or model the overhead
itself (overhead=None); the sheet states what it used."""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from solvers.conventions import convention, convention_value
from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.collective import AllReduceTerms, all_reduce_terms
from solvers.formulas.common import (
    GPU_MEMORY_UTILIZATION,
    dtype_bytes,
    given_compute_efficiencies,
    given_config,
    given_hbm_bandwidth,
    given_hbm_bytes,
    given_kv_bytes,
    given_matmul_peaks,
    given_model_params,
    given_usable_share,
    given_weight_bytes,
    hbm_bytes,
)
from solvers.formulas.kvcache import kv_bytes_per_token_per_gpu, kv_bytes_per_token_per_gpu_given
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of
from solvers.units import format_quantity

STEP_OVERHEAD = convention_value("step-overhead") * 1e-3  # the card's fixed seconds per step


@dataclass(frozen=True)
class StepConstants:
    """The model's named assumptions; the defaults are the conventions card's step-compute,
    step-bandwidth and step-overhead."""

    # achievable fraction of dense peak FLOP/s; None: the cards' figure for each matmul's precision
    compute: float | None = None
    bandwidth: float = convention_value("step-bandwidth")  # achievable fraction of HBM bandwidth
    # seconds per step outside the kernels; None: the question models it
    overhead: float | None = STEP_OVERHEAD


DEFAULT_CONSTANTS = StepConstants()


@dataclass(frozen=True)
class Engine:
    """The symbols of one TP group on a sheet, from which step times are built."""

    N: sympy.Symbol  # parameters
    W: sympy.Symbol  # weight bytes of the whole model
    KV: sympy.Symbol  # KV bytes per cached token held by one GPU
    A: sympy.Symbol  # attention FLOPs per query-key pair, all layers and heads
    TP: sympy.Symbol  # GPUs in the group
    P: sympy.Symbol  # dense peak FLOP/s per GPU of the weight GEMMs (the weights' dtype)
    P_att: sympy.Symbol  # dense peak FLOP/s per GPU of QKᵀ and PV (the KV cache's dtype); P itself where equal
    BW: sympy.Symbol  # HBM bandwidth per GPU
    eta_c: sympy.Symbol  # achievable fraction of P in the weight GEMMs
    eta_att: sympy.Symbol  # achievable fraction of P_att in attention; eta_c itself where equal
    eta_bw: sympy.Symbol  # achievable fraction of HBM bandwidth
    t_oh: sympy.Symbol | None  # fixed overhead per step (None: not part of this sheet's model)

    @property
    def flop_rate(self) -> sympy.Expr:
        """Achievable FLOP/s of the whole group in the weight GEMMs."""
        return self.TP * self.eta_c * self.P

    @property
    def attention_rate(self) -> sympy.Expr:
        """Achievable FLOP/s of the whole group in attention's matmuls."""
        return self.TP * self.eta_att * self.P_att

    def math_time(self, weight_flops: sympy.Expr, attention_flops: sympy.Expr) -> sympy.Expr:
        """Seconds of the group's math: the weight GEMMs at the weights' peak, attention at the cache's.
        With one peak for both it is the FLOPs over one rate, as the step's FLOPs are shown."""
        if self.P_att is self.P and self.eta_att is self.eta_c:
            return (weight_flops + attention_flops) / self.flop_rate
        return weight_flops / self.flop_rate + attention_flops / self.attention_rate

    @property
    def byte_rate(self) -> sympy.Expr:
        """Achievable HBM bytes/s of one GPU (each GPU reads its own share)."""
        return self.eta_bw * self.BW

    def _room(self, budget: sympy.Expr) -> sympy.Expr:
        return budget if self.t_oh is None else budget - self.t_oh

    def bytes_within(self, budget: sympy.Expr) -> sympy.Expr:
        """Bytes one GPU can read in a step that must finish within `budget`, overhead paid."""
        return self._room(budget) * self.byte_rate


@dataclass(frozen=True)
class StepWork:
    flops: sympy.Symbol  # FLOPs of the step, whole group
    bytes: sympy.Symbol  # bytes one GPU reads in the step
    math: sympy.Expr  # seconds of the group's math: Engine.math_time of the weights' and attention's FLOPs


def given_step_bandwidth(s: Sheet, value: float = DEFAULT_CONSTANTS.bandwidth) -> sympy.Symbol:
    """η_bw, the share of HBM bandwidth a step's reads reach: at the card's figure the step-bandwidth card is
    in play (read as the sheet is solved, so the screen lists it); a question's own figure stands alone."""
    if value == DEFAULT_CONSTANTS.bandwidth:
        value = convention_value("step-bandwidth")
    return s.given("η_bw", value, "%", "achievable fraction of HBM bandwidth")


def given_step_overhead(s: Sheet, value: float = STEP_OVERHEAD) -> sympy.Symbol:
    """t_oh, the fixed time a step pays outside its kernels: the step-overhead card's where it is the card's."""
    if value == STEP_OVERHEAD:
        value = convention_value("step-overhead") * 1e-3
    return s.given("t_oh", value, "ms", "fixed overhead per step")


def engine(s: Sheet, model: Record, gpu: Record, tp: int, constants: StepConstants = DEFAULT_CONSTANTS,
           dtype: str = "bf16", kv_dtype: str = "bf16", communication: bool = False,
           kv_prerequisite: bool = False) -> Engine:
    """Declare a TP group of `gpu` serving `model`: datasheet figures, the model's constants,
    weight bytes, KV bytes per token per GPU and attention FLOPs per query-key pair.
    communication: the question adds TP communication itself (the stated model says so).
    kv_prerequisite: KV bytes per token stand as kv-bytes-per-token's result (the question requires it)."""
    N = given_model_params(s, model)
    b_w = given_weight_bytes(s, dtype)
    b_kv = given_kv_bytes(s, kv_dtype)
    TP = s.given("TP", tp, "GPUs", "GPUs in the tensor-parallel group")
    P, P_att = given_matmul_peaks(s, gpu, dtype, kv_dtype)
    BW = given_hbm_bandwidth(s, gpu)
    eta_c, eta_att = given_compute_efficiencies(s, gpu, dtype, kv_dtype, constants.compute)
    eta_bw = given_step_bandwidth(s, constants.bandwidth)
    t_oh = None if constants.overhead is None else given_step_overhead(s, constants.overhead)
    L = given_config(s, model, "layers")
    H = given_config(s, model, "heads")
    d_h = given_config(s, model, "head_dim")

    W = s.step("weights", "Weight bytes", "W", N * b_w, "GB", "every parameter once; each GPU holds 1/TP of them")
    KV = (kv_bytes_per_token_per_gpu_given(s, model, dtype_bytes(kv_dtype), kv_dtype, TP) if kv_prerequisite
          else kv_bytes_per_token_per_gpu(s, model, b_kv, TP))
    convention("attention-flops")  # the step's math counts attention by this card: the question lists it in play
    A = s.step("attention_pair_flops", "Attention FLOPs per query-key pair", "A", 4 * L * H * d_h, "FLOP",
               "QKᵀ and PV: a multiply-add per head dimension each, for every query head in every layer")

    efficiency = s.text(eta_c) if constants.compute is not None else f"{s.text(eta_c)} of the {dtype} peak"
    overhead = ("the CPU's time per step is modelled separately" if constants.overhead is None
                else f"t_oh = {format_quantity(constants.overhead, 'ms')} per step")
    s.assume(
        "Step-time model: t = max(bytes each GPU reads / (η_bw·BW), FLOPs / (TP·η_c·peak)) + overhead, with "
        f"η_c = {efficiency} and η_bw = {format_quantity(constants.bandwidth, '%')}; "
        f"{overhead}. Reads and math overlap perfectly inside a step (a roofline); "
        + ("TP communication comes on top, below." if communication else "TP communication is left out."))
    s.assume("FLOPs: 2 per parameter per token through the weights, plus 4·d_h per query head per layer for "
             "every query-key pair of attention; embeddings and norms are ignored.")
    if P_att is not P:
        s.assume(f"Matmul precision (the card's matmul-precision): the weight GEMMs run at the {dtype} peak P, "
                 f"attention's QKᵀ and PV at the peak P_att of the {kv_dtype} KV cache they read.")
    return Engine(N, W, KV, A, TP, P, P_att, BW, eta_c, eta_att, eta_bw, t_oh)


def step_work(s: Sheet, e: Engine, tag: str, label: str, tokens: sympy.Expr, attended: sympy.Expr,
              cached: sympy.Expr) -> StepWork:
    """FLOPs and per-GPU bytes of one step.

    tokens:   tokens through the weights (decode streams + prefill tokens);
    attended: query-key pairs of attention (a decode token at context S adds S; a prompt of P
              tokens prefilled from scratch adds P²/2 under the causal mask);
    cached:   cached tokens whose KV the step reads (the decode streams' contexts)."""
    flops = s.step(f"flops_{tag}", f"FLOPs of the {label}", f"F_{tag}", 2 * e.N * tokens + e.A * attended,
                   "TFLOP", "2 per weight per token, plus the attention's query-key pairs")
    if e.P_att is e.P:
        math = flops / e.flop_rate
    else:  # two peaks: the weights' FLOPs and attention's, each at its own rate
        math = e.math_time(s.step("", f"FLOPs in the weights, {label}", f"Fw_{tag}",
                                  2 * e.N * tokens, "TFLOP", "2 per weight per token"),
                           s.step("", f"FLOPs in attention, {label}", f"Fa_{tag}",
                                  e.A * attended, "TFLOP", "the query-key pairs, at the cache's peak"))
    moved = s.step(f"bytes_{tag}", f"Bytes each GPU reads in the {label}", f"M_{tag}", e.W / e.TP + e.KV * cached,
                   "GB", "its share of the weights, read once for all tokens"
                   + (", plus the cached KV attended to" if cached != 0 else ""))
    return StepWork(flops, moved, math)


def step_time(s: Sheet, e: Engine, tag: str, label: str, work: StepWork, key: str = "", why: str = "",
              communication: sympy.Expr = sympy.S.Zero) -> sympy.Symbol:
    """Time of one step: the slower of reading and computing, plus the TP all-reduces
    (collective.tp_all_reduce; not overlapped) and the fixed overhead if modelled."""
    convention("roofline-time")  # the card whose rule this is: the question lists it in play
    expr = max_of(work.bytes / e.byte_rate, work.math) + communication
    if e.t_oh is not None:
        expr = expr + e.t_oh
    default_why = ("the slower of streaming the bytes and doing the math"
                   + ("" if communication == 0 else ", then the all-reduces")
                   + ("" if e.t_oh is None else ", plus overhead"))
    return s.step(key or f"t_{tag}", f"Time of the {label}", f"t_{tag}", expr, "ms", why or default_why)


def growing_steps_time(s: Sheet, e: Engine, tag: str, label: str, count: sympy.Expr, first: StepWork,
                       growth: sympy.Expr, communication: sympy.Expr = sympy.S.Zero, why: str = "") -> sympy.Symbol:
    """Total time of `count` steps, each priced as step_time prices one, that read the same bytes while
    their FLOPs grow by `growth` from one step to the next (a prompt's chunks: each attends to the
    chunks before it). The first steps may be short of math and wait on their reads: k counts them,
    and the rest sum their math in closed form. `communication` is per step."""
    convention("roofline-time")
    t_read = first.bytes / e.byte_rate
    dt = growth / e.attention_rate  # the growth is attention's: priced at the cache's peak
    k = s.step(f"read_bound_{tag}", f"Of the {label}, steps that wait on their reads", f"k_{tag}",
               min_of(count, max_of(0, ceil_of((t_read - first.math) / dt))), "steps",
               "a step whose math falls short of its read time takes the read time")
    computing = (count - k) * first.math + dt * (count * (count - 1) - k * (k - 1)) / 2
    per_step = communication if e.t_oh is None else communication + e.t_oh
    return s.step(f"t_{tag}", f"Time of the {label}", f"t_{tag}", k * t_read + computing + count * per_step, "ms",
                  why or "the read-bound steps at their read time, the others at their FLOPs (an arithmetic "
                  "series), each with its fixed costs")


def all_reduce_steps(s: Sheet, model: Record, gpu: Record, tp: int, nic: Record | None = None,
                     latency: sympy.Symbol | None = None) -> AllReduceTerms:
    """collective.all_reduce_terms shown as two steps, a fixed latency per step and a time per token:
    what a question needs to solve for the batch or chunk that fits a step. Zero at TP 1."""
    terms = all_reduce_terms(s, model, gpu, tp, nic=nic, latency=latency)
    if tp == 1:
        return terms
    fixed = s.step("allreduce_latency_per_step", "All-reduce latency per step", "t_AR0", terms.fixed, "ms",
                   "two calls per layer, each paying its latency however few tokens it carries")
    per_token = s.step("allreduce_per_token", "All-reduce time per token in a step", "t_ARtok", terms.per_token, "us",
                       "each token's activations, twice per layer, 2(TP−1)/TP of them over each GPU's link")
    return AllReduceTerms(fixed, per_token)


def require_fit(s: Sheet, e: Engine, gpu: Record, cached: sympy.Expr) -> None:
    """Reject a draw whose weights plus `cached` tokens of KV overflow a GPU's usable HBM."""
    if s.evaluate(e.W / e.TP + e.KV * cached) > hbm_bytes(gpu) * GPU_MEMORY_UTILIZATION:
        raise Reject(f"weights and KV cache do not fit on {gpu.name}")


@dataclass(frozen=True)
class DecodeCosts:
    """A decode step at one context split into what does not grow with the batch (one GPU's share
    of the weights) and what grows with each sequence (its KV read) or each token (its math and
    all-reduce bytes): the step-time model in a form a question can tabulate over batches."""

    weights: sympy.Symbol  # seconds to read one GPU's share of the weights
    kv: sympy.Symbol  # seconds to read one sequence's KV at the context
    math: sympy.Symbol  # seconds of the group's math per token at the context
    comm: AllReduceTerms  # the step's all-reduces: fixed + per token

    def kernels(self, batch: sympy.Expr, tokens: sympy.Expr = 1) -> sympy.Expr:
        """Kernel time of a step of `batch` sequences, each putting `tokens` query tokens through the
        model (1 for plain decode, γ+1 for a speculative verify pass) and reading its KV once."""
        return max_of(self.weights + batch * self.kv, batch * tokens * self.math) + self.comm.of(batch * tokens)


def decode_costs(s: Sheet, e: Engine, model: Record, gpu: Record, tp: int, context: sympy.Expr) -> DecodeCosts:
    """The step-time model's terms for decode at `context` tokens per sequence, as steps."""
    comm = all_reduce_steps(s, model, gpu, tp)
    weights = s.step("weight_read", "Weight read per step", "t_W", e.W / e.TP / e.byte_rate, "ms",
                     "each GPU's share of the weights, once per step however many tokens ride on it")
    kv = s.step("kv_read", "KV read per sequence", "t_KV", e.KV * context / e.byte_rate, "us",
                "its cached tokens' keys and values on each GPU, once per step")
    math = s.step("token_math", "Math per token", "t_F", e.math_time(2 * e.N, e.A * context), "us",
                  "2N through the weights plus attention to the whole context, at the group's achievable FLOP/s")
    return DecodeCosts(weights, kv, math, comm)


def on_gpu(s: Sheet, e: Engine, gpu: Record, tag: str, dtype: str = "bf16", kv_dtype: str = "bf16") -> Engine:
    """The same TP group of the same model on another GPU, in the same sheet: that GPU's own peaks
    and bandwidth, named apart by `tag` (P_tag, P_att_tag, BW_tag); the model's symbols are shared."""
    P, P_att = given_matmul_peaks(s, gpu, dtype, kv_dtype, f"P_{tag}", f"P_att_{tag}")
    return replace(e, P=P, P_att=P_att, BW=given_hbm_bandwidth(s, gpu, f"BW_{tag}"))


def mean_decode_context(s: Sheet, prompt: sympy.Expr, reply: sympy.Expr) -> sympy.Symbol:
    """The context every decoding request is sized at: the prompt and the reply's share the card's
    mean-decode-context gives (half: a context growing linearly from P to P + O, averaged)."""
    f_O = s.given("f_O", convention_value("mean-decode-context"), "",
                  "share of its reply a decoding request holds on average (mean-decode-context)")
    return s.step("mean_context", "Mean context of a decoding request", "S_avg", prompt + f_O * reply, "tokens",
                  "a request grows from its prompt to prompt + reply; staggered requests hold the midpoint on average")


MIN_DECODE_BATCH = 4  # a speed target that leaves fewer decode slots than this calls for another layout


@dataclass(frozen=True)
class Decode:
    batch: sympy.Symbol  # requests per replica
    step: sympy.Symbol  # seconds per decode step at that batch
    pool: sympy.Symbol  # tokens the KV pool holds
    rate: sympy.Symbol  # output tokens per second per replica


def usable_hbm(s: Sheet, gpu: Record, name: str = "M") -> sympy.Expr:
    """The HBM of one GPU that weights and KV may fill: its capacity (given as `name`) times the card's
    usable-hbm share."""
    M = given_hbm_bytes(s, gpu, name)
    return M * given_usable_share(s, "u_HBM")


def decode_at_speed(s: Sheet, e: Engine, gpu, ar: AllReduceTerms, S: sympy.Expr, budget: sympy.Expr,
                    budget_why: str, tag: str = "") -> Decode:
    """The decode batch of a replica whose steps must finish within `budget`, every request at the mean
    context S: the tightest of bandwidth, compute and the KV pool; then its step time and speeds.
    tag: names this replica's steps apart where one sheet sizes two GPU types."""
    def k(name: str) -> str:
        return f"{name}_{tag}" if tag else name

    on = f" on {gpu.name}" if tag else ""
    usable = usable_hbm(s, gpu, k("M"))
    room = s.step(k("step_room"), "Step time the target leaves for the kernels" + on, k("t_room"),
                  budget - e.t_oh - ar.fixed, "ms", f"{budget_why}, less the overhead and the all-reduce latencies")
    b_mem = s.step(k("batch_by_bandwidth"), "Batch at the target, by bandwidth" + on, k("B_mem"),
                   (room - e.W / (e.TP * e.byte_rate)) / (e.KV * S / e.byte_rate + ar.per_token), "requests",
                   "the time left after the weights' read, in one mean context's KV read (and its all-reduce bytes)")
    b_cmp = s.step(k("batch_by_compute"), "Batch at the target, by compute" + on, k("B_cmp"),
                   room / (e.math_time(2 * e.N, e.A * S) + ar.per_token), "requests",
                   "the time left, in one decode token's math at the mean context (and its all-reduce bytes)")
    pool = s.step(k("pool_tokens"), "Tokens the KV pool holds" + on, k("K"),
                  (usable - e.W / e.TP) / e.KV, "tokens", "usable HBM less the weights' share, in KV per token")
    b_pool = s.step(k("batch_by_pool"), "Batch the KV pool holds" + on, k("B_pool"), pool / S, "requests",
                    "the pool over the mean context")
    B = s.step(k("batch"), "Decode batch per replica" + on, k("B"), floor_of(min_of(b_mem, b_cmp, b_pool)),
               "requests", "the tightest of the three caps, in whole requests")
    if s.value(B) < MIN_DECODE_BATCH:
        raise Reject("the speed target leaves too few decode slots")
    dec = step_work(s, e, k("dec"), "decode step at that batch" + on, B, B * S, B * S)
    t_dec = step_time(s, e, k("dec"), "decode step at that batch" + on, dec, key=k("decode_step"),
                      communication=ar.of(B),
                      why="the slower of the reads and the math, then the all-reduces and the overhead")
    s.step(k("per_user"), "Per-user speed at that batch" + on, k("v_user"), 1 / t_dec, "tokens/s",
           "one token per step each")
    rate = s.step(k("decode_rate"), "Output tokens per second per replica, decoding" + on, k("X_dec"), B / t_dec,
                  "tokens/s", "B tokens per step")
    return Decode(B, t_dec, pool, rate)

