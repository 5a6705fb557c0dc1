"""Checks for the questions on the shared step-time model: chunked-prefill-budget,
coupled-slo-admission, decode-loop-overlap, long-reply-batching, roofline-model-breaks.

Each is recomputed here in plain Python from the catalogue records (the model's defaults:
60% of peak compute, 80% of HBM bandwidth, 2 ms per step), independently of sympy."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError, sweep
from solvers.formulas.common import GPU_MEMORY_UTILIZATION
from solvers.interview import stage_run

ETA_C, ETA_BW, OVERHEAD = 0.6, 0.8, 2e-3
ALPHA = 10e-6  # the conventions card: one all-reduce's latency inside an NVLink domain
SEEDS = range(120)  # for the properties every draw must have


class Group:
    """A TP group's figures, by hand."""

    def __init__(self, model, gpu, tp, eta_bw=ETA_BW):
        self.N = model.params_b * 1e9
        self.kv = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
        self.A = 4 * model.layers * model.heads * model.head_dim
        self.tp, self.gpu, self.model = tp, gpu, model
        self.rate = tp * ETA_C * gpu.bf16_dense_tflops * 1e12
        self.bw = eta_bw * gpu.hbm_tb_s * 1e12
        self.weights = self.N * 2 / tp  # per GPU

    def flops(self, tokens, attended):
        return 2 * self.N * tokens + self.A * attended

    def time(self, tokens, attended, cached, overhead=OVERHEAD):
        return max((self.weights + self.kv * cached) / self.bw, self.flops(tokens, attended) / self.rate) + overhead

    def allreduce(self, tokens, alpha=ALPHA):
        """Two ring all-reduces per layer of the tokens' bf16 activations over NVLink (0 at TP 1)."""
        if self.tp == 1:
            return 0.0
        link = self.gpu.nvlink_gb_s * 1e9 / 2
        return 2 * self.model.layers * (alpha + 2 * (self.tp - 1) / self.tp * tokens * self.model.hidden * 2 / link)


def _group(solution, eta_bw=ETA_BW):
    return Group(solution.param("model").value, solution.param("gpu").value, solution.param("tp").value, eta_bw)


def _value(solution, name):
    return solution.param(name).value


def _draws(variant, qid):
    return [variant(f"{qid}@{seed}") for seed in SEEDS]


def _fits(g, cached_tokens):
    return g.weights + g.kv * cached_tokens <= g.gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_small_models_are_not_split_many_ways(variant, qid):
    """An 8B model on TP 4 or 8 gave 0.3 ms steps (decode-loop-overlap) and 90K-token chunks."""
    for solution in _draws(variant, qid):
        if _value(solution, "model").params_b < 20:
            assert _value(solution, "tp") <= 2
    with pytest.raises(VariantError, match="not served over 8 GPUs"):
        variant(f"{qid}@default+model=llama-3-8b+tp=8")


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_an_xgmi_ring_spans_all_eight_gpus(variant, qid):
    """The all-reduce model takes half the xGMI aggregate as the link, which only a ring over all eight
    MI300X reaches (each GPU has one link to each peer): TP 2 and 4 on MI300X are not drawn."""
    for solution in _draws(variant, qid)[:60]:
        if _value(solution, "gpu").vendor == "AMD":
            assert _value(solution, "tp") in (1, 8)
    with pytest.raises(VariantError, match="xGMI"):
        variant(f"{qid}@default+gpu=mi300x+tp=2")


@pytest.mark.parametrize("qid", ["chunked-prefill-budget", "coupled-slo-admission", "decode-loop-overlap",
                                 "long-reply-batching", "roofline-model-breaks"])
def test_default_chart_crosses_the_regime_boundary(variant, catalog, qid):
    """A chart that stays on one side, or plots a flat line, teaches nothing (long-reply-batching's first
    chart, per-user speed against reply length, was flat at ~35 tokens/s)."""
    solution = variant(f"{qid}@default")
    curve = sweep(solution, catalog, *solution.question.chart)
    assert len({point.regime for point in curve}) >= 2
    assert len({round(point.y, 9) for point in curve}) >= 3


# --- chunked-prefill-budget ----------------------------------------------------------------


def chunk_steps(solution, chunk):
    """The chunked prefill step by step: each chunk's (read time, math time, all-reduces), its math
    attending to the chunks before it."""
    g = _group(solution)
    B, S, P = (_value(solution, n) for n in ("batch", "context", "prompt"))
    steps, done = [], 0
    while done < P:
        c = min(chunk, P - done)
        steps.append(((g.weights + g.kv * B * S) / g.bw, g.flops(B + c, B * S + c * done + c**2 / 2) / g.rate,
                      g.allreduce(B + c)))
        done += c
    return steps


def chunked_ttft(solution, chunk):
    return sum(max(read, work) + OVERHEAD + comm for read, work, comm in chunk_steps(solution, chunk))


