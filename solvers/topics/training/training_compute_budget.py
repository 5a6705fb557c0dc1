"""Pretraining compute budget, schedule and failures."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_hbm_bytes, given_peak_flops
from solvers.formulas.training import ADAM_FP32_COPIES, FLOPS_PER_PARAM_TOKEN, least_power_of_two
from solvers.sheetmath import floor_of, min_of
from solvers.units import figures_against, format_number, format_quantity

MAX_FAILURE_LOSS = 0.3  # a plan that loses 30% of its wall-clock to failures is not one anyone runs
TOO_CLOSE = sympy.Rational(3, 200)  # the wall-clock's tolerance (1.5%): a schedule this near its deadline is no call
LEVER_CLOSE = sympy.Rational(2, 100)  # a lever within two points of the share asked is not graded (a hairline)
STATE_CLOSE = sympy.Rational(1, 100)  # state this near a power of two of GPUs: label and reported HBM disagree


def _wall_clock(T_c, C, tau, a, R):
    """Wall-clock days of a run with T_c days of compute: every interval τ of work stalls C for its
    checkpoint, and interruptions, a per day of wall-clock, each cost the restart R plus half an
    interval of rewound work. W = T_c(1 + C/τ) + a·W·(R + τ/2), solved for W."""
    return T_c * (1 + C / tau) / (1 - a * (R + tau / 2))


def least_loss_interval(C, a, R):
    """The checkpoint interval that minimises W(τ) = T_c(1 + C/τ)/(1 − a(R + τ/2)): setting dW/dτ = 0 gives
    τ² + 2Cτ − 2C(1 − aR)/a = 0, so τ* = √(C² + 2C(1 − aR)/a) − C. Young's √(2C/a) is its first order, for a
    stall and a restart small against the MTBF; a long restart (or stall) pulls the optimum below Young's."""
    return sympy.sqrt(C**2 + 2 * C * (1 - a * R) / a) - C


def _schedule_levers(s: Sheet, v: dict[str, sympy.Symbol], shorter: sympy.Expr) -> None:
    """Which changes win back the share asked of the days lost to checkpoints and failures: each one re-solved
    on the same wall-clock equation. Judged on the lost days, not the whole schedule, so a lever's truth follows
    what is lost (stalls or failures), not the size of the run."""
    T_c, C, tau, a, R, W = (v[k] for k in ("T_c", "C", "tau", "a", "R", "W"))
    now = s.text(W)
    lost = format_quantity(s.evaluate(W - T_c), "days")
    options = (  # (option, compute days, stall, checkpoint interval, interruptions per day, restart time)
        ("checkpointing twice as often", T_c, C, tau / 2, a, R),
        ("checkpointing half as often", T_c, C, 2 * tau, a, R),
        ("halving the restart time", T_c, C, tau, a, R / 2),
        ("asynchronous checkpoint saves (no stall)", T_c, 0, tau, a, R),
        # The exact optimum of W(τ), not Young's first-order √(2·C·MTBF): the label promises the least time lost.
        ("checkpointing at the interval that loses the least time", T_c, C, v["tau_opt"], a, R),
    )
    for option, days, stall, interval, rate, restart in options:
        if s.compare(rate * (restart + interval / 2), 1) >= 0:
            s.judge("levers", option, False, "interruptions would come faster than the work between them: no end")
            continue
        wall = _wall_clock(days, stall, interval, rate, restart)
        won = (W - wall) / (W - T_c)  # the share of the lost days won back
        saved = s.evaluate(won)
        if s.compare(abs(won - shorter), LEVER_CLOSE) < 0:  # inside the estimate's error: not asked
            s.judge("levers", option, None, f"wins back {format_quantity(saved, '%')} of the lost days, within two "
                                            f"points of the {format_quantity(s.value(shorter), '%')} asked: too "
                                            "close to call")
            continue
        sig = figures_against(saved, s.value(shorter), sig=4)
        s.judge("levers", option, s.compare(won, shorter) >= 0,
                f"{format_quantity(s.evaluate(wall), 'days')} against {now} today: "
                + (f"{format_quantity(saved, '%', sig)} of the {lost} lost won back" if saved > 0 else
                   f"{format_quantity(s.evaluate(wall - W), 'days')} more lost"))


