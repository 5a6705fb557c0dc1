"""What sliding-window layers save in KV cache, and who decides."""
from __future__ import annotations

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.common import dtype_bytes, given_config, require_context
from solvers.formulas.kvcache import (
    blocks_for_tokens,
    kv_bytes_per_token_given,
)
from solvers.sheetmath import ceil_of, min_of
from solvers.units import format_number, format_quantity

TOO_CLOSE = 0.02  # the saving's tolerance in the question file
HAIR = 0.03  # a select statement judged within 3% of its threshold is a coin toss: refused where asked
LEVERS = "levers"
MORE = "the same pool holds at least {more} as many such requests with the windows freed"
HALVE = "halving the window would cut the KV left per request by at least {cut}"
TINY = "the windowed layers keep under {tiny} of the full cache"
DIVIDES = "a block size that divides the window stops the windowed layers holding a partial block"


def _hairline(s: Sheet, value: float, line: float, what: str) -> None:
    if abs(value / line - 1) <= HAIR:
        s.refuse_if_asked([LEVERS], f"{what} is within 3% of its threshold: too close to call")


def _levers(s: Sheet, f, saving, W, W_eff, C, kept, kept_win) -> None:
    """Statements whose truth follows from the context against the window and the layer ratio. Each turns on its
    own line inside a regime, not on the regime itself: the draws are long documents (33K and up) or Gemma-3 chats
    (4K and under), and halving the window's cut (5%) and the windows' sliver (1%) cross among Gemma-3's long
    documents (near 48K and 86K), where the regime does not move."""
    more, cut, tiny = s.param("m", "more"), s.param("x", "cut"), s.param("q", "tiny")
    room = s.step("pool_multiplier", "Requests the pool holds with the windows freed, against without", "M",
                  1 / (1 - saving), "x", "each request needs 1 − S of its full KV")
    _hairline(s, s.value(room), s.value(more), "the pool's multiplier")
    holds = s.compare(room, more) >= 0
    s.judge(LEVERS, MORE, holds,
            f"each request keeps {format_quantity(s.evaluate(1 - saving), '%')} of its full KV: {s.text(room)} as "
            f"many fit, {'at least' if holds else 'short of'} {s.text(more)}")
    halved = s.step("halved_window_cut", "Share of the KV left that halving the window would free", "H",
                    f * (W_eff - min_of(W / 2, C)) / C / kept, "%",
                    "the windowed layers drop half their window (none of it if the context fits in half a window), "
                    "over what the request keeps now")
    _hairline(s, s.value(halved), s.value(cut), "halving the window's cut")
    holds = s.compare(halved, cut) >= 0
    s.judge(LEVERS, HALVE, holds,
            f"the windows hold {format_quantity(s.evaluate(f * W_eff / C / kept), '%')} of what is left, so half "
            f"a window frees {s.text(halved)} of it" + ("" if holds else f", under {s.text(cut)}: the full "
                                                       "layers hold the rest"))
    _hairline(s, s.value(kept_win), s.value(tiny), "the windows' share of the full cache")
    holds = s.compare(kept_win, tiny) < 0
    s.judge(LEVERS, TINY, holds,
            f"{format_number(s.value(W))} tokens of {format_number(s.value(C))} in {s.text(f)} of the layers: the "
            f"windows keep {s.text(kept_win)} of the full cache, {'under' if holds else 'not under'} {s.text(tiny)}"
            + ("" if holds else ": the window itself is worth shortening"))
    s.judge(LEVERS, DIVIDES, False,
            "the window slides a token a step, so its oldest token sits mid-block whatever B divides: ⌈W/B⌉ + 1 "
            "blocks", fact=True)


def _window_regime(s: Sheet, f, L, saving, kept_full, kept_win, W_eff, C_star, C) -> None:
    cap, got = s.text(f), s.text(saving)
    full, win = s.text(kept_full), s.text(kept_win)
    one_more = format_quantity(s.evaluate((1 - W_eff / C) / L), "%")
    bigger = ("a zero-length window" if s.compare(kept_win, (1 - W_eff / C) / L) > 0 else
              "one more windowed layer")
    s.regime_by(C, C_star, tie="below", above=Side(
        "layer-ratio",
        f"The full layers keep {full} of the full cache, the windows only {win}: the saving ({got}) is bounded "
        f"by the windowed share of layers ({cap}). A zero-length window would add {win}, one more "
        f"windowed layer {one_more}: {bigger} is the larger of the two.",
        "At shorter contexts the windows keep more than the full layers: the window length, not the layer "
        "ratio, decides the saving, and at or inside the window it is zero."), below=Side(
        "window",
        f"The windows keep {win} of the full cache, at least the {full} the full layers keep: the window "
        f"length decides the saving, {got} of a possible {cap}"
        + (" (the window covers the whole context, so nothing is saved)." if s.compare(saving, 0) == 0 else
           f"; a zero-length window would add {win}, one more windowed layer {one_more}."),
        "At longer contexts the windows drop most of the context and the saving approaches the windowed "
        "share of layers: then the layer ratio, not the window, sets it."))


