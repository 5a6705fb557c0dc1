"""The app stays up through what a person types and what they drop in the config directory:
every crash kind typed into an answer box, and hostile user data files at start-up."""
from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Input

from tests.pilot_helpers import open_default, reveal, running_app, wait_for
from tests.test_hostile_files import HOSTILE
from tui.screens.solution import SolutionScreen

TYPED = ["[/", "[/x] [b]", "1e-300", "2.4×10⁻⁻⁵", "5×10⁻", "0 T T T T", "-", "1e400", "nan", "inf", "9" * 5000,
         "\x00", "٣"]


def test_every_crash_kind_typed_into_an_answer_is_read_or_refused_and_the_app_stays_up(data_dir):
    async def scenario():
        async with running_app() as (app, pilot):
            await open_default(app, pilot, "weight-read-intensity")
            box = next(iter(app.screen.query("AnswerField Input").results(Input)))
            note = app.screen.query_one("AnswerField .note")
            for text in TYPED:
                box.value = text
                await wait_for(pilot, lambda: str(note.render()) != "")
                assert app.is_running, text
            box.value = "1e-300"  # readable, absurdly small: graded wrong, not a crash
            await reveal(app, pilot, keys=("ctrl+s", "ctrl+s"))  # the second press reveals, other boxes empty
            assert isinstance(app.screen, SolutionScreen) and app.screen.grades[0].verdict == "wrong"

    asyncio.run(scenario())


@pytest.mark.parametrize("name", ["binary", "alias bomb", "deep nesting", "NaN figure", "latin-1",
                                  "model without kv_heads"])
def test_the_app_starts_past_a_hostile_user_file_and_names_it(config_dir, name):
    content, says = HOSTILE[name]
    target = config_dir / ("models.yaml" if content.startswith(b"models:") else "hardware.yaml")
    target.write_bytes(content)

    async def scenario():
        async with running_app() as (app, pilot):
            # Notices are posted as messages: wait for the one that names the file.
            await wait_for(pilot, lambda: any(says in n.message and str(target) in n.message
                                              for n in app._notifications))
            await open_default(app, pilot, "kv-bytes-per-token")
            assert app.is_running

    asyncio.run(scenario())
