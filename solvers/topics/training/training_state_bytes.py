"""Training state per parameter, and FSDP against pipeline across nodes."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_hbm_bytes, given_peak_flops
from solvers.formulas.training import FLOPS_PER_PARAM_TOKEN
from solvers.sheetmath import ceil_of, log_of, max_of
from solvers.units import format_number

ADAM_FP32_COPIES = 3  # fp32 master weights, first moment m, second moment v


# The layouts' steps this close are a call on rounding, not on understanding (the times are graded to 3%).
TOO_CLOSE = 0.03


ZERO3_VOLUME = 3  # ZeRO-3 moves 3Ψ elements per step per GPU: two weight all-gathers, one grad reduce-scatter


def _replica_all_reduce(s: Sheet, N, b_g, nodes, r) -> sympy.Symbol:
    """Bytes each NIC carries per step to all-reduce the gradients across the job's copies of the group: each GPU
    holds 1/(g·n) of them (FSDP's shard, or its stage's slice in a pipeline), its rail's ring moves 2(R−1)/R of
    that, every byte over the NIC, the node's g GPUs sharing its r NICs. Both layouts pay it."""
    g, G = s.symbol("g"), s.param("G", "gpus")
    R = s.step("replicas", "Copies of the group in the job", "n_rep", G / (g * nodes), "",
               "the job's GPUs over a group's: the data-parallel degree across groups")
    return s.step("dp_nic", "Cross-replica gradient all-reduce, bytes through each NIC per step", "V_DP",
                  2 * (R - 1) / R * N * b_g / (nodes * r), "GB",
                  "a ring all-reduce of each GPU's 1/(g·n) of the gradients over the R copies, g GPUs to r NICs")


def _fsdp_side(p, s: Sheet, N, b_w, BW, nodes, r, dp_nic) -> tuple[sympy.Symbol, ...]:
    """FSDP across nodes: the weights' all-gathers and the gradients' reduce-scatter in rings over the group's
    GPUs, the part that crosses nodes spread over each node's NICs, plus the gradients' all-reduce across the
    group's copies (hybrid sharding), against the compute of one step."""
    G, B, g = s.symbol("G"), s.param("B", "batch_tokens"), s.symbol("g")
    P = given_peak_flops(s, p.gpu, "bf16")
    mfu = s.param("η", "mfu")
    V = s.step("fsdp_traffic", "Bytes each GPU moves per step under FSDP", "V", ZERO3_VOLUME * N * b_w, "GB",
               "all-gather the bf16 weights for forward and again for backward, reduce-scatter the gradients: "
               "1.5x plain data parallel's all-reduce (ZeRO, sec. 7)")
    k = s.step("group_gpus", "GPUs in a sharding group", "k", g * nodes, "GPUs", "n nodes of g GPUs")
    V_nic = s.step("fsdp_nic", "Of it, bytes through each NIC per step", "V_nic",
                   V * (k - 1) / k / r + dp_nic, "GB",
                   "a ring over the group's k GPUs passes (k−1)/k of each collective through every hop, the node's "
                   "one hop out shared by its r NICs (a ring per rail), plus the all-reduce across the copies")
    t_comm = s.step("fsdp_comm", "FSDP communication per step over the NICs", "t_comm", V_nic / BW, "s",
                    "each NIC at its line rate, all of them at once, each carrying its own rail's collective")
    s.assume("The node's NICs add up because each carries its own rail's share (NCCL runs a ring per rail, "
             "one NIC per GPU), each at its line rate. One transfer striped over many NICs gets less: Mooncake's "
             "transfer engine reached 87% of 4 × 200 Gb/s but about half of 8 × 400 Gb/s (kvcache-ai/Mooncake "
             "README).")
    F = s.prerequisite("training-compute-budget", "F_step", FLOPS_PER_PARAM_TOKEN * s.value(N) * s.value(B), "FLOP",
                       "training FLOPs of one step, 6·N·D over the global batch")
    t_comp = s.step("step_compute", "Compute per step", "t_comp", F / (G * P * mfu), "s",
                    "the step's FLOPs shared by every GPU of the job, at the share of peak its kernels reach: "
                    "the exposed communication and the bubble come on top")
    loss = s.step("fsdp_loss", "Step time FSDP loses to exposed communication", "f_FSDP",
                  1 - t_comp / max_of(t_comp, t_comm), "%",
                  "prefetching hides the traffic behind compute; what exceeds the compute stalls the step")
    return loss, t_comp, t_comm, V_nic


