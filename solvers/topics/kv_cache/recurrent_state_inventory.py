"""What a hybrid Mamba/attention request holds, and where it can restart."""
from __future__ import annotations

from solvers.data import Record
from solvers.derivation import Sheet, Side
from solvers.models.common import (
    dtype_bytes,
)
from solvers.models.kvcache import (
    kv_bytes_per_token_given,
)
from solvers.sheetmath import floor_of, lcm_of, min_of
from solvers.units import format_number


def _restorable(s: Sheet, interval, block, C) -> float:
    """Tokens of a C-token context a next turn restores, with snapshots every `interval` and KV blocks of
    `block` tokens: the last position both land on."""
    R = lcm_of(interval, block)
    return s.evaluate(R * floor_of(C / R))


def _snapshot_judgements(s: Sheet, p, state, kv, kept_bytes, R, reuse, k, B, C) -> None:
    key, now = "snapshot_policy", s.value(reuse)
    s.judge(key, "The snapshots it keeps cost more than its KV cache", s.compare(kept_bytes, kv) > 0,
            f"{s.text(kept_bytes)} of snapshots against {s.text(kv)} of KV")
    s.judge(key, "A next turn resending this context restores more than half of it from cache",
            s.compare(2 * reuse, C) > 0,
            f"{format_number(now)} of {format_number(s.value(C))} tokens come back")
    half = _restorable(s, k / 2, B, C)
    s.judge(key, "Snapshots every half the interval would restore more of the next turn", half > now,
            f"restart points every lcm(k/2, B) = {format_number(s.evaluate(lcm_of(k / 2, B)))} tokens restore "
            f"{format_number(half)} tokens against {format_number(now)}")
    per_block = _restorable(s, B, B, C)
    s.judge(key, "Snapshots at every block boundary would restore more of the next turn", per_block > now,
            f"restart points every {format_number(p.block_size)} tokens restore {format_number(per_block)} tokens "
            f"against {format_number(now)}")
    s.judge(key, "Keeping more snapshots per request would restore more of the next turn", False,
            "a turn that resends the whole context resumes from the newest restart point; older snapshots only "
            "serve a branch from earlier in the conversation", fact=True)


def _state_regime(s: Sheet, state, kv, C_star, C) -> None:
    live, cache = s.text(state), s.text(kv)
    crossover = format_number(s.value(C_star))
    s.regime_by(C, C_star, tie="above", above=Side(
        "kv-dominated",
        f"The attention KV ({cache}) outweighs the recurrent state ({live}): past {crossover} tokens the few "
        "attention layers set the memory per request, and each kept snapshot is small next to the cache.",
        f"Below {crossover} tokens the fixed recurrent state dominates: a short request pays the full state "
        "however few tokens it has, and every snapshot kept for prefix reuse costs as much again, which is why "
        "engines keep only the ones on a restart point and cap them."),
        below=Side(
        "state-dominated",
        f"The recurrent state ({live}) outweighs the attention KV ({cache}): below {crossover} tokens the fixed "
        "state is most of what a request holds, so short requests cost far more than their token count "
        "suggests, and each snapshot kept costs as much as the live state.",
        f"Past {crossover} tokens the KV of the few attention layers grows beyond the state, and memory per "
        "request scales with context as in a transformer, only more slowly; the capped snapshots stay a "
        "fixed cost."))


