"""The MoE helper the MoE, scale-up and long-context questions share.

It counts a MoE model from its config fields (models.yaml), the routed experts' weights and total
against active parameters; prices an expert-parallel all-to-all (its copies' bytes, its two legs and
their latency); and simulates how unevenly routed tokens load the GPUs. A routed expert is a gated MLP
of three hidden × expert_ffn matrices; a model without dense_layers or shared_experts has none. (How
many experts a batch touches is each question's own step: E·(1 − (1 − k/E)^B).)"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import sympy

from solvers.conventions import convention, convention_value, scale_up_domain
from solvers.data import Record
from solvers.derivation import Sheet
from solvers.formulas.common import dtype_bytes, given_config, given_nic, given_nvlink
from solvers.sheetmath import max_of

GATED_MATRICES = 3  # gate, up and down projections of a SwiGLU expert


def moe_layers(model: Record) -> int:
    return model.layers - model.get("dense_layers", 0)


def expert_params(model: Record) -> int:
    """Parameters of one routed (or shared) expert."""
    return GATED_MATRICES * model.hidden * model.expert_ffn


def attention_params(model: Record) -> int:
    """Attention projections of one layer. GQA: q and o of heads × head_dim, k and v of kv_heads × head_dim.
    MLA (DeepSeek): the low-rank query (q_lora_rank) and key-value (kv_lora_rank) paths, the RoPE key,
    and values of head_dim per head."""
    h, H, d = model.hidden, model.heads, model.head_dim
    if model.attention == "mla":
        c, r = model.kv_lora_rank, model.qk_rope_head_dim
        q_rank = model.get("q_lora_rank")
        query = h * H * (d + r) if q_rank is None else h * q_rank + q_rank * H * (d + r)
        return query + h * (c + r) + c * H * 2 * d + H * d * h
    return 2 * h * H * d + 2 * h * model.kv_heads * d


@dataclass(frozen=True)
class ParameterCount:
    total: float
    active: float  # what one token runs through: everything but the routed experts it does not pick
    routed: float  # all routed experts of all MoE layers


def parameter_count(model: Record) -> ParameterCount:
    """Total and active parameters from the config fields: attention, dense MLPs, shared and routed
    experts, routers and untied embedding and output tables (norms and biases left out, under 0.1%)."""
    L_moe, dense = moe_layers(model), model.get("dense_layers", 0)
    E, k, p_e = model.experts, model.experts_per_token, expert_params(model)
    routed = L_moe * E * p_e
    rest = (model.layers * attention_params(model) + dense * GATED_MATRICES * model.hidden * model.ffn
            + L_moe * (model.get("shared_experts", 0) * p_e + E * model.hidden) + 2 * model.vocab * model.hidden)
    return ParameterCount(rest + routed, rest + L_moe * k * p_e, routed)


SCALE_BLOCK = 128  # FP8 dispatch carries one FP32 scale per 128 values (DeepEP, DeepSeek-V3 sec. 3.3)


SCALE_BYTES = 4


COMBINE_BYTES = 2  # combine returns bf16 outputs


def copy_bytes(s: Sheet, h: sympy.Symbol, dispatch_dtype: str = "fp8",
               value_bytes: sympy.Symbol | None = None) -> tuple[sympy.Symbol, sympy.Symbol]:
    """Bytes of one token's copy each way of an expert-parallel all-to-all, as DeepEP moves them: the hidden
    vector out in the dispatch dtype (FP8 with one FP32 scale per 128 values), the expert's output back in bf16.
    `value_bytes`: the sheet's own symbol for a dispatched value's bytes, where it has one (the experts' dtype)."""
    b_d = (s.given("b_d", dtype_bytes(dispatch_dtype), "B", f"bytes per dispatched value ({dispatch_dtype})")
           if value_bytes is None else value_bytes)
    if dispatch_dtype == "fp8":
        blk = s.given("n_blk", SCALE_BLOCK, "", "values per FP8 scale")
        b_s = s.given("b_s", SCALE_BYTES, "B", "bytes per scale (FP32)")
        d_copy = s.step("dispatch_copy", "Bytes of one dispatched copy", "d", h * b_d + h / blk * b_s, "B",
                        "the token's hidden vector in FP8 plus one FP32 scale per 128 values")
    else:
        d_copy = s.step("dispatch_copy", "Bytes of one dispatched copy", "d", h * b_d, "B",
                        "the token's hidden vector in bf16, no scales")
    b_c = s.given("b_c", COMBINE_BYTES, "B", "bytes per combined value (bf16)")
    c_copy = s.step("combine_copy", "Bytes of one combined copy", "c", h * b_c, "B",
                    "each expert's output comes back in bf16 to be weighted and summed")
    return d_copy, c_copy


def a2a_call_latency(s: Sheet, crosses: bool) -> sympy.Symbol:
    """The fixed latency one dispatch or combine call pays: the bank's all-reduce latency of the slowest link it
    uses (across nodes, or inside one NVLink domain), taken for an all-to-all as nvl72-boundary takes it."""
    card = "all-reduce-latency-nic" if crosses else "all-reduce-latency-nvlink"
    return s.given("α_A2A", convention_value(card) * 1e-6, "us", "fixed latency of a dispatch or combine call "
                   + ("across nodes" if crosses else "inside one NVLink domain") + f" ({card})")


def a2a_legs(s: Sheet, gpu: Record, nic: Record, n: sympy.Symbol, gpus: int, volume: sympy.Expr) -> sympy.Expr:
    """Seconds for `volume` bytes of one GPU's dispatch and combine under the moe-all-to-all card's routing: the
    share bound for GPUs in its NVLink domain (its own counted in) over NVLink, the rest over its NIC, both at
    once, the slower setting the time (all over NVLink where the `gpus` fit one domain)."""
    convention("moe-all-to-all")
    domain = scale_up_domain(gpu)
    if gpus <= domain:
        return volume / given_nvlink(s, gpu)
    D = s.given("D", domain, "GPUs", f"{gpu.name} NVLink domain")
    return max_of(volume * D / n / given_nvlink(s, gpu), volume * (n - D) / n / given_nic(s, nic))


def ep_all_to_all(s: Sheet, model: Record, gpu: Record, nic: Record, n: sympy.Symbol, gpus: int,
                  tokens: sympy.Expr, layers: sympy.Expr) -> sympy.Expr:
    """A decode step's expert-parallel all-to-all over `gpus` GPUs (`n` on the sheet), each carrying `tokens`:
    the moe-all-to-all card as DeepEP's low-latency kernels run it, each copy sent straight to its expert's GPU
    (a2a_legs), plus a fixed latency for each of dispatch and combine (the all-reduce-latency card of the
    slowest link the call uses, as nvl72-boundary takes it). Zero on one GPU: no copy leaves it."""
    if gpus == 1:
        return sympy.Integer(0)
    crosses = gpus > scale_up_domain(gpu)
    k = given_config(s, model, "experts_per_token")
    d_copy, c_copy = copy_bytes(s, given_config(s, model, "hidden"))
    alpha = a2a_call_latency(s, crosses)
    V = s.step("a2a_bytes", "Dispatch and combine bytes a GPU moves per MoE layer", "V_A2A",
               tokens * k * (d_copy + c_copy), "MB", "k copies of each of its tokens out in FP8, the k results back")
    layer = s.step("a2a_layer", "All-to-all per MoE layer", "t_A2A_L", a2a_legs(s, gpu, nic, n, gpus, V) + 2 * alpha,
                   "us", ("the copies for GPUs in the domain over NVLink, the rest over the NIC, at once; " if crosses
                          else "every copy over NVLink; ") + "plus the fixed latency of dispatch and of combine")
    return s.step("a2a_step", "All-to-all per decode step", "t_A2A", layers * layer, "ms",
                  "every MoE layer dispatches and combines once a step")


@dataclass(frozen=True)
class SkewSimulation:
    """One seeded replay of a step's router: per-GPU times under three placements, in seconds."""

    naive: float  # experts in id order, E/G per GPU
    fit_today: float  # one redundant slot per GPU, replicas and packing fit to today's loads
    fit_yesterday: float  # the same, fit to yesterday's loads, run on today's
    sigma: float  # spread of log-popularity that gives the hottest expert m times the mean


def popularity(rng: np.random.Generator, experts: int, hot: float,
               correlation: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Today's and yesterday's share of the routed tokens per expert: log-normal popularity scaled so the
    hottest expert gets `hot` times the mean today, yesterday's log-popularity correlated `correlation` with it."""
    z_today, noise = rng.standard_normal(experts), rng.standard_normal(experts)
    z_yesterday = correlation * z_today + math.sqrt(1 - correlation**2) * noise

    def peak(sigma: float) -> float:  # max / mean of exp(sigma z): rises with sigma
        w = np.exp(sigma * (z_today - z_today.max()))
        return 1 / w.mean()

    low, high = 0.0, 8.0
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if peak(mid) < hot else (low, mid)
    sigma = (low + high) / 2
    today, yesterday = np.exp(sigma * z_today), np.exp(sigma * z_yesterday)
    return today / today.sum(), yesterday / yesterday.sum(), sigma


def _busiest(gpu_of: np.ndarray, expert_of: np.ndarray, counts: np.ndarray, tokens: np.ndarray, gpus: int,
             t_read: float, t_tok: float) -> float:
    """The busiest GPU: the sum over the expert copies it holds of max(weight read, its tokens' math)."""
    per_copy = np.maximum(t_read, tokens[expert_of] / counts[expert_of] * t_tok)
    return float(np.bincount(gpu_of, weights=per_copy, minlength=gpus).max())


def _rebalanced(loads: np.ndarray, gpus: int, t_read: float,
                t_tok: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """EPLB-style: one redundant slot per GPU goes to the expert whose copies are heaviest (again and again),
    then balanced packing: copies heaviest first, one per GPU per round, the least-loaded GPU taking the heaviest
    (every GPU ends with E/G + 1 copies). Returns each copy's GPU and expert, and the copies per expert."""
    experts = len(loads)
    counts = np.ones(experts, dtype=int)
    heaviest = [(-load, e) for e, load in enumerate(loads.tolist())]
    heapq.heapify(heaviest)
    for _ in range(gpus):
        _, e = heapq.heappop(heaviest)
        counts[e] += 1
        heapq.heappush(heaviest, (-loads[e] / counts[e], e))
    expert_of = np.repeat(np.arange(experts), counts)
    times = np.maximum(t_read, loads[expert_of] / counts[expert_of] * t_tok)
    order = np.argsort(-times, kind="stable").reshape(-1, gpus)  # E + G copies: E/G + 1 rounds of G
    busy = np.zeros(gpus)
    gpu_of = np.empty(len(expert_of), dtype=int)
    for round_copies in order:
        lightest = np.argsort(busy, kind="stable")
        gpu_of[round_copies] = lightest
        busy[lightest] += times[round_copies]
    _separate_copies(gpu_of, expert_of, counts, order)
    return gpu_of, expert_of, counts


def _separate_copies(gpu_of: np.ndarray, expert_of: np.ndarray, counts: np.ndarray, order: np.ndarray) -> None:
    """Two copies of one expert on one GPU (they straddled a round) swap GPUs with a neighbour in the round."""
    if len(np.unique(gpu_of * len(counts) + expert_of)) == len(gpu_of):
        return
    for e in np.flatnonzero(counts > 1):
        copies = np.flatnonzero(expert_of == e)
        for i in copies[1:]:
            if gpu_of[i] in set(gpu_of[copies[copies != i]]):
                row = order[np.flatnonzero((order == i).any(axis=1))[0]]
                for j in row:
                    if expert_of[j] != e and gpu_of[j] not in set(gpu_of[copies]):
                        gpu_of[i], gpu_of[j] = gpu_of[j], gpu_of[i]
                        break


REPLAYS = 3  # router replays averaged per variant: one replay's hot set is noisy


def simulate_skew(seed: int, experts: int, gpus: int, picks: float, hot: float, correlation: float,
                  t_read: float, t_tok: float) -> SkewSimulation:
    """Expected per-expert token counts (picks × share) under today's popularity, timed on three placements;
    the mean of REPLAYS replays of the router."""
    rng = np.random.default_rng(seed)
    ids = np.arange(experts)
    runs = []
    for _ in range(REPLAYS):
        today, yesterday, sigma = popularity(rng, experts, hot, correlation)
        tokens = picks * today
        naive = _busiest(ids // (experts // gpus), ids, np.ones(experts), tokens, gpus, t_read, t_tok)
        fit_today = _busiest(*_rebalanced(tokens, gpus, t_read, t_tok), tokens, gpus, t_read, t_tok)
        fit_yesterday = _busiest(*_rebalanced(picks * yesterday, gpus, t_read, t_tok), tokens, gpus, t_read, t_tok)
        runs.append((naive, fit_today, fit_yesterday, sigma))
    return SkewSimulation(*(float(np.mean(column)) for column in zip(*runs)))

