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


def _ttft_regime(s: Sheet, redo_time, ttft, redo, own, lost) -> None:
    """The hole's consequence: the latest chat's re-prefill against its TTFT target (a tie meets it)."""
    took, again, mine, gib = s.text(redo_time), s.text(redo), s.text(own), s.text(lost)
    s.regime_by(redo_time, ttft, tie="below", above=Side(
        "misses-ttft",
        f"The latest chat back re-prefills {again} ({mine} of them its own history, still resident below the "
        f"hole) in {took}, past its {s.text(ttft)} target: a hole costs a returning chat its first token, "
        f"while the {gib} below it sits unreachable. Cascade-evicting the subtree would not help it; filling "
        "only the missing block and walking on to the resident blocks below would.",
        "A shorter history or a faster replica brings the re-prefill inside the target: the hole then costs "
        "compute and cache room, not the SLO."),
        below=Side(
        "meets-ttft",
        f"The latest chat back re-prefills {again} ({mine} of them its own history) in {took}, inside its "
        f"{s.text(ttft)} target: the hole costs prefill compute and the {gib} of cache room below it, not the "
        "first token; once that prefill refills the hole the other chats hit again.",
        "A longer history, a slower (busier) replica or a tighter target puts the re-prefill past it: a "
        "hole then costs the returning chat its SLO."))
    ratio = s.value(redo_time) / s.value(ttft)
    if abs(ratio - 1) < 0.06:
        raise Reject(f"the re-prefill, {took}, within 6% of the {s.text(ttft)} target")
    # A target twenty times the re-prefill (or a twentieth of it) asks nothing: the draws keep within 4x of it,
    # where one interviewer's change (the prompt, the replica's load, the target) can cross.
    if not 0.25 <= ratio <= 4:
        raise Reject(f"the re-prefill, {took}, is {ratio:.3g}x the {s.text(ttft)} target: far from a question")


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
    redo_all = s.step("reprefill", "Tokens the latest chat re-prefills when it returns", "P_re", redo + L[0],
                      "tokens", "a lookup stops at the first miss: the shared prompt from the hole on, and then "
                      "the chat's own history, though that KV is still resident below the hole")
    rate = s.param("R", "rate")
    redo_time = s.step("reprefill_time", "Its re-prefill at the replica's prefill rate", "t_re", redo_all / rate,
                       "s", "tokens over the prefill rate, before its new turn's own tokens")
    ttft = s.param("T", "ttft")
    _stranding_policies(s, tree_bytes)

    s.assume("The eviction is an approximate, sampled LRU (it ranks a few sampled candidates, as Redis-style "
             "caches do), so it can take an interior block of the prompt: an exact LRU with path refresh never "
             "does (vLLM frees a request's tail blocks first, SGLang evicts only leaves).")
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
    s.assume("The latest chat (chat 1) is the first back; its new turn's own tokens are left out of the re-prefill, "
             "the same with or without the hole.")
    s.assume("The replica's prefill rate is stated, not derived from the step model: it stands for whatever the "
             "replica sustains with the other traffic it serves.")
    s.slip("only the evicted block counted", on="stranded_bytes", factor=1 / s.value(below))
    s.slip("the system prompt's own blocks below the victim forgotten", on="stranded_bytes",
           factor=s.value(own) / s.value(below))
    s.slip("/2: K and V counted once", 0.5, on="stranded_bytes")
    s.slip("only the shared prompt re-prefilled, not the chat's own resident history", on="reprefill",
           factor=s.value(redo) / s.value(redo_all))
    _ttft_regime(s, redo_time, ttft, redo_all, L[0], lost)

