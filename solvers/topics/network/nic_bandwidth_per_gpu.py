"""Network bandwidth per GPU for data-parallel training."""
from __future__ import annotations

import sympy

from solvers.derivation import BIT_RATE_TIME_SLIPS, Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_peak_flops, hbm_bytes, model_params
from solvers.sheetmath import max_of

ADAM_STATE_BYTES = 16  # bf16 weights and grads, fp32 master weights and two moments, all on every replica
STATE_SHARE = 0.75  # the share of HBM the training state may take; activations and buffers need the rest
BYTES_REL, SHARE_REL = 0.02, 0.1  # the bytes' and the exposed share's tolerances in the question file
# The verdict is refused within a tenth of the line rate: the terms the model leaves out are each that large.
# NCCL's ring reaches ~90-95% of a 400G port as bus bandwidth, attention's FLOPs lengthen an 8K window by ~8% on
# a 70B, and a bucketed reduction leaves its last bucket and 2(d − 1) latency steps after the last gradient.
LINE_BAND = sympy.Rational(1, 10)


def _overlap_regime(s: Sheet, need, best, B_nic, t_comm, t_mb, exposed, share) -> None:
    needed, line, loose = (s.text(x) for x in (need, B_nic, best))
    comm, window, wait, part = s.text(t_comm), s.text(t_mb), s.text(exposed), s.text(share)
    s.regime_by(need, B_nic, tie="below", below=Side(
        "comms-hidden",
        f"The reduction needs {needed} in the last micro-batch's backward and the NIC gives {line}: it takes {comm} "
        f"inside a {window} window, so the network costs no step time. The whole-step bound, {loose}, would "
        "suggest a far slower link suffices: it is the last micro-batch, one sequence per GPU, that sets the port.",
        "A faster GPU or a higher MFU (more FLOP/s per byte of gradient) shrinks the window without shrinking the "
        "bytes: past the line rate the rest of the reduction waits at the end of each step, a share of the step "
        "that the micro-batches dilute.",
        near=f"The reduction needs {needed} in the last micro-batch's backward, under the NIC's {line}: it "
             f"takes {comm} of a {window} window, with little to spare. The port happens to sit near the need of "
             "one 8K sequence on this GPU; halve the sequence, or move to a faster GPU, and it no longer hides."),
        above=Side(
        "comms-exposed",
        f"The reduction needs {needed} in the last micro-batch's backward but the NIC gives {line}: it takes {comm} "
        f"against a {window} window, so the step waits {wait} at its end, {part} of it. The whole-step bound, "
        f"{loose}, hides this: the accumulated gradients are final only at the end.",
        "A faster NIC, longer sequences per micro-batch, or fewer bytes in the window (a distributed optimizer "
        "sends the reduce-scatter now and leaves the all-gather to the next forward; in-network reduction) bring "
        "the need under the line rate; whether that is worth buying depends on the share of the step it wins back.",
        near=f"The reduction needs {needed} in the last micro-batch's backward, over the NIC's {line}: only "
             f"{wait} of the {comm} is past the {window} window, {part} of the step. The port sits near what "
             "one 8K sequence on this GPU needs: a cheap overrun, not a reason to buy a faster NIC."))


