"""Choosing the KV block size - empty slots, kernel gathers, prefix hits."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes
from solvers.formulas.kvcache import (
    blocks_for_tokens,
    kv_bytes_per_token_given,
)
from solvers.sheetmath import floor_of
from solvers.units import format_number, format_quantity

TOO_CLOSE = 0.03  # the waste share's tolerance in the question file


# The bar is the team's, not a measurement: the empty share is the share of concurrency lost. PagedAttention
# (Kwon et al., SOSP 2023) measured vLLM under 4%, where a good allocator lands.
def _block_choices(s: Sheet, B, L_avg, P, tau) -> None:
    """The trade at half and twice this block size, judged on the variant's numbers."""
    def share(size):
        return (size - 1) / 2 / (L_avg + (size - 1) / 2)

    def tail(size):
        return P - size * floor_of(P / size)

    half, double = B / 2, 2 * B
    bar = s.text(tau)
    for size in (B, half, double):  # the share is graded within 3%: a draw that close to the bar is no question
        if abs(s.evaluate(share(size)) / s.value(tau) - 1) <= TOO_CLOSE:
            why = f"the empty share at {format_number(s.evaluate(size))}-token blocks is within 3% of the bar"
            if size is B:
                raise Reject(f"{why}: too close to call")
            s.refuse_if_asked(("block_choice",), why)  # a push that asks only the share at B need not refuse
    for size, option, word in (
            (half, "with half the block size the empty share would be under {waste_tolerance}", "half"),
            (double, "with twice the block size the empty share would still be under {waste_tolerance}", "twice")):
        s.judge("block_choice", option, s.compare(share(size), tau) < 0,
                f"at {word} the block size, (B' − 1)/2 ÷ (L + (B' − 1)/2) = "
                f"{format_quantity(s.evaluate(share(size)), '%')} against the {bar} bar")
    now, at_half = format_number(s.value(P) - s.evaluate(B * floor_of(P / B))), format_number(s.evaluate(tail(half)))
    s.judge("block_choice", "half the block size would cache more of the system prompt",
            s.compare(tail(half), tail(B)) < 0,
            f"the uncached tail P mod B' goes from {now} to {at_half} tokens")
    at_double = format_number(s.evaluate(tail(double)))
    s.judge("block_choice", "twice the block size would prefill more of the system prompt again",
            s.compare(tail(double), tail(B)) > 0,
            f"the uncached tail P mod B' goes from {now} to {at_double} tokens")


def _block_regime(s: Sheet, share, tau, L_star, L_avg, waste) -> None:
    """Memory only: what the block trades besides (kernel gathers, prefix hits) is asked later, never said here."""
    pct, bar, empty = s.text(share), s.text(tau), s.text(waste)
    s.regime_by(L_avg, L_star, tie="below", above=Side(
        "waste-negligible",
        f"Sequences are long next to the block: {pct} of the cache ({empty}) sits empty, under the {bar} "
        "bar, so the partial last blocks cost almost no concurrency.",
        "With shorter sequences the partial last block becomes a visible share of the cache, and the memory "
        "it strands is concurrency lost."), below=Side(
        "waste-material",
        f"Sequences are short next to the block: {pct} of the cache ({empty}) sits empty, above the {bar} "
        "bar: memory that could hold more sequences holds nothing.",
        "With longer sequences the partial last block is a rounding error next to the tokens stored."))


def solve(p, s: Sheet) -> None:
    kv_tok = kv_bytes_per_token_given(s, p.model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    B, n, L_avg, P = (s.param(sym, name) for sym, name in
                      (("B", "block_size"), ("n", "batch"), ("L_avg", "mean_length"), ("P", "prefix")))

    w_max = s.step("worst_waste", "Worst-case empty slots per sequence", "w_max", B - 1, "tokens",
                   "only the last block can be partly full, and it holds at least one token")
    s.step("worst_batch_waste", "Most KV the batch can leave empty (a bound, not asked)", "W_max",
           n * w_max * kv_tok, "GiB", "every sequence ends one token into its last block: twice the expected")
    w = s.step("expected_waste", "Expected empty slots per sequence", "w", w_max / 2, "tokens",
               "a length ending anywhere in its last block leaves 0 to B−1 slots empty, each equally likely")
    waste = s.step("batch_waste", "Expected empty KV across the batch", "W", n * w * kv_tok, "GiB",
                   "every sequence in flight pays its own partial last block, in every layer")
    share = s.step("waste_share", "Share of the allocated KV left empty", "f_w", w / (L_avg + w), "%",
                   "empty slots over slots allocated (tokens stored plus empty ones)")
    s.step("sequences_lost", "More mean-length sequences the empty KV would hold", "n_lost", n * w / L_avg,
           "sequences", "the empty KV priced at a mean-length sequence's KV: n_lost / (n + n_lost) is the share")
    blocks_for_tokens(s, L_avg, B)
    hit = s.step("prefix_hit", "System-prompt tokens in full blocks (cache hits)", "P_hit", B * floor_of(P / B),
                 "tokens", "only full blocks are hashed, and the block where the shared prompt ends also holds "
                 "each request's own text")
    s.step("prefix_recompute", "System-prompt tokens each new request prefills again", "P_miss", P - hit, "tokens",
           "the tail of the prompt past its last full block misses the cache")
    if s.compare(P, 2 * B) < 0:  # a prompt under two blocks: its uncached tail is most or all of it
        s.refuse_if_asked(("prefix_recompute", "block_choice"), f"a {format_number(s.value(P))}-token system "
                          f"prompt is under two {format_number(s.value(B))}-token blocks")
    tau = s.param("tau", "waste_tolerance")
    L_star = s.step("boundary_length", "Mean length at which the waste reaches the bar", "L_star",
                    w * (1 - tau) / tau, "tokens", "solve w / (L + w) = τ for L")

    s.assume("Lengths are spread widely enough that each sequence ends at a uniformly random slot of its "
             "last block, so the expected waste is (B − 1)/2 slots; the worst case is B − 1.")
    s.assume("KV bytes are those of one model replica across all layers; under tensor parallelism each GPU "
             "holds its KV heads' share of the same blocks, so the shares and counts are unchanged (the page a "
             "GPU gathers is 1/TP of the replica's).")
    s.assume(f"The {s.text(tau)} bar is ours, on concurrency lost: PagedAttention measured "
             "vLLM's waste under 4%, an outcome of 16-token blocks, not a criterion.")
    s.assume("The system prompt is followed by text that differs per request, so its last, mixed block never "
             "matches in a prefix cache that hashes whole blocks (vLLM's rule).")
    s.slip("/n: one sequence's waste, not the batch's", 1 / p.batch, on="batch_waste")
    s.slip("x2: the worst case B − 1 instead of the expected (B − 1)/2", 2.0, on="batch_waste")
    s.slip("B/2 instead of (B − 1)/2: a last block counted as if it could be wholly empty", on="batch_waste",
           factor=p.block_size / (p.block_size - 1))
    s.slip("x2: the worst case B − 1 instead of the expected (B − 1)/2", on="waste_share",
           factor=s.evaluate(w_max / (L_avg + w_max)) / s.value(share))
    s.slip("x layers: KV of one layer counted for the whole model", 1 / p.model.layers, on="batch_waste")

    _block_choices(s, B, L_avg, P, tau)
    _block_regime(s, share, tau, L_star, L_avg, waste)