def _pipeline_side(p, s: Sheet, nodes) -> sympy.Symbol:
    m = s.param("m", "microbatches")
    if p.microbatches < s.value(nodes):
        raise Reject("fewer micro-batches than pipeline stages: the pipeline never fills")
    return s.step("bubble", "Pipeline bubble, one stage per node", "f_PP", (nodes - 1) / (m + nodes - 1), "%",
                  "1F1B: the first and last p − 1 micro-batch slots of each step leave stages idle")


def _layout_regime(s: Sheet, fsdp_side, pp_side, t_comp, t_comm, nodes) -> None:
    """The layout with the shorter step wins; the text quotes the share of the step each loses (near the
    boundary the engine adds the steps' margin, so the words follow it)."""
    (loss_fsdp, step_fsdp), (loss_pp, step_pp) = fsdp_side, pp_side
    fsdp, pp = (s.text(x) for x in (loss_fsdp, loss_pp))
    comm, comp = (s.text(x) for x in (t_comm, t_comp))
    stages = format_number(s.value(nodes))
    s.regime_by(step_fsdp, step_pp, tie="below", below=Side(
        "fsdp-across-nodes",
        f"FSDP's {comm} of NIC traffic per step against {comp} of compute loses {fsdp} of the step, less "
        f"than the {pp} bubble of a {stages}-stage pipeline: shard across the nodes. The weights' all-gathers, "
        "the gradients' reduce-scatter and the all-reduce across the copies then cross the NICs every step.",
        "With fewer tokens per GPU (a smaller global batch or more GPUs) or a slower NIC the traffic outgrows "
        "the compute, the exposed part passes the bubble, and pipeline stages across nodes win."),
        above=Side(
        "pipeline-across-nodes",
        f"FSDP's {comm} of NIC traffic per step cannot hide behind {comp} of compute: it loses {fsdp} of the "
        f"step, more than the {pp} bubble of a {stages}-stage pipeline. Put pipeline stages across nodes and "
        "keep sharding inside NVLink: only the stage boundaries' activations and each stage's all-reduce across "
        "the copies cross the NICs.",
        "With more tokens per GPU (a larger global batch) or a faster NIC the compute covers FSDP's traffic, "
        "and sharding across nodes loses less than the bubble."))


def _group_of(nodes):
    """The least power of two at or above `nodes` (exact: log2 of a power of two is whole)."""
    return 2 ** ceil_of(log_of(nodes, 2))


