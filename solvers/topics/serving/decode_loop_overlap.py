"""The CPU in the decode loop, and what overlapping it costs."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.common import GPU_MEMORY_UTILIZATION, hbm_bytes
from solvers.formulas.scheduling import require_realistic_tp, step_constants
from solvers.formulas.steptime import (
    engine,
    require_fit,
    step_time,
    step_work,
)
from solvers.sheetmath import max_of
from solvers.units import format_number

# Two sides within this share of each other are a tie in practice (the step model's efficiencies are not that
# exact): such draws are refused, so a push never moves a hairline.
NEAR_TIE = sympy.Rational(1, 10)
# One side this many times the other leaves overlap under a third to gain, and no push in range crosses over.
FAR_APART = 3


# A TPOT cut within this share of the line the option weighs is refused where the option is asked.
TPOT_TIE = 0.05
# The request in question is grammar-constrained: its sampling needs a mask the CPU builds from its last token.
GRAMMAR_WAITS = "its sampling waits each step for its next mask, built on the CPU while its forward pass runs"


def _judge_payers(s: Sheet, p, cpu_bound: bool, gpu: str, cpu: str, waste, gain, lines, t_seq, t_ovl) -> None:
    """What running step n+1 before step n's tokens are known costs, and whom, in this variant."""
    key, (w, line, tpot_line) = "pays", lines
    s.judge(key, "its extra step at the end, computed and thrown away, costs over {waste_line} of the slots",
            s.compare(waste, w) > 0,
            f"its stop is seen a step late, after step n+1 was launched: one slot in {format_number(p.reply + 1)}, "
            f"{s.text(waste)}, against {s.text(w)}")
    s.judge(key, "every token reaches its user one step later", False,
            "step n's tokens are processed and streamed while step n+1 runs, as soon as in the serial loop",
            fact=True)
    cut = t_seq - t_ovl
    if abs(s.evaluate(cut / tpot_line) - 1) < TPOT_TIE:
        s.refuse_if_asked([key], "the TPOT overlap cuts lies within 5% of the line the option weighs")
    s.judge(key, "overlap cuts the loop's TPOT by more than {tpot_line}", s.compare(cut, tpot_line) > 0,
            f"overlap hides the shorter side: {s.text(t_seq)} serial against {s.text(t_ovl)}, "
            f"{format_number(s.evaluate(cut) * 1e3, 3)} ms a token")
    s.judge(key, "overlap raises the loop's useful throughput by over {gain_line}", s.compare(gain - 1, line) > 0,
            f"the sum of the two sides over the larger, less the extra steps: {s.text(gain)}")
    if p.request == "grammar-constrained":
        s.judge(key, GRAMMAR_WAITS, cpu_bound,
                f"the CPU needs {cpu} to process step n and build the mask, the forward pass {gpu}: "
                + ("the mask comes late and the batch's sampling waits" if cpu_bound
                   else "the mask is ready before the forward pass ends, and sampling never waits"))
    else:
        s.judge(key, GRAMMAR_WAITS, False, "a free-text request's sampling needs no mask: nothing to wait for")


# A lever whose throughput gain lands within this share of the line the options weigh is refused where asked.
LEVER_TIE = 0.02
LEVER_REQUEST = "detokenize and stop-check in a front-end process: half the CPU's work per request"
LEVER_FIXED = "a leaner scheduler and CUDA graphs: half the CPU's fixed work a step"
LEVER_BATCH = "twice the batch on the same engine"
LEVER_GPU = "a GPU that runs the step in half the time"