def solve(p, s: Sheet) -> None:
    M_l = s.param("L_M", "mamba_layers")
    n_h = s.param("n_h", "ssm_heads")
    d_p = s.param("d_p", "ssm_head_dim")
    d_s = s.param("d_s", "state_size")
    g = s.param("n_g", "n_groups")
    K = s.param("K", "conv_kernel")
    b_s = s.given("b_ssm", dtype_bytes(p.ssm_dtype), "B", f"bytes per SSM state element ({p.ssm_dtype})")
    b_c = s.given("b_conv", dtype_bytes("bf16"), "B", "bytes per conv buffer element (bf16)")
    ssm = s.step("ssm_layer", "SSM state per layer", "S_ssm", n_h * d_p * d_s * b_s, "MiB",
                 "one head_dim × state_size matrix per head")
    conv = s.step("conv_layer", "Conv buffer per layer", "S_conv", (K - 1) * (n_h * d_p + 2 * g * d_s) * b_c,
                  "KiB", "the last K − 1 inputs of the x, B and C channels the causal conv reads")
    state = s.step("state_per_request", "Recurrent state per request", "S", M_l * (ssm + conv), "MiB",
                   "every Mamba layer keeps its own state, whatever the context length")

    attention = Record(name="attention layers", layers=p.attn_layers, kv_heads=p.kv_heads, head_dim=p.head_dim,
                       attention="gqa")
    kv_tok = kv_bytes_per_token_given(s, attention, dtype_bytes(p.kv_dtype), p.kv_dtype)
    C = s.param("C", "context")
    kv = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "MiB",
                "the attention layers' keys and values for every token of the context")
    C_star = s.step("crossover", "Context at which KV equals the state", "C_star", state / kv_tok, "tokens",
                    "KV grows with the context, the state does not")

    k = s.param("k", "interval")
    B = s.param("B", "block_size")
    taken = s.step("snapshots_taken", "Snapshots taken over the context", "n_snap", floor_of(C / k), "",
                   "one every k tokens")
    R = s.step("restart_boundary", "Positions every layer can restore", "R", lcm_of(k, B), "tokens",
               "attention restores at whole blocks, the Mamba layers only at snapshots: both at lcm(k, B)")
    usable = s.step("snapshots_usable", "Snapshots at a restart point", "n_use", floor_of(C / R), "",
                    "only these can ever seed a cache hit; the rest are dropped")
    keep = s.param("n_keep", "keep")
    kept = s.step("snapshots_kept", "Snapshots the engine keeps", "n_kept", min_of(keep, usable),
                  "", "the newest usable ones, up to the per-request cap")
    kept_bytes = s.step("snapshot_bytes", "Memory of the kept snapshots", "S_snap", kept * state, "MiB",
           "each is a full copy of the recurrent state of every Mamba layer")
    reuse = s.step("reusable", "Tokens the next turn restores from cache", "C_hit", R * usable, "tokens",
                   "the newest restart point within the context; everything after it is recomputed")

    s.assume("Layer counts and shapes from Nemotron-H-8B's config.json (the 128K reasoning release keeps them); "
             "its MLP layers hold no state.")
    s.assume("State shapes as vLLM allocates them (MambaStateShapeCalculator.mamba2_state_shape): SSM state "
             "heads × head_dim × state_size, conv buffer (kernel − 1) × (heads·head_dim + 2·groups·state_size); "
             "one GPU, no TP split.")
    s.assume("A snapshot copies the whole recurrent state (SSM and conv) of every Mamba layer; the attention "
             "KV is cached in whole blocks, so a prefix is restorable only where both line up.")
    s.assume("Retention is capped, as engines cap it: SGLang's MambaRadixCache keeps a state only where a cached "
             "prefix ends, in a pool of its own with LRU eviction; Megatron-Core keeps at most 3 intermediate "
             "states per request; vLLM sparsifies per-block snapshots with a retention interval. Here the engine "
             f"keeps the newest {format_number(p.keep)} snapshot(s) that sit on a restart point and drops the rest.")
    s.assume("Block sizes and snapshot intervals here are illustrative. vLLM sizes a hybrid model's attention "
             "block so that one layer's page holds a Mamba layer's state (for this layout with bf16 KV: 528 "
             "tokens with a bf16 SSM state, 1,040 with fp32); with prefix caching on, it rounds that up to a "
             "multiple of the 256-token Mamba chunk (768, 1,280) and snapshots the state at every block boundary. "
             "Here the block is drawn apart from the state dtype and the snapshots come every 512 or 1,024 tokens.")
    state_answers = ("state_per_request", "crossover", "snapshot_bytes")
    s.slip("x Mamba layers: one layer's state, not the model's", 1 / p.mamba_layers, on=state_answers)
    s.slip("conv buffer left out", on=state_answers,
           factor=s.value(ssm) / (s.value(ssm) + s.value(conv)))
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", on="kv_per_request",
           factor=(p.mamba_layers + p.attn_layers) / p.attn_layers)
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", on="crossover",
           factor=p.attn_layers / (p.mamba_layers + p.attn_layers))
    if s.compare(kept, 0) > 0:
        s.slip("every snapshot taken kept, unbounded", s.value(taken) / s.value(kept), on="snapshot_bytes")
    _snapshot_judgements(s, p, state, kv, kept_bytes, R, reuse, k, B, C)
    _state_regime(s, state, kv, C_star, C)