def _replica_layout(p, s: Sheet, N, G) -> sympy.Symbol:
    """The fewest GPUs one data-parallel replica spans with the optimizer sharded over the replicas (ZeRO-1, as
    Llama 3 and Megatron's distributed optimizer run): each replica holds the bf16 weights and gradients whole,
    split over its own GPUs, and the fp32 master and moments are split over every GPU of the job. Returns the
    checkpoint's bytes: the fp32 master and moments (the bf16 weights are the master rounded; gradients are
    rebuilt by the next step)."""
    b_w = s.given("b_w", dtype_bytes("bf16"), "B", "bytes per bf16 weight (and per bf16 gradient)")
    b_32 = s.given("b_32", dtype_bytes("fp32"), "B", "bytes per fp32 value")
    M = given_hbm_bytes(s, p.gpu, "M_HBM")
    share = s.param("u_S", "state_share")
    b_rep = s.step("", "Replica's own state per parameter", "b_R", 2 * b_w, "B/param",
                   "bf16 weights and gradients: every replica holds them whole, split over its GPUs")
    b_opt = s.step("", "Optimizer state per parameter", "b_O", ADAM_FP32_COPIES * b_32, "B/param",
                   "Adam's fp32 master copy and two moments: ZeRO-1 splits them over every GPU of the job")
    room = s.step("", "Room for the replica's share on a GPU", "H",
                  share * M - N * b_opt / G, "GB",
                  "the share of HBM kept for state, less this GPU's slice of the optimizer state (N·b_O/G)")
    if s.compare(room, 0) <= 0:
        raise Reject("the optimizer's slice alone fills the HBM kept for state")
    n0 = s.step("", "GPUs the replica's state fills", "n_0", N * b_rep / room, "GPUs",
                "the bf16 weights and gradients over each GPU's room; activations take the rest of the HBM")
    group = least_power_of_two(n0)
    if s.compare(abs(n0 / group - 1), STATE_CLOSE) < 0 or s.compare(abs(2 * n0 / group - 1), STATE_CLOSE) < 0:
        raise Reject("the state fills within 1% of a power of two of GPUs: too close to call")
    # The words say which HBM (r12: at @52014 the reported 192.3e9 B gave 15.5 GPUs, so 16, the 180 GB label 16.6,
    # so 32): the label's reading is the slip it invites.
    label = s.given("M_label", p.gpu.hbm_gb * 1e9, "GB", f"{p.gpu.name} HBM by its datasheet label")
    by_label = least_power_of_two(N * b_rep / (share * label - N * b_opt / G))
    whole = least_power_of_two(N * (b_rep + b_opt) / (share * M))  # no sharding: the layout r13 asked for
    node = s.given("g", p.gpu.nvlink_domain, "GPUs", f"GPUs per {p.gpu.name} NVLink domain")
    across = s.compare(group, node) > 0  # the replica spans nodes: the rest of it is pipeline stages
    mp = s.step("mp_gpus", "GPUs one replica spans, at the fewest", "n_MP", group, "GPUs",
                f"the least power of two at or above n_0, so replicas tile the {format_number(p.gpus)} GPUs: "
                f"TP {format_number(s.evaluate(min_of(group, node)))} inside the node"
                + (f" × {format_number(s.evaluate(group / node))} pipeline stages across nodes" if across else "")
                + ". Without ZeRO-1 each replica would hold all 16 B a parameter and span "
                + format_number(s.evaluate(whole)) + "; activations and the pipeline's bubble often set a larger "
                  "replica in practice (Llama 3 405B ran TP 8 × PP 16)")
    if s.compare(mp, G) > 0:
        raise Reject("one copy of the state needs more GPUs than the job has")
    s.slip("HBM read at its datasheet label, not as the device reports it", s.evaluate(by_label / group),
           on="mp_gpus")
    s.slip("no ZeRO-1: every replica holds the whole 16 B a parameter", s.evaluate(whole / group), on="mp_gpus")
    s.step("gpu_state", "Training state each GPU holds", "S_GPU", N * b_rep / mp + N * b_opt / G, "GB",
           "its slice of the replica's bf16 weights and gradients, plus its slice of the job's fp32 optimizer state")
    s.slip("no ZeRO-1: the fp32 state split over the replica only", on="gpu_state",
           factor=s.evaluate((N * (b_rep + b_opt) / mp) / (N * b_rep / mp + N * b_opt / G)))
    tp = s.step("", "Tensor-parallel degree", "TP", min_of(mp, node), "",
                "tensor parallelism stays on NVLink: its all-reduces run every layer")
    s.step("", "Pipeline stages", "PP", mp / tp, "", "the rest of the replica, one stage per node's share")
    s.step("", "Data-parallel replicas", "DP", G / mp, "",
           "the job's GPUs over one replica's: each replica trains on its share of every global batch")
    return s.step("ckpt_bytes", "Checkpoint size", "S_ck", N * b_opt, "TB",
                  "what a restart needs: the fp32 master weights and Adam's two moments; the bf16 weights are the "
                  "master rounded, and the gradients are rebuilt by the next step")


