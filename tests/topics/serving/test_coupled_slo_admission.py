"""What every question on the step-time model shares: small models stay on few GPUs, xGMI rings span
the eight MI300X, the default chart crosses its boundary."""
from __future__ import annotations

import math

import pytest

from solvers.engine import VariantError
from solvers.formulas.common import GPU_MEMORY_UTILIZATION
from solvers.interview import stage_run
from tests.by_hand import by_hand_test, value_of
from tests.topics.serving.group_by_hand import OVERHEAD, draws_of, group_of


def _fits(g, cached_tokens):
    return g.weights + g.kv * cached_tokens <= g.gpu.hbm_mib * 2**20 * GPU_MEMORY_UTILIZATION


def admission_by_hand(solution):
    """The chunk priced at the last chunk (every token attending to its whole prompt); throughput and
    TTFT at the mean step, in whole steps; all-reduces in every step."""
    g = group_of(solution)
    B, S, L, q = (value_of(solution, n) for n in ("batch", "context", "prompt", "queued"))
    tpot, ttft_target = value_of(solution, "tpot"), value_of(solution, "ttft")
    per_token = g.allreduce(1) - g.allreduce(0)
    fixed = OVERHEAD + g.allreduce(B) + g.flops(B, B * S) / g.rate
    chunk = math.floor((tpot - fixed) / ((2 * g.N + g.A * L) / g.rate + per_token))
    step = g.time(B + chunk, B * S + chunk * L / 2, B * S) + g.allreduce(B + chunk)
    limit = math.floor(ttft_target / step) * chunk
    backlog = (q + 1) * L
    verdict = "route-elsewhere" if backlog > limit else "admit"
    admitted = backlog <= limit
    if admitted:
        flips, stands = backlog + L > limit, backlog <= math.floor(ttft_target / 2 / step) * chunk
    else:
        flips, stands = q >= 1 and backlog - L <= limit, backlog > math.floor(2 * ttft_target / step) * chunk
    return {"chunk": chunk, "prefill_rate": chunk / step, "backlog_limit": limit,
            "ttft": math.ceil(backlog / chunk) * step, "added_delay": L * step / chunk, "regime": verdict,
            "remedies": {FLIPS: flips, STANDS: stands, HOLD: True}}

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


HOLD = "held outside the engine until the backlog drains, its first token comes no sooner"


FLIPS = "the verdict is one waiting prompt from flipping (one more ahead, or one fewer)"


STANDS = "the verdict would stand with the TTFT target halved, and with it doubled"


