"""Prefix-cache questions: what a block-hash cache (vLLM) and a radix tree (SGLang) serve from
cache, what their eviction takes, where a cache key means anything, and what evicting a block
that still has descendants strands.

Engine facts they rest on, from the engines' source:
- vLLM v1 hashes full blocks only, each as hash(parent hash, block tokens, extra keys: LoRA name,
  multimodal hashes, cache_salt); the first block's parent is NONE_HASH, os.urandom(32) unless
  PYTHONHASHSEED is set (vllm/v1/core/kv_cache_utils.py init_none_hash). A hit stops one token
  short of the prompt, whose logits must be computed (kv_cache_manager.get_computed_blocks,
  max_cache_hit_length = num_tokens − 1). Freed blocks join an LRU free queue, a request's
  chain tail first, and the head of the queue is evicted (FreeKVCacheBlockQueue).
- SGLang's RadixCache (page size 1) matches token by token, also one short of the prompt
  (Req.adjust_max_prefix_ids); a match refreshes every node on its path, and evict() pops the
  least recently used unlocked leaf and frees all of its tokens (radix_cache.py).
"""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side, max_of, min_of
from solvers.topics.common import dtype_bytes
from solvers.topics.kvcache import kv_bytes_per_token_given
from solvers.units import format_number, format_quantity

# The teaser's bar: on a chat prompt the two hit rates differ by under one percent of the prompt.
MATERIAL_GAP = 0.01


def prefix_cache_engines(p, s: Sheet) -> None:
    B = s.param("B", "block_size")
    P = s.param("P", "prompt")
    D = s.param("D", "history")
    S = s.param("S", "system")
    R = s.param("R", "evicted")

    # Both engines compute the prompt's last token themselves, so at most P − 1 tokens can hit.
    M = s.step("matchable", "Prompt tokens a cache may serve", "D_m", min_of(D, P - 1), "tokens",
               "the repeated history, but never the prompt's last token: its logits must be computed")
    hit_radix = s.step("radix_hit", "Radix tree: tokens served from cache", "H_rad", M, "tokens",
                       "the tree matches token by token, so every matchable token hits")
    hit_block = s.step("block_hit", "Block-hash cache: tokens served from cache", "H_blk", B * sympy.floor(M / B),
                       "tokens", "only full blocks carry a hash, so the hit stops at the last full block")
    gap = s.step("gap", "Tokens the radix tree serves and the block cache does not", "g", hit_radix - hit_block,
                 "tokens", "the matchable tokens past the last full block: (min(D, P−1) mod B)")
    s.step("gap_share", "The gap as a share of the prompt", "g_P", gap / P, "%",
           "the difference between the two hit rates, in points of the prompt")
    bound = s.step("gap_bound", "Worst case of the gap as a share of the prompt", "g_max", (B - 1) / P, "%",
                   "at most B − 1 tokens of a block can be left unhashed")
    s.step("mean_gap", "Mean gap over where the history ends", "g_mean", (B - 1) / 2, "tokens",
           "an ending equally likely at each of the B slots of a block leaves 0 to B − 1 tokens, (B − 1)/2 on average")

    _after_eviction(s, B, P, D, S, R, M)
    _key_scope(s, p)

    tau = s.given("τ", MATERIAL_GAP, "%", "a gap counted as material (one point of the prompt)")
    P_star = s.step("boundary_prompt", "Prompt length below which the worst-case gap passes the bar", "P_star",
                    (B - 1) / tau, "tokens", "solve (B − 1)/P = τ for P")
    s.assume("The history D counts the tokens whose KV the previous turn computed (prompt and reply, the same "
             "token ids; its last sampled token has none yet); vLLM caches every full block of it, SGLang all of "
             "it (page size 1).")
    s.assume("Other live conversations hold the system prompt (their requests are running), so neither engine can "
             "evict it; this conversation's own blocks and leaf are free and least recently used.")
    s.assume("Engine versions: vLLM v1 (chained sha256 block hashes, LRU free-block queue); SGLang RadixCache with "
             "the default LRU policy and page size 1.")
    s.slip("the whole history taken as matchable (the last prompt token forgotten)", on="block_hit",
           factor=s.evaluate(B * sympy.floor(min_of(D, P) / B)) / s.value(hit_block))
    s.slip("B/P instead of (B − 1)/P", on="gap_bound", factor=s.value(B) / (s.value(B) - 1))
    s.slip("B/2 instead of (B − 1)/2", on="mean_gap", factor=s.value(B) / (s.value(B) - 1))
    _gap_regime(s, bound, tau, P, P_star, gap)