def _judge_levers(s: Sheet, p, e, B, S, c_0, c_r, t_gpu, t_ovl) -> None:
    """Which change raises the overlapped loop's throughput past the line: a step is the slower side, so each
    lever's tokens a step over its new step, against B over today's (the extra steps' share is the same)."""
    key, line = "levers", s.param("lever_line", "lever_line")
    target = 1 + s.value(line)

    def judge(option: str, batch, cpu, gpu, why: str) -> None:
        new = s.evaluate(batch / max_of(cpu, gpu))
        gain = new / s.evaluate(B / t_ovl)
        if abs(gain / target - 1) < LEVER_TIE:
            s.refuse_if_asked([key], f"{option}: its gain within {LEVER_TIE:.0%} of the line")
        s.judge(key, option, s.compare(batch / max_of(cpu, gpu) / (B / t_ovl), 1 + line) > 0,
                f"{why}: a step of {format_number(s.evaluate(max_of(cpu, gpu)) * 1e3, 3)} ms for "
                f"{format_number(s.evaluate(batch))} tokens, {format_number(gain, 3)}x today's throughput")

    judge(LEVER_REQUEST, B, c_0 + B * c_r / 2, t_gpu, "the per-request half moves off the loop")
    judge(LEVER_FIXED, B, c_0 / 2 + B * c_r, t_gpu, "the fixed part halves")
    judge(LEVER_GPU, B, c_0 + B * c_r, t_gpu / 2, "the GPU's side halves, the CPU's stays")
    if s.compare(e.W / e.TP + e.KV * 2 * B * S, exact(hbm_bytes(p.gpu)) * exact(GPU_MEMORY_UTILIZATION)) > 0:
        s.judge(key, LEVER_BATCH, None, "twice the batch's KV does not fit beside the weights")
        return
    work = step_work(s, e, "double", "decode step at twice the batch", 2 * B, 2 * B * S, 2 * B * S)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, 2 * B, tag="double", label="decode step at twice the batch")
    t_double = step_time(s, e, "double", "decode step at twice the batch", work, communication=t_ar,
                         why="the weights read once for twice the requests, and twice the KV")
    judge(LEVER_BATCH, 2 * B, c_0 + 2 * B * c_r, t_double, "twice the tokens a step; the CPU's per-request work "
          "doubles, the GPU's step grows less")