@pytest.mark.parametrize("seed", range(300))
def test_admission_backlog_by_step_simulation(variant, seed):
    """The review's wrong key: holding the request outside until the backlog drains was keyed false in every
    draw, though the drained backlog and then its own chunks often fit the TTFT target. Simulated step by step:
    the TTFT admitted now, the drain, the TTFT held, the backlog limit and the options that follow from them."""
    solution = variant(f"coupled-slo-admission@{seed}")
    results, expected = solution.sheet.results, solution.expected
    chunk, step = round(expected["chunk"]), results["step_time"]
    prompt = round(value_of(solution, "prompt"))
    queued, target = value_of(solution, "queued"), value_of(solution, "ttft")
    waiting = [prompt] * queued
    now = _prefill_finishes([*waiting, prompt], chunk)[-1]
    assert expected["ttft"] == pytest.approx(now * step, rel=1e-12)
    drained = _prefill_finishes(waiting, chunk)[-1] if waiting else 0
    assert results["drain_steps"] == drained
    held = _prefill_finishes([prompt], chunk, start=drained)[-1]
    assert results["ttft_held"] == pytest.approx(held * step, rel=1e-12)
    assert held >= now and results["remedies"][HOLD] is True  # the declared fact: holding never brings it sooner
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
    prompt, queued = round(value_of(solution, "prompt")), value_of(solution, "queued")
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
    prefill-only replica is always a way to make it (the route key's fallback); a target between the two
    floors is refused with the step model's reason. (A prefill-only replica behind the same queue is an
    option whose truth varies: the queue times the prompt's one step.)"""
    for solution in draws_of(variant, "coupled-slo-admission"):
        g = group_of(solution)
        L = value_of(solution, "prompt")
        assert g.time(L, L**2 / 2, 0) + g.allreduce(L) <= value_of(solution, "ttft")
    with pytest.raises(VariantError, match="slo-scales-with-work"):
        variant("coupled-slo-admission@default+prompt=39000+ttft=0.25")
    with pytest.raises(VariantError, match="shorter than the prompt's prefill alone"):
        variant("coupled-slo-admission@default+ttft=0.1")  # 0.071 s at peak, 0.168 s by the step model


def test_admission_judgement_turns_on_more_than_the_verdict(variant):
    """The review: "let it overtake" held in 167/195 listings, its cost to the prompts it passes left out. The
    select asks how near the line the verdict is, on whichever side it fell, which splits both verdicts; the cost
    of admitting it is graded on its own (added_delay), and the key says overtaking moves it onto the prompts
    passed."""
    sets = {}
    for solution in draws_of(variant, "coupled-slo-admission"):
        sets.setdefault(solution.regime_name, set()).add(tuple(sorted(solution.expected["remedies"])))
        listed = {option for option, holds in solution.sheet.results["remedies"].items() if holds is not None}
        assert listed == {FLIPS, STANDS, HOLD}
    assert set(sets) == {"admit", "route-elsewhere"}
    assert all(len(keys) >= 2 for keys in sets.values())
    assert "overtake" in variant("coupled-slo-admission@default").sheet.regime.summary


def test_admission_reader7_no_option_restates_the_verdict(variant):
    """Reader 7 (finding 2): "held outside the engine until the backlog drains, it makes it" had the verdict's truth
    in every draw (admitted or held, the same whole steps), and "on an idle peer it makes it" held in all but one
    (in all 200 once TTFT targets start at 0.5 s); the prefill-only replica behind the same queue kept the verdict's
    truth in 196 of 200. Each option now reads the side the verdict fell on, and its truth splits on each side;
    holding is the one declared fact (never sooner); the two graded options never hold together, so every listing
    has an option that holds and one that fails."""
    truths = {}
    for solution in draws_of(variant, "coupled-slo-admission"):
        judged = solution.sheet.results["remedies"]
        assert not (judged[FLIPS] and judged[STANDS])
        for option in (FLIPS, STANDS):
            truths.setdefault((solution.regime_name, option), set()).add(judged[option])
    assert all(seen == {True, False} for seen in truths.values()), truths
    assert len(truths) == 4
    options = variant("coupled-slo-admission@default").question.answer("remedies").pool
    assert not any("it makes it" in option for option in options)


def test_admission_reader7_route_side_near_the_line(variant):
    """A routed request one waiting prompt from the line (@default+queued=8+ttft=1.7: 36,000 against 35,258, one
    fewer leaves 32,000) flips; the default (52,000 against 31,110, one fewer 48,000) does not, and doubled its
    target would hold 63,257: the verdict does not stand."""
    near = variant("coupled-slo-admission@default+queued=8+ttft=1.7")
    assert near.regime_name == "route-elsewhere" and set(near.expected["remedies"]) == {HOLD, FLIPS}
    far = variant("coupled-slo-admission@default")
    assert set(far.expected["remedies"]) == {HOLD}
    assert far.sheet.results["backlog_limit_twice"] == 63_257


def test_admission_reader7_targets_and_reality_are_ones_a_deployment_sets(variant, bank):
    """Reader 7 (finding 8 and the In practice row): a 0.3 s TTFT target for a 70B replica holds a handful of
    chunked steps; draws start at 0.5 s. The reality row chunked its prompt under a 150 ms TPOT, past the 100 ms
    the question's own comment calls the loosest anyone sets: it now uses 100 ms."""
    question = bank.questions["coupled-slo-admission"]
    assert min(value_of(s, "ttft") for s in draws_of(variant, "coupled-slo-admission")) >= 0.5
    (entry,) = question.reality
    assert "tpot=100" in entry.variant and "150" not in entry.system


def test_admission_no_step_breaks_the_tpot_target(variant):
    """Sized for the mean token, the step carrying a prompt's last chunk overshot TPOT (median 1.12x):
    recompute that step by hand, every chunk token attending to the whole prompt."""
    for solution in draws_of(variant, "coupled-slo-admission"):
        g = group_of(solution)
        B, S, L = (value_of(solution, n) for n in ("batch", "context", "prompt"))
        chunk = solution.expected["chunk"]
        assert g.time(B + chunk, B * S + chunk * L, B * S) <= value_of(solution, "tpot") * (1 + 1e-12)


def test_admission_ttft_counts_whole_steps(variant):
    """Backlog / rate gave a TTFT of a fraction of a step when the backlog fit one chunk (1.8 ms against a
    4.3 ms decode-only step): the key is a whole number of steps, never less than one."""
    for solution in draws_of(variant, "coupled-slo-admission"):
        ttft, step = solution.expected["ttft"], solution.sheet.results["step_time"]
        assert ttft >= step
        assert ttft / step == pytest.approx(round(ttft / step), abs=1e-9)


def test_admission_draws_fit_and_stay_in_context(variant):
    """The backlog's KV (the waiting prompts and the new one) must fit beside the running batch, and each prompt
    within the model's context."""
    for solution in draws_of(variant, "coupled-slo-admission"):
        B, S, L, q = (value_of(solution, n) for n in ("batch", "context", "prompt", "queued"))
        assert _fits(group_of(solution), B * S + (q + 1) * L)
        assert L <= value_of(solution, "model").max_context
    # 8 x H100 (81,559 MiB each) hold 1,448,516 tokens of KV beside the weights: 100 x 14,000 and a 40,000-token
    # prompt fit; 50,000 do not.
    variant("coupled-slo-admission@default+batch=100+context=14000+prompt=40000+queued=0+ttft=2.5")
    with pytest.raises(VariantError, match="do not fit"):
        variant("coupled-slo-admission@default+batch=100+context=14000+prompt=50000+queued=0+ttft=2.5")


def test_admission_prompt_reads_well_at_zero_and_one(variant, catalog):
    for queued in (0, 1):
        say = stage_run(variant(f"coupled-slo-admission@default+queued={queued}"), catalog, 1).say
        assert f" {queued} ahead (FCFS)" in say and "1 requests" not in say


test_admission_matches_plain_arithmetic = by_hand_test("coupled-slo-admission", range(15), admission_by_hand)

def test_admission_reader7_words_say_what_the_keys_count(variant, catalog):
    """Reader 7: "the most backlog a newcomer can sit behind" read as the tokens ahead (27,110 at the default), while
    the key counts its own prompt (31,110); "its peers are replicas like this one" read as all as loaded, while the
    key routes to an idle one; "every later arrival" overclaimed (one after the backlog drains pays nothing); the
    prompt push did not say the waiting prompts change too. The words now say each."""
    from solvers.interview import stage_run
    solution = variant("coupled-slo-admission@default")
    backlog, peers = stage_run(solution, catalog, 1).say, stage_run(solution, catalog, 2).say
    assert "own in it" in backlog and solution.expected["backlog_limit"] == pytest.approx(31_110)
    assert "One peer has an empty queue" in peers and "queued behind it" in peers
    assert "queued behind it" in solution.question.answer("added_delay").label
    assert "later arrival" not in solution.sheet.regime.summary
    pushes = [stage_run(variant(f"coupled-slo-admission@{seed}"), catalog, 3) for seed in range(40)]
    moved = [p for p in pushes if p is not None and "prompt" in p.say and "alike" in p.say]
    assert moved, "no prompt push said the waiting prompts move too"


def test_admission_r13_words_say_the_chunk_rule_and_whole_steps(variant, catalog):
    """r13: the chunk was read as sized so the mean step meets the TPOT target (1,515 tokens at @73019, 75.0 ms)
    where the key prices every chunk token at its whole prompt (1,321, 65.88 ms); the backlog and TTFT were read in
    continuous time (23,080 tokens, 0.122 s at @73020) where the key counts whole steps (21,892, 0.1468 s); a chunk
    larger than the prompt (1,684 against 1,400 at @73020) read oddly. The words now say each."""
    from solvers.interview import stage_run
    solution = variant("coupled-slo-admission@73019")
    assert "even if each chunk token saw its whole prompt" in stage_run(solution, catalog, 0).say
    assert solution.expected["chunk"] == pytest.approx(1_321, abs=1)
    spans = variant("coupled-slo-admission@73020")
    assert spans.expected["chunk"] > 1_400 and spans.expected["ttft"] == pytest.approx(0.1468, rel=1e-3)
    say = stage_run(spans, catalog, 1).say
    assert "A chunk may span prompts" in say and "step with its prompt's last token ends" in say


def test_admission_reader7_asks_what_the_streams_pay(variant):
    """Reader 7: nobody asked what the decode streams pay while prompts prefill. Stage 1 grades their mean TPOT, the
    mean step with a full chunk: 48.82 ms at the default against the 50 ms target (a decode-only step is 13.4 ms)."""
    solution = variant("coupled-slo-admission@default")
    assert "step_time" in solution.question.stages[0].ask
    assert solution.expected["step_time"] == pytest.approx(0.048823, rel=1e-4)
