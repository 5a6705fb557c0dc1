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


def _window_allocator(s: Sheet, saving, n_win, full_blocks, W, C, L_w, L) -> None:
    """What the allocator must do follows from whether this request's context outgrows the window."""
    window, context = format_number(s.value(W)), format_number(s.value(C))
    saves = s.compare(saving, 0) > 0
    frees = s.compare(n_win, full_blocks) < 0
    held, whole = format_number(s.value(n_win)), format_number(s.value(full_blocks))
    s.judge("allocator", "keep the windowed layers in block tables of their own (a KV cache group)", saves,
            f"the {context}-token context outgrows the {window}-token window: one table shared with the full "
            "layers would keep the whole context in every layer" if saves else
            f"the {context}-token context fits in the {window}-token window: no layer drops anything")
    s.judge("allocator", "free a windowed layer's blocks once they fall wholly behind the window", frees,
            f"a windowed layer needs {held} of the {whole} blocks the context fills: the rest must go back to the "
            "pool" if frees else f"a windowed layer still needs all {whole} blocks the context fills")
    s.judge("allocator", "nothing: at this context every layer keeps the whole request anyway", not saves,
            "the window is shorter than the context, so the saving must be made" if saves else
            f"the {window}-token window covers all {context} tokens: the saving is zero whatever the allocator")
    s.judge("allocator", "use a block size that divides the window", False,
            "the window still starts mid-block as it slides: ⌈W/B⌉ + 1 blocks whatever B divides", fact=True)
    more = s.param("m", "more")
    room = s.step("pool_multiplier", "Requests the pool holds with the windows freed, against without", "M",
                  1 / (1 - saving), "x", "each request needs 1 − S of its full KV")
    twice = s.compare(room, more) >= 0
    s.judge("allocator", "the same pool holds at least {more} as many such requests with the windows freed", twice,
            f"each request keeps {format_quantity(s.evaluate(1 - saving), '%')} of its full KV: {s.text(room)} as "
            "many fit" + ("" if twice else f", short of {s.text(more)} (the windowed share of layers caps it at "
                                           f"{format_quantity(s.evaluate(1 / (1 - L_w / L)), 'x')})"))


def _window_regime(s: Sheet, f, saving, kept_full, kept_win, C_star, C) -> None:
    cap, got = s.text(f), s.text(saving)
    full, win = s.text(kept_full), s.text(kept_win)
    detail = (f"the window covers the whole context, so the saving is zero of a possible {cap}"
              if s.compare(saving, 0) == 0 else
              f"the window length decides the saving, {got} of a possible {cap}, and a shorter window "
              "could win back at least half of what is left")
    s.regime_by(C, C_star, tie="below", above=Side(
        "layer-ratio",
        f"The full-context layers keep {full} of the full cache, the windowed ones only {win}: the saving "
        f"({got}) is capped by the windowed share of layers ({cap}), and even a zero-length window would add "
        f"no more than {win}. More windowed layers, not a shorter window, is the bigger lever.",
        "Below the boundary context the windowed layers keep more KV than the full ones: the window length, "
        "not the layer ratio, decides the saving, and at or below the window it is zero."), below=Side(
        "window",
        f"The windowed layers keep {win} of the full cache, at least the {full} the full-context layers keep: "
        f"{detail}.",
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
    n_win = s.step("window_blocks", "Blocks a windowed layer holds per request while decoding", "n_win",
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
    s.assume("All layers cache the same KV heads and head dim, windowed or not (true of gpt-oss and Gemma 2/3), "
             "so the saving depends on layer counts alone; KV dtype and block size do not change it.")
    s.assume("The saving needs an allocator that gives the windowed layers their own block tables and frees "
             "their blocks as they slide out of the window (vLLM's hybrid KV cache manager, one KV cache group "
             "per layer type). One block table for all layers keeps the full context in every layer: a saving "
             "of zero.")
    s.assume("Per request at its full context; the saving in tokens ignores the up-to-one extra block "
             "each windowed layer holds.")
    s.slip("saving counted as if every layer were windowed", 1 / s.value(f), on="saving")
    s.slip("saving counted as if every layer were windowed", on="kv_windowed",
           factor=s.evaluate(full * W_eff / C) / s.value(kv_win))
    _window_allocator(s, saving, n_win, full_blocks, W, C, L_w, L)
    _window_regime(s, f, saving, kept_full, kept_win, C_star, C)