def _schedule_regime(s: Sheet, W, T_dl, T_c) -> None:
    if s.compare(abs(W - T_dl), TOO_CLOSE * T_dl) < 0:
        raise Reject("the schedule lands within the wall-clock's tolerance of its deadline: no call to grade")
    wall, deadline, compute = (s.text(x) for x in (W, T_dl, T_c))
    lost, allowed = (format_quantity(s.evaluate(x), "days") for x in (W - T_c, T_dl - T_c))
    s.regime_by(W, T_dl, tie="below", below=Side(
        "fits-deadline",
        f"{compute} of compute stretch to {wall} with checkpoints and failures, within the deadline of "
        f"{deadline}: the {lost} they take fit the {allowed} allowed.",
        "Past the deadline the fix is less time lost per failure (faster restarts, a checkpoint interval nearer "
        "the optimum, about √(2·C·MTBF)), a shorter checkpoint stall (faster storage, asynchronous saves), "
        "or more compute slack: more GPUs (which also fail more often), "
        "a higher MFU, fewer tokens.",
        near=f"{compute} of compute stretch to {wall} against a deadline of {deadline}: it fits with "
             f"little to spare: {lost} of the {allowed} allowed go to checkpoints and failures, and one bad "
             "stretch of failures would use the rest."),
        above=Side(
        "misses-deadline",
        f"{compute} of compute stretch to {wall} with checkpoints and failures, past the deadline of "
        f"{deadline}: they take {lost}, more than the {allowed} allowed.",
        "Within the deadline the allowance absorbs the stalls and failures; here the plan needs less time lost "
        "per failure, a shorter stall, or more compute slack (more GPUs, which fail more often too).",
        near=f"{compute} of compute stretch to {wall}, past the deadline of {deadline}: checkpoints and "
             f"failures take {lost} against the {allowed} allowed."))


