"""The model-runner rewrite - input preparation on the GPU (vLLM Model Runner V2)."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side, ceil_of, max_of
from solvers.models.collective import tp_all_reduce
from solvers.models.steptime import StepConstants, engine, step_time, step_work
from solvers.units import format_number

BLOCK_SIZE = 16  # vLLM's default KV block size


SLOT_BYTES = 4  # int32 token ids and block ids


# vLLM v0.28.0 vllm/config/vllm.py _get_v2_model_runner_unsupported_features (and the Triton check before it):
# with VLLM_USE_V2_MODEL_RUNNER unset, any of these puts a dense model on the V1 runner with one warning line.
# Custom logits processors left that list after v0.28.0 (PR #56497), which is why the stage text pins the release.
FEATURES = {
    "prefix caching, EAGLE-3 speculative decoding": (),
    "prefix caching, ngram speculative decoding": ("ngram",),
    "structured outputs, a custom logits processor": ("logits",),
    "chunked prefill, dual batch overlap": ("dbo",),
    "prefix caching, structured outputs": (),
    "prefix caching, a logits-processor plugin installed in the image": ("logits",),
    "prefix caching, an image built without Triton": ("triton",),
    "ngram speculative decoding, a custom logits processor": ("ngram", "logits"),
}


CAUSE_NAMES = {"ngram": "ngram drafting", "logits": "the custom logits processor", "dbo": "dual batch overlap",
               "triton": "the missing Triton"}


# Listed only where the V1 runner is built (elsewhere nothing keeps MRV2 off): it shortens the step only
# where Model Runner V2's step is shorter, that is where the old runner's CPU sets the pace.
REMOVE = "turning off what keeps it on the V1 runner"
FORCE = "setting VLLM_USE_V2_MODEL_RUNNER to force Model Runner V2"
FASTER_CPU = "a host CPU twice as fast"
MORE_BANDWIDTH = "GPUs with twice the HBM bandwidth"


def _runner(s: Sheet, p, e, work, comm, gpu, cpu_old, cpu_new, old, new, speedup) -> None:
    """Which runner serves this deployment, and which levers would shorten the step of the runner it builds."""
    reads = work.bytes / e.byte_rate
    causes = FEATURES[p.features]
    s.choose("runner", "v1-runner" if causes else "model-runner-v2",
             f"{' and '.join(CAUSE_NAMES[c] for c in causes)} keep{'' if len(causes) > 1 else 's'} it on the old runner"
             if causes else "none of these features falls back, so V2 runs")
    gain = s.text(speedup)
    named = " and ".join(CAUSE_NAMES[c] for c in causes)
    run = s.step("tpot_run", "Step time of the runner vLLM builds", "t_run", old if causes else new, "ms",
                 f"the old runner's step: {named} keeps MRV2 from running" if causes else "Model Runner V2's step")
    s.step("realized", "Gain this deployment actually gets", "S_real", old / run, "x",
           f"Model Runner V2's {gain} only where it is the runner that runs: the fallback is silent"
           if causes else "Model Runner V2 is the runner that runs")
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


def _regime(s: Sheet, p, gpu, cpu_old, work, e) -> None:
    """CPU-bound (the old runner's CPU time sets the step) against GPU-bound."""
    g, c = s.text(gpu), s.text(cpu_old)
    # The batch where the two sides meet: both grow linearly with it (KV reads against per-request CPU work).
    per_seq_gpu = s.evaluate(work.bytes / e.byte_rate) / p.batch - s.evaluate(e.W / e.TP / e.byte_rate) / p.batch
    fixed_gpu = s.evaluate(e.W / e.TP / e.byte_rate)
    fixed_cpu, per_seq_cpu = p.sched + p.prep, p.per_req
    if per_seq_gpu != per_seq_cpu and (per_seq_gpu > per_seq_cpu) == (fixed_cpu > fixed_gpu):  # cross at a batch > 0
        batch = (fixed_cpu - fixed_gpu) / (per_seq_gpu - per_seq_cpu)
        side = "below" if per_seq_gpu > per_seq_cpu else "above"
        meet = f"the reads and the CPU's work meet near a batch of {format_number(batch, 3)} at this context: " \
               f"{side} it the CPU binds"
    else:
        meet = "the reads and the CPU's work cross at no batch at this context"
    s.regime_by(cpu_old, gpu, tie="below", above=Side(
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


def solve(p, s: Sheet) -> None:
    e = engine(s, p.model, p.gpu, p.tp, StepConstants(overhead=None), dtype=p.dtype, communication=p.tp > 1,
               kv_prerequisite=True)
    B, C = s.param("B", "batch"), s.param("C", "context")
    work = step_work(s, e, "dec", "decode step", B, B * C, B * C)
    comm = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="dec", label="decode step")
    gpu = step_time(s, e, "dec", "decode step's GPU work", work, key="gpu_step", communication=comm,
                    why="the step-time model's kernels: the slower of reads and math"
                        + (", then the all-reduces" if p.tp > 1 else ""))
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
           "the batch's tokens per step")
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
             "time, so one worker's time counts, at every TP alike.")
    s.assume("The old runner's CPU costs are the variant's profile (a fixed part and a part per request); "
             "MRV2's is the scheduler plus the variant's staging and launch time, its Triton input kernels "
             "taking microseconds of GPU time (left out).")
    s.assume("Runner choice as vLLM v0.28.0 makes it with VLLM_USE_V2_MODEL_RUNNER unset (vllm/config/vllm.py "
             "use_v2_model_runner): dense models, quantized ones included, default to MRV2 unless Triton is "
             "missing or a feature in _get_v2_model_runner_unsupported_features is on. Later releases run "
             "custom logits processors on MRV2 (PR #56497).")
    s.assume("The runners are compared on the same step: drafting and verification, where speculative decoding "
             "is on, are left out of the step's work, and dual batch overlap has no expert all-to-all to hide "
             "in a dense model, so turning it off costs nothing here.")
    # Slips on the tokens/s V2 delivers: V2's step over the step each mistake times (the old runner's step
    # is V2's in a GPU-bound draw, a factor of 1 the sheet drops).
    t_new = s.value(new)
    s.slip("CPU and GPU times added (no async overlap)", on="throughput_new",
           factor=t_new / (s.value(gpu) + s.value(cpu_new)))
    s.slip("the old runner's step kept (its CPU time still in it)", on="throughput_new", factor=t_new / s.value(old))
    s.slip("one sequence's tokens per second, not the batch's", on="throughput_new", factor=1 / p.batch)
    _regime(s, p, gpu, cpu_old, work, e)