def solve(p, s: Sheet) -> None:
    shard = model_params(p.model) / (p.tp * p.pp)
    if shard * ADAM_STATE_BYTES > STATE_SHARE * hbm_bytes(p.gpu):
        raise Reject("plain data parallelism keeps the whole optimizer state on every replica: one GPU's shard "
                     "of it does not fit in three quarters of its HBM")
    N = s.given("N", model_params(p.model), "billion params", f"{p.model.name} parameters")
    tp = s.param("TP", "tp")
    pp = s.param("PP", "pp")
    d = s.param("d", "dp")
    m = s.param("m", "microbatches")
    S = s.param("S", "seq")
    b = s.given("b", dtype_bytes("bf16"), "B", "bytes per bf16 gradient")
    P = given_peak_flops(s, p.gpu, "bf16")
    u = s.param("MFU", "mfu")
    B_nic = s.given("B_nic", p.nic.gbit_s * 1e9 / 8, "Gb/s", f"{p.nic.name} line rate")

    N_s = s.step("params_per_gpu", "Parameters per GPU", "N_s", N / (tp * pp), "billion params",
                 "each GPU holds one tensor-parallel slice of one pipeline stage")
    G = s.step("grad_bytes", "Gradient bytes per GPU", "G", N_s * b, "GB",
               "the shard the data-parallel group must sum across replicas")
    V = s.step("bytes_per_step", "Bytes each GPU sends per step for the reduction", "V", 2 * (d - 1) / d * G, "GB",
               "ring all-reduce: a reduce-scatter and an all-gather, each sending (d−1)/d of the buffer")
    T = s.step("tokens_per_replica", "Tokens per replica per step", "T", m * S, "tokens",
               "micro-batches of one sequence each")
    t_bwd = s.step("backward_time", "Backward pass of the whole step", "t_bwd",
                   4 * N_s * T / (P * u), "ms",
                   "4 of the 6 FLOPs per local parameter per token are backward, at peak × MFU")
    best = s.step("bandwidth_step", "Bandwidth if the reduction could spread over the whole backward", "B_step",
                  V / t_bwd, "Gb/s", "the best case: the shard cancels, (d−1)/d·P·MFU/T, so it falls as the batch "
                  "per replica grows")
    t_mb = s.step("micro_backward", "Backward of the last micro-batch", "t_mb", t_bwd / m, "ms",
                  "the gradients accumulate over the micro-batches and are final only in the last one's backward: "
                  "the window the reduction really has")
    need = s.step("bandwidth", "Bandwidth per GPU to hide it in the last micro-batch's backward", "B_need",
                  V / t_mb, "Gb/s", "the bytes over the real window: ≈ (d−1)/d·P·MFU/S, set by the GPU's speed "
                  "and one sequence, whatever the batch")
    t_comm = s.step("comm_time", "Reduction time on the NIC", "t_comm", V / B_nic, "ms", "the bytes at line rate")
    t_pipe = s.step("pipeline_time", "Forward and backward passes of the step", "t_pipe",
                    t_mb * 3 / 2 * (m + pp - 1), "s",
                    "one-forward-one-backward: m + PP − 1 slots of one micro-batch's forward and backward (6 FLOPs "
                    "per parameter per token, half again the backward's 4); the first stage's last backward ends it")
    exposed = s.step("exposed_time", "Reduction time past the last backward", "t_exp", max_of(t_comm - t_mb, 0), "ms",
                     "what of the reduction the window cannot hold: the step waits for it before the optimizer runs")
    step = s.step("step_time", "Step time", "t_step", t_pipe + exposed, "s", "the passes, then the wait")
    share = s.step("exposed_share", "Share of the step the network adds", "f_exp", exposed / step, "%",
                   "the wait over the whole step: the micro-batches before the last one dilute it")
    if s.compare(need, B_nic * (1 + LINE_BAND)) < 0 and s.compare(need, B_nic * (1 - LINE_BAND)) > 0:
        raise Reject("the need is within a tenth of the line rate: the ring's real bus bandwidth, attention's FLOPs "
                     "and the bucket tail each move it that much, so hidden or exposed is a coin flip")
    # Near the line the wait is a small difference of two near-equal times. Where the first stage accepts the
    # ring's 2(d−1)/d read as 2 (t_comm one (d−1)-th longer, within BYTES_REL), that reading must neither flip
    # the verdict nor move the share past its tolerance; with fewer replicas the first stage marks it.
    if p.dp - 1 >= 1 / BYTES_REL:
        if s.compare(exposed, 0) > 0:
            if s.compare(t_comm / (d - 1), SHARE_REL * exposed) > 0:
                raise Reject("the exposed wait is too small a difference: the ring's (d−1)/d would move its share")
        elif s.compare(t_comm * d / (d - 1), t_mb) > 0:
            raise Reject("hidden only by the ring's (d−1)/d: too close to the line")
    s.step("headroom", "Pass speed-up this NIC still hides", "k", B_nic / need, "x",
           "the line rate over the need: faster passes shrink the window in proportion, the bytes stay")

    s.assume("Plain data parallelism (PyTorch DDP, or Megatron's DDP with overlap_grad_reduce): every replica keeps "
             "the whole optimizer state, 16 B a parameter of its shard within three quarters of its HBM, and a "
             "bucketed ring all-reduce of the bf16 gradients overlaps the backward. Gradients accumulate locally "
             "over the micro-batches and are reduced once per step.")
    s.assume("A distributed optimizer (ZeRO-1, Megatron's) does not lower the need: only its reduce-scatter, half "
             "the bytes, is due in the last backward, but its all-gather of the updated weights must land before "
             "the first stage's next forward uses them, a window half as long: the same rate. Llama 3 "
             "reduce-scatters fp32 gradients (sec. 3.3.2), twice the bytes: the same need again, in the backward.")
    s.assume("What else would shrink the window: a middle stage's window also carries its pipeline sends over the "
             "same rail, and a bucketed reduction always leaves a tail, its last bucket plus the ring's 2(d − 1) "
             "latency steps (a few ms at d in the hundreds), after the last gradient is made.")
    s.assume("Each GPU's shard is the model over TP × PP, the stages taken as even. Llama 3 405B trained on 16 "
             "stages though its 126 layers do not divide by 16 (nor 4 or 8): the first and last stages hold one "
             "layer fewer beside the embedding and the output head, every stage within 4% of N/PP.")
    s.assume("One NIC per GPU on its own rail, taken at line rate, no in-network reduction (SHARP); tensor-parallel "
             "traffic stays on NVLink inside the node. A real ring reaches ~90-95% of a 400G port as NCCL bus "
             "bandwidth, so draws whose need is within a tenth of the line rate are refused: there the verdict is "
             "inside the model's own error (with the attention FLOPs and the bucket tail below).")
    s.assume("The whole-step window is a bound no schedule reaches: a stage's accumulated gradients are final only "
             "in its last micro-batch's backward. The first stage finishes last and has only that window (later "
             "stages also have the pipeline's drain), so it is the window the key grades; having no earlier stage, it "
             "sends no activation gradient back over the NIC in it. Reducing after every micro-batch instead would "
             "send the bytes m times.")
    s.assume("MFU here, as the prompt says, is the passes' own share of peak while they run; the pipeline's bubble "
             "(PP − 1 idle slots of the m + PP − 1) and the exposed reduction are counted in the step apart from it, "
             "as is the interleaving-free one-forward-one-backward schedule. Attention's FLOPs beyond 6 per parameter "
             "per token are left out: they lengthen the window, by ~8% at 8K and ~15% at 16K on a 70B, which only "
             "helps hide the reduction. Llama 3's 38-43% for 405B (Table 4) is "
             "over whole steps, its interleaved schedule's smaller bubble included. The optimizer step and the data "
             "loader are left out.")
    s.slip("all-reduce counted as one pass of the buffer, not two", 0.5, on=("bytes_per_step", "bandwidth"))
    s.slip("the whole step's backward as the window", on="bandwidth", factor=s.value(best) / s.value(need))
    s.slip("the whole step (forward too) as the window, not the backward", 2 / 3, on="bandwidth_step")
    s.slip("the pipeline's bubble left out of the step", on="step_time",
           factor=s.evaluate(t_pipe * m / (m + pp - 1) + exposed) / s.value(step))
    # A bit/byte slip scales the reduction's time, not the step: it moves only the wait past the window.
    s.bit_rate_times.discard("step_time")
    for slip in BIT_RATE_TIME_SLIPS:
        wait = max_of(slip.factor * t_comm - t_mb, 0)
        s.slip(slip.label, s.evaluate(t_pipe + wait) / s.value(step), on="step_time")
        if s.compare(exposed, 0) > 0:
            s.slip(slip.label, s.evaluate(wait / (t_pipe + wait)) / s.value(share), on="exposed_share")
    if s.compare(exposed, 0) > 0:
        s.slip("the whole reduction counted as exposed, not what overruns the window", on="exposed_share",
               factor=s.evaluate(t_comm / (t_pipe + t_comm)) / s.value(share))

    _overlap_regime(s, need, best, B_nic, t_comm, t_mb, exposed, share)