def solve(p, s: Sheet) -> None:
    N = s.param("N", "params")
    b_w = s.given("b_w", dtype_bytes("bf16"), "B", "bytes per bf16 weight")
    b_g = s.given("b_g", dtype_bytes("bf16"), "B", "bytes per bf16 gradient")
    b_32 = s.given("b_32", dtype_bytes("fp32"), "B", "bytes per fp32 value")
    g = s.param("g", "gpus_per_node")
    M = given_hbm_bytes(s, p.gpu)
    u = s.param("u", "usable")

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
    least = s.step("nodes_least", "Nodes to hold the state, fully sharded", "n_0", ceil_of(S / room), "nodes",
                   "whole nodes: the state over one node's room, rounded up")
    if s.value(least) < 2:
        raise Reject("the state fits one node: nothing crosses the network to decide")
    nodes = s.step("nodes", "Nodes in a sharding group", "n", _group_of(least), "nodes",
                   "the job's nodes are a power of two, so a group that divides them into whole replicas is one too: "
                   "the least power of two at or above n_0")
    s.step("state_per_gpu", "State per GPU, sharded over those nodes", "S_gpu", S / (nodes * g), "GB",
           "ZeRO-3 / FSDP gives every GPU an equal slice of weights, gradients and optimizer state")
    BW = s.given("BW_nic", p.nic.gbit_s * 1e9 / 8, "GB/s", f"{p.nic.name}, each direction")
    r = s.param("r", "nics_per_node")
    dp_nic = _replica_all_reduce(s, N, b_g, nodes, r)
    loss_fsdp, t_comp, t_comm, V_nic = _fsdp_side(p, s, N, b_w, BW, nodes, r, dp_nic)
    loss_pp = _pipeline_side(p, s, nodes)
    t_dp = s.step("pp_dp", "Pipeline: the gradient all-reduce across copies on the NICs", "t_DP", dp_nic / BW, "s",
                  "the same all-reduce; a stage's boundary activations are megabytes beside it")

    s.assume("Mixed-precision Adam as in the ZeRO paper (Rajbhandari et al. 2020): 2 + 2 + 12 = 16 bytes per "
             "parameter. An fp32 gradient-accumulation buffer beside the bf16 gradients adds 4 (Megatron's "
             "20 B/param row); writing gradients straight into fp32 drops the bf16 copy (18).")
    s.assume(f"{format_number(p.gpus_per_node)} GPUs and {format_number(p.nics_per_node)} NICs per node; the "
             "share of HBM left for state is an assumption: activations (after checkpointing), buffers and "
             "fragmentation need the rest.")
    s.assume("FSDP / ZeRO-3 across the nodes: each GPU all-gathers the bf16 weights for forward and again for "
             "backward and reduce-scatters the gradients, 3× the bf16 weights per step. Each collective is a ring "
             "over the group's k GPUs: every hop carries (k−1)/k of it, and the one hop out of each node is spread "
             "over its NICs (NCCL runs a ring per NIC rail), the rest over NVLink. The gradients then all-reduce "
             "across the group's copies in the job (hybrid sharding), every byte over the NICs. Prefetching "
             "overlaps it all with compute, so only the excess over the compute is exposed.")
    s.assume("Every NIC runs at its full line rate and hidden traffic costs the compute nothing. Measured NCCL "
             "rings reach about 80% of line rate, their kernels take SMs from the GEMMs, and the first layer's "
             "all-gather cannot be prefetched: all three favour FSDP here, so near the boundary the pipeline "
             "does better than the bank says.")
    s.assume("The job runs whole copies of the group (hybrid sharding: shard inside a group, replicate across "
             "groups; Megatron and PyTorch's device mesh both need the world size to divide into them), so the "
             "group is the fewest nodes that hold the state and divide the job's nodes.")
    s.assume("Pipeline across the nodes: one stage per node, 1F1B schedule, no interleaving; only boundary "
             "activations (megabytes per micro-batch) cross the NIC besides the data-parallel gradient all-reduce "
             "of each stage's slice, which overlaps the backward pass: only what outlasts it adds to the step. "
             "Tensor parallel stays inside NVLink.")
    for label, wrong in (("weights only, 2 B/param", 2), ("fp32 master weights and moments left out", 4)):
        s.slip(label, wrong / s.value(b), on=("bytes_per_param", "state"))
    s.slip("the NIC's Gb/s read as GB/s", 1 / 8, on="fsdp_comm")
    s.slip("the all-reduce across the group's copies left out", on="fsdp_comm",
           factor=1 - s.value(dp_nic) / s.value(V_nic))
    s.slip("plain data parallel's 2x the weights, not ZeRO-3's 3x", on="fsdp_comm",
           factor=1 - (s.value(V_nic) - s.value(dp_nic)) / 3 / s.value(V_nic))
    s.slip("x1/3: 2·N per token counts the forward pass only", 1 / 3, on="step_compute")
    s.slip("the bubble as (p−1)/m, not (p−1)/(m+p−1)", on="bubble",
           factor=s.evaluate((nodes - 1) / p.microbatches) / s.value(loss_pp))

    step_fsdp = s.step("fsdp_step", "Step time with FSDP across nodes", "t_FSDP", max_of(t_comp, t_comm), "s",
                       "the slower of the compute and the traffic it overlaps")
    step_pp = s.step("pp_step", "Step time with a pipeline across nodes", "t_PP",
                     t_comp / (1 - loss_pp) + max_of(0, t_dp - 2 * t_comp / 3), "s",
                     "the same compute per GPU, stretched by the bubble, and any of the gradients' all-reduce that "
                     "outlasts the backward pass (two thirds of the compute) it overlaps")
    if abs(s.value(step_fsdp) / s.value(step_pp) - 1) < TOO_CLOSE:
        raise Reject("FSDP's step and the pipeline's are within the answers' 3%: too close to call")
    _layout_regime(s, (loss_fsdp, step_fsdp), (loss_pp, step_pp), t_comp, t_comm, nodes)