def solve(p, s: Sheet) -> None:
    require_realistic_tp(p.model, p.tp, p.gpu)
    e = engine(s, p.model, p.gpu, p.tp, step_constants(p, overhead=False), communication=p.tp > 1,
               kv_prerequisite=True)
    B = s.param("B", "batch")
    S = s.param("S", "context")
    c_0 = s.param("c_0", "cpu_step")
    c_r = s.param("c_r", "cpu_request")
    L_out = s.param("L_out", "reply")
    require_fit(s, e, p.gpu, B * S)

    work = step_work(s, e, "gpu", "decode step on the GPU", B, B * S, B * S)
    t_ar = tp_all_reduce(s, p.model, p.gpu, p.tp, B, tag="gpu", label="decode step")
    t_gpu = step_time(s, e, "gpu", "decode step on the GPU", work, key="gpu_time", communication=t_ar,
                      why="the GPU's kernels for one token of every request" + (", all-reduces included"
                                                                                 if p.tp > 1 else ""))
    t_cpu = s.step("cpu_time", "CPU time per step", "t_cpu", c_0 + B * c_r, "ms",
                   "plan the batch and prepare inputs, then append, detokenize and stop-check every request")
    t_seq = s.step("serial_step", "Step without overlap", "t_serial", t_gpu + t_cpu, "ms",
                   "the GPU waits while the CPU processes its output and plans the next step")
    s.step("idle", "GPU idle fraction without overlap", "idle", t_cpu / t_seq, "%", "the CPU's share of each step")
    X_seq = s.step("throughput_serial", "Throughput without overlap", "X_serial", B / t_seq, "tokens/s",
                   "one token per request per step")
    t_ovl = s.step("overlap_step", "Step with the overlap scheduler", "t_overlap", max_of(t_gpu, t_cpu), "ms",
                   "step n+1 is launched before step n's tokens are processed: the slower side sets the pace")
    waste = s.step("waste", "Placeholder share of the slots", "w", 1 / (L_out + 1), "%",
           "a request that stops has already been scheduled for one more step: one token per request is "
                   "computed and thrown away")
    X_ovl = s.step("throughput_overlap", "Useful throughput with overlap", "X_overlap",
                   B / t_ovl * L_out / (L_out + 1), "tokens/s", "tokens per step, less the discarded placeholders")
    gain = s.step("gain", "Gain from overlap", "G", X_ovl / X_seq, "x",
                  "sum of the two sides over the larger one, less the discarded placeholders")

    s.assume("CPU time per step = a fixed part (scheduling, input preparation) plus a part per request "
             "(output bookkeeping in the engine loop: appending the token, stop checks, a grammar's mask); it runs "
             "on one thread. vLLM V1 detokenizes and matches stop strings in the API-server process, off this loop; "
             "a single-process engine does it here.")
    s.assume("With overlap the CPU work of step n runs while the GPU runs step n+1, whose inputs are step n's "
             "sampled ids, still on the GPU; a request that stops (EOS or a stop string) is found one step late, "
             "and the token it got in that step is discarded, a grammar-constrained one included.")
    s.assume("A grammar-constrained request under overlap (vLLM's async scheduling with structured outputs, PR "
             "#26866, Oct 2025): step n+1's forward pass is launched on the placeholder, the CPU advances the "
             "grammar with step n's token and builds the mask meanwhile, and only sampling waits for it. Before "
             "that PR vLLM ran such batches without overlap.")
    s.assume(f"The loop's two sides are more than {format_number(float(NEAR_TIE * 100))}% apart (closer is a tie "
             f"within the step model's precision) and within {FAR_APART} times each other (past that, overlap hides "
             "little and the question is the slower side alone).")
    s.slip("overlap throughput taken as the serial one", s.value(X_seq) / s.value(X_ovl), on="throughput_overlap")
    if s.compare(t_cpu, t_gpu) < 0:  # past the GPU's time the ratio is over 100%: no one types that
        s.slip("idle fraction taken as CPU time over GPU time", on="idle",
               factor=s.evaluate(t_cpu / t_gpu) / s.evaluate(t_cpu / t_seq))

    if s.compare(t_cpu, (1 - NEAR_TIE) * t_gpu) > 0 and s.compare(t_cpu, (1 + NEAR_TIE) * t_gpu) < 0:
        raise Reject("the CPU and the GPU take the same time per step, within the model's precision")
    if s.compare(t_cpu, FAR_APART * t_gpu) > 0 or s.compare(t_gpu, FAR_APART * t_cpu) > 0:
        raise Reject(f"one side takes more than {FAR_APART} times the other: overlap has next to nothing to hide")
    lines = s.param("w_line", "waste_line"), s.param("g_line", "gain_line"), s.param("tpot_line", "tpot_line")
    gpu, cpu = s.text(t_gpu), s.text(t_cpu)
    cpu_bound = s.compare(t_cpu, t_gpu) > 0
    _judge_payers(s, p, cpu_bound, gpu, cpu, waste, gain, lines, t_seq, t_ovl)
    _judge_levers(s, p, e, B, S, c_0, c_r, t_gpu, t_ovl)
    s.regime_by(t_cpu, t_gpu, tie="below", above=Side(
        "CPU-bound",
        f"The CPU needs {cpu} per step against the GPU's {gpu}: even with overlap the GPU waits for the CPU every "
        "step, and overlap hides only the GPU's share.",
        "With less CPU work per request (a faster output path, fewer requests per engine process) or a heavier "
        "GPU step (longer contexts, a bigger model), the GPU becomes the pace-setter and overlap hides the CPU "
        "entirely."), below=Side(
        "GPU-bound",
        f"The GPU's {gpu} per step covers the CPU's {cpu}: with overlap the CPU work disappears behind the GPU, "
        "and the loop runs at the GPU's pace.",
        "With a larger batch of cheap steps (a small model, short contexts) the CPU's per-request work outgrows "
        "the GPU step, and then the CPU sets the pace even with overlap."))

