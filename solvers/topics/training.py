"""Training questions: the compute a pretraining run needs, and the memory its state takes."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.topics.common import dtype_bytes, hbm_bytes, peak_flops
from solvers.units import format_number, format_quantity

# FLOPs per parameter per token: 2 in the forward pass, 4 in the backward (input and weight grads).
FLOPS_PER_PARAM_TOKEN = 6
ADAM_FP32_COPIES = 3  # fp32 master weights, first moment m, second moment v
MAX_FAILURE_LOSS = 0.4  # a plan that loses 40% of its wall-clock to failures is not one anyone runs
ZERO3_VOLUME = 3  # ZeRO-3 moves 3Ψ elements per step per GPU: two weight all-gathers, one grad reduce-scatter


def _wall_clock(T_c, C, tau, a, R):
    """Wall-clock days of a run with T_c days of compute: every interval τ of work stalls C for its
    checkpoint, and interruptions, a per day of wall-clock, each cost the restart R plus half an
    interval of rewound work. W = T_c(1 + C/τ) + a·W·(R + τ/2), solved for W."""
    return T_c * (1 + C / tau) / (1 - a * (R + tau / 2))


def training_compute_budget(p, s: Sheet) -> None:
    N, D, G, u, T_dl = (s.param(sym, name) for sym, name in (
        ("N", "params"), ("D", "tokens"), ("G", "gpus"), ("MFU", "mfu"), ("T_dl", "deadline")))
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    I_ref, T_ref, G_ref = (s.param(sym, name) for sym, name in (
        ("I_ref", "ref_interruptions"), ("T_ref", "ref_days"), ("G_ref", "ref_gpus")))
    tau, C, R = (s.param(sym, name) for sym, name in (
        ("τ", "ckpt_interval"), ("C", "ckpt_write"), ("R", "restart")))

    F = s.step("flops", "Training FLOPs", "F", FLOPS_PER_PARAM_TOKEN * N * D, "FLOP",
               "each parameter does a multiply-add per token forward and two backward")
    X = s.step("cluster_flops", "Sustained cluster throughput", "X", G * P * u, "EFLOP/s",
               "every GPU at its dense peak, scaled by the MFU the run achieves")
    T_c = s.step("days", "Days of pure compute", "T_c", F / X, "days", "the work over the rate, no interruptions")
    s.step("data_rate", "Tokens per second the data pipeline feeds", "r_D", D / T_c, "tokens/s",
           "the training tokens over the compute time: the loader must sustain this while the GPUs run")
    s.step("interruptions_compute", "Interruptions over the compute days alone", "I_c",
           I_ref / (G_ref * T_ref) * G * T_c, "interruptions", "the first estimate, before the schedule stretches")
    lam = s.step("failure_rate", "Interruptions per GPU-day (Llama 3)", "λ", I_ref / (G_ref * T_ref),
                 "interruptions/GPU-day", "failures come from parts, so the rate scales with GPUs × wall-clock time")
    a = s.step("cluster_rate", "Interruptions per day of this job", "a", lam * G, "interruptions/day",
               "every GPU of the job can stop it")
    s.step("mtbf", "Mean time between interruptions", "M", 1 / a, "h", "the job's MTBF: 1 / a")
    loss = s.step("lost_per_failure", "Time lost per interruption", "t_f", R + tau / 2, "h",
                  "detect, reschedule and reload, plus the work since the last checkpoint: half an interval on average")
    if s.value(a) * s.value(loss) >= MAX_FAILURE_LOSS:
        raise Reject("failures eat most of the schedule: no one would plan this checkpoint interval")
    W = s.step("wall_days", "Wall-clock days of the schedule", "W", _wall_clock(T_c, C, tau, a, R), "days",
               "W = T_c·(1 + C/τ) + a·W·t_f: checkpoint stalls on every interval, and interruptions that grow "
               "with the wall-clock time itself")
    s.step("interruptions", "Interruptions over the schedule", "I", a * W, "interruptions",
           "the job's rate over its wall-clock days")
    s.step("lost_days", "Days lost to checkpoints and failures", "T_lost", W - T_c, "days",
           "wall-clock minus compute")
    s.step("effective_share", "Effective training time", "E", T_c / W, "%",
           "the share of wall-clock spent on useful steps (Llama 3 405B reported over 90%)")
    s.step("", "Checkpoint interval with the least lost time (Young)", "τ_Y", sympy.sqrt(2 * C / a), "min",
           "first-order optimum √(2·C·M): the write cost against the rewound work")

    s.assume(f"Model FLOPs are {FLOPS_PER_PARAM_TOKEN}·N·D (the flops-per-token card; Kaplan et al. 2020): "
             "attention over the context and the embeddings are left out; activation recomputation is not "
             "counted, since MFU is defined on model FLOPs.")
    s.assume("MFU as stated for the whole run, against the dense bf16 datasheet peak (dense-peaks; Llama 3 405B "
             "reached 38-43% on H100).")
    s.assume(f"Failure rate from Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): "
             f"{format_number(p.ref_interruptions)} job interruptions (47 planned, 419 unexpected) over "
             f"{format_quantity(p.ref_days, 'days')} on {format_number(p.ref_gpus)} H100s, taken per GPU-day of "
             "wall-clock time, so a schedule stretched by failures sees more of them.")
    s.assume("Each interruption rewinds to the last checkpoint (on average half an interval of work) and costs the "
             "restart time; checkpoint writes stall training (no asynchronous save); interruptions do not "
             "overlap.")
    s.slip("x1/3: 2·N·D counts the forward pass only", 1 / 3, on=("flops", "days"))
    s.slip("x4/3: 8·N·D counts activation recomputation, which MFU excludes", on=("flops", "days"), factor=4 / 3)
    s.slip("MFU left out: the run at datasheet peak", p.mfu, on="days")
    s.slip("one GPU's time, not the cluster's", p.gpus, on="days")
    s.slip("Llama 3's interruptions per day copied without scaling by GPU count", on="interruptions",
           factor=p.ref_gpus / p.gpus)
    s.slip("interruptions over the compute days, not the wall-clock schedule", on="interruptions",
           factor=s.value(T_c) / s.value(W))
    s.slip("a whole interval rewound per failure, not half", on="lost_per_failure",
           factor=(p.restart + p.ckpt_interval) / (p.restart + p.ckpt_interval / 2))

    _schedule_levers(s, {"T_c": T_c, "C": C, "tau": tau, "a": a, "R": R, "W": W})
    _schedule_regime(s, W, T_dl, T_c)


def _schedule_levers(s: Sheet, v: dict[str, sympy.Symbol]) -> None:
    """Which changes shorten the schedule: each one re-solved on the same wall-clock equation."""
    T_c, C, tau, a, R, W = (v[k] for k in ("T_c", "C", "tau", "a", "R", "W"))
    now = format_quantity(s.value(W), "days")
    options = (  # (option, compute days, checkpoint interval, interruptions per day, restart time)
        ("checkpointing twice as often", T_c, tau / 2, a, R),
        ("checkpointing half as often", T_c, 2 * tau, a, R),
        ("halving the restart time", T_c, tau, a, R / 2),
        ("twice the GPUs (same MFU)", T_c / 2, tau, 2 * a, R),
    )
    for option, days, interval, rate, restart in options:
        if s.compare(rate * (restart + interval / 2), 1) >= 0:
            s.judge("levers", option, False, "interruptions would come faster than the work between them: no end")
            continue
        wall = _wall_clock(days, C, interval, rate, restart)
        s.judge("levers", option, s.compare(wall, W) < 0,
                f"{format_quantity(s.evaluate(wall), 'days')} against {now} today")


def _schedule_regime(s: Sheet, W, T_dl, T_c) -> None:
    wall, deadline, compute = (format_quantity(s.value(x), "days") for x in (W, T_dl, T_c))
    s.regime_by(W, T_dl, tie="below", below=Side(
        "fits-deadline",
        f"{compute} of compute stretch to {wall} with checkpoints and failures, within the deadline of "
        f"{deadline}: the schedule survives its own arithmetic.",
        "Past the deadline the fix is more GPUs (which also fail more often), a higher MFU, fewer tokens, or "
        "less time lost per failure: faster restarts, a checkpoint interval nearer √(2·C·MTBF).",
        near=f"{compute} of compute stretch to {wall} against a deadline of {deadline}: it fits, with almost "
             "no slack; one bad week of failures or a few points of MFU and it slips."),
        above=Side(
        "misses-deadline",
        f"{compute} of compute stretch to {wall} with checkpoints and failures, past the deadline of "
        f"{deadline}.",
        "Within the deadline the slack absorbs the failures; here the schedule needs more GPUs (more "
        "failures per day too), a higher MFU, fewer tokens, or less time lost per failure.",
        near=f"{compute} of compute stretch to {wall}, just past the deadline of {deadline}: the time lost to "
             "failures is the difference, so faster restarts or a better checkpoint interval would save it."))


def training_state_bytes(p, s: Sheet) -> None:
    N = s.given("N", p.params, "billion params", "parameters")
    b_w = s.given("b_w", dtype_bytes("bf16"), "B", "bytes per bf16 weight")
    b_g = s.given("b_g", dtype_bytes("bf16"), "B", "bytes per bf16 gradient")
    b_32 = s.given("b_32", dtype_bytes("fp32"), "B", "bytes per fp32 value")
    g = s.given("g", p.gpus_per_node, "GPUs", "GPUs per node")
    M = s.given("M", hbm_bytes(p.gpu), "GB", f"{p.gpu.name} HBM")
    u = s.given("u", p.usable, "%", "share of HBM for training state")

    K = s.step("optimizer_bytes", "Optimizer bytes per parameter", "K", ADAM_FP32_COPIES * b_32, "B/param",
               "Adam keeps an fp32 master copy and two fp32 moments for every weight (ZeRO's K = 12)")
    if p.grad_accum == "fp32":
        per_param = b_w + b_g + b_32 + K
        why = "bf16 weights and gradients, an fp32 buffer accumulating the gradients, and the optimizer state"
    else:
        per_param = b_w + b_g + K
        why = "bf16 weights and gradients plus the optimizer state"
    b = s.step("bytes_per_param", "Training state per parameter", "b", per_param, "B/param", why)
    S = s.step("state", "Total training state", "S", N * b, "TB", "every parameter carries all of it")
    node = s.step("node_hbm", "HBM per node", "M_node", g * M, "GB", "all GPUs of one node")
    room = s.step("node_room", "Room for state per node", "R", u * node, "GB",
                  "activations, buffers and fragmentation take the rest")
    nodes = s.step("nodes", "Nodes to hold the state, fully sharded", "n", sympy.ceiling(S / room), "nodes",
                   "whole nodes: the state over one node's room, rounded up")
    s.step("state_per_gpu", "State per GPU, sharded over those nodes", "S_gpu", S / (nodes * g), "GB",
           "ZeRO-3 / FSDP gives every GPU an equal slice of weights, gradients and optimizer state")
    N_star = s.step("max_params_one_node", "Largest model whose state fits one node", "N_star", room / b,
                    "billion params", "one node's room over the bytes per parameter")
    traffic = s.step("zero3_traffic", "Bytes each GPU moves per step under full sharding", "V",
                     ZERO3_VOLUME * N * b_w, "GB",
                     "all-gather the bf16 weights for forward and again for backward, reduce-scatter the "
                     "gradients: 1.5x plain data parallel's all-reduce (ZeRO, sec. 7)")

    s.assume("Mixed-precision Adam as in the ZeRO paper (Rajbhandari et al. 2020): 2 + 2 + 12 = 16 bytes per "
             "parameter. An fp32 gradient-accumulation buffer beside the bf16 gradients adds 4 (Megatron's "
             "20 B/param row); writing gradients straight into fp32 drops the bf16 copy (18).")
    s.assume(f"{format_number(p.gpus_per_node)} GPUs per node; the share of HBM left for state is an assumption: "
             "activations (after checkpointing), communication buffers and allocator fragmentation need the rest.")
    s.assume("Full sharding splits the state evenly over every GPU it spans; collectives use ring-style "
             "volumes, gradients reduced in bf16.")
    for label, wrong in (("weights only, 2 B/param", 2), ("fp32 master weights and moments left out", 4)):
        s.slip(label, wrong / s.value(b), on=("bytes_per_param", "state"))
        # Sharded over the nodes that smaller state would need: fewer nodes, so more per GPU.
        s.slip(label, on="state_per_gpu",
               factor=wrong / s.value(b) * s.value(nodes) / s.evaluate(sympy.ceiling(N * wrong / room)))
    s.slip("state per node, not per GPU", p.gpus_per_node, on="state_per_gpu")

    _state_regime(s, N, N_star, S, room, nodes, traffic)


def _state_regime(s: Sheet, N, N_star, S, room, nodes, traffic) -> None:
    state, fits = format_quantity(s.value(S), "TB"), format_quantity(s.value(room), "GB")
    limit = format_quantity(s.value(N_star), "billion params")
    moved = format_quantity(s.value(traffic), "GB")
    if s.value(nodes) <= 1:
        s.set_regime(
            "one-node",
            f"{state} of state fits the {fits} one node holds for it: shard it inside the node, where the "
            f"{moved} each GPU gathers and reduces per step ride NVLink, and let only the data-parallel "
            "gradient reduction cross the network.",
            N_star, N,
            f"Above {limit} the state spans nodes. Sharded across them (FSDP / ZeRO-3), every GPU then moves "
            "three times the bf16 weights through its NIC each step, which must hide behind compute; pipeline "
            "parallel across nodes keeps each stage's state at home and sends only the activations at stage "
            "boundaries, paying in pipeline bubbles.")
    else:
        s.set_regime(
            "multi-node",
            f"{state} of state against {fits} per node: it spans {format_number(s.value(nodes))} nodes before "
            "the first token. Either shard it across nodes (FSDP / ZeRO-3: about "
            f"{moved} per GPU per step over the NIC, to be hidden behind compute) or cut the model into "
            "pipeline stages across nodes (only boundary activations cross the NIC, at the cost of bubbles); "
            "tensor parallel stays inside NVLink.",
            N_star, N,
            f"At or below {limit} the state fits one node: sharding stays on NVLink and only the data-parallel "
            "gradient reduction crosses the NIC.")
