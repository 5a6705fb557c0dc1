"""What a hybrid Mamba/attention request holds, and where vLLM's prefix cache lets it restart."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_config
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_number

KERNEL_BLOCK = 16  # FlashAttention's block sizes are multiples of 16 tokens (get_supported_kernel_block_sizes)


def _policy_judgements(s: Sheet, state, kv, kept_bytes, dense_bytes, reuse, C, B, n_blk, r, M_l,
                       page) -> None:
    key = "snapshot_policy"
    s.judge(key, "The states it keeps cost more than its KV cache", s.compare(kept_bytes, kv) > 0,
            f"{s.text(kept_bytes)} of kept states against {s.text(kv)} of KV; a state at every block would cost "
            f"{format_number(s.value(dense_bytes) / 2**20)} MiB, over the KV whatever the context, since Mamba "
            "layers outnumber attention layers (why vLLM sparsified it)")
    s.judge(key, "More than a tenth of a resent context is prefilled again", s.compare(10 * (C - reuse), C) > 0,
            f"{format_number(s.evaluate(C - reuse))} of {format_number(s.value(C))} tokens come after the newest "
            "kept state")
    s.judge(key, "Its live state and kept states together outweigh its KV cache",
            s.compare(state + kept_bytes, kv) > 0,
            f"{s.text(state)} + {s.text(kept_bytes)} against {s.text(kv)} of KV")
    # The knob, not the crossover again (read12: "at twice this context" restated the regime): would a state kept
    # half as often bring the kept states under the KV?
    fewer = s.evaluate(ceil_of(n_blk / (2 * r)) * M_l * page)
    s.judge(key, "Doubling the retention interval would leave its kept states under its KV cache",
            s.compare(fewer, kv) < 0,
            f"a state every {format_number(2 * s.value(r))} blocks: {format_number(fewer / 2**20)} MiB of kept "
            f"states against {s.text(kv)} of KV")
    s.judge(key, "A prompt a quarter this long would get no hit from the cache", s.compare(C, 4 * B) <= 0,
            f"a quarter is {format_number(s.evaluate(C / 4))} tokens against a {format_number(s.value(B))}-token "
            "block: a hit needs a full block before the prompt's last token")


def _state_regime(s: Sheet, state, kv, C_star, C) -> None:
    live, cache = s.text(state), s.text(kv)
    crossover = format_number(s.value(C_star))
    s.regime_by(C, C_star, tie="above", above=Side(
        "kv-dominated",
        f"The attention KV ({cache}) outweighs the recurrent state ({live}): past {crossover} tokens the few "
        "attention layers set the memory per request, as in a transformer with fewer layers.",
        f"Below {crossover} tokens the fixed recurrent state dominates: a short request pays the full state "
        "however few tokens it has, and every state kept for prefix reuse costs a padded page per Mamba layer."),
        below=Side(
        "state-dominated",
        f"The recurrent state ({live}) outweighs the attention KV ({cache}): below {crossover} tokens the fixed "
        "state is most of what a request holds, so short requests cost far more than their token count "
        "suggests, and each kept state costs as much again.",
        f"Past {crossover} tokens the KV of the few attention layers grows beyond the state, and memory per "
        "request scales with context as in a transformer, only more slowly."))


def solve(p, s: Sheet) -> None:
    m = p.model
    M_l = given_config(s, m, "mamba_layers")
    n_h = given_config(s, m, "ssm_heads")
    d_p = given_config(s, m, "ssm_head_dim")
    d_s = given_config(s, m, "ssm_state")
    g = given_config(s, m, "ssm_groups")
    K = given_config(s, m, "conv_kernel")
    b_s = s.given("b_ssm", dtype_bytes(p.ssm_dtype), "B", f"bytes per SSM state element ({p.ssm_dtype})")
    b_c = s.given("b_conv", dtype_bytes("bf16"), "B", "bytes per conv buffer element (bf16)")
    ssm = s.step("ssm_layer", "SSM state per layer", "S_ssm", n_h * d_p * d_s * b_s, "MiB",
                 "one head_dim × state_size matrix per head")
    conv = s.step("conv_layer", "Conv buffer per layer", "S_conv", (K - 1) * (n_h * d_p + 2 * g * d_s) * b_c,
                  "KiB", "the last K − 1 inputs of the x, B and C channels the causal conv reads")
    layer_state = s.step("layer_state", "Recurrent state of one Mamba layer", "S_l", ssm + conv, "MiB",
                         "what one layer's Mamba page must hold")
    state = s.step("state_per_request", "Recurrent state per request", "S", M_l * layer_state, "MiB",
                   "every Mamba layer keeps its own state, whatever the context length")

    kv_tok = kv_bytes_per_token_given(s, m, dtype_bytes(p.kv_dtype), p.kv_dtype)
    L_A = given_config(s, m, "attention_layers")
    C = s.param("C", "context")
    kv = s.step("kv_per_request", "KV cache per request", "KV_req", kv_tok * C, "MiB",
                "the attention layers' keys and values for every token of the context")
    C_star = s.step("crossover", "Context at which KV equals the state", "C_star", state / kv_tok, "tokens",
                    "KV grows with the context, the state does not")

    a = s.step("attn_page_token", "One attention layer's KV per token", "a", kv_tok / L_A, "KiB",
               "an attention page holds block × this for one layer")
    k16 = s.given("k_blk", KERNEL_BLOCK, "tokens", "attention kernel block multiple")
    B = s.step("block_size", "Attention block size vLLM picks", "B", k16 * ceil_of(layer_state / (k16 * a)),
               "tokens", "the fewest 16-token multiples whose one-layer page holds one Mamba layer's state")
    if s.compare(C, 2 * B) < 0:
        raise Reject(f"a {format_number(s.value(C))}-token context is under two {format_number(s.value(B))}-token "
                     "blocks: nothing to restore")
    page = s.step("page", "Page per layer per block (a Mamba state padded to it)", "P", B * a, "MiB",
                  "every layer's page is the same size, so a Mamba state fills a whole attention page")
    if s.compare(C, B * floor_of(C / B)) == 0:
        # vLLM caps a hit at the prompt's length less one (the last token is computed again for its logits),
        # so a context ending on a boundary resumes from an older kept state: not a draw to grade.
        raise Reject(f"a {format_number(s.value(C))}-token context ends exactly on a "
                     f"{format_number(s.value(B))}-token block boundary")
    n_blk = s.step("full_blocks", "Full blocks in the context", "n_blk", floor_of(C / B), "blocks",
                   "a state exists only at a block boundary")
    r = s.param("r", "retain")
    kept = s.step("states_kept", "States kept for reuse", "n_kept", ceil_of(n_blk / r), "",
                  "one at the end of every r blocks, plus the newest boundary")
    kept_bytes = s.step("snapshot_bytes", "Memory of the kept states", "S_kept", kept * M_l * page, "MiB",
                        "each kept state is a padded page in every Mamba layer")
    reuse = s.step("reusable", "Tokens a resent context restores from cache", "C_hit", B * n_blk, "tokens",
                   "the newest full block boundary, whose state is always kept; the rest is prefilled again")
    dense = s.step("dense_bytes", "Memory if a state were kept at every block", "S_dense", n_blk * M_l * page,
                   "MiB", "vLLM's retention before it was sparsified")

    s.assume(f"Layer counts and shapes from {m.name}'s config (see the model's source); its MLP and MoE layers "
             "hold no state.")
    s.assume("A hit stops one token short of a whole resent prompt (vLLM computes the last token again for its "
             "logits), so a context ending exactly on a block boundary would resume from an older kept state: "
             "such contexts are not drawn.")
    s.assume("State shapes as vLLM allocates them (MambaStateShapeCalculator.mamba2_state_shape): SSM state "
             "heads × head_dim × state_size, conv buffer (kernel − 1) × (heads·head_dim + 2·groups·state_size), "
             "the conv in the model's bf16; one GPU, no TP split (under TP the Mamba heads and conv channels "
             "shard), no speculative decoding (which would snapshot the state per draft window to roll back a "
             "rejection).")
    s.assume("vLLM with prefix caching in align mode (mamba_cache_mode align; platforms/interface.py): the "
             "attention block is the least multiple of 16 tokens whose one-layer page holds one Mamba layer's "
             "state, and the Mamba page is padded to it; the Mamba block is the attention block, so a hit resumes "
             "only at a block boundary. (All mode, which keeps a state at every block, rounds the block up to a "
             "multiple of the Mamba chunk size instead.)")
    s.assume(f"Retention as vLLM's prefix-cache retention interval (PRs #45845, #52216) set to "
             f"{format_number(p.retain)} blocks: one state per interval plus the newest replayable boundary; "
             "every other state is freed. Before #45845 a state was kept at every block. The prefill is taken as "
             "chunked at block boundaries, so every grid state exists: on vLLM main align mode materialises a "
             "state only where a prefill chunk ends (PRs #43628, #53803), so this is the policy as designed.")
    state_answers = ("state_per_request", "crossover")
    s.slip("x Mamba layers: one layer's state, not the model's", 1 / m.mamba_layers, on=state_answers)
    s.slip("conv buffer left out", on=state_answers, factor=s.value(ssm) / s.value(layer_state))
    mixers = (m.mamba_layers + m.attention_layers) / m.attention_layers
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", mixers,
           on="kv_per_request")
    s.slip("KV counted over every Mamba and attention layer, not the attention layers alone", 1 / mixers,
           on="crossover")
    s.slip("kept states counted unpadded, at the Mamba state's own size", s.value(layer_state) / s.value(page),
           on="snapshot_bytes")
    if s.compare(kept, n_blk) < 0:
        s.slip("a state kept at every block, not every r blocks", s.value(n_blk) / s.value(kept),
               on="snapshot_bytes")
    _policy_judgements(s, state, kv, kept_bytes, dense, reuse, C, B, n_blk, r, M_l, page)
    if s.compare(50 * C, 51 * C_star) < 0 and s.compare(50 * C, 49 * C_star) > 0:
        # The crossover is graded to 2%: a context that close to it cannot be called either side fairly.
        s.refuse_if_asked(["regime"], "the context is within 2% of the crossover, the crossover's tolerance")
    _state_regime(s, state, kv, C_star, C)