def _after_eviction(s: Sheet, B, P, D, S, R, M) -> None:
    """What each engine still serves once R tokens were evicted with this conversation least recently used."""
    if s.compare(S, D) >= 0:
        raise Reject("the system prompt must be shorter than the repeated history")
    c = s.step("cached_blocks", "Full blocks the previous turn left cached", "c", sympy.floor(D / B), "blocks",
               "every full block of the history carries a hash")
    c_s = s.step("shared_blocks", "Full blocks of the system prompt (held by other chats)", "c_S",
                 sympy.floor(S / B), "blocks", "the first block holding this chat's own text is its own")
    k = s.step("evicted_blocks", "Blocks vLLM evicts to free the room", "k", sympy.ceiling(R / B), "blocks",
               "the free queue's head: this chat's chain, tail block first, one block per B tokens needed")
    left = s.step("", "vLLM: this chat's blocks still cached", "c_left", max_of(c_s, c - k), "blocks",
                  "the tail blocks go first, and the system prompt's blocks are in use elsewhere")
    after_block = s.step("block_after", "Block-hash cache: tokens served after the eviction", "H_blk2",
                         B * min_of(left, sympy.floor((P - 1) / B)), "tokens",
                         "the chain still cached from the first block, up to the matchable length")
    # SGLang frees the least recently used leaf whole: this chat's branch below the system prompt.
    after_radix = s.step("radix_after", "Radix tree: tokens served after the eviction", "H_rad2", min_of(S, M),
                         "tokens", "evict() frees the whole leaf, this chat's branch below the shared system prompt, "
                         "however few tokens were asked for")
    order = s.compare(after_block, after_radix)
    s.choose("after_eviction", "block-hash" if order > 0 else "radix" if order < 0 else "tie")
    s.slip("SGLang taken to evict only the tokens asked for", on="radix_after",
           factor=max(s.evaluate(min_of(D - R, M)), s.value(S)) / s.value(after_radix))
    if s.value(after_block) > 0:
        s.slip("vLLM taken to evict the whole conversation", on="block_after",
               factor=s.evaluate(B * min_of(c_s, sympy.floor((P - 1) / B))) / s.value(after_block))


SCOPE_OPTIONS = (
    "a later request to this same server process with the same prefix",
    "a request from another tenant with the same system prompt",
    "a KV-aware router that hashes each prompt's blocks itself to pick the replica",
    "this server after a restart, reading a shared CPU/SSD tier keyed by block hash",
    "another replica serving the same model with blocks of twice the size",
    "a request for a LoRA adapter of the same base model",
)


def _key_scope(s: Sheet, p) -> None:
    """Which lookups can reuse this vLLM replica's block hashes: set by the hash seed and the salt."""
    fixed = p.hash_seed == "fixed"
    salted = p.salt == "per-tenant"
    seed = ("PYTHONHASHSEED is fixed fleet-wide, so NONE_HASH and every chained hash are the same in any process"
            if fixed else "PYTHONHASHSEED is unset: NONE_HASH is os.urandom(32), so every chained hash is private "
            "to this process")
    first, tenant, router, restart, wider, lora = SCOPE_OPTIONS
    s.judge("key_scope", first, True, "same process, same NONE_HASH, same tokens: the same chained hashes")
    s.judge("key_scope", tenant, not salted,
            "each tenant's cache_salt enters the first block's extra keys, so its chain never meets another's"
            if salted else "no cache_salt is set, so equal tokens give equal hashes whoever sends them")
    s.judge("key_scope", router, fixed, seed)
    s.judge("key_scope", restart, fixed,
            seed + ("; a restarted process recomputes the same keys" if fixed else
                    "; a restarted process draws a new NONE_HASH and none of the stored keys match"))
    s.judge("key_scope", wider, False, "a block hash covers its own B tokens: other block boundaries give other "
            "chains from the first block on")
    s.judge("key_scope", lora, False, "the LoRA adapter's name enters every block's extra keys")


def _gap_regime(s: Sheet, bound, tau, P, P_star, gap) -> None:
    worst, bar = format_quantity(s.value(bound), "%"), format_quantity(s.value(tau), "%")
    now = format_number(s.value(gap))
    s.regime_by(P, P_star, tie="above", above=Side(
        "gap-negligible",
        f"Even the worst case, B − 1 unhashed tokens, is {worst} of this prompt, under the {bar} bar (this "
        f"history leaves {now}): the engines' hit rates are the same for practical purposes. What separates "
        "them is what their eviction takes and whom their keys mean something to.",
        "Below the boundary length (short prompts, or large blocks such as 64-128-token kernel pages) the "
        "partial last block is a visible share of the prompt, and token-granular matching starts to pay."),
        below=Side(
        "gap-material",
        f"The worst case, B − 1 unhashed tokens, is {worst} of this prompt, above the {bar} bar (this history "
        f"leaves {now}): a prompt this short against blocks this large gives token-granular matching a real "
        "edge, besides the differences in eviction and key scope.",
        "Past the boundary length the B − 1 tokens are a rounding error of the prompt, and the two caches hit "
        "alike; only eviction and key scope still tell them apart."))


# --- prefix-eviction-stranding -----------------------------------------------------------------


def _chat_symbols(s: Sheet, lengths: list[int]) -> list[sympy.Symbol]:
    # Zero-padded names keep sympy's sorted printing in chat order.
    width = len(str(len(lengths)))
    return [s.given(f"L_{i:0{width}d}", length, "tokens", f"own tokens of chat {i}")
            for i, length in enumerate(lengths, start=1)]


