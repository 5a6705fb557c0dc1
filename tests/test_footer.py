"""The screens' footer shows each screen's keys, and is rebuilt only when they change (Textual
rebuilds its own on every change of bindings: three times for each question opened)."""
from __future__ import annotations

import asyncio

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from tests.test_tui import open_default, running_app, wait_for
from tui.screens.home import HomeScreen
from tui.widgets.footer import KeysFooter


def _keys(screen) -> list[str]:
    return [str(key.description) for key in screen.query_one(KeysFooter).query(FooterKey)]


async def _the_footer_is_rebuilt_once_per_question_and_shows_its_keys(monkeypatch):
    rebuilt = []
    real = Footer.recompose

    async def recompose(self):
        rebuilt.append(type(self.screen).__name__)
        await real(self)

    monkeypatch.setattr(Footer, "recompose", recompose)
    async with running_app() as (app, pilot):
        await wait_for(pilot, lambda: "Drill" in _keys(app.screen))
        for _ in range(2):
            rebuilt.clear()
            await open_default(app, pilot, "weight-read-intensity")
            await wait_for(pilot, lambda: "Submit" in _keys(app.screen))
            await pilot.pause()
            assert rebuilt == ["QuestionScreen"]
            assert {"Submit", "Hint", "New variant", "Back"} <= set(_keys(app.screen))
            assert "Skip follow-up" not in _keys(app.screen)  # no follow-up: its key is off
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            await wait_for(pilot, lambda: "Drill" in _keys(app.screen) and "Submit" not in _keys(app.screen))


def test_the_footer_is_rebuilt_once_per_question_and_shows_its_keys(monkeypatch):
    asyncio.run(_the_footer_is_rebuilt_once_per_question_and_shows_its_keys(monkeypatch))


def test_at_60_columns_the_footer_leaves_out_the_keys_that_do_not_fit_and_brings_them_back_wider():
    """Textual's footer scrolled its keys under the palette key at 60 columns, one cut in half (`f▏^p palette`):
    the keys shown fit whole beside the palette key, in their order, and a wider screen shows them all."""
    from tui.widgets.footer import key_width

    def keys(app):
        footer = app.screen.query_one(KeysFooter)
        shown = list(footer.query(FooterKey))
        palette = [k for k in shown if k.has_class("-command-palette")]
        return [k for k in shown if k not in palette], palette

    async def scenario():
        async with running_app() as (app, pilot):
            await pilot.press("b")
            await wait_for(pilot, lambda: "Open" in _keys(app.screen))
            wide, _ = keys(app)
            await pilot.resize_terminal(60, 20)
            await wait_for(pilot, lambda: len(keys(app)[0]) < len(wide))
            narrow, palette = keys(app)
            used = sum(key_width(k) for k in narrow)
            await pilot.resize_terminal(80, 24)
            await wait_for(pilot, lambda: len(keys(app)[0]) == len(wide))
            return [k.description for k in wide], [k.description for k in narrow], used, palette

    wide, narrow, used, palette = asyncio.run(scenario())
    assert narrow == wide[:len(narrow)] and 0 < len(narrow) < len(wide)
    assert len(palette) == 1 and used <= 60 - key_width(palette[0])
