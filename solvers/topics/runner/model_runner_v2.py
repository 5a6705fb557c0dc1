"""The model-runner rewrite - input preparation on the GPU (vLLM Model Runner V2)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import AllReduceTerms, all_reduce_terms, tp_all_reduce
from solvers.formulas.common import hbm_bytes
from solvers.formulas.steptime import Engine, StepConstants, StepWork, engine, step_time, step_work
from solvers.sheetmath import ceil_of, max_of
from solvers.units import format_number

BLOCK_SIZE = 16  # vLLM's default KV block size


SLOT_BYTES = 4  # int32 token ids and block ids


# vLLM v0.28.0 vllm/config/vllm.py _get_v2_model_runner_unsupported_features (and the Triton check before it):
# with VLLM_USE_V2_MODEL_RUNNER unset, any of these puts a dense model on the V1 runner with one warning line.
# Custom logits processors left that list after v0.28.0 (PR #56497), which is why the stage text pins the release.
FEATURES = {
    "prefix caching and EAGLE-3 speculative decoding": (),
    "prefix caching and ngram speculative decoding": ("ngram",),
    "structured outputs and a custom logits processor": ("logits",),
    "structured outputs and ngram speculative decoding": ("ngram",),
    "prefix caching and structured outputs": (),
    "prefix caching and a logits-processor plugin installed in the image": ("logits",),
    "prefix caching and an image built without Triton": ("triton",),
    "ngram speculative decoding and a custom logits processor": ("ngram", "logits"),
}


CAUSE_NAMES = {"ngram": "ngram drafting", "logits": "the custom logits processor", "triton": "the missing Triton"}


# Listed only where the V1 runner is built (elsewhere nothing keeps MRV2 off): it shortens the step only
# where Model Runner V2's step is shorter, that is where the old runner's CPU sets the pace.
REMOVE = "turning off what keeps it on the V1 runner"
FORCE = "setting VLLM_USE_V2_MODEL_RUNNER to force Model Runner V2"
FASTER_CPU = "a host CPU twice as fast"
MORE_BANDWIDTH = "GPUs with twice the HBM bandwidth"
# read7 #1: a lever whose truth is not the regime's bit: listed where the V1 runner runs and its CPU sets the step.
CPU_AS_V2 = "a host CPU twice as fast, shortening the step as far as Model Runner V2 would"


def _runner(s: Sheet, p, e, work, comm, gpu, cpu_old, cpu_new, old, new, speedup) -> None:
    """Which runner serves this deployment, and which levers would shorten the step of the runner it builds."""
    reads = work.bytes / e.byte_rate
    causes = FEATURES[p.features]
    gain = s.text(speedup)
    named = " and ".join(CAUSE_NAMES[c] for c in causes)
    # The runner is no graded answer: the recall's fallback list, shown before, names it. It stays here, in
    # the step the levers are judged against.
    run = s.step("tpot_run", "Step time of the runner vLLM builds", "t_run", old if causes else new, "ms",
                 f"the V1 runner's step: {named} keep{'s' if len(causes) == 1 else ''} MRV2 from running"
                 if causes else "Model Runner V2's step: none of these features falls back")
    s.step("realized", "Gain this deployment actually gets", "S_real", old / run, "x",
           f"Model Runner V2's {gain} only where it is the runner that runs: the fallback is silent"
           if causes else "Model Runner V2 is the runner that runs")
    # read7 #2: what the deployment decodes as configured, graded beside what V2 would.
    s.step("throughput_run", "Decode tokens per second, as deployed", "X_run", s.param("B", "batch") / run,
           "tokens/s", "the batch over the step of the runner vLLM builds"
           + (f": the V1 runner, silently ({named})" if causes else ": Model Runner V2"))
    faster = s.compare(new, old) < 0
    s.judge("fallback", REMOVE, faster if causes else None,
            "nothing keeps MRV2 off here" if not causes else
            f"without {named} MRV2 runs, and its step is {gain} shorter" if faster else
            f"without {named} MRV2 runs, but the GPU sets the step either way: MRV2 gains nothing here")
    s.judge("fallback", FORCE, False, "with an unsupported feature on, vLLM refuses to start (a forced MRV2 is "
            "checked, not silently dropped); with none, MRV2 already runs", fact=True)
    cpu_run = cpu_old if causes else cpu_new
    cpu_binds = s.compare(cpu_run, gpu) > 0
    s.judge("fallback", FASTER_CPU, cpu_binds,
            "the CPU's work sets the step: halving it shortens the step" if cpu_binds else
            "the GPU's step already covers the CPU's work, which async scheduling hides")
    # read7 #1: twice the CPU on the V1 runner against V2: does halving the old runner's CPU reach V2's step?
    listed = bool(causes) and cpu_binds
    half = s.step("cpu_old_fast", "CPU time per step, old runner, on a CPU twice as fast", "t_CPU1'", cpu_old / 2,
                  "ms", "the same Python work at twice the speed") if listed else cpu_old
    as_v2 = s.compare(max_of(gpu, half), new) <= 0
    s.judge("fallback", CPU_AS_V2, (cpu_binds and as_v2) if causes else None,
            (f"halved, the old runner's {s.text(cpu_old)} of CPU is {s.text(half)}: "
             + (f"under the GPU's {s.text(gpu)}, so the step falls as far as MRV2's" if as_v2 else
                f"still over MRV2's {s.text(new)} step, so the step falls, but less than MRV2's"))
            if listed else "the GPU sets the step: neither a faster CPU nor MRV2 shortens it" if causes else
            "MRV2 already runs")
    gpu_fast = max_of(reads / 2, work.math) + comm
    shorter = s.compare(max_of(gpu_fast, cpu_run), run) < 0
    s.judge("fallback", MORE_BANDWIDTH, shorter,
            "the GPU sets the step and waits on its reads, so halving them shortens it" if shorter else
            "the CPU's work sets the step: a faster GPU only waits longer" if cpu_binds else
            "the GPU's step is its math, not its reads")
    if not causes and abs(s.value(cpu_new) / s.value(gpu) - 1) < 0.05:
        raise Reject("MRV2's CPU and GPU within 5% of each other: which side binds would turn on rounding")
    if not cpu_binds and abs(s.evaluate(reads) / s.evaluate(work.math) - 1) < 0.05:
        raise Reject("reads and math within 5% of each other: whether bandwidth helps would turn on rounding")


def crossings(s: Sheet, p, side: GpuSide) -> tuple[list[float], int, bool]:
    """The batches, at this context, where the GPU's step (the same max(reads, math) + all-reduces as the
    gpu_step key) equals the old runner's CPU time; the largest batch that could run (max_num_seqs, or the
    most sequences whose KV fits in HBM beside the weights); and whether the CPU binds at a batch of 1.
    Every piece is linear in the batch, so each branch of the max meets the CPU's line at one batch, which
    counts where that branch is the longer."""
    e, B, C = side.e, s.param("B", "batch"), s.param("C", "context")
    reads_0, reads_1 = s.evaluate(e.W / e.TP / e.byte_rate), s.evaluate(C * e.KV / e.byte_rate)
    math_1 = s.evaluate(side.work.math / B)  # decode math is all per sequence: the weights' and its context's
    ar_0, ar_1 = s.evaluate(side.all_reduce.fixed), s.evaluate(side.all_reduce.per_token)
    cpu_0 = s.evaluate(s.param("t_sched", "sched") + s.param("t_prep", "prep"))
    cpu_1 = s.evaluate(s.param("c_req", "per_req"))
    cap = min(int(p.max_num_seqs), int(s.evaluate((hbm_bytes(p.gpu) - e.W / e.TP) / (C * e.KV))))
    found = []
    for fixed, per_seq, longer in ((reads_0, reads_1, True), (0.0, math_1, False)):
        if per_seq + ar_1 != cpu_1:
            batch = (cpu_0 - fixed - ar_0) / (per_seq + ar_1 - cpu_1)
            if 1 <= batch <= cap and (reads_0 + reads_1 * batch >= math_1 * batch) == longer:
                found.append(batch)
    gpu_at_1 = max(reads_0 + reads_1, math_1) + ar_0 + ar_1
    return sorted(found), cap, gpu_at_1 < cpu_0 + cpu_1


def _meet(s: Sheet, p, side: GpuSide) -> str:
    """Where, at this context, the two sides cross as the batch moves, in words."""
    found, cap, cpu_at_1 = crossings(s, p, side)
    at = [format_number(batch, 3) for batch in found]
    if len(found) == 2:
        return f"at this context the CPU binds only between batches of {at[0]} and {at[1]}"
    if found:
        return (f"the GPU's step and the CPU's work meet near a batch of {at[0]} at this context: "
                f"{'below' if cpu_at_1 else 'above'} it the CPU binds")
    return (f"at this context the {'CPU' if cpu_at_1 else 'GPU'} binds at every batch from 1 to {cap:,}, "
            f"the most that max_num_seqs and the HBM allow")


def _regime(s: Sheet, p, side: GpuSide, cpu_old) -> None:
    """CPU-bound (the old runner's CPU time sets the step) against GPU-bound."""
    g, c = s.text(side.time), s.text(cpu_old)
    meet = _meet(s, p, side)
    s.regime_by(cpu_old, side.time, tie="below", above=Side(
        "cpu-bound",
        f"The old runner spends {c} of CPU per step against {g} of GPU work: the GPU waits on Python, which is "
        f"where Model Runner V2's GPU-side input preparation pays; {meet}.",
        "With more work per step (a bigger model, a larger batch, longer contexts, a slower GPU) the GPU's time "
        "passes the CPU's and the rewrite no longer changes the step time."),
        below=Side(
        "gpu-bound",
        f"The GPU's {g} per step covers the old runner's {c} of CPU work: the async overlap already hides it, "
        f"so the rewrite changes little here; {meet}.",
        "With less GPU work per step (a small model, small batches, short contexts, a fast GPU) the CPU's time "
        "binds, and moving input preparation into Triton kernels is what shortens the step."))


@dataclass(frozen=True)
class GpuSide:
    """The decode step's GPU time and the pieces it is made of, each linear in the batch at a fixed context."""

    e: Engine
    work: StepWork
    all_reduce: AllReduceTerms  # per step: fixed + per_token × batch (0 at TP 1)
    comm: sympy.Expr  # the step's all-reduces, as the sheet states them
    time: sympy.Symbol  # the gpu_step key: max(reads, math) + all-reduces


def gpu_side(s: Sheet, p) -> GpuSide:
    """The GPU's time per decode step: every sequence of the batch decodes one token at the context."""
    e = engine(s, p.model, p.gpu, p.tp, StepConstants(overhead=None), dtype=p.dtype, communication=True,
               kv_prerequisite=True)
    B, C = s.param("B", "batch"), s.param("C", "context")
    work = step_work(s, e, "dec", "decode step", B, B * C, B * C)
    comm = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    time = step_time(s, e, "dec", "decode step's GPU work", work, key="gpu_step", communication=comm,
                     why="the step-time model's kernels: the slower of reads and math"
                         + (", then the all-reduces" if p.tp > 1 else ""))
    return GpuSide(e, work, all_reduce_terms(s, p.model, p.gpu, p.tp), comm, time)


def solve(p, s: Sheet) -> None:
    side = gpu_side(s, p)
    e, work, comm, gpu = side.e, side.work, side.comm, side.time
    B = s.param("B", "batch")
    t_s, t_p, c_r = s.param("t_sched", "sched"), s.param("t_prep", "prep"), s.param("c_req", "per_req")
    cpu_old = s.step("cpu_old", "CPU time per step, old runner", "t_CPU1", t_s + t_p + c_r * B, "ms",
                     "scheduler, then input tensors and output processing in Python, plus a share per request")
    t_v2 = s.param("t_v2", "v2_cpu")
    cpu_new = s.step("cpu_new", "CPU time per step, Model Runner V2", "t_CPU2", t_s + t_v2, "ms",
                     "the scheduler did not change; the per-request work moved into GPU kernels")
    old = s.step("tpot_old", "Step time, old runner", "t_1", max_of(gpu, cpu_old), "ms",
                 "async scheduling overlaps the CPU's next step with the GPU's: the slower sets the pace")
    new = s.step("tpot_new", "Step time, Model Runner V2", "t_2", max_of(gpu, cpu_new), "ms",
                 "the same overlap with the smaller CPU share")
    s.step("per_user_new", "Tokens per second per user, Model Runner V2", "x_2", 1 / new, "tokens/s",
           "one token per sequence per step")
    s.step("throughput_new", "Decode tokens per second, Model Runner V2", "X_2", B / new, "tokens/s",
           "steps per second × batch: one token per sequence per step")
    speedup = s.step("speedup", "Throughput gain of Model Runner V2", "S", old / new, "x",
                     "the same batch, each step as long as its slower side")
    if abs(s.value(cpu_old) / s.value(gpu) - 1) < 0.05:
        raise Reject("CPU and GPU within 5% of each other: which side binds would turn on rounding")

    R, L_max = s.param("R", "max_num_seqs"), s.param("L_max", "max_model_len")
    b = s.given("b_slot", SLOT_BYTES, "B", "bytes per token id or block id (int32)")
    blk = s.given("b_blk", BLOCK_SIZE, "tokens", "KV block size")
    s.step("token_buffer", "Prefill token ids, one persistent row per request slot (pinned host, UVA)", "M_tok",
           R * L_max * b, "MiB", "max_num_reqs rows of max_model_len ids: GPU kernels read it over UVA")
    s.step("block_table", "Block table, one persistent row per request slot (GPU)", "M_bt",
           R * ceil_of(L_max / blk) * b, "MiB", "a block id per block of the longest sequence, per slot")
    _runner(s, p, e, work, comm, gpu, cpu_old, cpu_new, old, new, speedup)
    s.assume("Step-time model for the GPU side with its constants (step-compute, step-bandwidth): every sequence "
             "of the batch decodes one token at the given context; the CPU's time is modelled here instead of "
             "the card's fixed step overhead.")
    s.assume("Async scheduling: the CPU prepares step N+1 while the GPU runs step N, so a step lasts as long "
             "as the slower of the two. The runner prepares a step's inputs from the scheduler's output, so the "
             "two CPU costs add; at TP > 1 each worker prepares its own inputs in its own process at the same "
             "time, so one worker's time counts, at every TP alike. read7 #7: at TP > 1 the multiprocess executor "
             "runs the scheduler in the engine-core process and the runners in the workers, which can pipeline "
             "the scheduling of step N+2 under the preparation of step N+1: there the sum is an upper bound, "
             "and the CPU side nearer the longer of the two.")
    s.assume("The old runner's CPU costs are the variant's profile (a fixed part and a part per request), drawn "
             "wide and not measured (read7 #4): published V1 profiles put its input preparation at a few hundred "
             "µs at these batches, so a real V1 deployment is CPU-bound over a narrower range than the draws; "
             "MRV2's is the scheduler plus the variant's staging and launch time, its Triton input kernels "
             "taking microseconds of GPU time (left out).")
    s.assume("Runner choice as vLLM v0.28.0 makes it with VLLM_USE_V2_MODEL_RUNNER unset (vllm/config/vllm.py "
             "use_v2_model_runner): dense models, quantized ones included, default to MRV2 unless Triton is "
             "missing or a feature in _get_v2_model_runner_unsupported_features is on. Later releases run "
             "custom logits processors on MRV2 (PR #56497).")
    s.assume("At TP > 1 the step's two all-reduces per layer (the tp-all-reduce card) come after the kernels, "
             "not overlapped; at TP 1 there are none.")
    s.assume("Tokens per second count one token per sequence per step (steps per second × batch). Where "
             "speculative decoding is on, its drafting and verification are left out of the step's work and its "
             "accepted drafts out of the count: the question is about the CPU's side of the step, and accepted "
             "drafts would multiply both runners' tokens per step alike.")
    # Slips on the tokens/s V2 delivers: V2's step over the step each mistake times (the old runner's step
    # is V2's in a GPU-bound draw, a factor of 1 the sheet drops).
    t_new = s.value(new)
    s.slip("CPU and GPU times added (no async overlap)", on="throughput_new",
           factor=t_new / (s.value(gpu) + s.value(cpu_new)))
    s.slip("the old runner's step kept (its CPU time still in it)", on="throughput_new", factor=t_new / s.value(old))
    s.slip("one sequence's tokens per second, not the batch's", on="throughput_new", factor=1 / p.batch)
    _regime(s, p, side, cpu_old)