def prefix_eviction_stranding(p, s: Sheet) -> None:
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    B = s.param("B", "block_size")
    S = s.param("S", "system")
    j = s.param("j", "victim")
    L = _chat_symbols(s, list(p.chats))
    n = s.given("n", len(L), "", "chats below the system prompt")

    blk = s.step("block_bytes", "KV bytes of one block", "b_blk", B * kv_tok, "MiB",
                 "B tokens of keys and values in every layer")
    c_s = s.step("system_blocks", "Full blocks of the system prompt", "c_S", sympy.floor(S / B), "blocks",
                 "the shared part of every chat's chain")
    if s.compare(j, c_s) > 0:
        raise Reject("the evicted block must lie inside the system prompt")
    # A chat's first own block is the one its text enters: floor((S + L_i)/B) − floor(S/B) own full blocks.
    own = s.step("chat_blocks", "Full blocks below the system prompt, all chats", "c_own",
                 sympy.Add(*[sympy.floor((S + L_i) / B) for L_i in L]) - n * c_s, "blocks",
                 "each chat caches ⌊(S + L_i)/B⌋ full blocks; the system prompt's are shared")
    tree = s.step("tree_blocks", "Blocks the tree holds", "c_tree", c_s + own, "blocks",
                  "the shared system prompt once, then every chat's own chain")
    below = s.step("stranded_blocks", "Resident blocks below the evicted one", "c_str", c_s - j + own, "blocks",
                   "every block after it in the system prompt, and every chat's own blocks: all its descendants")
    lost = s.step("stranded_bytes", "KV stranded: resident, and never to be hit again", "M_str", below * blk,
                  "GiB", "a lookup walks the chain from the first block and stops at the hole, so nothing below "
                  "it can be found; it stays until evicted in turn")
    s.step("stranded_share", "Share of the tree's cache stranded", "f_str", below / tree, "%",
           "the descendants over all the tree's blocks")
    served = s.step("served_after", "Prompt tokens a returning chat serves from cache", "H", (j - 1) * B, "tokens",
                    "only the blocks before the hole still match")
    s.step("recompute_per_chat", "System-prompt tokens each chat's next turn prefills again", "ΔP", S - served,
           "tokens", "everything from the hole on, though its KV is still sitting in the pool")
    _stranding_policies(s, j, lost)

    s.assume("Every chat's history sits in the cache as full blocks (a partial last block is never hashed); "
             "the chats are idle between turns, so none of their blocks is pinned by a running request.")
    s.assume("A hit walks the chain from the first block (vLLM's chained hashes, SGLang's tree path) and "
             "refreshes every block it touches, so a parent is never older than its children.")
    s.slip("only the evicted block counted", on="stranded_bytes", factor=1 / s.value(below))
    s.slip("the system prompt's own blocks below the victim forgotten", on="stranded_blocks",
           factor=s.value(own) / s.value(below))
    s.slip("x2: K and V counted once", 0.5, on="stranded_bytes")


STRANDING_POLICIES = (
    "LRU where a hit refreshes the whole path, the deepest block first on ties",
    "FIFO: the block cached first is evicted first",
    "expiry at the TTL above, counted from when a block was cached",
    "cost-aware: the block cheapest to recompute is evicted first",
    "LRU run on its own by each shard the blocks are spread over",
    "a CPU tier below the GPU cache evicting by its own LRU of write times",
)


def _stranding_policies(s: Sheet, j, lost) -> None:
    """Which orders could take a block of this tree while blocks below it stay: the TTL and the shard count
    decide two of them."""
    ttl, age, shards = s.param("τ", "ttl"), s.param("A_S", "system_age"), s.param("k", "shards")
    gib = format_quantity(s.value(lost), "GiB")
    safe, fifo, expiry, cost, sharded, tier = STRANDING_POLICIES
    s.judge("policies", safe, False, "a parent's last use is never older than its children's, and on a tie the "
            "deepest goes first: every descendant leaves before its ancestor")
    s.judge("policies", fifo, True, "the system prompt was cached before any chat: its first block goes first "
            f"and strands the whole tree below it (losing block {format_number(s.value(j))} strands {gib})")
    expired = s.compare(age, ttl) > 0
    s.judge("policies", expiry, expired,
            f"the system prompt is {format_quantity(s.value(age), 'min')} old, past the "
            f"{format_quantity(s.value(ttl), 'min')} TTL, while the chats' latest blocks are fresh: it expires "
            "above them" if expired else
            f"the system prompt is {format_quantity(s.value(age), 'min')} old, inside the "
            f"{format_quantity(s.value(ttl), 'min')} TTL, and every chat block is younger: nothing has expired "
            "above a live descendant yet")
    s.judge("policies", cost, True, "the first block has the least context before it, so it is the cheapest to "
            "recompute and the first to go, with every chain below it")
    split = s.compare(shards, 1) > 0
    s.judge("policies", sharded, split,
            f"with {format_number(s.value(shards))} shards, a shard short of room evicts its own least recently "
            "used block while that block's descendants sit on other shards" if split else
            "one shard holds every block, so this is the global LRU above")
    s.judge("policies", tier, True, "a hit on the GPU does not refresh the CPU copy's write time: the tier drops "
            "the system prompt's blocks, written first, below copies of every chat it still holds")
