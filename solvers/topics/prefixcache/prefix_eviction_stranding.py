"""Evicting a block with descendants - the KV that stays but no lookup reaches."""
from __future__ import annotations

import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes
from solvers.formulas.kvcache import kv_bytes_per_token_given
from solvers.sheetmath import floor_of
from solvers.units import format_quantity


def _chat_symbols(s: Sheet, lengths: list[int]) -> list[sympy.Symbol]:
    # Zero-padded names keep sympy's sorted printing in chat order.
    width = len(str(len(lengths)))
    return [s.given(f"L_{i:0{width}d}", length, "tokens", f"own tokens of chat {i}")
            for i, length in enumerate(lengths, start=1)]


def _hole_regime(s: Sheet, served, half, redo, lost, n) -> None:
    kept, again = s.text(served), s.text(redo)
    gib, chats = s.text(lost), s.text(n)
    s.regime_by(served, half, tie="below", above=Side(
        "hole-late",
        f"The hole is in the second half of the system prompt: the first chat back still serves {kept} of it "
        f"and prefills {again} again; the {gib} below the hole, every chat's own KV included, sits unreachable "
        "until that prefill refills the hole (the recomputed block hashes as before) or it is evicted in turn.",
        "A hole nearer the front (FIFO and cheapest-first orders pick the very first block) costs each "
        "returning chat most of the shared prompt as well as its own history."),
        below=Side(
        "hole-early",
        f"The hole leaves no more than half of the system prompt hitting: the first of the {chats} chats back "
        f"re-prefills {again} of the shared prompt, {'as much as' if s.compare(served, half) == 0 else 'more than'} "
        f"the {kept} it still serves, besides its own history, while the {gib} that would have served it stays "
        "resident and unreachable; once that prefill refills the hole, the other chats hit again.",
        "A hole in the second half still leaves most of the shared prompt hitting; what is lost is the tail of "
        "it and every chat's own history below."))


STRANDING_POLICIES = (
    "LRU where a hit refreshes the whole path, the deepest block first on ties",
    "expiry at the TTL above, counted from when a block was cached",
    "expiry at twice the TTL above, counted from when a block was cached",
    "LRU run on its own by each shard the blocks are spread over",
    "the CPU tier, copying each block as it is cached and evicting by its own LRU of write times",
)


def _expiry(s: Sheet, age, idle, ttl) -> tuple[bool, str]:
    """A TTL counted from caching strands while the system prompt has expired and the latest chat blocks
    have not (a block expires once its age reaches the TTL)."""
    system_expired, chat_fresh = s.compare(age, ttl) >= 0, s.compare(idle, ttl) < 0
    old, fresh = s.text(age), format_quantity(s.evaluate(idle), "min")
    limit = format_quantity(s.evaluate(ttl), "min")
    return system_expired and chat_fresh, (
        f"the system prompt, cached {old} ago, has reached the {limit} TTL, while the latest chat blocks, cached "
        f"{fresh} ago, are not: the prompt has already expired above them" if system_expired and chat_fresh else
        f"the latest chat blocks, cached {fresh} ago, have reached the {limit} TTL too: the whole tree has expired "
        "together, with nothing left below a hole" if system_expired else
        f"the system prompt, cached {old} ago, is inside the {limit} TTL: nothing has expired yet")


def _stranding_policies(s: Sheet, tree_bytes) -> None:
    """Which orders could take a block of this tree while blocks below it stay: the ages against the TTL, the
    shard count and the CPU tier's room decide all but the one safe order (the question's declared fact)."""
    ttl, age, shards = s.param("τ", "ttl"), s.param("A_S", "system_age"), s.param("k", "shards")
    idle = s.param("A_c", "idle")
    # FIFO is the TTL's order without the clock, and a CPU tier's write-time LRU is FIFO once it is full: both
    # are asked through what this variant's numbers decide (the ages, the tier's room).
    safe, expiry, longer, sharded, tier = STRANDING_POLICIES
    s.judge("policies", safe, False, "a parent's last use is never older than its children's, and on a tie the "
            "deepest goes first: every descendant leaves before its ancestor", fact=True)
    for option, limit in ((expiry, ttl), (longer, 2 * ttl)):
        s.judge("policies", option, *_expiry(s, age, idle, limit))
    room = s.param("C_CPU", "cpu_tier")
    full = s.compare(tree_bytes, room) > 0
    s.judge("policies", tier, full, f"the tree's {s.text(tree_bytes)} overflow the tier's {s.text(room)}: it drops "
            "the oldest writes, the system prompt's blocks, below copies of every chat it still holds" if full else
            f"the tree's {s.text(tree_bytes)} fit the tier's {s.text(room)}: it never has to evict any of them")
    split = s.compare(shards, 1) > 0
    s.judge("policies", sharded, split,
            f"with {s.text(shards)}, a shard short of room evicts its own least recently "
            "used block while that block's descendants sit on other shards" if split else
            "one shard holds every block, so this is the global LRU above")


def solve(p, s: Sheet) -> None:
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
    lost = s.step("stranded_bytes", "KV stranded: resident, and unreachable until the hole is refilled", "M_str",
                  below * blk, "GiB", "a lookup walks the chain from the first block and stops at the hole, so "
                  "nothing below it can be found until a request recomputes the missing block; free to evict, it "
                  "costs the cache room reachable prefixes could use, not room for running requests")
    s.step("stranded_share", "Share of the tree's cache stranded", "f_str", below / tree, "%",
           "the descendants over all the tree's blocks")
    tree_bytes = s.step("tree_bytes", "KV the tree holds", "M_tree", tree * blk, "GiB",
                        "every block of the tree, what a tier holding its copies must fit")
    served = s.step("served_after", "Prompt tokens the first chat back serves from cache", "H", (j - 1) * B, "tokens",
                    "only the blocks before the hole still match")
    redo = s.step("recompute_per_chat", "System-prompt tokens the first chat back prefills again", "ΔP",
                  S - served, "tokens", "everything from the hole on, though its KV is still sitting in the pool")
    half = s.step("half_system", "Half the system prompt", "S_half", S / 2, "tokens",
                  "where the hole starts to cost a returning chat more of the shared prefix than it keeps")
    _stranding_policies(s, tree_bytes)

    s.assume("Every chat's history sits in the cache as full blocks (a partial last block is never hashed); "
             "the chats are idle between turns, so none of their blocks is pinned by a running request.")
    s.assume("A hit walks the chain from the first block (vLLM's chained hashes, SGLang's tree path) and "
             "refreshes every block it touches, so a parent is never older than its children.")
    s.assume("Stranding lasts until the hole is refilled: a block's hash chains its parent's hash and its own "
             "tokens, so the first chat back recomputes the missing block under the same hash, and later lookups "
             "walk through it to the resident blocks below (vLLM v1 keeps both copies under that hash until one "
             "is evicted). SGLang's radix tree evicts only leaves, so it cannot strand a subtree this way.")
    s.assume("Orders that rank blocks by anything but recency with path refresh strand whenever they run: FIFO "
             "and a full CPU tier's write-time LRU take the system prompt, cached first; a cost-aware order takes "
             "the first block, with the least context before it and so the cheapest to recompute.")
    s.slip("only the evicted block counted", on="stranded_bytes", factor=1 / s.value(below))
    s.slip("the system prompt's own blocks below the victim forgotten", on="stranded_blocks",
           factor=s.value(own) / s.value(below))
    s.slip("x2: K and V counted once", 0.5, on="stranded_bytes")
    _hole_regime(s, served, half, redo, lost, n)

