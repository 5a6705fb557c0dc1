"""Block-hash cache vs radix tree - where the hit rates differ, and where they don't."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.sheetmath import ceil_of, floor_of, max_of, min_of
from solvers.units import format_number

# The teaser's bar, priced: the tokens vLLM leaves unhashed are prefilled again, so the gap is weighed against the
# prefill SGLang runs anyway (the turn's new tokens), not against the whole prompt.


# SGLang's chunked_prefill_size as the question states it: every prefill chunk becomes a node of the tree.
def _after_eviction(s: Sheet, B, P, D, S, R, M):
    """What each engine still serves once the allocator needed room for R tokens, this chat least recently used."""
    Y = s.param("Y", "reply")
    C = s.param("C", "sglang_chunk")
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
    # read4-R3: who keeps more is the answer that matters; a short reply over a long unhashed tail lets SGLang win.
    s.step("lead", "vLLM's lead over SGLang after the eviction", "Δ", after_block - after_radix, "tokens",
           "positive where the block cache keeps more: SGLang frees whole nodes, often more than the room asked "
           "for, while vLLM frees whole blocks, at most a block past it; negative where SGLang's leaf is shorter "
           "than the tail vLLM never hashed plus the cached blocks it pops")
    exact = max(s.evaluate(min_of(D - R, M)), s.value(S))
    if exact != s.value(after_radix):
        s.slip("SGLang taken to evict only the tokens asked for", on="radix_after", factor=exact / s.value(after_radix))
    if s.compare(S, after_radix) != 0:
        s.slip("SGLang taken to free the whole branch below the system prompt", on="radix_after",
               factor=s.value(S) / s.value(after_radix))
    if s.compare(after_block, 0) > 0 and s.compare(partial, 0) > 0:
        whole = s.evaluate(B * min_of(max_of(c_s, c - ceil_of(R / B)), floor_of((P - 1) / B)))
        s.slip("vLLM's partial last block not counted as the first freed (every block of room a cached one)",
               on="block_after", factor=whole / s.value(after_block))
    if s.compare(after_block, 0) > 0:
        s.slip("vLLM taken to evict the whole conversation", on="block_after",
               factor=s.evaluate(B * min_of(c_s, floor_of((P - 1) / B))) / s.value(after_block))
    return c_s, Y, after_block, after_radix


SCOPE_OPTIONS = (
    "a later request of the same tenant to this same server process with the same prefix",
    "a request from another tenant to this same server process with the same system prompt",
    "a KV-aware router that hashes each request's blocks as vLLM does, extra keys included, to pick the replica",
    "this server after a restart, reading a shared CPU/SSD tier keyed by vLLM's block hashes",
    "another replica of the same model with 16-token blocks, reading a shared tier keyed by vLLM's block hashes",
    "another replica of the same model with 32-token blocks, reading a shared tier keyed by vLLM's block hashes",
)


def _key_scope(s: Sheet, p, c_s) -> None:
    """Which lookups can reuse this vLLM replica's block hashes: set by the hash seed, the salt and, for another
    tenant, the full blocks the shared system prompt fills (the first block holding a tenant's own text is its own)."""
    fixed = p.hash_seed == "fixed"
    salted = p.salt == "per-tenant"
    seed = ("PYTHONHASHSEED is fixed fleet-wide, so NONE_HASH and every chained hash are the same in any process"
            if fixed else "PYTHONHASHSEED is unset: NONE_HASH is os.urandom(32), so every chained hash is private "
            "to this process")
    first, tenant, router, restart, sixteen, thirty_two = SCOPE_OPTIONS
    s.judge("key_scope", first, True, "same process, same NONE_HASH, same tokens: the same chained hashes",
            fact=True)
    shares = s.compare(c_s, 0) > 0
    if salted:
        why = "each tenant's cache_salt enters the first block's extra keys, so its chain never meets another's"
    elif not shares:
        why = (f"no cache_salt is set, but the {format_number(p.system)}-token system prompt fills no full "
               f"{format_number(p.block_size)}-token block: the first hashed block already holds this tenant's "
               "own text, so no hash is shared")
    else:
        why = (f"no cache_salt is set, so equal tokens give equal hashes whoever sends them, and the system prompt "
               f"fills {s.text(c_s)} in full")
    s.judge("key_scope", tenant, not salted and shares, why)
    s.judge("key_scope", router, fixed, seed)
    s.judge("key_scope", restart, fixed,
            seed + ("; a restarted process recomputes the same keys" if fixed else
                    "; a restarted process draws a new NONE_HASH and none of the stored keys match"))
    for option, size in ((sixteen, 16), (thirty_two, 32)):
        same_blocks = p.block_size == size
        s.judge("key_scope", option, fixed and same_blocks,
                (seed + "; its blocks end where this replica's do" if same_blocks else
                 f"this replica's blocks are {format_number(p.block_size)} tokens, and a block hash covers its own "
                 f"tokens: {size}-token boundaries give other chains from the first block on"))


def _gap_verdict(s: Sheet, share, bound, tau, gap, prefill) -> None:
    """Stage 1's verdict, on this chat's own gap: the tokens vLLM prefills again over the ones SGLang prefills, a
    count of tokens against the bar (read4-R3: it was called 'material' on a turn whose key said it cost no time)."""
    over = s.compare(share, tau) > 0
    g, n, bar = s.text(gap), s.text(prefill), s.text(tau)
    worst = s.text(bound)
    s.choose("gap_verdict", "over-bar" if over else "within-bar",
             f"{g} again on top of {n}: {s.text(share)} more prefill tokens, {'over' if over else 'not over'} the "
             f"{bar} bar (B − 1 at worst, {worst})" + (
                 ". In time they cost that share only once the turn's prefill is compute-bound; a turn of tens of "
                 "tokens reads the weights either way, so there they cost next to nothing" if over else ""))


def _eviction_regime(s: Sheet, R, Y, S, after_block, after_radix) -> None:
    """Whether the room reaches past SGLang's reply leaf: the regime the push moves, since past it SGLang frees the
    first prompt's chunk nodes whole while vLLM still frees about the room asked for."""
    kept_b, kept_r, room, reply = s.text(after_block), s.text(after_radix), s.text(R), s.text(Y)
    ahead = s.compare(after_block, after_radix)
    if ahead > 0:
        lead = format_number(s.value(after_block) - s.value(after_radix))
        moral = f"Node granularity, not block granularity, costs SGLang {lead} tokens of hits here."
    elif s.compare(after_radix, S) <= 0 and s.compare(after_block, S) <= 0:
        moral = "Here the room takes the whole branch from both: each keeps only the system prompt."
    else:
        moral = "Here SGLang's nodes happen to end near the room, and vLLM's block rounding costs it as much."
    only = Side(
        "reply-only",
        f"The room ({room}) fits inside the reply ({reply}), SGLang's least recently used leaf: it frees that node "
        f"whole and keeps {kept_r}; vLLM pops about the room in blocks and keeps {kept_b}. Neither loses more "
        "than about a reply's worth.",
        "Once the room passes the reply, SGLang's next leaf is the first prompt's last chunk node, freed whole: "
        "up to a chunk of tokens for a little more room, while vLLM still frees about what was asked.",
        near=f"The room ({room}) fits inside the reply ({reply}), SGLang's least recently used leaf: it frees that "
             f"node whole and keeps {kept_r}; vLLM pops about the room in blocks and keeps {kept_b}.")
    past = Side(
        "reply-and-prompt",
        f"The room ({room}) passes the reply ({reply}), so SGLang frees the reply and then the first prompt's "
        f"chunk nodes, whole, from the last up, until the room is made: it keeps {kept_r} where vLLM, popping "
        f"about the room in blocks, keeps {kept_b}. {moral}",
        "A room within the reply costs SGLang only the reply leaf, about what vLLM loses in blocks.",
        near=f"The room ({room}) passes the reply ({reply}), so SGLang frees the reply and then the first prompt's "
             f"chunk nodes whole, from the last up: it keeps {kept_r}, vLLM keeps {kept_b}.")
    s.regime_by(R, Y, tie="below", above=past, below=only)


def solve(p, s: Sheet) -> None:
    B = s.param("B", "block_size")
    D = s.param("D", "history")
    N = s.param("N", "new")
    S = s.param("S", "system")
    R = s.param("R", "evicted")

    P = s.step("prompt", "The second turn's prompt", "P", D + N, "tokens", "the repeated history and the new tokens")
    # Both engines compute the prompt's last token themselves, so at most P − 1 tokens can hit: with N ≥ 1 new
    # tokens the whole history can.
    M = s.step("matchable", "Prompt tokens a cache may serve", "D_m", min_of(D, P - 1), "tokens",
               "the repeated history; the prompt's last token is never served (its logits must be computed), but "
               "it is one of the new ones")
    hit_radix = s.step("radix_hit", "Radix tree: tokens served from cache", "H_rad", M, "tokens",
                       "the tree matches token by token, so every matchable token hits")
    hit_block = s.step("block_hit", "Block-hash cache: tokens served from cache", "H_blk", B * floor_of(M / B),
                       "tokens", "only full blocks carry a hash, so the hit stops at the last full block")
    gap = s.step("gap", "Tokens the radix tree serves and the block cache does not", "g", hit_radix - hit_block,
                 "tokens", "the matchable tokens past the last full block: (D mod B)")
    prefill = s.step("radix_prefill", "Tokens SGLang prefills this turn", "N_rad", P - hit_radix, "tokens",
                     "everything past the cached history: the new tokens")
    share = s.step("gap_share", "The gap as extra prefill over SGLang's", "g_N", gap / prefill, "%",
                   "vLLM prefills the unhashed tail again, on top of the new tokens")
    bound = s.step("gap_bound", "Worst case of the extra prefill", "g_max", (B - 1) / prefill, "%",
                   "at most B − 1 tokens of a block can be left unhashed; each prefilled token costs about the same "
                   "(it runs the same layers and attends over the same context)")
    s.step("mean_gap", "Mean gap over where the history ends", "g_mean", (B - 1) / 2, "tokens",
           "an ending equally likely at each of the B slots of a block leaves 0 to B − 1 tokens, (B − 1)/2 on average")

    tau = s.param("τ", "material")
    s.step("boundary_new", "New tokens below which the worst-case gap passes the bar", "N_star",
           (B - 1) / tau, "tokens", "solve (B − 1)/N = τ for N")
    _gap_verdict(s, share, bound, tau, gap, prefill)

    c_s, Y, after_block, after_radix = _after_eviction(s, B, P, D, S, R, M)
    _key_scope(s, p, c_s)
    s.assume("The previous turn was this chat's first: the history D is that turn's prompt (the shared system "
             "prompt, then the chat's own first prompt U) and its reply Y, counting the tokens whose KV was "
             "computed (the last sampled token has none yet); vLLM caches every full block of it, SGLang all of "
             "it (page size 1). The second turn repeats it token for token (the same chat template, the reply "
             "not re-tokenised) and adds N new tokens.")
    s.assume("SGLang prefilled that first prompt alone, in chunks of C from the end of the system prompt, each "
             "inserted as a node (cache_unfinished_req); on finishing, the reply became the leaf below them "
             "(cache_finished_req).")
    s.assume("Other live conversations hold the system prompt (their requests are running), so neither engine can "
             "evict it; this chat's blocks and nodes are free and the least recently used. The eviction is a "
             "demand for room for R tokens: vLLM pops ⌈R/B⌉ free blocks, SGLang frees whole leaves until R.")
    s.assume("The gap is priced as prefill work: every token prefilled costs about the same (the same layers, "
             "attention over the same cached context), so the extra share is the extra compute-bound prefill time. "
             "A turn of only tens of tokens is weight-read-bound, and there the gap costs less time still.")
    s.assume("Where the keys travel: vLLM's block hashes can be recomputed outside this process (a router, a restarted "
             "server, another replica on a shared tier) only when PYTHONHASHSEED fixes the first parent hash; a "
             "LoRA adapter's name and cache_salt enter the extra keys. SGLang's GPU radix tree is process-local; "
             "its HiCache host and L3 tiers key pages by chained SHA-256 of their tokens.")
    s.assume("Engine versions: vLLM v1 (chained sha256 block hashes, LRU free-block queue); SGLang RadixCache with "
             "the default LRU policy and page size 1: token-granular matching is page size 1; with the 16- or 64-token "
             "pages of its FlashInfer or FlashMLA backends SGLang too loses the partial last page.")
    s.slip("the gap over the whole prompt, not over the tokens prefilled", on="gap_share",
           factor=s.value(prefill) / s.value(P))
    if s.compare(gap, 0) > 0:
        s.slip("the worst case, B − 1 tokens, instead of this chat's gap", on="gap_share",
               factor=(s.value(B) - 1) / s.value(gap))
    _eviction_regime(s, R, Y, S, after_block, after_radix)