def solve(p, s: Sheet) -> None:
    model = p.model
    require_context(model, p.context)
    kv_tok = kv_bytes_per_token_given(s, model, dtype_bytes(p.kv_dtype), p.kv_dtype)
    L = given_config(s, model, "layers")
    L_w = s.given("L_w", model.sliding_window_layers, "", "layers with a sliding window")
    W = s.given("W", model.sliding_window, "tokens", "sliding window")
    C = s.param("C", "context")
    B = s.param("B", "block_size")

    full = s.step("kv_full", "KV per request, every layer at full context", "KV_full", kv_tok * C, "GiB",
                  "what the request would hold if no layer were windowed")
    f = s.step("windowed_share", "Share of layers windowed", "f", L_w / L, "%", "windowed layers over all layers")
    W_eff = s.step("window_tokens", "Tokens a windowed layer keeps", "W_eff", min_of(W, C), "tokens",
                   "the last W tokens, or the whole context if it is shorter")
    saving = s.step("saving", "KV saved by the windows", "S", f * (1 - W_eff / C), "%",
                    "the windowed share of layers, times the part of the context they drop")
    kv_win = s.step("kv_windowed", "KV per request with windowed layers freed", "KV_win", full * (1 - saving),
                    "GiB", "full layers keep the whole context, windowed layers only their window")
    full_blocks = blocks_for_tokens(s, C, B, key="full_layer_blocks")
    s.step("window_blocks", "Blocks a windowed layer keeps per request while decoding", "n_win",
           min_of(ceil_of(W_eff / B) + 1, full_blocks), "blocks",
           "vLLM's bound at one token per step: the window may start mid-block, so one block more than "
           "W/B; blocks that slide out are freed (a prefill chunk of T tokens needs up to "
           "⌈(W − 1 + T)/B⌉ + 1). A request inside the window never reaches it: it holds its own ⌈C/B⌉")
    kept_full = s.step("full_layers_keep", "Share of the full cache the full-context layers keep", "K_f", 1 - f, "%",
                       "they hold every token of the context")
    kept_win = s.step("windowed_layers_keep", "Share of the full cache the windowed layers keep", "K_w",
                      f * W_eff / C, "%", "their window out of the whole context")
    C_star = s.step("boundary_context", "Context at which both kinds of layer keep equal KV", "C_star",
                    f * W / (1 - f), "tokens", "solve (1 − f) = f·W/C for C")

    # Counted in blocks rather than tokens the two kinds of layer can tie on either side of C_star (Gemma-3 at
    # 5,400 tokens: 338 x 10 = 65 x 52 blocks of 16), and a context this near it is a coin toss to the candidate.
    # A context inside the window is no such toss: every layer keeps all of it (Gemma-2 at 4,096 is a window).
    if s.compare(C, W) > 0 and abs(s.value(C) / s.value(C_star) - 1) <= TOO_CLOSE:
        raise Reject("the context is within 2% of the one where both kinds of layer keep equal KV: too close to call")
    # A request inside the window saves nothing: an opening on it asks three figures of which one is zero and
    # one repeats another. A push may still land there (the window covers the request: that is its lesson).
    if s.compare(C, W) <= 0:
        s.refuse_if_asked(["kv_full", "kv_windowed"], "the context fits inside the window: the windows save nothing")
    s.assume("All layers cache the same KV heads and head dim, windowed or not (true of gpt-oss and Gemma 2/3), "
             "so the saving depends on layer counts alone; KV dtype and block size do not change it.")
    s.assume("The saving needs an allocator that gives the windowed layers their own block tables and frees "
             "their blocks as they slide out of the window (vLLM's hybrid KV cache manager, one KV cache group "
             "per layer type; SGLang splits a windowed and a full pool by --swa-full-tokens-ratio, so the saving "
             "is realised only where that ratio matches the traffic). One block table for all layers keeps the "
             "full context in every layer: a saving of zero.")
    s.assume("Decode reads shrink in the same proportion: each step reads only the KV a layer keeps, so the "
             "windows cut the attention bytes per token by the same share as the memory.")
    s.assume("Per request at its full context; the saving in tokens ignores the up-to-one extra block "
             "each windowed layer holds. Prefix caching is left out: a windowed layer can reuse a cached prefix "
             "only while the blocks of its last window are still resident (vLLM keeps them for that).")
    if s.compare(saving, 0) > 0:  # at zero saving the slip gives the key itself
        s.slip("saving counted as if every layer were windowed", 1 / s.value(f), on="saving")
        s.slip("saving counted as if every layer were windowed", on="kv_windowed",
               factor=s.evaluate(full * W_eff / C) / s.value(kv_win))
    _levers(s, f, saving, W, W_eff, C, kept_full + kept_win, kept_win)
    _window_regime(s, f, L, saving, kept_full, kept_win, W_eff, C_star, C)
