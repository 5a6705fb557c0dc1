"""How many KV cache blocks vLLM allocates, and why that is a ceiling."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import tp_all_reduce
from solvers.formulas.common import GPU_MEMORY_UTILIZATION, given_active_params, given_config, given_weight_bytes
from solvers.formulas.memory import profile_run_inputs
from solvers.formulas.moe import parameter_count
from solvers.formulas.steptime import Engine, StepWork, engine, step_time
from solvers.sheetmath import ceil_of, floor_of, min_of
from solvers.units import format_number, format_quantity

TOO_CLOSE = 0.03  # the TPOT's tolerance in the question file


def _block_slips(p, s: Sheet, avail, page, blocks, per_seq, seqs) -> None:
    s.slip("x layers: one layer's page, not the whole block", 1 / p.model.layers, on="block_bytes")
    per_layer = floor_of(avail / page)  # blocks when the layers are not divided out
    s.slip("blocks counted per layer", s.evaluate(per_layer) / s.value(blocks), on="num_blocks")
    s.slip("blocks counted per layer", on="max_sequences",
           factor=s.evaluate(floor_of(per_layer / per_seq)) / s.value(seqs))
    kept = max(1, p.model.kv_heads // p.tp)  # KV heads each GPU holds
    if p.tp > p.model.kv_heads:
        s.slip("KV heads split past their count (no replication)", p.model.kv_heads / p.tp, on="block_bytes")
    s.slip("KV heads not split over TP", p.model.kv_heads / kept, on="block_bytes")


def _ceiling_judgements(p, s: Sheet, avail, A, block, blocks,
                        reads: tuple[sympy.Expr, sympy.Expr, sympy.Symbol]) -> None:
    """Why fewer full-context sequences run than a naive count suggests, judged on this variant."""
    s.judge("ceiling", "this TP exceeds the KV heads, so each GPU holds a copied head and its blocks shrink no further",
            p.tp > p.model.kv_heads,
            f"TP {p.tp} over {p.model.kv_heads} KV heads: "
            + (f"every GPU holds a copy of one head, {p.tp // p.model.kv_heads} GPUs per head, so a block costs "
               "each GPU as much as at TP = KV heads (the weights still shard further)"
               if p.tp > p.model.kv_heads else "each GPU keeps one head, none copied yet (a wider TP would copy it)"
               if p.tp == p.model.kv_heads else f"each GPU keeps {p.model.kv_heads // p.tp} heads, none copied"))
    s.judge("ceiling", "the CUDA graphs captured after start-up take blocks back", False,
            "the blocks are allocated before the graphs are captured; the graphs come out of the memory "
            "outside gpu_memory_utilization, or OOM there", fact=True)
    more = floor_of((avail + A / 2) / block) / blocks - 1
    gained = s.evaluate(more)
    s.judge("ceiling", "halving max_num_batched_tokens would add over {more_blocks} more blocks",
            s.compare(more, s.param("f_more", "more_blocks")) > 0,
            f"half the {s.text(A)} activation peak returns "
            f"{format_quantity(s.value(A) / 2, 'GiB')}: {format_quantity(gained, '%')} more blocks")
    weights, kv, tpot = reads
    speed = s.param("v_read", "reading_speed")
    # The TPOT is graded within 3%: a speed or a read split that close to its line could be called either way.
    if abs(s.evaluate(1 / tpot) / s.value(speed) - 1) <= TOO_CLOSE or abs(s.evaluate(kv / weights) - 1) <= TOO_CLOSE:
        raise Reject("the per-user speed or the KV-to-weight read ratio is within 3% of its line: too close to call")
    s.judge("ceiling", "at that batch and full context, each step reads more KV than weights",
            s.compare(kv, weights) > 0,
            f"each GPU reads {format_quantity(s.evaluate(kv), 'GB')} of KV against "
            f"{format_quantity(s.evaluate(weights), 'GB')} of weights a step")
    s.judge("ceiling", "at that batch and full context, every user still streams over {reading_speed}",
            s.compare(1 / tpot, speed) > 0,
            f"a {s.text(tpot)} step gives each user {format_quantity(1 / s.value(tpot), 'tokens/s')}")


def _decode_tpot(p, s: Sheet, e: Engine, batch, C, tag: str = "dec", key: str = "tpot",
                 label: str = "decode step at full context") -> tuple[sympy.Expr, sympy.Expr, sympy.Symbol]:
    """The step of the batch that runs, every sequence at full context, in the bank's step model; the
    weights and KV each GPU reads in it. A MoE model reads the experts the batch touches and runs its
    active parameters."""
    N_act = e.N
    weights = e.W / e.TP
    if p.model.get("active_params_b") is not None:
        N_act = given_active_params(s, p.model)
        E = given_config(s, p.model, "experts")
        k = given_config(s, p.model, "experts_per_token", "k_E")
        routed = s.given("N_routed", parameter_count(p.model).routed, "", "routed expert parameters (config)")
        sub = "" if tag == "dec" else f"_{tag}"
        touched = s.step("", "Share of each layer's experts the batch touches", f"f_E{sub}", 1 - (1 - k / E) ** batch,
                         "%",
                         "each sequence's token picks k of E experts; the chance an expert is missed by all of them")
        weights = s.step("", "Weights each GPU reads per step", f"W_read{sub}",
                         (e.W - routed * given_weight_bytes(s, p.weight_dtype) * (1 - touched)) / e.TP, "GB",
                         "all but the routed experts no token of the batch picked")
    kv = e.KV * batch * C
    work = StepWork(s.step(f"flops_{tag}", f"FLOPs of the {label}", f"F_{tag}",
                           2 * N_act * batch + e.A * batch * C,
                           "TFLOP", "2 per active weight per token, plus attention over the full context"),
                    s.step(f"bytes_{tag}", f"Bytes each GPU reads in the {label}", f"M_{tag}", weights + kv, "GB",
                           "its share of the weights, read once for the batch, and of every sequence's KV"),
                    e.math_time(2 * N_act * batch, e.A * batch * C))
    comm = tp_all_reduce(s, p.model, p.gpu, p.tp, batch, tag=tag, label=label)
    tpot = step_time(s, e, tag, label, work, key=key, communication=comm,
              why="one token for every running sequence: the slower of reads and math"
                  + (", the all-reduces" if p.tp > 1 else "") + ", plus overhead")
    return weights, kv, tpot


def _ceiling_regime(s: Sheet, seqs, cap) -> None:
    count, limit = format_number(s.value(seqs)), s.text(cap)
    s.regime_by(seqs, cap, tie="above", below=Side(
        "block-limited",
        f"The blocks hold {count} full-context sequences, fewer than max_num_seqs = {limit}: the KV cache is the "
        "ceiling, and it is reached only if every sequence grows to the full context at once; shorter ones "
        "leave blocks for more, longer-lived ones force preemption.",
        "With shorter contexts, fp8 KV, more GPUs or fp8 weights the blocks outgrow max_num_seqs, which then "
        "caps the batch while blocks sit idle: raise it (and the CUDA-graph capture sizes) to use them.",
        near=f"The blocks hold {count} full-context sequences, just under max_num_seqs = {limit}: the cache binds "
             f"first, but more blocks buy at most {format_number(s.value(cap) - s.value(seqs))} more sequences "
             "before max_num_seqs does."),
        above=Side(
        "seqs-limited",
        f"The blocks hold {count} full-context sequences, but max_num_seqs = {limit} admits fewer: the scheduler's "
        "cap binds and the rest of the blocks serve only longer sequences or the prefix cache.",
        "With longer contexts, bf16 KV or narrower TP the blocks run out before max_num_seqs: the KV cache is "
        "then the ceiling, and every sequence that grows past its share forces a preemption.",
        near=f"max_num_seqs = {limit} caps the batch just below the {count} sequences the blocks hold: both "
             "limits are close, so raising max_num_seqs alone soon runs into the blocks."))


def solve(p, s: Sheet) -> None:
    M, u, n, A, T, w = profile_run_inputs(p, s, GPU_MEMORY_UTILIZATION, peak="A_pk", tp="TP")
    e = engine(s, p.model, p.gpu, p.tp, dtype=p.weight_dtype, kv_dtype=p.kv_dtype, communication=True,
               kv_prerequisite=True)
    other = s.step("other_non_kv", "Activation peak plus non-torch memory", "O", A + T, "GiB",
                   "what the profile run measured besides the weights")
    avail = s.step("available", "Memory left for the KV cache per GPU", "M_KV", M * u - (w + other), "GiB",
                   "vLLM: total × gpu_memory_utilization − (weights + activation peak + non-torch)")
    if s.value(avail) <= 0:
        raise Reject("no memory for cache blocks: vLLM refuses to start")
    L = given_config(s, p.model, "layers")
    bs = s.param("S_b", "block_size")
    page = s.step("page_bytes", "Page per layer (one block)", "P_pg", bs * e.KV / L, "KiB",
                  "vLLM's page_size_bytes: the block's tokens times one layer's K and V for the heads this GPU keeps")
    block = s.step("block_bytes", "Bytes per block, all layers, per GPU", "B_blk", page * L, "MiB",
                   "a block id covers the same token slots in every layer")
    blocks = s.step("num_blocks", "KV cache blocks", "N_blk", floor_of(avail / block), "blocks",
                    "vLLM: available // page_size // num_layers (two floors give the same as one)")
    s.step("token_capacity", "Token slots in the cache", "K_tok", blocks * bs, "tokens",
           "what vLLM logs as the GPU KV cache size")
    C = s.param("C", "context")
    per_seq = s.step("blocks_per_sequence", "Blocks per full-context sequence", "k", ceil_of(C / bs),
                     "blocks", "a sequence's last block is allocated whole, however few tokens it holds")
    seqs = s.step("max_sequences", "Full-context sequences the blocks hold", "B_max",
                  floor_of(blocks / per_seq), "sequences",
                  "vLLM's 'maximum concurrency' line: the blocks over one sequence's blocks")
    if s.value(seqs) < 1:
        raise Reject("not one sequence fits at this context: vLLM refuses to start")
    cap = s.param("S_max", "max_num_seqs")
    if s.compare(seqs, cap) == 0:
        raise Reject("the blocks hold exactly max_num_seqs sequences: neither cap is the one that binds")
    running = s.step("concurrency", "Full-context sequences that run at once", "B_run", min_of(seqs, cap),
                     "sequences", "the scheduler admits no more than max_num_seqs, and no more than the blocks hold")
    reads = _decode_tpot(p, s, e, running, C)
    # read12 (rf-ft) #3: on the max_num_seqs side the push asks what the idle blocks would cost in TPOT if the
    # scheduler were let fill them, the trade a cut to max_num_seqs makes (on the block side it is the TPOT).
    _decode_tpot(p, s, e, seqs, C, tag="fill", key="tpot_filled", label="full-cache decode step")

    s.assume("total_memory is the capacity the device reports (hbm_mib), as vLLM reads it; "
             f"gpu_memory_utilization = {format_number(GPU_MEMORY_UTILIZATION)} caps everything vLLM allocates; "
             "CUDA graphs, captured after the cache is sized, come out of the rest. That is vLLM before v0.21: "
             "since v0.21 it also takes an estimate of the graphs' memory out before it sizes the cache, by default "
             "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, vllm PR #30515), so a current engine holds somewhat fewer "
             "blocks than this accounting.")
    s.assume("The activation peak and non-torch memory are what the profile run measured on each GPU at "
             "max_num_batched_tokens; the peak grows with that token count, so halving it roughly halves the "
             "peak. The weights split evenly over the TP group (vocab-parallel embeddings and LM head included).")
    s.assume("KV heads per GPU follow vLLM: H_kv // TP, but at least one; past the KV heads each is replicated.")
    s.assume("The TPOT is the worst step the admitted batch can take: every running sequence at the full context.")
    _block_slips(p, s, avail, page, blocks, per_seq, seqs)
    _ceiling_judgements(p, s, avail, A, block, blocks, reads)
    _ceiling_regime(s, seqs, cap)
