"""Seeded generators for list-valued parameters (e.g. a batch's output lengths).

Each takes the variant's numpy Generator first, then the arguments the question file
gives, and returns rounded values, so the prompt shows exactly what the solver uses.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

GENERATORS: dict[str, Callable[..., list]] = {}


def generator(name: str):
    def register(function: Callable[..., list]) -> Callable[..., list]:
        GENERATORS[name] = function
        return function

    return register


@generator("lognormal_ints")
def lognormal_ints(rng: np.random.Generator, n: int, median: float, sigma: float,
                   low: int = 1, high: int = 10**7) -> list[int]:
    """n integers, log-normal around `median`; sigma 0 gives identical values, 1.5 a heavy tail."""
    draws = rng.lognormal(mean=np.log(median), sigma=sigma, size=int(n))
    return [int(v) for v in np.clip(np.rint(draws), low, high)]


# --- pause-storm-origin: a small leaf-spine fabric's pause counters -------------------------

_LEAVES = {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}


@generator("pause_fabric")
def pause_fabric(rng: np.random.Generator, gbit_s: float, quanta: int, window_s: float) -> list[dict]:
    """Pause frames sent on every link end after one node stopped draining: it pauses its leaf,
    the leaf pauses the ports its traffic arrives on (local senders, the spine), the spine pauses
    the other leaf, and that leaf pauses its senders. One row per link end, in a fixed order
    (node ports, then leaf-spine ports); the question shows each row as a counter of its own."""
    leaf_of = {node: leaf for leaf, nodes in _LEAVES.items() for node in nodes}
    nodes = list(leaf_of)
    origin = nodes[int(rng.integers(len(nodes)))]
    home = leaf_of[origin]
    away = next(leaf for leaf in _LEAVES if leaf != home)
    # Each other node sends to the origin with probability 3/4; at least one on the far leaf,
    # so the storm crosses the spine ("many jobs degrade together").
    local = [n for n in _LEAVES[home] if n != origin and rng.random() < 0.75]
    remote = [n for n in _LEAVES[away] if rng.random() < 0.75] or [_LEAVES[away][int(rng.integers(2))]]
    full_window = window_s * gbit_s * 1e9 / (quanta * 512)  # frames that would pause a link for the whole window

    def upstream(paused: int) -> int:
        # A switch holds an ingress port paused only while its egress is paused, so each hop back
        # sends at most the pauses it received.
        return int(round(rng.uniform(0.85, 1.0) * paused))

    pauses = {(origin, home): int(round(rng.uniform(0.6, 0.95) * full_window))}  # (sender, receiver) -> frames
    pauses.update({(home, node): upstream(pauses[(origin, home)]) for node in local})
    pauses[(home, "spine")] = upstream(pauses[(origin, home)])
    pauses[("spine", away)] = upstream(pauses[(home, "spine")])
    pauses.update({(away, node): upstream(pauses[("spine", away)]) for node in remote})
    links = [(node, leaf_of[node]) for node in nodes] + [(leaf, "spine") for leaf in _LEAVES]
    ends = [end for a, b in links for end in ((a, b), (b, a))]
    return [{"from": a, "to": b, "pause frames": pauses.get((a, b), 0)} for a, b in ends]


@generator("pause_frames")
def pause_frames(rng: np.random.Generator, fabric: list[dict], sender: str, receiver: str) -> int:
    """One link end's pause-frames-sent counter, read from the fabric's rows (no randomness)."""
    return next(row["pause frames"] for row in fabric if (row["from"], row["to"]) == (sender, receiver))


# --- loss-plateau-triage: two log readings, two hours apart, that point to one cause --------

# "healthy": no fault planted (a loss moving by thousandths late in a schedule). Re-reading the data is no cause:
# under four passes it trains nearly as fresh data does (the solver's HARMFUL_PASSES), so every incident may fall
# past one pass where its schedule outlasts the data, a fault or not.
PLATEAU_CAUSES = ("job-not-stepping", "lr-or-grad-zero", "healthy", "loss-scale-collapsed", "rank-sending-zeros")
_LOG_HOURS = 2


def _sig(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits - 1}e}")


@generator("plateau_decay")
def plateau_decay(rng: np.random.Generator, dataset_t: float, batch: int, seq_len: int) -> int:
    """The step the LR schedule decays to, set when the dataset was meant to last it: one pass over the
    dataset, overrun up to twice where the data shrank after the schedule was set (deduplication, a
    filter, a shard list cut short), or up to 30% short of it where the run went on past its schedule on
    the data left. Two significant figures, as configs write it."""
    data_steps = dataset_t * 1e12 / (batch * seq_len)
    return int(_sig(rng.uniform(0.7, 2.0) * data_steps, 2))


GROWTH_INTERVAL = 2000  # clean steps before a dynamic loss scaler doubles (torch.amp.GradScaler's default)


@generator("plateau_incident")
def plateau_incident(rng: np.random.Generator, warmup: int, decay_steps: int, batch: int, seq_len: int,
                     dataset_t: float, scale_power: int, ranks: int = 4) -> list[dict]:
    """Readings at 09:00 and 11:00 of a run whose loss went flat, with one cause planted.

    `dataset_t` is in trillions of tokens. The LR reaches its floor only if the schedule ends
    before the data does: where it cannot, a flat LR is drawn as a vanished gradient. The loss scale
    obeys the loss-scaling card from its start of 2^scale_power: every halving is an overflow the
    skipped-steps counter counts, so
    a scale of 2^k comes with at least scale_power − k skipped steps (more where it grew back)."""
    data_steps = dataset_t * 1e12 / (batch * seq_len)
    advance = int(round(_LOG_HOURS * 3600 / rng.uniform(4, 20)))  # steps in two hours at 4-20 s per step
    running = (2 * warmup, 0.7 * decay_steps - advance)  # before 70% of the decay: the LR well above its floor
    at_floor = (1.05 * decay_steps, 0.95 * data_steps - advance)
    cause = PLATEAU_CAUSES[int(rng.integers(len(PLATEAU_CAUSES)))]
    # Where the run can have gone past its schedule's end, a flat LR is the lr cause it shows (a vanished
    # gradient otherwise).
    lr_floor = cause == "lr-or-grad-zero" and at_floor[0] < at_floor[1]
    window = at_floor if lr_floor else running
    first = int(round(rng.uniform(window[0], max(window)), -1))
    last = first if cause == "job-not-stepping" else first + advance

    def norm() -> float:
        if cause == "lr-or-grad-zero" and not lr_floor:
            return _sig(10 ** rng.uniform(-8, -6))
        return _sig(rng.uniform(0.15, 1.2))

    zero_rank = int(rng.integers(ranks)) if cause == "rank-sending-zeros" else None

    def rank_norms(total: float) -> dict:
        # Each rank holds a slice of the layers: the squares of the rank norms add up to the global one.
        # A zero rank's weights get no gradient but it still passes gradients back, so the others stay healthy.
        weights = rng.uniform(0.5, 1.5, ranks)
        if zero_rank is not None:
            weights[zero_rank] = 0
        shares = np.sqrt(weights / weights.sum())
        return {f"grad norm, rank {r}": total if np.isinf(total) else _sig(total * share)
                for r, share in enumerate(shares)}

    def reading(step: int, loss: float, scale: int, skipped: int) -> dict:
        total = norm()
        return {"step": step, "loss": loss, "grad norm": total, "loss scale": scale, "skipped steps": skipped,
                **rank_norms(total)}

    loss = round(rng.uniform(1.9, 2.8), 3)
    # A dynamic scaler at its ceiling doubles after every clean growth interval (PyTorch's GradScaler: 2,000
    # steps; Megatron's: 1,000) and the next overflow halves it back: a run hundreds of thousands of steps in has
    # skipped about one step per interval, hundreds in all, not a handful.
    regrown = first // GROWTH_INTERVAL + int(rng.integers(0, 40))
    if cause == "loss-scale-collapsed":
        # The scale fell all the way to 1 before 09:00 and sits there: every step since has overflowed.
        exponent, skipped = 0, scale_power + regrown + int(rng.integers(5, 200))
    else:
        exponent = int(rng.integers(10, min(scale_power, 17)))
        skipped = scale_power - exponent + regrown
    at_nine = reading(first, loss, 2**exponent, skipped)
    if cause == "job-not-stepping":
        at_eleven = dict(at_nine)  # nothing new was logged: every value is the 09:00 one
    elif cause == "loss-scale-collapsed":
        # Every step skipped, the scale stuck at 1; a skipped step logs no grad norm, so the norms are
        # still those of the last step that updated, before 09:00.
        at_eleven = {**at_nine, "step": last, "skipped steps": skipped + advance}
    else:
        # A healthy scaler moves a notch at most in two hours: halved by one overflow, or doubled after
        # a clean stretch of a thousand steps or more.
        change = int(rng.integers(-1, 1 + (advance >= 1000)))
        at_eleven = reading(last, round(loss - rng.uniform(0, 0.004), 3), 2 ** (exponent + change),
                            skipped + (change < 0))
    return [{"signal": name, "09:00": at_nine[name], "11:00": at_eleven[name]} for name in at_nine]


@generator("plateau_reading")
def plateau_reading(rng: np.random.Generator, incident: list[dict], signal: str, at: str):
    """One reading of the incident's log ("rank grad norms": the list of every rank's), no randomness."""
    rows = {row["signal"]: row[at] for row in incident}
    if signal == "rank grad norms":
        return [value for name, value in rows.items() if name.startswith("grad norm, rank")]
    return rows[signal]


# --- spec-decode-exactness: one position's distributions, and greedy positions' logit gaps -------

_SPEC_TOKENS = ("the", "a", "this", "its", "our")


def _rounded_distribution(logits: np.ndarray) -> list[float]:
    """softmax, rounded to 3 decimals, summing to exactly 1 (the rounding lands on the largest)."""
    weights = np.exp(logits - logits.max())
    probs = [round(float(v), 3) for v in weights / weights.sum()]
    top = int(np.argmax(probs))
    probs[top] = round(1 - sum(v for i, v in enumerate(probs) if i != top), 3)
    return [max(v, 0.001) if i != top else v for i, v in enumerate(probs)]


@generator("spec_position")
def spec_position(rng: np.random.Generator, draft_noise: float, target_fp8_noise: float,
                  draft_fp8_noise: float) -> list[dict]:
    """Next-token distributions at one position over five candidate tokens: the bf16 target, its
    drafter (the target's logits plus noise of `draft_noise`), and both again with FP8 weights
    (logits perturbed by `target_fp8_noise` and `draft_fp8_noise`: weight quantization moves a large
    target's distribution less than a small drafter's). Every column sums to exactly 1 at three decimals."""
    while True:
        target = np.sort(rng.normal(0, 1.5, len(_SPEC_TOKENS)))[::-1]
        draft = target + rng.normal(0, draft_noise, len(target))
        columns = [_rounded_distribution(x) for x in (
            target, draft, target + rng.normal(0, target_fp8_noise, len(target)),
            draft + rng.normal(0, draft_fp8_noise, len(target)))]
        if all(abs(sum(col) - 1) < 1e-9 and min(col) > 0 for col in columns):
            break
    names = ("p, bf16 target", "q, draft", "p, FP8 target", "q, FP8 draft")
    return [{"token": token, **{name: col[i] for name, col in zip(names, columns)}}
            for i, token in enumerate(_SPEC_TOKENS)]


@generator("spec_row")
def spec_row(rng: np.random.Generator, table: list[dict], row: int) -> list[float]:
    """One token's four probabilities from spec_position's table, in its column order (no randomness)."""
    return [value for name, value in table[int(row)].items() if name != "token"]


@generator("greedy_gaps")
def greedy_gaps(rng: np.random.Generator, positions: int, low: float, high: float) -> list[float]:
    """The FP8 target's gap between its top two logits at `positions` greedy positions, log-uniform."""
    return [round(float(g), 3) for g in np.exp(rng.uniform(np.log(low), np.log(high), int(positions)))]


# --- cost-audit-rollout: a cost ledger of candidate changes against a baseline --------------

# Each change's effect on the baseline, as (price, output tokens/s per GPU, p99 TPOT) multipliers drawn
# uniformly, and the spread of its quality delta: the ranges real changes of this kind show. Prices: the
# baseline H100 SXM at $2.5-4 and the A100 at 0.32-0.5 of it ($0.80-2.00) sit inside the Mercatus index
# (May 2026: H100 $1.99-5.00, A100 $0.80-3.00 a GPU-hour); the A100 decodes at 0.5-0.65 of the H100's
# tokens/s with steps 1.4-2.2x as long (HBM 2.0 against 3.35 TB/s, 0.61), so in a good share of weeks it
# tops the ledger on price and misses the SLO. Changes that
# keep the model's math (the GPU, the kernel, a larger batch whose batch-variant kernels only reorder sums,
# speculative decoding, which is lossless against its target) get eval noise only, None below: within the
# question's stated noise either way; fp8 changes the math and may move quality for real.
LEDGER_CHANGES = {
    "A100s instead of H100s": ((0.32, 0.5), (0.5, 0.65), (1.4, 2.2), None),
    "fp8 weights and GEMMs": ((1, 1), (1.3, 1.8), (0.6, 0.85), (-2.5, 0.2)),
    "twice the batch cap": ((1, 1), (1.3, 1.9), (1.2, 1.8), None),
    "a new decode attention kernel": ((1, 1), (1.0, 1.15), (0.85, 1.0), None),
    "speculative decoding with a draft model": ((1, 1), (0.8, 1.5), (0.5, 1.0), None),
}


@generator("cost_ledger")
def cost_ledger(rng: np.random.Generator, quality_noise: float = 0.2) -> list[dict]:
    """A week of shadow measurements: the baseline (H100, bf16) within the SLOs a question draws but its
    tightest (30 ms, where the solver redraws a baseline that misses it), then each change's
    price, output tokens/s per GPU, p99 TPOT and quality delta (eval points against the baseline; within
    ±quality_noise for a change that keeps the model's math), rounded as a dashboard shows them."""
    price = round(rng.uniform(2.5, 4.0), 2)
    tps = round(rng.uniform(800, 2500), -1)
    tpot = round(rng.uniform(24, 36), 1)
    rows = [{"change": "baseline", "$/GPU-h": price, "tokens/s per GPU": tps, "p99 TPOT (ms)": tpot,
             "quality (pts)": 0.0}]
    for change, (p, t, lat, q) in LEDGER_CHANGES.items():
        q = q or (-quality_noise, quality_noise)
        rows.append({"change": change, "$/GPU-h": round(price * rng.uniform(*p), 2),
                     "tokens/s per GPU": round(tps * rng.uniform(*t), -1),
                     "p99 TPOT (ms)": round(tpot * rng.uniform(*lat), 1),
                     "quality (pts)": round(rng.uniform(*q), 1) + 0.0})  # + 0.0: no "-0.0" on the dashboard
    return rows


@generator("ledger_row")
def ledger_row(rng: np.random.Generator, ledger: list[dict], change: str) -> str:
    """One ledger row as the parameter table shows it (no randomness): the figures the solver uses."""
    row = next(r for r in ledger if r["change"] == change)
    quality = "" if change == "baseline" else f", quality {row['quality (pts)']:+.1f} pts"
    return (f"${row['$/GPU-h']:.2f}/GPU-h, {row['tokens/s per GPU']:,.0f} tokens/s per GPU, "
            f"p99 TPOT {row['p99 TPOT (ms)']:.1f} ms{quality}")


# --- fp8-attention-quant-points: the row max the interviewer states --------------------------

@generator("gaussian_row_max")
def gaussian_row_max(rng: np.random.Generator, tokens: int, spread: float) -> float:
    """The expected largest of `tokens` Gaussian scores of spread `spread`, in nats above their mean: the mean of
    the Gumbel limit, √(2 ln T) less (ln ln T + ln 4π − 2γ)/(2√(2 ln T)), times the spread; three significant
    figures, as the interviewer says it. Nothing is drawn: the figure follows from the two it is given."""
    z0 = np.sqrt(2 * np.log(tokens))
    return _sig(float(spread * (z0 - (np.log(np.log(tokens)) + np.log(4 * np.pi) - 2 * np.euler_gamma) / (2 * z0))))


# --- moe-dispatch-bytes: how a model's router spreads a token's experts over nodes -----------

@lru_cache(maxsize=1)
def _shipped_catalog():  # noqa: ANN202 - a Catalog, imported late: numpy-only callers never load the data
    from solvers.data import load_catalog

    return load_catalog()


@generator("moe_routing")
def moe_routing(rng: np.random.Generator, model: str) -> str:
    """The routing a model's config gives, as the interviewer says it (no randomness): DeepSeek-V3's expert
    groups (a token's experts within groups_per_token of expert_groups), or none (any expert, on any node). The
    figures are the catalogue's, so the words and the solver cannot disagree."""
    entry = _shipped_catalog().get("models", model)
    if entry.get("expert_groups"):
        return (f"a token's {entry.experts_per_token} in at most {entry.groups_per_token} of {entry.expert_groups} "
                "groups, whole groups a node")
    return "no expert groups: any node"