def chunked_by_hand(solution):
    g = _group(solution)
    B, S, P = (_value(solution, n) for n in ("batch", "context", "prompt"))
    tpot, ttft_target = _value(solution, "tpot"), _value(solution, "ttft")
    per_token = g.allreduce(1) - g.allreduce(0)
    fixed = OVERHEAD + g.allreduce(B) + g.flops(B, B * S) / g.rate
    chunk = math.floor((tpot - fixed) / ((2 * g.N + g.A * P) / g.rate + per_token))
    ttft, ttft_half = chunked_ttft(solution, chunk), chunked_ttft(solution, chunk // 2)
    remedies = {"the TPOT-capped budget": ttft <= ttft_target,
                "half the TPOT-capped budget, for smoother streams": ttft_half <= ttft_target,
                "twice the TPOT-capped budget, while this prompt prefills": False,
                "none of the budgets beside the streams: the prompt needs a prefill-only replica": ttft > ttft_target}
    return {
        "decode_step": g.time(B, B * S, B * S) + g.allreduce(B),
        "stall": g.time(B + P, B * S + P**2 / 2, B * S) + g.allreduce(B + P),
        "token_budget": B + chunk,
        "ttft": ttft,
        "regime": "set-by-TPOT" if ttft <= ttft_target else "set-by-TTFT",
        "remedies": sorted(option for option, holds in remedies.items() if holds),
    }


def test_chunked_stall_counts_the_tp_all_reduces(variant):
    """The review's figure: a 20K-token prefill at TP 8 all-reduces 2 x 80 x 20,000 x 8,192 x 2 B = 52 GB,
    about +29% on the stall; the chunk's budget pays its share of them too (1,153 tokens without)."""
    solution = variant("chunked-prefill-budget@default")
    results = solution.sheet.results
    assert 2 * 80 * 20_000 * 8192 * 2 == pytest.approx(52e9, rel=0.01)
    assert results["allreduce_full"] / (results["stall"] - results["allreduce_full"]) == pytest.approx(0.29, abs=0.01)
    assert results["chunk"] < 1153


def test_chunked_budget_is_within_tolerance_of_the_exact_worst_step(variant):
    """The review's ambiguity: the worst step's chunk read as its exact causal count (c tokens attending to
    P − c/2 on average) against every chunk token priced at the whole prompt, as the hint says. Draws where
    the two budgets part by more than the answer's 3% are refused, so either reading is graded right."""
    solution = variant("chunked-prefill-budget@default")
    assert "price every chunk token at the whole prompt" in " ".join(solution.question.stages[1].hints)
    for solution in _draws(variant, "chunked-prefill-budget"):
        g = _group(solution)
        B, S, P, tpot = (_value(solution, n) for n in ("batch", "context", "prompt", "tpot"))
        fixed = OVERHEAD + g.allreduce(B) + g.flops(B, B * S) / g.rate
        per_token = g.allreduce(1) - g.allreduce(0)
        exact = max(c for c in range(1, int(P)) if fixed + c * per_token
                    + (2 * g.N * c + g.A * c * (P - c / 2)) / g.rate <= tpot)
        assert B + exact <= solution.expected["token_budget"] * 1.03


@pytest.mark.parametrize("seed", range(15))
def test_chunked_matches_plain_arithmetic(variant, seed):
    solution = variant(f"chunked-prefill-budget@{seed}")
    for key, value in chunked_by_hand(solution).items():
        expected = solution.expected[key]
        if isinstance(value, list):
            assert sorted(expected) == value, key
        else:
            assert expected == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def test_chunked_ttft_is_its_chunks_step_by_step(variant):
    """key-check-2 (@103 then: 0.1033 s, correct 0.1143 s): every chunk's step was priced by its FLOPs alone,
    though a short last chunk still reads every weight and the streams' KV. Over every draw the key is the
    step-by-step simulation on both sides of the roofline, in closed form; the draws include last chunks that
    wait on their reads, and the question file pins one (default+prompt=20300: a 14-token last chunk)."""
    read_bound = 0
    for solution in _draws(variant, "chunked-prefill-budget"):
        assert solution.expected["ttft"] == pytest.approx(chunked_by_hand(solution)["ttft"], rel=1e-9)
        *full, (read, work, _) = chunk_steps(solution, solution.sheet.results["chunk"])
        read_bound += read > work
        assert solution.sheet.results["read_bound_full_chunks"] == sum(r > w for r, w, _ in full)
    assert read_bound >= 10


def test_chunked_draws_are_not_degenerate(variant):
    """Every draw needs chunking (one unchunked step breaks the TPOT target, the chunk is smaller than the
    prompt), stays within the model's context, and keeps a budget a server would configure."""
    for solution in _draws(variant, "chunked-prefill-budget"):
        expected, prompt = solution.expected, _value(solution, "prompt")
        assert expected["stall"] > _value(solution, "tpot")
        assert solution.sheet.results["chunk"] < prompt
        assert prompt <= _value(solution, "model").max_context
        assert expected["token_budget"] <= 16_384  # vLLM's largest usual max_num_batched_tokens
    with pytest.raises(VariantError, match="serves at most"):
        variant("chunked-prefill-budget@default+model=qwen2.5-72b+prompt=40000")


def test_chunked_ttft_is_not_n_tpot_steps(variant):
    """Earlier chunks attend to less of the prompt than the last: TTFT is below n x TPOT (1.15 s at the
    default), a slip the key names."""
    solution = variant("chunked-prefill-budget@default")
    assert solution.expected["ttft"] < solution.sheet.results["chunks"] * _value(solution, "tpot") * 0.9
    assert any("chunks × TPOT" in slip.label for slip in solution.sheet.slips["ttft"])


def test_chunked_ttft_targets_are_ones_the_step_model_can_meet(variant):
    """The review (@7 then: an 83K prompt against a 3.3 s target it takes 4.16 s to prefill alone): the bank's
    slo-scales-with-work checks the prompt at 100% of peak, the step model runs it at 60% with its attention and
    all-reduces. Every draw's TTFT target lies between the prompt's prefill alone on the group, by the step
    model, and 2.5 times it (a looser one leaves the two targets nothing to trade); a tighter override is
    refused with the reason."""
    for solution in _draws(variant, "chunked-prefill-budget"):
        g = _group(solution)
        P, ttft = _value(solution, "prompt"), _value(solution, "ttft")
        alone = g.time(P, P**2 / 2, 0) + g.allreduce(P)
        assert alone <= ttft <= 2.5 * alone
        assert not solution.sheet.results["remedies"]["twice the TPOT-capped budget, while this prompt prefills"]
    with pytest.raises(VariantError, match="shorter than the prompt's prefill alone"):
        variant("chunked-prefill-budget@default+ttft=0.9")


def test_chunked_judgement_turns_on_more_than_the_regime(variant):
    """The review: the key sets followed the regime (3 sets). Half the budget holds in some TPOT-set draws and
    fails in others: the TTFT's slack, not the regime, decides it."""
    sets = {(s.regime_name, tuple(sorted(s.expected["remedies"]))) for s in _draws(variant, "chunked-prefill-budget")}
    assert len({remedies for regime, remedies in sets if regime == "set-by-TPOT"}) == 2
    assert {regime for regime, _ in sets} == {"set-by-TPOT", "set-by-TTFT"}


def test_chunked_more_compute_names_the_scale_up_fabric(variant):
    """At TP 8 on an 8-GPU domain, "a larger TP group" would leave the node: the key says so, naming the
    fabric the GPU has (MI300X's is Infinity Fabric, not NVLink)."""
    nvidia = variant("chunked-prefill-budget@default+prompt=38000")
    assert "leave the H100 SXM NVLink domain" in nvidia.sheet.regime.other_side
    amd = variant("chunked-prefill-budget@default+gpu=mi300x+prompt=40000+ttft=1.8")
    assert "leave the MI300X Infinity Fabric domain" in amd.sheet.regime.other_side + amd.sheet.regime.summary


# --- coupled-slo-admission -----------------------------------------------------------------


def admission_by_hand(solution):
    """The chunk priced at the last chunk (every token attending to its whole prompt); throughput and
    TTFT at the mean step, in whole steps; all-reduces in every step."""
    g = _group(solution)
    B, S, L, q = (_value(solution, n) for n in ("batch", "context", "prompt", "queued"))
    tpot, ttft_target = _value(solution, "tpot"), _value(solution, "ttft")
    per_token = g.allreduce(1) - g.allreduce(0)
    fixed = OVERHEAD + g.allreduce(B) + g.flops(B, B * S) / g.rate
    chunk = math.floor((tpot - fixed) / ((2 * g.N + g.A * L) / g.rate + per_token))
    step = g.time(B + chunk, B * S + chunk * L / 2, B * S) + g.allreduce(B + chunk)
    limit = math.floor(ttft_target / step) * chunk
    backlog = (q + 1) * L
    verdict = "route-elsewhere" if backlog > limit else "admit"
    admitted = backlog <= limit
    solo = g.time(L, L**2 / 2, 0) + g.allreduce(L)
    return {"chunk": chunk, "prefill_rate": chunk / step, "backlog_limit": limit,
            "ttft": math.ceil(backlog / chunk) * step, "added_delay": L * step / chunk, "regime": verdict,
            ONE_MORE: backlog + L > limit if admitted else None,
            HALF: backlog <= math.floor(ttft_target / 2 / step) * chunk if admitted else None,
            PEER: L <= limit, REPLICA: (q + 1) * solo <= ttft_target}


def _prefill_finishes(prompts: list[int], chunk: int, start: int = 0) -> list[int]:
    """Chunked prefill, FCFS, step by step from step `start`: each step takes up to `chunk` waiting prompt tokens
    from the front of the queue (the end of one prompt and the start of the next may share a step). Returns the
    step that finishes each prompt: its first token comes out with that step."""
    finishes, queue, step = [], list(prompts), start
    while queue:
        step, room = step + 1, chunk
        while queue and room:
            taken = min(room, queue[0])
            room, queue[0] = room - taken, queue[0] - taken
            if queue[0] == 0:
                queue.pop(0)
                finishes.append(step)
    return finishes


HOLD = "held outside the engine until the backlog drains, it makes it"
ONE_MORE = "one more prompt waiting ahead of it would make it miss here"
HALF = "under half the TTFT target it would still make it here"
PEER = "on an idle peer (same decode batch, empty queue) it makes it"
REPLICA = "on a prefill-only replica of the same GPUs, behind as many waiting prompts, it makes it"


@pytest.mark.parametrize("seed", range(300))
def test_admission_backlog_by_step_simulation(variant, seed):
    """The review's wrong key: holding the request outside until the backlog drains was keyed false in every
    draw, though the drained backlog and then its own chunks often fit the TTFT target. Simulated step by step:
    the TTFT admitted now, the drain, the TTFT held, the backlog limit and the options that follow from them."""
    solution = variant(f"coupled-slo-admission@{seed}")
    results, expected = solution.sheet.results, solution.expected
    chunk, step = round(expected["chunk"]), results["step_time"]
    prompt, queued, target = round(_value(solution, "prompt")), _value(solution, "queued"), _value(solution, "ttft")
    waiting = [prompt] * queued
    now = _prefill_finishes([*waiting, prompt], chunk)[-1]
    assert expected["ttft"] == pytest.approx(now * step, rel=1e-12)
    drained = _prefill_finishes(waiting, chunk)[-1] if waiting else 0
    assert results["drain_steps"] == drained
    held = _prefill_finishes([prompt], chunk, start=drained)[-1]
    assert results["ttft_held"] == pytest.approx(held * step, rel=1e-12)
    assert results["remedies"][HOLD] == (held * step <= target)
    assert (now * step <= target) == (solution.regime_name == "admit")
    # The limit: the most backlog tokens whose last one comes out within the target, one token more does not.
    limit = round(expected["backlog_limit"])
    assert _prefill_finishes([limit], chunk)[-1] * step <= target < _prefill_finishes([limit + 1], chunk)[-1] * step


@pytest.mark.parametrize("seed", range(20))
def test_admission_added_delay_is_the_mean_over_later_arrivals(variant, seed):
    """The delay every later arrival pays, simulated: a later prompt finishes floor or ceil(prompt / chunk) steps
    later for the new one ahead of it, as it falls in a chunk; over every place it can fall (a whole chunk of
    lengths), the mean is prompt / prefill rate, the key (the prompt says "mean delay")."""
    solution = variant(f"coupled-slo-admission@{seed}")
    chunk, step = round(solution.expected["chunk"]), solution.sheet.results["step_time"]
    prompt, queued = round(_value(solution, "prompt")), _value(solution, "queued")
    delays = []
    for later in range(prompt, prompt + chunk):  # one chunk's worth of lengths: every place it can end in a chunk
        without = _prefill_finishes([prompt] * queued + [later], chunk)[-1]
        with_it = _prefill_finishes([prompt] * (queued + 1) + [later], chunk)[-1]
        delays.append(with_it - without)
    assert set(delays) <= {prompt // chunk, -(-prompt // chunk)}
    assert sum(delays) / chunk * step == pytest.approx(solution.expected["added_delay"], rel=1e-12)


def test_admission_ttft_targets_are_ones_the_step_model_can_meet(variant):
    """The review (@20 then: a 21K-token prompt against a 0.36 s target, 0.34 s at datasheet peak): the bank's
    slo-scales-with-work checks the prompt at 100% of peak; the step model runs it at 60% with its attention and
    all-reduces. No target is shorter than the prompt's prefill alone on the group by the step model, so a
    prefill-only replica is always a way to make it (the select's one declared fact); a target between the two
    floors is refused with the step model's reason. (A prefill-only replica behind the same queue is an
    option whose truth varies: the queue times the prompt's one step.)"""
    for solution in _draws(variant, "coupled-slo-admission"):
        g = _group(solution)
        L = _value(solution, "prompt")
        assert g.time(L, L**2 / 2, 0) + g.allreduce(L) <= _value(solution, "ttft")
    with pytest.raises(VariantError, match="slo-scales-with-work"):
        variant("coupled-slo-admission@default+prompt=39000+ttft=0.25")
    with pytest.raises(VariantError, match="shorter than the prompt's prefill alone"):
        variant("coupled-slo-admission@default+ttft=0.1")  # 0.071 s at peak, 0.168 s by the step model


def test_admission_judgement_turns_on_more_than_the_verdict(variant):
    """The review: "let it overtake" held in 167/195 listings, its cost to the prompts it passes left out. The
    select now asks where the request makes it and how much room the replica has left (one more waiting prompt,
    half the target), which splits both verdicts; the cost of admitting it is graded on its own (added_delay),
    and the key says overtaking moves it onto the prompts passed. The interviewer reading: the room options were
    graded where they could not flip (it missed already): they are listed only when it is admitted."""
    sets = {}
    for solution in _draws(variant, "coupled-slo-admission"):
        sets.setdefault(solution.regime_name, set()).add(tuple(sorted(solution.expected["remedies"])))
        listed = {option for option, holds in solution.sheet.results["remedies"].items() if holds is not None}
        assert ({ONE_MORE, HALF} <= listed) == (solution.regime_name == "admit")
    assert set(sets) == {"admit", "route-elsewhere"}
    assert all(len(keys) >= 2 for keys in sets.values())
    assert "overtake" in variant("coupled-slo-admission@default").sheet.regime.summary


def test_admission_no_step_breaks_the_tpot_target(variant):
    """Sized for the mean token, the step carrying a prompt's last chunk overshot TPOT (median 1.12x):
    recompute that step by hand, every chunk token attending to the whole prompt."""
    for solution in _draws(variant, "coupled-slo-admission"):
        g = _group(solution)
        B, S, L = (_value(solution, n) for n in ("batch", "context", "prompt"))
        chunk = solution.expected["chunk"]
        assert g.time(B + chunk, B * S + chunk * L, B * S) <= _value(solution, "tpot") * (1 + 1e-12)


def test_admission_ttft_counts_whole_steps(variant):
    """Backlog / rate gave a TTFT of a fraction of a step when the backlog fit one chunk (1.8 ms against a
    4.3 ms decode-only step): the key is a whole number of steps, never less than one."""
    for solution in _draws(variant, "coupled-slo-admission"):
        ttft, step = solution.expected["ttft"], solution.sheet.results["step_time"]
        assert ttft >= step
        assert ttft / step == pytest.approx(round(ttft / step), abs=1e-9)


def test_admission_draws_fit_and_stay_in_context(variant):
    """The backlog's KV (the waiting prompts and the new one) must fit beside the running batch, and each prompt
    within the model's context."""
    for solution in _draws(variant, "coupled-slo-admission"):
        B, S, L, q = (_value(solution, n) for n in ("batch", "context", "prompt", "queued"))
        assert _fits(_group(solution), B * S + (q + 1) * L)
        assert L <= _value(solution, "model").max_context
    # 8 x H100 (81,559 MiB each) hold 1,448,516 tokens of KV beside the weights: 100 x 14,000 and a 40,000-token
    # prompt fit; 50,000 do not.
    variant("coupled-slo-admission@default+batch=100+context=14000+prompt=40000+queued=0+ttft=2.5")
    with pytest.raises(VariantError, match="do not fit"):
        variant("coupled-slo-admission@default+batch=100+context=14000+prompt=50000+queued=0+ttft=2.5")


def test_admission_prompt_reads_well_at_zero_and_one(variant, catalog):
    for queued in (0, 1):
        say = stage_run(variant(f"coupled-slo-admission@default+queued={queued}"), catalog, 1).say
        assert f"with {queued} waiting ahead of it" in say and "1 requests" not in say


@pytest.mark.parametrize("seed", range(15))
def test_admission_matches_plain_arithmetic(variant, seed):
    solution = variant(f"coupled-slo-admission@{seed}")
    for key, value in admission_by_hand(solution).items():
        if isinstance(value, bool) or value is None:
            assert solution.sheet.results["remedies"][key] == value, key
        else:
            assert solution.expected[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


# --- decode-loop-overlap -------------------------------------------------------------------


def overlap_by_hand(solution):
    g = _group(solution)
    B, S, reply = (_value(solution, n) for n in ("batch", "context", "reply"))
    gpu = g.time(B, B * S, B * S, overhead=0) + g.allreduce(B)
    cpu = _value(solution, "cpu_step") + B * _value(solution, "cpu_request")
    return {
        "gpu_time": gpu,
        "cpu_time": cpu,
        "idle": cpu / (cpu + gpu),
        "waste": 1 / (reply + 1),
        "throughput_overlap": B / max(gpu, cpu) * reply / (reply + 1),
        "regime": "CPU-bound" if cpu > gpu else "GPU-bound",
    }


def test_overlap_gain_bounded_by_vllm_idle_share(variant):
    """vLLM's v0.6.0 profile of Llama 3 8B on one H100 found the GPU busy only 38% of the time.
    Overlap turns a sum into a max, so it can win at most 1 / max(share): with the CPU at 62%,
    no more than 1/0.62 = 1.61x; in general the gain never exceeds 2x."""
    for seed in range(20):
        sheet = variant(f"decode-loop-overlap@{seed}").sheet
        idle, gain = sheet.results["idle"], sheet.results["gain"]
        assert gain <= 1 / max(idle, 1 - idle) + 1e-9
        assert gain <= 2
    assert 1 / max(0.62, 0.38) == pytest.approx(1.61, abs=0.01)


@pytest.mark.parametrize("seed", range(15))
def test_overlap_matches_plain_arithmetic(variant, seed):
    solution = variant(f"decode-loop-overlap@{seed}")
    for key, value in overlap_by_hand(solution).items():
        found = solution.expected.get(key, solution.sheet.results[key])
        assert found == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def test_overlap_waste_is_for_replies_that_stop_on_their_own(variant, catalog):
    """vLLM skips the extra step for a reply cut at max_tokens: the interviewer says replies stop at EOS or a
    stop string."""
    say = stage_run(variant("decode-loop-overlap@default"), catalog, 1).say
    assert "stop at EOS or a stop string" in say


def test_overlap_draws_sit_clear_of_the_boundary(variant):
    """The review's hairline push (@7 then: CPU 5.6 -> 6 ms flipped a GPU-bound loop): no draw has the two sides
    within 10% of each other, nor one side past 3 times the other (no push in range crosses back from there)."""
    for solution in _draws(variant, "decode-loop-overlap"):
        ratio = solution.expected["cpu_time"] / solution.expected["gpu_time"]
        assert not 0.9 < ratio < 1.1
        assert 1 / 3 <= ratio <= 3


def test_overlap_who_pays_is_no_fixed_pattern(variant):
    """The review: the "pays" key was always one of each pair (one more step / waits out the CPU, and CPU waits /
    GPU waits), learnable as a pattern. The extra step's cost and overlap's gain are now weighed against a line,
    so the key set turns on the reply length and the two sides' ratio, not on the request kind alone."""
    by_kind = {}
    for solution in _draws(variant, "decode-loop-overlap"):
        by_kind.setdefault(_value(solution, "request"), set()).add(tuple(sorted(solution.expected["pays"])))
    assert all(len(sets) >= 3 for sets in by_kind.values())


def test_overlap_grades_where_the_tokens_live_and_who_pays(variant):
    """The review: where the placeholder tokens live and which request pays were assumptions only. Now graded
    (both requests' right sets are pinned in the question file); the constrained request's reason quotes the
    serial step it waits out."""
    constrained = variant("decode-loop-overlap@default+request=grammar-constrained")
    assert "14.32 ms per token" in constrained.sheet.reasons["pays"][
        "it waits out the CPU's work on each of its tokens (the serial step)"]


def test_overlap_placement_turns_on_the_two_sides(variant):
    """The interviewer reading: where the token is was fixed by one word (the request kind), two key sets. A
    free-text token's placeholder is filled before step n+1 ends exactly when the CPU's step fits in the GPU's,
    so the key now turns on the variant's times too."""
    keys = set()
    for solution in _draws(variant, "decode-loop-overlap"):
        placed = solution.sheet.results["placeholders"]
        cpu, gpu = solution.expected["cpu_time"], solution.expected["gpu_time"]
        free = _value(solution, "request") == "free-text"
        assert placed["on the GPU, feeding step n+1; the CPU fills its placeholder before step n+1 ends"] == (
            free and cpu <= gpu)
        assert placed["on the GPU, feeding step n+1; its placeholder on the CPU is still open when step n+1 ends"] == (
            free and cpu > gpu)
        keys.add(tuple(sorted(solution.expected["placeholders"])))
    assert len(keys) == 3


def test_overlap_gpu_step_carries_the_all_reduces(variant):
    """At TP 8 a 70B decode step pays 160 all-reduce latencies (1.6 ms) besides its kernels."""
    solution = variant("decode-loop-overlap@default+model=llama-3-70b+tp=8")
    assert solution.sheet.results["allreduce_gpu"] == pytest.approx(160 * (10e-6 + 1.75 * 64 * 16384 / 450e9))


# --- long-reply-batching -------------------------------------------------------------------


def long_reply_by_hand(solution):
    g = _group(solution)
    prompt, reply, speed = (_value(solution, n) for n in ("prompt", "reply", "speed"))
    pool = g.gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION - g.weights
    mean = prompt + reply / 2
    batch = math.floor(math.floor(pool / g.kv) / mean)
    room = 1 / speed - OVERHEAD - g.allreduce(0)
    per_token = g.allreduce(1) - g.allreduce(0)
    by_memory = (room - g.weights / g.bw) / (g.kv * mean / g.bw + per_token)
    by_compute = room / ((2 * g.N + g.A * mean) / g.rate + per_token)
    allowed = math.floor(min(by_memory, by_compute))
    step = g.time(batch, batch * mean, batch * mean) + g.allreduce(batch)
    swap = 2 * mean * g.kv / _value(solution, "host_link")
    return {
        "pool_batch": batch,
        "per_user_speed": 1 / step,
        "slo_batch": allowed,
        "recompute_time": g.time(mean, mean**2 / 2, 0) + g.allreduce(mean),
        "swap_time": swap,
        "swap_hides": "fits-in-a-step" if swap <= step else "outlasts-a-step",
        "regime": "pool-limited" if batch <= allowed else "SLO-limited",
        "batch": min(batch, allowed),
    }


def full_read_speed(solution):
    """Per-user speed of a step that reads all of a GPU's usable HBM: the pool's batch fills the pool,
    so each step reads the weights plus the whole pool, whatever the reply length; the all-reduces add
    their latencies and the batch's activations."""
    g, batch = _group(solution), solution.expected["pool_batch"]
    return 1 / (GPU_MEMORY_UTILIZATION * g.gpu.hbm_mib * 2**20 / g.bw + OVERHEAD + g.allreduce(batch))


def test_long_reply_grades_the_speed_cap_apart_from_the_pool(variant):
    """The review's ambiguity: "the batch cap that keeps every user at the target" was keyed at the pool's
    99 when any max_num_seqs from 99 up to the speed cap runs the same batch. The speed cap is now its own
    answer, past the pool's batch at a 29 tokens/s target, and the regime says which of the two binds. The batch
    graded beside them is the one that runs, the pool's, not a max_num_seqs any of 113 to 121 would set."""
    solution = variant("long-reply-batching@default+speed=29")
    assert solution.expected["batch"] == solution.expected["pool_batch"] < solution.expected["slo_batch"]
    assert "from 113 to 121" in solution.sheet.regime.summary


def test_long_reply_all_reduces_are_in_the_step(variant):
    """TP 4 pays 2 x 80 all-reduces per decode step: 2.6 ms of a 33 ms step at the default; at TP 1 none."""
    solution = variant("long-reply-batching@default")
    assert solution.sheet.results["allreduce_batch"] == pytest.approx(160 * (10e-6 + 1.5 * 113 * 16384 / 450e9))
    single = variant("long-reply-batching@default+model=llama-3-8b+tp=1")
    assert "allreduce_batch" not in single.sheet.results


@pytest.mark.parametrize("reply", [2000, 8000, 32000])
def test_long_reply_speed_at_a_full_pool_ignores_the_reply(variant, reply):
    """The invariant the first version missed: at the pool's batch each step reads ~all usable HBM, so
    every reply length gives 28-31 tokens/s on 4 x H100 (0.9 x 85.52 GB / (0.8 x 3.35 TB/s) + 2 ms + 1.6 ms
    of all-reduce latency = 32.3 ms, plus the batch's all-reduce bytes: shorter replies, bigger batch). The pool's
    batch is floored: at 32,000-token replies its 30 requests fill 97% of the pool, so the speed sits up to 2%
    above the full read."""
    solution = variant(f"long-reply-batching@default+reply={reply}")
    assert solution.expected["per_user_speed"] == pytest.approx(full_read_speed(solution), rel=0.02)
    assert 28 < solution.expected["per_user_speed"] < 31.5
    assert solution.sheet.results["full_read_speed"] == pytest.approx(30.94, rel=1e-3)


def test_long_reply_regime_agrees_with_the_full_pool_criterion(variant):
    """Across many draws: pool-limited exactly when the target is at most the speed at the pool's batch;
    when that step is memory-bound its speed is the full-read closed form (within the pool's rounding),
    and away from that line the closed form alone calls the regime."""
    sides = set()
    for solution in _draws(variant, "long-reply-batching"):
        expected, target = solution.expected, _value(solution, "speed")
        speed, closed = expected["per_user_speed"], full_read_speed(solution)
        assert (expected["regime"] == "pool-limited") == (target <= speed)
        sides.add(expected["regime"])
        results = solution.sheet.results
        memory_bound = results["bytes_batch"] / (ETA_BW * _value(solution, "gpu").hbm_tb_s * 1e12) >= (
            results["flops_batch"] / (_value(solution, "tp") * ETA_C * _value(solution, "gpu").bf16_dense_tflops
                                      * 1e12))
        if memory_bound:
            assert closed <= speed <= closed * (1 + 1.01 / expected["pool_batch"])
            if abs(target / closed - 1) > 1 / expected["pool_batch"] + 0.01:
                assert (expected["regime"] == "pool-limited") == (target <= closed)
        else:
            assert speed < closed
    assert sides == {"pool-limited", "SLO-limited"}


def test_long_reply_push_moves_the_target_across_from_either_side(variant, catalog):
    """The interview's push is one turn with a declared move per side: an SLO-limited draw gets an overnight
    target, a pool-limited one a snappier target; only the stage for the draw's side runs, and it crosses.
    Where realism refuses the snappier target (a batch of one already misses it: 70B at TP 1 on B200), the
    engine's push stands in with its own words; that stays rare. Nothing but the target moves."""
    declared = 0
    seeds = range(1, 61)
    for seed in seeds:
        solution = variant(f"long-reply-batching@{seed}")
        side, stages = solution.expected["regime"], solution.question.stages
        pushes = [i for i, stage in enumerate(stages) if stage.push]
        assert {stages[i].when for i in pushes} == {"pool-limited", "SLO-limited"}
        runs = [(i, run) for i in pushes if (run := stage_run(solution, catalog, i)) is not None]
        assert [stages[i].when for i, _ in runs] == [side]
        (index, push), = runs
        assert push.moved == ("speed",) and push.ask == ("regime", "batch") and push.regime != side
        # What the move changes: the batch that runs, the pool's once the target is loose, the speed cap's once tight.
        after = push.solution.expected
        assert after["batch"] == (after["pool_batch"] if side == "SLO-limited" else after["slo_batch"])
        assert after["batch"] != solution.expected["batch"]
        target, pushed_target = _value(solution, "speed"), _value(push.solution, "speed")
        # Tighter target, smaller speed cap; the pool's batch is the target's business only through the regime.
        assert (pushed_target > target) == (side == "pool-limited")
        assert (push.solution.expected["slo_batch"] <= solution.expected["slo_batch"]) == (side == "pool-limited")
        assert push.solution.expected["pool_batch"] == solution.expected["pool_batch"]
        opening_words = stages[index].say.split("{")[0]
        if str(push.solution.param("speed").raw) == dict(stages[index].set)["speed"]:
            declared += 1
            assert push.say.startswith(opening_words) and push.solution.param("speed").shown in push.say
        else:
            assert not push.say.startswith(opening_words)
    assert declared >= 0.9 * len(seeds)


def test_long_reply_swap_hides_in_a_step_or_not_as_the_draw_has_it(variant):
    """Review point 3: "which preemption is cheaper" has one key in every draw (the swap, ~20x, timed alone),
    so it decides nothing. Whether the swap out and back fits within one decode step of the full pool does
    vary: a long reply's swap (past ~9K tokens of mean footprint for 70B at TP 4) outlasts the step. It is
    asked with the preemption prices, and agrees with the two times the candidate has found."""
    solution = variant("long-reply-batching@default")
    stage = solution.question.stages[solution.question.stage_of("swap_hides")]
    assert stage.ask == ("recompute_time", "swap_time", "swap_hides")
    outcomes = set()
    for solution in _draws(variant, "long-reply-batching"):
        step, swap = 1 / solution.expected["per_user_speed"], solution.expected["swap_time"]
        assert solution.expected["swap_hides"] == ("fits-in-a-step" if swap <= step else "outlasts-a-step")
        outcomes.add(solution.expected["swap_hides"])
    assert outcomes == {"fits-in-a-step", "outlasts-a-step"}


def test_long_reply_chart_shows_the_regime_flip(variant, catalog):
    """The chart sweeps the speed target: the speed cap falls as the target tightens and crosses the pool's
    99 requests where the regime flips (the first chart, against reply length, was flat at ~35 tokens/s)."""
    solution = variant("long-reply-batching@default")
    assert solution.question.chart == ("speed", "slo_batch")
    curve = sweep(solution, catalog, "speed", "slo_batch")
    ys = [point.y for point in curve]
    assert len(set(ys)) > 5
    assert ys[0] > 99 > ys[-1]
    assert all(later <= earlier for earlier, later in zip(ys, ys[1:]))
    assert {point.regime for point in curve} == {"pool-limited", "SLO-limited"}


def test_long_reply_draws_are_not_degenerate(variant):
    """No pool of a handful of requests (70B on 2 x H100 left ~3 GB), no speed target only a handful meet (a
    strong interviewer's reading of a 70B draw at TP 2: 3 requests, the weights' read most of the step), no reply
    past the model's context. The default meets 55 tokens/s with 9 requests; at 56 only 7 would."""
    for solution in _draws(variant, "long-reply-batching"):
        assert solution.expected["pool_batch"] >= 16 and solution.expected["slo_batch"] >= 8  # the push can cross
        assert _value(solution, "prompt") + _value(solution, "reply") <= _value(solution, "model").max_context
    with pytest.raises(VariantError, match="too few requests"):
        variant("long-reply-batching@default+tp=2")
    assert variant("long-reply-batching@default+speed=55").expected["slo_batch"] == 9
    with pytest.raises(VariantError, match="only a handful"):
        variant("long-reply-batching@default+speed=56")


def test_long_reply_texts_name_the_real_levers(variant):
    regime = variant("long-reply-batching@default").sheet.regime
    assert "30.04 tokens/s" in regime.other_side and "fp8 KV" in regime.other_side
    assert "shorter replies" not in regime.other_side.lower()
    assert "max_num_seqs" in regime.summary
    assert "V1" in " ".join(variant("long-reply-batching@default").sheet.assumptions)


def test_swap_beats_recompute_by_the_fetch_ratio(variant):
    """The catalogue's recompute-vs-fetch figure: for Llama-3-70B over 50 GB/s, fetching a token's
    KV one way beats recomputing it at peak by 2N/989.4 TFLOP/s ÷ (327,680 B / 50 GB/s) = 21.8x.
    At 60% of peak and with the KV crossing twice, that is 21.8 / 0.6 / 2 = 18.2x before attention,
    the all-reduces (41 ms of a 4,500-token prefill at TP 4) and overhead, which only add to the
    recompute side."""
    fetch_wins = (2 * 70.55e9 / 989.4e12) / (327_680 / 50e9)
    assert fetch_wins == pytest.approx(21.8, abs=0.05)
    ratio = variant("long-reply-batching@default").sheet.results["recompute_over_swap"]
    assert fetch_wins / 0.6 / 2 < ratio < fetch_wins / 0.6 / 2 * 1.25


@pytest.mark.parametrize("seed", range(15))
def test_long_reply_matches_plain_arithmetic(variant, seed):
    solution = variant(f"long-reply-batching@{seed}")
    for key, value in long_reply_by_hand(solution).items():
        assert solution.expected[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def test_long_reply_pinned_seed(variant):
    """Seed 7 draws these parameters (its keys are pinned in the question file)."""
    assert [p.raw for p in variant("long-reply-batching@7").params] == [
        "llama-3-70b", "mi300x", 8, 200, 4600, 62, 12, 60, 80, 2]


# --- roofline-model-breaks -----------------------------------------------------------------


BREAKS = {"bandwidth": "kernels reaching only part of the datasheet bandwidth and peak",
          "latency": "the all-reduces' fixed latency, two calls per layer",
          "bytes": "the all-reduces' bytes over the link",
          "overhead": "the per-step overhead (scheduling, sampling, launch gaps)"}


def roofline_by_hand(solution):
    eta_bw = _value(solution, "bandwidth_eff")
    g = _group(solution, eta_bw)
    B, S = _value(solution, "batch"), _value(solution, "context")
    model, gpu, tp = g.model, g.gpu, g.tp
    moved, flops = g.weights + g.kv * B * S, g.flops(B, B * S)
    bare = max(moved / (gpu.hbm_tb_s * 1e12), flops / (tp * gpu.bf16_dense_tflops * 1e12))
    efficient = g.time(B, B * S, B * S, overhead=0)
    link = gpu.nvlink_gb_s * 1e9 / 2
    message = B * model.hidden * 2  # the batch's bf16 activations
    latencies = 2 * model.layers * _value(solution, "allreduce_latency")
    ring_bytes = 2 * model.layers * 2 * (tp - 1) / tp * message / link
    overhead = _value(solution, "overhead")
    corrected = efficient + latencies + ring_bytes + overhead
    costs = {"bandwidth": efficient - bare, "all-reduce": latencies + ring_bytes, "overhead": overhead}
    parts = {"bandwidth": efficient - bare, "latency": latencies, "bytes": ring_bytes, "overhead": overhead}
    listed = {name: cost for name, cost in parts.items() if abs(cost / corrected / 0.1 - 1) >= 0.03}
    return {
        "bare_throughput": B / bare,
        "allreduce_time": latencies + ring_bytes,
        "corrected_throughput": B / corrected,
        "dominant": max(costs, key=costs.get),
        "breaks": {BREAKS[name] for name, cost in listed.items() if cost > 0.1 * corrected},
        "listed": {BREAKS[name] for name in listed},
        "regime": "within-reach" if corrected / bare <= 2 else "off-by-a-factor",
    }


def test_roofline_default(variant):
    """70B on 8 x H100 at batch 32, 2K context: 9.99 ms in all, 1.65x the bare step (the keys are pinned in the
    question file). The default overhead was 1 ms, 9.5% of the step: on the 10% line the breaks select now
    grades, so it moved to 0.5 ms."""
    assert variant("roofline-model-breaks@default").sheet.results["ratio"] == pytest.approx(1.651, rel=1e-3)


def test_roofline_candidate_recalls_the_breaks_before_the_select(variant):
    """The review: the list of breaks the teaser scores was handed over as options, and 'catch' mirrored
    'breaks' one to one. The candidate now lists the breaks and how to catch each (a recall stage) before any
    list is shown; the select that follows grades which matter here, its right set moving with the variant,
    and no option is the same in every draw."""
    solution = variant("roofline-model-breaks@default")
    kinds = [stage.kind for stage in solution.question.stages]
    assert kinds.index("recall") < next(i for i, stage in enumerate(solution.question.stages) if "breaks" in stage.ask)
    assert "catch" not in {spec.key for spec in solution.question.answers}
    assert "all-reduce" not in solution.prompt and "overhead" not in solution.prompt
    right_sets, truths = set(), {}
    for draw in _draws(variant, "roofline-model-breaks"):
        judged = draw.sheet.results["breaks"]
        right_sets.add(frozenset(o for o, holds in judged.items() if holds))
        for option, holds in judged.items():
            truths.setdefault(option, set()).add(holds)
    assert len(right_sets) >= 5
    assert all({True, False} <= seen for seen in truths.values())


def test_roofline_push_moves_two_parameters_per_side_and_crosses(variant, catalog):
    """The key check: one fixed three-parameter push for every variant, at 9303 announcing 'retuned kernels: 85%'
    where it already was 85%. Each side's push now moves the one or two things an interviewer would (the batch and
    the engine's overhead; the overhead and the all-reduce kernel) and crosses in nine draws in ten."""
    crossed = pushed = declared = 0
    for seed in range(60):
        solution = variant(f"roofline-model-breaks@{seed}")
        run = stage_run(solution, catalog, len(solution.question.stages) - 2 +
                        (solution.expected["regime"] == "off-by-a-factor"))
        names = {name for name, _ in run.stage.set}
        assert names in ({"batch", "overhead"}, {"overhead", "allreduce_latency"})
        declared += set(run.moved) <= names  # else the engine's own push stood in for a declared one that failed
        pushed += 1
        crossed += run.regime != solution.expected["regime"]
    assert crossed >= 0.9 * pushed and declared >= 0.8 * pushed > 0


def test_roofline_calls_are_never_on_a_knife_edge(variant):
    """The choices have no tolerance: no draw within the numbers' 3% of the 2x line, and the largest correction
    leads the next by at least 3% (the first default sat 5% from 2x, its top two corrections 3.8% apart); a
    correction within 3% of the 10% line is not listed in the breaks select (test_roofline_matches_plain_arithmetic)."""
    for solution in _draws(variant, "roofline-model-breaks"):
        results = solution.sheet.results
        assert abs(results["ratio"] / 2 - 1) >= 0.03
        costs = sorted([results["bandwidth_cost"], results["allreduce_time"], _value(solution, "overhead")])
        assert costs[1] <= costs[2] * 0.97
        if _value(solution, "gpu").vendor == "AMD":
            assert _value(solution, "tp") == 8
    with pytest.raises(VariantError, match="xGMI"):
        variant("roofline-model-breaks@default+gpu=mi300x+tp=2")


def test_roofline_wording(variant):
    """The question that adds TP communication must not say it is left out; a batch of one reads well."""
    solution = variant("roofline-model-breaks@default+batch=1")
    assert not any("communication is left out" in text for text in solution.sheet.assumptions)
    assert "decodes a batch of 1 at about" in solution.prompt
    assert "small batch" not in variant("roofline-model-breaks@default").sheet.regime.other_side


def test_roofline_bare_step_is_the_weight_read_at_batch_one(variant):
    """Batch 1, short context: the bare step is the weights over TP × bandwidth (weight-read-intensity's
    42.1 ms for 70B on one H100, spread over 8 GPUs)."""
    solution = variant("roofline-model-breaks@default+batch=1+context=500")
    # 500 tokens of KV add 0.1% to the 17.6 GB of weights each GPU reads.
    assert solution.sheet.results["bare_time"] == pytest.approx(141.1e9 / 8 / 3.35e12, rel=2e-3)


def test_roofline_fixed_costs_swamp_a_short_step(variant):
    """Llama-3-8B over 2 x H100 at batch 1: a 2.4 ms roofline step against 64 all-reduce latencies
    and 2 ms of overhead, past twice the bare estimate (pinned in the question file). (Over 8 GPUs, as this test
    first had it, the model is not served: the realism rule refuses it.)"""
    solution = variant("roofline-model-breaks@default+model=llama-3-8b+tp=2+batch=1+context=500+overhead=2")
    assert solution.sheet.results["ratio"] > 2.2


@pytest.mark.parametrize("seed", range(15))
def test_roofline_matches_plain_arithmetic(variant, seed):
    solution = variant(f"roofline-model-breaks@{seed}")
    for key, value in roofline_by_hand(solution).items():
        if key == "breaks":  # a select: the options that hold, of those the pool judged
            assert {o for o, holds in solution.sheet.results[key].items() if holds} == value
            continue
        if key == "listed":  # an option on the 10% line is judged None: never listed
            assert {o for o, holds in solution.sheet.results["breaks"].items() if holds is not None} == value
            continue
        assert solution.expected[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def test_roofline_pinned_seed(variant):
    """Seed 7 draws these parameters (its keys are pinned in the question file)."""
    assert [p.raw for p in variant("roofline-model-breaks@7").params] == [
        "llama-3-70b", "mi300x", 8, 4, 1700, 85, 5, 3.3, 60, 10, 2]


def _decode_loop(gpu: float, cpu: float, reply: int, batch: int, steps: int, overlap: bool) -> tuple[list[float], int]:
    """The decode loop step by step. Serial: the CPU processes step n's tokens and plans step n + 1, then the GPU
    runs it. Overlapped: the GPU runs step n + 1 as soon as step n's CPU planning of it is done, on step n's
    sampled ids; the CPU processes step n's tokens while it runs. A request's stop is seen only when its tokens
    are processed, so with overlap one more step was already launched for it: that token is thrown away.
    Returns when each step ends on the GPU, and the useful tokens."""
    gpu_end = cpu_end = 0.0
    ends = []
    written = [0] * batch  # tokens each slot's request has kept
    useful = 0
    for _ in range(steps):
        start = max(gpu_end, cpu_end) if not overlap else max(gpu_end, cpu_end - cpu)  # planned in the last CPU pass
        gpu_end = start + gpu
        cpu_end = max(gpu_end, cpu_end) + cpu
        ends.append(gpu_end)
        for slot in range(batch):
            if written[slot] < reply:
                written[slot] += 1
                useful += 1
            elif overlap and written[slot] == reply:  # launched before its stop was seen: a placeholder
                written[slot] += 1
            if written[slot] == reply + (1 if overlap else 0):
                written[slot] = 0  # the next request takes the slot
    return ends, useful


@pytest.mark.parametrize("seed", range(40))
def test_overlap_step_and_throughput_by_simulation(variant, seed):
    """The overlap step max(t_GPU, t_CPU) and the useful throughput B/t · L/(L + 1), against the loop simulated
    step by step over many replies; the serial loop's t_GPU + t_CPU likewise."""
    solution = variant(f"decode-loop-overlap@{seed}")
    results = solution.sheet.results
    gpu, cpu = results["gpu_time"], results["cpu_time"]
    reply, batch = round(_value(solution, "reply")), round(_value(solution, "batch"))
    steps = 20 * (reply + 1)  # whole replies in every slot, so the throughput is the steady one
    sides = ((True, "throughput_overlap", "overlap_step"), (False, "throughput_serial", "serial_step"))
    for overlap, key, step in sides:
        ends, useful = _decode_loop(gpu, cpu, reply, batch, steps, overlap)
        pace = (ends[-1] - ends[steps // 2]) / (steps - 1 - steps // 2)  # the steady pace, past the start
        assert pace == pytest.approx(results[step], rel=1e-9)
        assert useful == batch * steps * (reply / (reply + 1) if overlap else 1)  # whole replies: a placeholder each
        assert useful / (steps * pace) == pytest.approx(results[key], rel=1e-9)