def solve(p, s: Sheet) -> None:
    N, D, G, u, slack = (s.param(sym, name) for sym, name in (
        ("N", "params"), ("D", "tokens"), ("G", "gpus"), ("MFU", "mfu"), ("s_D", "slack")))
    P = given_peak_flops(s, p.gpu, "bf16")
    I_ref, T_ref, G_ref = (s.param(sym, name) for sym, name in (
        ("I_ref", "ref_interruptions"), ("T_ref", "ref_days"), ("G_ref", "ref_gpus")))
    tau, B_ck, R = (s.param(sym, name) for sym, name in (
        ("τ", "ckpt_interval"), ("B_ck", "ckpt_bw"), ("R", "restart")))

    F = s.step("flops", "Training FLOPs", "F", FLOPS_PER_PARAM_TOKEN * N * D, "FLOP",
               "each parameter does a multiply-add per token forward and two backward")
    X = s.step("cluster_flops", "Sustained cluster throughput", "X", G * P * u, "EFLOP/s",
               "every GPU at its dense peak, scaled by the MFU the run achieves")
    T_c = s.step("days", "Days of pure compute", "T_c", F / X, "days", "the work over the rate, no interruptions")
    s.step("data_rate", "Tokens per second the data pipeline feeds", "r_D", D / T_c, "tokens/s",
           "the training tokens over the compute time: the loader must sustain this while the GPUs run")
    S = _replica_layout(p, s, N, G)
    C = s.step("ckpt_write", "Checkpoint stall", "C", S / B_ck, "min",
               "the checkpoint written at the storage's sustained rate, training paused meanwhile")
    s.step("interruptions_compute", "Interruptions over the compute days alone", "I_c",
           I_ref / (G_ref * T_ref) * G * T_c, "interruptions", "the first estimate, before the schedule stretches")
    lam = s.step("failure_rate", "Interruptions per GPU-day (Llama 3)", "λ", I_ref / (G_ref * T_ref),
                 "interruptions/GPU-day", "failures come from parts, so the rate scales with GPUs × wall-clock time")
    a = s.step("cluster_rate", "Interruptions per day of this job", "a", lam * G, "interruptions/day",
               "every GPU of the job can stop it")
    s.step("mtbf", "Mean time between interruptions", "M", 1 / a, "h",
           "the job's MTBF, 1 / a: every GPU of the job can stop it, so it falls as the job grows")
    # Meta's over 90% effective time bounds its loss an interruption at a tenth of its window over its count.
    past_meta = s.compare(R + tau / 2, T_ref / (10 * I_ref)) > 0
    loss = s.step("lost_per_failure", "Time lost per interruption", "t_f", R + tau / 2, "h",
                  "detect, reschedule and reload, plus the work since the last checkpoint: half an interval on average"
                  + ("; Meta's over 90% effective time implies at most 16.7 min an interruption, so this restart "
                     "and interval are the gap to close" if past_meta else ""))
    if s.value(a) * s.value(loss) >= MAX_FAILURE_LOSS:
        raise Reject("failures eat most of the schedule: no one would plan this checkpoint interval")
    W = s.step("wall_days", "Wall-clock days of the schedule", "W", _wall_clock(T_c, C, tau, a, R), "days",
               "W = T_c·(1 + C/τ) + a·W·t_f: checkpoint stalls on every interval, and interruptions that grow "
               "with the wall-clock time itself")
    s.step("interruptions", "Interruptions over the schedule", "I", floor_of(a * W + sympy.Rational(1, 2)),
           "interruptions", "the job's rate over its wall-clock days, to the nearest whole interruption")
    s.step("lost_days", "Days lost to checkpoints and failures", "T_lost", W - T_c, "days",
           "wall-clock minus compute")
    s.step("effective_share", "Effective training time", "E", T_c / W, "%",
           "the share of wall-clock spent on useful steps (Llama 3 405B reported over 90%)")
    s.step("", "Young's checkpoint interval", "τ_Y", sympy.sqrt(2 * C / a), "min",
           "first-order optimum √(2·C·M): the write cost against the rewound work, the restart left out")
    tau_opt = s.step("", "Checkpoint interval with the least lost time", "τ*", least_loss_interval(C, a, R), "min",
                     "dW/dτ = 0: τ² + 2Cτ − 2C(1 − aR)/a = 0; the restart's share of the time (aR) pulls it under "
                     "Young's")

    s.assume(f"Model FLOPs are {FLOPS_PER_PARAM_TOKEN}·N·D (the flops-per-token card; Kaplan et al. 2020): "
             "attention over the context and the embeddings are left out; activation recomputation is not "
             "counted, since MFU is defined on model FLOPs.")
    s.assume("MFU as stated for the whole run, against the dense bf16 datasheet peak (dense-peaks; Llama 3 405B "
             "reached 38-43% on H100).")
    s.assume(f"Failure rate from Llama 3 405B (The Llama 3 Herd of Models, sec. 3.3.4): "
             f"{format_number(p.ref_interruptions)} job interruptions (47 planned, 419 unexpected) over "
             f"{format_quantity(p.ref_days, 'days')} on {format_number(p.ref_gpus)} H100s, taken per GPU-day of "
             "wall-clock time, so a schedule stretched by failures sees more of them. The planned 47 are counted as "
             "if they too scaled with GPUs; and an A100 or B200 fleet is taken to fail as Llama 3's H100s did, "
             "which no published record of a fleet that size confirms. Meta's over 90% effective time bounds "
             "its average loss at 0.10 × 54 days / 466 = 16.7 min an interruption: an upper bound, not a measurement.")
    s.assume("The optimizer's fp32 state is sharded over the data-parallel replicas (ZeRO-1, Megatron's distributed "
             "optimizer, as Llama 3 ran); each replica holds its bf16 weights and gradients whole, and activations "
             "fit in the HBM left over: the layout is the fewest GPUs that hold the state, with TP inside the node. "
             "Llama 3 405B ran TP 8 × PP 16 × DP 128 on 16,384 H100s: activations at its sequence length and the "
             "pipeline's bubble, not the state, set that size.")
    s.assume("Each interruption rewinds to the last checkpoint (on average half an interval of work) and costs the "
             "restart time; checkpoint writes stall training for the checkpoint at the storage's sustained write "
             "rate (12 B a parameter: the fp32 master and two moments, no gradients; no asynchronous save; Llama 3's "
             "Tectonic file system sustains 2 TB/s, sec. 3.3.1, of which one job gets a share); interruptions do "
             "not overlap.")
    s.slip("x1/3: 2·N·D counts the forward pass only", 1 / 3, on=("flops", "days"))
    s.slip("x4/3: 8·N·D counts activation recomputation, which MFU excludes", on=("flops", "days"), factor=4 / 3)
    s.slip("MFU left out: the run at datasheet peak", p.mfu, on="days")
    s.slip("one GPU's time, not the cluster's", p.gpus, on="days")
    s.slip("Llama 3's interruptions per day copied without scaling by GPU count", on="interruptions",
           factor=p.ref_gpus / p.gpus)
    s.slip("interruptions over the compute days, not the wall-clock schedule", on="interruptions",
           factor=s.value(T_c) / s.value(W))
    s.slip("interruptions counted over the compute days: the schedule's stretch ignored", on="wall_days",
           factor=s.evaluate(T_c * (1 + C / tau) + lam * G * T_c * loss) / s.value(W))
    s.slip("Llama 3's time between interruptions copied without scaling by GPU count", on="mtbf",
           factor=p.gpus / p.ref_gpus)

    T_dl = s.step("deadline", "Deadline", "T_dl", T_c * (1 + slack), "days",
                  "the compute days plus the allowance the plan keeps for checkpoints and failures")
    _schedule_levers(s, {"T_c": T_c, "C": C, "tau": tau, "a": a, "R": R, "W": W, "tau_opt": tau_opt},
                     s.param("s_L", "shorter"))
    _schedule_regime(s, W, T_dl, T_c)

