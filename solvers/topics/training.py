"""Training questions: the compute a pretraining run needs, and the memory its state takes."""
from __future__ import annotations

import math

import sympy

from solvers.derivation import Sheet
from solvers.topics.common import dtype_bytes, hbm_bytes, peak_flops
from solvers.units import format_number, format_quantity

# FLOPs per parameter per token: 2 in the forward pass, 4 in the backward (input and weight grads).
FLOPS_PER_PARAM_TOKEN = 6
ADAM_FP32_COPIES = 3  # fp32 master weights, first moment m, second moment v
ZERO3_VOLUME = 3  # ZeRO-3 moves 3Ψ elements per step per GPU: two weight all-gathers, one grad reduce-scatter


def training_compute_budget(p, s: Sheet) -> None:
    N = s.given("N", p.params, "billion params", "parameters (dense)")
    D = s.given("D", p.tokens, "trillion tokens", "training tokens")
    G = s.given("G", p.gpus, "GPUs", "GPUs in the job")
    P = s.given("P", peak_flops(p.gpu, "bf16"), "TFLOP/s", f"{p.gpu.name} dense bf16 peak")
    u = s.given("MFU", p.mfu, "%", "model FLOPs utilisation")
    T_dl = s.given("T_dl", p.deadline, "days", "deadline")
    I_ref = s.given("I_ref", p.ref_interruptions, "interruptions", "Llama 3 405B interruptions")
    T_ref = s.given("T_ref", p.ref_days, "days", "Llama 3 405B observation window")
    G_ref = s.given("G_ref", p.ref_gpus, "GPUs", "Llama 3 405B GPUs")

    F = s.step("flops", "Training FLOPs", "F", FLOPS_PER_PARAM_TOKEN * N * D, "FLOP",
               "each parameter does a multiply-add per token forward and two backward")
    X = s.step("cluster_flops", "Sustained cluster throughput", "X", G * P * u, "EFLOP/s",
               "every GPU at its dense peak, scaled by the MFU the run achieves")
    T = s.step("days", "Training time", "T", F / X, "days", "the work over the rate; pure compute, no restarts")
    GD = s.step("gpu_days", "GPU-days of compute", "GD", G * T, "GPU-days",
                "fixed by the FLOPs, the peak and the MFU: more GPUs finish sooner but burn the same GPU-days")
    lam = s.step("failure_rate", "Interruptions per GPU-day (Llama 3)", "lambda", I_ref / (G_ref * T_ref),
                 "interruptions/GPU-day", "failures come from parts, so the rate scales with GPUs × time")
    s.step("interruptions", "Interruptions to plan for", "I", lam * GD, "interruptions",
           "the per-GPU-day rate over the run's GPU-days")
    G_need = s.step("gpus_needed", "GPUs that would just meet the deadline", "G_need", F / (P * u * T_dl), "GPUs",
                    "solve F / (G·P·MFU) = deadline for G")

    s.assume(f"Model FLOPs are {FLOPS_PER_PARAM_TOKEN}·N·D (Kaplan et al. 2020): the attention-score FLOPs "
             "over the context and the embedding lookups are left out; activation recomputation is not counted, "
             "since MFU is defined on model FLOPs.")
    s.assume("MFU as stated for the whole run, against the dense bf16 datasheet peak (Llama 3 405B reached "
             "38-43% on H100).")
    s.assume(f"Failure rate from Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): "
             f"{format_number(p.ref_interruptions)} job interruptions (47 planned, 419 unexpected) over "
             f"{format_quantity(p.ref_days, 'days')} on {format_number(p.ref_gpus)} H100s, taken per GPU-day "
             "and applied to the compute days. Wall-clock time runs longer than compute (Llama 3 kept over 90% "
             "effective training time), which adds interruptions in proportion.")
    s.slip("x1/3: 2·N·D counts the forward pass only", 1 / 3, on=("flops", "days", "interruptions"))
    s.slip("x4/3: 8·N·D counts activation recomputation, which MFU excludes", on=("flops", "days", "interruptions"),
           factor=4 / 3)
    s.slip("MFU left out: the run at datasheet peak", p.mfu, on=("days", "interruptions"))
    s.slip("one GPU's time, not the cluster's", p.gpus, on="days")
    s.slip("Llama 3's interruptions per day copied without scaling by GPU count", on="interruptions",
           factor=p.ref_gpus / p.gpus)

    _schedule_regime(s, T, T_dl, G_need)


def _schedule_regime(s: Sheet, T, T_dl, G_need) -> None:
    days, deadline = format_quantity(s.value(T), "days"), format_quantity(s.value(T_dl), "days")
    needed = s.value(G_need)
    if s.compare(T, T_dl) <= 0:
        s.set_regime(
            "fits-deadline",
            f"{days} of pure compute against a deadline of {deadline}: the plan fits, before restarts and "
            "rewound work are added.",
            T_dl, T,
            "The slack is the budget for failures, checkpoints and slow starts: a plan that fits only narrowly "
            f"slips once they are counted. About {format_number(needed, 3)} GPUs at this MFU would just make the "
            "deadline; with fewer GPUs, a lower MFU or more tokens the plan misses it.")
    else:
        # Jobs are sized in powers of two (whole nodes, symmetric parallel layouts).
        fleet = format_number(2 ** math.ceil(math.log2(needed)))
        s.set_regime(
            "misses-deadline",
            f"{days} of pure compute against a deadline of {deadline}: the plan misses it even before a single "
            "interruption.",
            T_dl, T,
            f"About {format_number(needed, 3)} GPUs at this MFU would just make it ({fleet} as a power of two, "
            "plus headroom for failures); otherwise raise MFU, train fewer tokens or a smaller model. "
            "Interruptions stay the same whatever the GPU count: they follow the GPU-days, which the FLOPs fix.")


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
