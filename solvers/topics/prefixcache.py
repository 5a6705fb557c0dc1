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

from solvers.derivation import Reject, Sheet, Side, ceil_of, floor_of, max_of, min_of
from solvers.topics.common import dtype_bytes
from solvers.topics.kvcache import kv_bytes_per_token_given
from solvers.units import format_number, format_quantity

# The teaser's bar: on a chat prompt the two hit rates differ by under one percent of the prompt.
MATERIAL_GAP = 0.01
# SGLang's chunked_prefill_size as the question states it: every prefill chunk becomes a node of the tree.
SGLANG_CHUNK = 8192


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
    hit_block = s.step("block_hit", "Block-hash cache: tokens served from cache", "H_blk", B * floor_of(M / B),
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
    s.assume("The previous turn was this chat's first: the history D is that turn's prompt (the shared system "
             "prompt, then the chat's own first prompt U) and its reply Y, counting the tokens whose KV was "
             "computed (the last sampled token has none yet); vLLM caches every full block of it, SGLang all of "
             "it (page size 1).")
    s.assume("SGLang prefilled that first prompt alone, in chunks of C from the end of the system prompt, each "
             "inserted as a node (cache_unfinished_req); on finishing, the reply became the leaf below them "
             "(cache_finished_req).")
    s.assume("Other live conversations hold the system prompt (their requests are running), so neither engine can "
             "evict it; this chat's blocks and nodes are free and the least recently used. The eviction is a "
             "demand for room for R tokens: vLLM pops ⌈R/B⌉ free blocks, SGLang frees whole leaves until R.")
    s.assume("Engine versions: vLLM v1 (chained sha256 block hashes, LRU free-block queue); SGLang RadixCache with "
             "the default LRU policy and page size 1.")
    s.slip("the whole history taken as matchable (the last prompt token forgotten)", on="block_hit",
           factor=s.evaluate(B * floor_of(min_of(D, P) / B)) / s.value(hit_block))
    s.slip("B/P instead of (B − 1)/P", on="gap_bound", factor=s.value(B) / (s.value(B) - 1))
    s.slip("B/2 instead of (B − 1)/2", on="mean_gap", factor=s.value(B) / (s.value(B) - 1))
    _gap_regime(s, bound, tau, P, P_star, gap)


def _after_eviction(s: Sheet, B, P, D, S, R, M) -> None:
    """What each engine still serves once the allocator needed room for R tokens, this chat least recently used."""
    Y = s.param("Y", "reply")
    C = s.given("C", SGLANG_CHUNK, "tokens", "SGLang prefill chunk (chunked_prefill_size)")
    if s.compare(S + Y + B, D) > 0:
        raise Reject("the first prompt must hold more than the system prompt")
    c = s.step("cached_blocks", "Full blocks the previous turn left cached", "c", floor_of(D / B), "blocks",
               "every full block of the history carries a hash")
    c_s = s.step("shared_blocks", "Full blocks of the system prompt (held by other chats)", "c_S",
                 floor_of(S / B), "blocks", "the first block holding this chat's own text is its own")
    # A finished request's blocks join the free queue tail first, so its unhashed partial block
    # (D mod B ≠ 0) is the first popped and costs the cache nothing.
    partial = s.step("partial_block", "The chat's partial last block (no hash)", "δ", ceil_of(D / B) - c, "blocks",
                     "1 when the history ends inside a block; freed first (tail first), it heads this chat's blocks "
                     "in the free queue")
    k = s.step("evicted_blocks", "Cached blocks vLLM evicts to make the room", "k", ceil_of(R / B) - partial,
               "blocks", "one block per B tokens of room, from the queue's head: this chat's tail first; the "
               "partial block among them frees room but no hit")
    left = s.step("", "vLLM: this chat's blocks still cached", "c_left", max_of(c_s, c - k), "blocks",
                  "the tail blocks go first, and the system prompt's blocks are in use elsewhere")
    after_block = s.step("block_after", "Block-hash cache: tokens served after the eviction", "H_blk2",
                         B * min_of(left, floor_of((P - 1) / B)), "tokens",
                         "the chain still cached from the first block, up to the matchable length")
    # SGLang's branch below the system prompt: the first prompt's prefill chunks (a node each, as
    # cache_unfinished_req inserted them), then the reply, which cache_finished_req added as the leaf.
    u = s.step("first_prompt", "Tokens of the first prompt below the system prompt", "U", D - S - Y, "tokens",
               "the history less the shared system prompt and the reply")
    if s.compare(R, Y) <= 0:
        freed = s.step("radix_freed", "Tokens SGLang frees", "F", Y, "tokens",
                       "evict() frees the least recently used leaf whole: the reply node already covers the room")
    else:
        last = s.step("last_chunk", "The first prompt's last prefill-chunk node", "ℓ", u - C * (ceil_of(u / C) - 1),
                      "tokens", "chunks of C from the system prompt on, each inserted as a node; the last one the rest")
        freed = s.step("radix_freed", "Tokens SGLang frees", "F",
                       Y + min_of(u, last + C * ceil_of(max_of(R - Y - last, 0) / C)), "tokens",
                       "the reply leaf is too small, so its parent chunk node becomes a leaf and goes next, and so "
                       "on up, whole nodes, until the room is made or only the locked system prompt is left")
    after_radix = s.step("radix_after", "Radix tree: tokens served after the eviction", "H_rad2", min_of(D - freed, M),
                         "tokens", "the branch down to the last node still in the tree")
    order = s.compare(after_block, after_radix)
    s.choose("after_eviction", "block-hash" if order > 0 else "radix" if order < 0 else "tie")
    exact = max(s.evaluate(min_of(D - R, M)), s.value(S))
    if exact != s.value(after_radix):
        s.slip("SGLang taken to evict only the tokens asked for", on="radix_after", factor=exact / s.value(after_radix))
    if s.value(S) != s.value(after_radix):
        s.slip("SGLang taken to free the whole branch below the system prompt", on="radix_after",
               factor=s.value(S) / s.value(after_radix))
    if s.value(after_block) > 0:
        s.slip("vLLM taken to evict the whole conversation", on="block_after",
               factor=s.evaluate(B * min_of(c_s, floor_of((P - 1) / B))) / s.value(after_block))


SCOPE_OPTIONS = (
    "a later request of the same tenant to this same server process with the same prefix",
    "a request from another tenant with the same system prompt",
    "a KV-aware router that hashes each prompt's blocks itself to pick the replica",
    "this server after a restart, reading a shared CPU/SSD tier keyed by block hash",
    "another replica of the same model with 16-token blocks, reading the same shared tier",
    "a request for a LoRA adapter of the same base model",
)


def _key_scope(s: Sheet, p) -> None:
    """Which lookups can reuse this vLLM replica's block hashes: set by the hash seed and the salt."""
    fixed = p.hash_seed == "fixed"
    salted = p.salt == "per-tenant"
    seed = ("PYTHONHASHSEED is fixed fleet-wide, so NONE_HASH and every chained hash are the same in any process"
            if fixed else "PYTHONHASHSEED is unset: NONE_HASH is os.urandom(32), so every chained hash is private "
            "to this process")
    first, tenant, router, restart, sixteen, lora = SCOPE_OPTIONS
    same_blocks = p.block_size == 16
    s.judge("key_scope", first, True, "same process, same NONE_HASH, same tokens: the same chained hashes",
            fact=True)
    s.judge("key_scope", tenant, not salted,
            "each tenant's cache_salt enters the first block's extra keys, so its chain never meets another's"
            if salted else "no cache_salt is set, so equal tokens give equal hashes whoever sends them")
    s.judge("key_scope", router, fixed, seed)
    s.judge("key_scope", restart, fixed,
            seed + ("; a restarted process recomputes the same keys" if fixed else
                    "; a restarted process draws a new NONE_HASH and none of the stored keys match"))
    s.judge("key_scope", sixteen, fixed and same_blocks,
            (seed + "; its blocks end where this replica's do" if same_blocks else
             f"this replica's blocks are {format_number(p.block_size)} tokens, and a block hash covers its own "
             "tokens: 16-token boundaries give other chains from the first block on"))
    s.judge("key_scope", lora, False, "the LoRA adapter's name enters every block's extra keys", fact=True)


def _gap_regime(s: Sheet, bound, tau, P, P_star, gap) -> None:
    worst, bar = format_quantity(s.value(bound), "%"), format_quantity(s.value(tau), "%")
    now = format_number(s.value(gap))
    s.regime_by(P, P_star, tie="above", above=Side(
        "gap-negligible",
        f"Even the worst case, B − 1 unhashed tokens, is {worst} of this prompt, under the {bar} bar (this "
        f"history leaves {now}): the engines' hit rates are the same for practical purposes. What separates "
        "them is what their eviction takes (blocks against whole nodes) and how far their keys travel (vLLM's "
        "hashes leave the process only when seeded; SGLang's GPU tree is process-local, its HiCache tiers key "
        "pages by chained SHA-256).",
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
    c_s = s.step("system_blocks", "Full blocks of the system prompt", "c_S", floor_of(S / B), "blocks",
                 "the shared part of every chat's chain")
    if s.compare(j, c_s) > 0:
        raise Reject("the evicted block must lie inside the system prompt")
    # A chat's first own block is the one its text enters: floor((S + L_i)/B) − floor(S/B) own full blocks.
    own = s.step("chat_blocks", "Full blocks below the system prompt, all chats", "c_own",
                 sympy.Add(*[floor_of((S + L_i) / B) for L_i in L]) - n * c_s, "blocks",
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
    redo = s.step("recompute_per_chat", "System-prompt tokens each chat's next turn prefills again", "ΔP",
                  S - served, "tokens", "everything from the hole on, though its KV is still sitting in the pool")
    half = s.step("half_system", "Half the system prompt", "S_half", S / 2, "tokens",
                  "where the hole starts to cost a returning chat more of the shared prefix than it keeps")
    _stranding_policies(s, j, lost)

    s.assume("Every chat's history sits in the cache as full blocks (a partial last block is never hashed); "
             "the chats are idle between turns, so none of their blocks is pinned by a running request.")
    s.assume("A hit walks the chain from the first block (vLLM's chained hashes, SGLang's tree path) and "
             "refreshes every block it touches, so a parent is never older than its children.")
    s.slip("only the evicted block counted", on="stranded_bytes", factor=1 / s.value(below))
    s.slip("the system prompt's own blocks below the victim forgotten", on="stranded_blocks",
           factor=s.value(own) / s.value(below))
    s.slip("x2: K and V counted once", 0.5, on="stranded_bytes")
    _hole_regime(s, served, half, redo, lost, n)


def _hole_regime(s: Sheet, served, half, redo, lost, n) -> None:
    kept, again = format_quantity(s.value(served), "tokens"), format_quantity(s.value(redo), "tokens")
    gib, chats = format_quantity(s.value(lost), "GiB"), format_number(s.value(n))
    s.regime_by(served, half, tie="below", above=Side(
        "hole-late",
        f"The hole is in the second half of the system prompt: a returning chat still serves {kept} of it and "
        f"prefills {again} again; the {gib} below the hole, every chat's own KV included, sits unreachable "
        "until it is evicted in turn.",
        "A hole nearer the front (FIFO and cheapest-first orders pick the very first block) costs each "
        "returning chat most of the shared prompt as well as its own history."),
        below=Side(
        "hole-early",
        f"The hole is in the first half of the system prompt: each of the {chats} chats re-prefills {again} of "
        f"the shared prompt, more than the {kept} it still serves, besides its own history, while the "
        f"{gib} that would have served them stays resident and unreachable.",
        "A hole in the second half still leaves most of the shared prompt hitting; what is lost is the tail of "
        "it and every chat's own history below."))


STRANDING_POLICIES = (
    "LRU where a hit refreshes the whole path, the deepest block first on ties",
    "expiry at the TTL above, counted from when a block was cached",
    "expiry at twice the TTL above, counted from when a block was cached",
    "cost-aware: the block cheapest to recompute is evicted first",
    "LRU run on its own by each shard the blocks are spread over",
    "a CPU tier below the GPU cache evicting by its own LRU of write times",
)


def _expiry(s: Sheet, age, idle, ttl) -> tuple[bool, str]:
    """A TTL counted from caching strands while the system prompt has expired and the latest chat blocks
    have not (a block expires once its age reaches the TTL)."""
    system_expired, chat_fresh = s.compare(age, ttl) >= 0, s.compare(idle, ttl) < 0
    old, fresh = format_quantity(s.value(age), "min"), format_quantity(s.evaluate(idle), "min")
    limit = format_quantity(s.evaluate(ttl), "min")
    return system_expired and chat_fresh, (
        f"the system prompt, cached {old} ago, has reached the {limit} TTL, while the latest chat blocks, cached "
        f"{fresh} ago, are not: the prompt has already expired above them" if system_expired and chat_fresh else
        f"the latest chat blocks, cached {fresh} ago, have reached the {limit} TTL too: the whole tree has expired "
        "together, with nothing left below a hole" if system_expired else
        f"the system prompt, cached {old} ago, is inside the {limit} TTL: nothing has expired yet")


def _stranding_policies(s: Sheet, j, lost) -> None:
    """Which orders could take a block of this tree while blocks below it stay: the TTL and the shard count
    decide two of them."""
    ttl, age, shards = s.param("τ", "ttl"), s.param("A_S", "system_age"), s.param("k", "shards")
    idle = s.param("A_c", "idle")
    gib = format_quantity(s.value(lost), "GiB")
    # The three orders that never look at this variant's numbers are declared facts. FIFO is the TTL's order
    # without the clock: it is asked through two TTLs, whose answers follow the ages.
    safe, expiry, longer, cost, sharded, tier = STRANDING_POLICIES
    s.judge("policies", safe, False, "a parent's last use is never older than its children's, and on a tie the "
            "deepest goes first: every descendant leaves before its ancestor", fact=True)
    for option, limit in ((expiry, ttl), (longer, 2 * ttl)):
        s.judge("policies", option, *_expiry(s, age, idle, limit))
    s.judge("policies", cost, True, "the first block has the least context before it, so it is the cheapest to "
            f"recompute and the first to go, with every chain below it (losing block {format_number(s.value(j))} "
            f"strands {gib})", fact=True)
    split = s.compare(shards, 1) > 0
    s.judge("policies", sharded, split,
            f"with {format_number(s.value(shards))} shards, a shard short of room evicts its own least recently "
            "used block while that block's descendants sit on other shards" if split else
            "one shard holds every block, so this is the global LRU above")
    s.judge("policies", tier, True, "a hit on the GPU does not refresh the CPU copy's write time: the tier drops "
            "the system prompt's blocks, written first, below copies of every chat it still holds", fact=True)
