"""Bill of materials for a training cluster."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.common import model_params
from solvers.formulas.fleet import fat_tree_switches, spare_pool, training_run
from solvers.sheetmath import ceil_of
from solvers.units import format_number, format_quantity

MIN_CLUSTER_GPUS = 1024  # below a thousand GPUs the bill is a few racks, not a fabric design


MAX_CLUSTER_GPUS = 65_536  # k³/4 for 64-port switches: the most a three-tier fat tree of them reaches


def _bom_judgements(s: Sheet, p, E0, E, pod, n_job, g, pool, rate, site) -> None:
    wanted, radix = format_number(s.value(E0)), p.big_radix
    if s.compare(s.symbol("k"), radix) >= 0:  # the fabric has those switches already: the option asks nothing
        s.judge("bom", "with {big_radix}-port switches this fabric would need only two tiers", None,
                f"the fabric is built of {format_number(p.radix)}-port switches already")
    else:
        s.judge("bom", "with {big_radix}-port switches this fabric would need only two tiers",
                s.compare(2 * E0, radix**2) <= 0,
                f"{wanted} GPUs against the {format_number(radix**2 / 2)} that two tiers of "
                f"{format_number(radix)}-port switches reach (k²/2)")
    # A rail leaf takes one NIC of each of the unit's k/2 nodes: with it out, every one of them loses a rail.
    su_nodes = s.symbol("k") / 2
    s.judge("bom", "the job keeps its full size with one rail leaf out", s.compare(E / g - su_nodes, n_job) >= 0,
            f"{format_number(s.evaluate(E / g))} nodes less the {format_number(s.evaluate(su_nodes))} a rail leaf "
            f"serves against a job of {format_number(s.value(n_job))}")
    beyond = E / g - n_job  # what filling whole pods (or leaves) installs past the job
    s.judge("bom", "the nodes installed beyond the job are more than twice the spare pool",
            s.compare(beyond, 2 * pool) > 0,
            f"{format_number(s.evaluate(beyond))} nodes past the job's {format_number(s.value(n_job))} against a "
            f"pool of {format_number(s.value(pool))}: the rest of the last "
            "scalable unit is spare capacity the pool does not need")
    s.judge("bom", "the spare pool is under {small_pool} of the job's nodes",
            s.compare(pool, s.param("f_pool", "small_pool") * n_job) < 0,
            f"{format_number(s.value(pool))} spare nodes for a job of {format_number(s.value(n_job))}")
    s.judge("bom", "the checkpoint needs more than {fast_storage} of storage writes",
            s.compare(rate, exact(p.fast_storage)) > 0, f"it needs {s.text(rate)}")
    s.judge("bom", "the site needs a feed of more than {big_feed}", s.compare(site, exact(p.big_feed)) > 0,
            f"the site draws {s.text(site)}")


def _tier_regime(s: Sheet, E0, E2, k) -> None:
    gpus, limit, radix = (format_number(s.value(x)) for x in (E0, E2, k))
    pod_size = format_number((s.value(k) / 2) ** 2)
    s.regime_by(E0, E2, tie="below", above=Side(
        "three-tier",
        f"{gpus} GPUs with their spares exceed the {limit} that leaves and spines of {radix}-port switches can "
        f"join: a core tier joins pods of {pod_size} GPUs, and its switches and optics are the price of the size.",
        f"At or below {limit} GPUs (k²/2) two tiers suffice: no core switches and one hop fewer. A higher "
        "radix moves the boundary with its square.",
        near=f"{gpus} GPUs with their spares only just exceed the {limit} that two tiers of {radix}-port switches "
             "reach: a slightly smaller job, a smaller spare pool or a longer schedule would save the whole core "
             "tier."),
        below=Side(
        "two-tier",
        f"{gpus} GPUs with their spares fit the {limit} that leaves and spines of {radix}-port switches can join "
        "(k²/2): no core tier is needed.",
        f"Past {limit} GPUs a third tier appears: spines give half their ports to uplinks, pods of {pod_size} "
        "GPUs form, and core switches join them, adding switches, optics and a hop for cross-pod traffic.",
        near=f"{gpus} GPUs with their spares only just fit the {limit} of two tiers of {radix}-port switches: a "
             "few more nodes (a shorter schedule, a lower MFU, more spares) would bring in a whole core tier."))


def solve(p, s: Sheet) -> None:
    F, T, P, u = training_run(p, s)
    g = s.param("g", "gpus_per_node")
    M_n = s.param("M_node", "node_mtbf")
    T_r = s.param("T_rep", "repair")
    k = s.param("k", "radix")
    r = s.param("r", "oversub")
    N = s.given("N", model_params(p.model), "billion params", f"{p.model.name} parameters")
    b_st = s.param("b_st", "checkpoint_bytes")
    T_w = s.param("T_w", "window")
    P_n = s.param("P_node", "node_kw")
    P_port = s.param("P_port", "port_w")
    pue = s.param("PUE", "pue")

    need = s.step("gpus_needed", "GPUs the FLOPs call for", "G", F / (T * P * u), "GPUs",
                  "the fleet equation F = G·T·P·MFU solved for G")
    if s.value(need) < MIN_CLUSTER_GPUS:
        raise Reject("a few racks, not a cluster fabric")
    n_job = s.step("job_nodes", "Nodes the job runs on", "n_job", ceil_of(need / g), "nodes",
                   "the need in whole nodes")
    down, pool = spare_pool(s, n_job, M_n, T_r)
    E0 = s.step("gpus_wanted", "GPUs with the spares", "E_0", g * (n_job + pool), "GPUs", "job nodes plus spares")
    E2 = s.step("two_tier_max", "Most GPUs a two-tier fat tree reaches", "E_2", k**2 / 2, "GPUs",
                "k leaves' worth of spine ports, each leaf with k/2 GPUs below: k·k/2")
    three_tier = s.compare(E0, E2) > 0
    su = s.step("su_gpus", "GPUs per scalable unit", "E_SU", g * (k / 2), "GPUs",
                "k/2 nodes, one rail leaf per GPU index: g leaves whose k/2 down-ports each take one NIC of "
                "every node in the unit (DGX SuperPOD's 32-node unit)")
    E = s.step("gpus", "GPUs installed: whole scalable units", "E", su * ceil_of(E0 / su), "GPUs",
               "the fabric is built pod-capable but filled unit by unit; the last unit's free nodes hold more "
               "spares")
    pod = None  # pods of (k/2)² GPUs exist only under a core tier
    if three_tier:
        pod = s.step("pod_gpus", "GPUs per pod", "E_pod", (k / 2) ** 2, "GPUs",
                     "k/2 leaves of k/2 GPUs under k/2 spines, whose other half of ports faces the core")
        s.step("pods", "Pods in use", "pods", ceil_of(E / pod), "pods",
               "the units fill pods of (k/2)² GPUs; the last may be part-filled, its spines and core "
               "provisioned for the leaves in it")
    else:
        s.step("pods", "Pods in use", "pods", ceil_of(E / E2), "pods", "the whole fabric is one two-tier pod")
    if s.value(E) > MAX_CLUSTER_GPUS:
        raise Reject("past what a three-tier fat tree of 64-port switches reaches")
    nodes = s.step("nodes", "Nodes", "n", E / g, "nodes", "eight GPUs to a node, job and spares alike")
    total = fat_tree_switches(s, E, k, r, three_tier)
    ckpt = s.step("checkpoint", "Checkpoint size", "S_ck", N * b_st, "TB",
                  "the training state a restart needs: fp32 master weights and both Adam moments")
    rate = s.step("storage_rate", "Storage write bandwidth for the checkpoint", "B_st", ckpt / T_w, "GB/s",
                  "the whole checkpoint inside the window the training stall allows")
    IT = s.step("it_power", "IT power: nodes and fabric", "P_IT", nodes * P_n + total * k * P_port, "MW",
                "nodes at their maximum system power, plus every switch port with its optics (empty ports too, an "
                "upper bound): the IT load, before cooling")
    site = s.step("facility_power", "Site power: the feed the site must supply", "P_site", IT * pue, "MW",
                  "the IT load times PUE: cooling and power conversion on top")
    _bom_judgements(s, p, E0, E, pod, n_job, g, pool, rate, site)

    s.assume("Model FLOPs 6·N·D (flops-per-token, from training-compute-budget) over the dense bf16 peak "
             "(dense-peaks) at the stated MFU; the schedule is compute time.")
    s.assume("Node failures arrive at random, one per node MTBF per node (Llama 3 405B: 466 interruptions in 54 "
             "days on 2,048 nodes, one per ~240 node-days); a failed node is out for the repair time (diagnosis, RMA "
             "or reseat, burn-in). The pool covers the mean plus two standard deviations of a Poisson count.")
    s.assume("Rail-optimised compute fabric (NIC i of every node on rail i, as in DGX SuperPOD), bought in whole "
             "scalable units of k/2 nodes (one rail leaf per GPU index; 32 nodes on 64-port switches): the leaf "
             "count is a multiple of 8, and near the two/three-tier line the bill grows by a unit, not a pod.")
    s.assume("A rail leaf out takes one NIC from each node of its unit, and those nodes are counted out of the "
             "job. NCCL's PXN can carry that rail's traffic through a peer GPU's NIC over NVLink, so a job could "
             "limp on at reduced bandwidth instead; spares are not sized on that.")
    s.assume("The job's GPUs are the FLOPs' count, before the parallel layout: a real run rounds them to a "
             "multiple of its model-parallel group (405B in TP 8 × PP 16 runs in 128-GPU replicas; Meta's run "
             "used 16,384 = 2^14), which can add a unit.")
    s.assume("The checkpoint rate is for a synchronous save inside the window. Production runs copy the state to "
             "host memory and drain it asynchronously, so the training stall is the device-to-host copy and the "
             "filesystem gets the whole interval; Llama 3's storage sustained 2 TB/s.")
    s.assume("Fat tree of one switch model: leaves and spines split their ports half down, half up (non-blocking "
             "inside a pod); above the pods the core may be oversubscribed, as large clusters do (Llama 3's "
             "24K-GPU cluster: 1:7 between pods). Storage, front-end and management networks are not counted.")
    s.assume(f"Node power {format_quantity(p.node_kw, 'kW')} (DGX H100 datasheet maximum); each switch port "
             f"{format_quantity(p.port_w, 'W')} with its optics, an estimate (32 twin-port OSFP cages rated at "
             "17 W per transceiver in a 64-port QM9700, plus the switch itself). Storage power left out.")
    s.slip("MFU left out: the GPUs at datasheet peak", p.mfu, on="gpus_needed")
    s.slip("GPUs per node forgotten: one node per GPU", p.gpus_per_node, on="nodes")
    s.slip("the spares' mean only, no cover for its spread", on="spare_pool",
           factor=s.evaluate(ceil_of(down)) / s.value(pool))
    s.slip("bf16 weights only in the checkpoint", 2 / p.checkpoint_bytes, on="storage_rate")

    _tier_regime(s, E0, E2, k)

