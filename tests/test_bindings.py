"""Every key binding of the app and its screens has an id (for keymaps) and a tooltip (the footer's
hover text and the help page's line on it)."""
from __future__ import annotations

import asyncio
import importlib
import inspect
import io
import pkgutil

from rich.console import Console
from textual.binding import Binding

import tui.screens
from tests.test_tui import running_app, wait_for
from tui.app import InfradrillApp


def owners() -> list[type]:
    """The app and every class in tui.screens that declares bindings of its own."""
    found: list[type] = [InfradrillApp]
    for module in pkgutil.iter_modules(tui.screens.__path__):
        loaded = importlib.import_module(f"tui.screens.{module.name}")
        found += [c for _, c in inspect.getmembers(loaded, inspect.isclass)
                  if c.__module__ == loaded.__name__ and "BINDINGS" in vars(c)]
    return found


def test_every_binding_has_a_unique_id_and_a_tooltip():
    bindings = [(owner.__name__, b) for owner in owners() for b in owner.BINDINGS if isinstance(b, Binding)]
    assert len(bindings) > 40  # every screen was found
    assert [name for name, b in bindings if not b.id or not b.tooltip] == []
    ids = [b.id for _, b in bindings]
    assert len(ids) == len(set(ids))


def test_the_help_page_gives_each_key_its_tooltip():
    async def scenario():
        async with running_app() as (app, pilot):
            await pilot.press("f1")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
            console = Console(width=80, record=True, file=io.StringIO())
            console.print(app.screen.body())
            return console.export_text()

    page = asyncio.run(scenario())
    assert "Drill  the next due review, else a new question" in page
    assert "Settings  new questions a day, retention, theme, follow-ups" in page
