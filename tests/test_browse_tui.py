"""Browse as an interviewer's tool, through Pilot at 80x24: the filter, each question's state in the drill,
the interviewer view and the what-if explorer from a row (nothing recorded), and every screen's help
named as its user knows it."""
from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from datetime import timedelta

import pytest
from textual import events
from textual.screen import Screen
from textual.widgets import DataTable, Static

import tui.screens
from practice.records import now_utc
from solvers.bank import Bank
from solvers.groups import group_names
from solvers.lookup import matching
from tests.pilot_helpers import (
    interviewer_ready,
    on_screen,
    palette_pick,
    running_app,
    step_what_if,
    text_of,
    wait_for,
)
from tui.app import InfradrillApp

pytestmark = pytest.mark.usefixtures("data_dir")

QUESTIONS = ("kv-bytes-per-token", "weight-read-intensity", "paged-block-size", "moe-dispatch-bytes",
             "ep-load-skew")


@pytest.fixture
def small_bank(bank):
    return Bank({qid: bank.questions[qid] for qid in QUESTIONS})


def rows(app: InfradrillApp) -> list[str]:
    table = app.screen.query_one(DataTable)
    return [str(table.get_row_at(i)[2]) for i in range(table.row_count)]


async def browsing(app: InfradrillApp, pilot, at: str | None = None) -> DataTable:
    """Browse open, the cursor on `at`."""
    await pilot.press("b")
    await wait_for(pilot, on_screen(app, "BrowseScreen"))
    table = app.screen.query_one(DataTable)
    if at is not None:
        table.move_cursor(row=rows(app).index(at))
        title = app.loaded_session.bank.questions[at].title
        await wait_for(pilot, lambda: title in text_of(app.screen.query_one("#detail").content))
    return table


def test_typing_a_filter_narrows_the_list_and_esc_clears_it_before_leaving(small_bank):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            await browsing(app, pilot)
            everything = rows(app)
            await pilot.press("slash", *"moe")
            narrowed = rows(app), str(app.screen.query_one("#shown").content)
            await pilot.press("down")  # back to the list: its letters are keys again
            focus = app.screen.focused
            await pilot.press("escape")  # clears the filter, stays
            cleared = rows(app), app.screen.query_one("#filter").value, type(app.screen).__name__
            await pilot.press("slash", *"k1", "enter")
            group = [str(r[0]) for r in (app.screen.query_one(DataTable).get_row_at(i)
                                         for i in range(app.screen.query_one(DataTable).row_count))]
            await pilot.press("escape", "escape")
            return everything, narrowed, focus, cleared, group, type(app.screen).__name__

    everything, (narrowed, shown), focus, cleared, group, left_to = asyncio.run(scenario())
    assert set(everything) == set(QUESTIONS)
    assert narrowed == matching([small_bank.questions[q] for q in everything], "moe")
    assert "moe-dispatch-bytes" in narrowed and "kv-bytes-per-token" not in narrowed
    assert shown == f"{len(narrowed)} of {len(QUESTIONS)}"
    assert isinstance(focus, DataTable)
    assert cleared == (everything, "", "BrowseScreen")
    assert group == ["K1"]  # a group's code as a word is that group
    assert left_to == "HomeScreen"


def test_typing_on_the_list_starts_the_filter_and_keys_typed_fast_behind_slash_are_text(small_bank):
    """A letter no key is bound to starts the filter; after `/`, every letter is text, those that arrive in the
    same write as it included (a paste, tmux): `d` there must not open the default variant."""
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            await browsing(app, pilot)
            box = app.screen.query_one("#filter")
            await pilot.press(*"kv")  # neither is bound on the list
            typed = box.value, box.has_focus
            await pilot.press("escape", "escape")
            await browsing(app, pilot)
            for key, character in (("slash", "/"), ("d", "d"), ("i", "i"), ("s", "s")):
                app.post_message(events.Key(key, character))  # all queued before any is handled
            await wait_for(pilot, lambda: app.screen.query_one("#filter").value == "dis")
            return typed, type(app.screen).__name__, app.loaded_session.reviewer.store.held(now_utc())

    typed, screen, held = asyncio.run(scenario())
    assert typed == ("kv", True)
    assert screen == "BrowseScreen" and held == {}  # neither opened nor suspended anything


def test_each_row_shows_its_state_in_the_drill_and_the_row_its_group_spelled_out(small_bank):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            reviewer = app.loaded_session.reviewer
            reviewer.review("kv-bytes-per-token", 1, now_utc() - timedelta(hours=1))  # Again an hour ago: due
            reviewer.review("weight-read-intensity", 4)  # Easy: days away
            reviewer.suspend("paged-block-size")
            reviewer.bury("ep-load-skew")
            table = await browsing(app, pilot, at="paged-block-size")
            states = {str(table.get_row(qid)[2]): str(table.get_row(qid)[1]) for qid in QUESTIONS}
            return states, reviewer.states(), text_of(app.screen.query_one("#detail").content)

    states, expected, detail = asyncio.run(scenario())
    assert states == expected  # what the drill does with each, as practice.review says
    assert states["paged-block-size"] == "suspended" and states["ep-load-skew"] == "buried"
    assert states["moe-dispatch-bytes"] == "new" and states["weight-read-intensity"] == "later"
    assert states["kv-bytes-per-token"] == "due"
    assert f"K1 {group_names()['K1']}" in detail and "suspended" in detail


def test_what_if_from_a_row_records_nothing_and_names_the_variant_it_explores(small_bank):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            await browsing(app, pilot, at="weight-read-intensity")
            await pilot.press("w")
            await wait_for(pilot, on_screen(app, "WhatIfScreen"))
            screen = app.screen
            await wait_for(pilot, lambda: screen.asked > 0 and screen.solved == screen.asked)
            first = text_of(screen.query_one("#whatif-title").content)
            for key in ("right", "left"):  # a fresh variant: its parameter may sit at the end of its range
                await step_what_if(pilot, screen, key)
                if screen.solution.code != screen.base.code:
                    break
            moved = str(screen.solution.code), text_of(screen.query_one("#whatif-title").content)
            params = {p.name: p.shown for p in screen.solution.params}
            again = app.loaded_session.variant_from_code(moved[0])  # what the candidate opens with v
            store = app.loaded_session.reviewer.store
            return (str(screen.base.code), first, moved, params, {p.name: p.shown for p in again.params},
                    store.attempts(), store.cards())

    base, first, (code, title), params, reopened, attempts, cards = asyncio.run(scenario())
    assert base.startswith("weight-read-intensity@") and f"variant {base}" in first
    assert code != base and code.startswith(base + "+")  # the explored variant's own code...
    assert f"variant {code} (from {base})" in " ".join(title.split())
    assert reopened == params  # ...which opens exactly it
    assert attempts == [] and cards == {}  # no attempt, no card


async def as_interviewer(app: InfradrillApp, pilot, at: str) -> Screen:
    """The interviewer's view of the question `at`, opened from Browse, its pushes found."""
    await browsing(app, pilot, at=at)
    await pilot.press("i")
    await wait_for(pilot, on_screen(app, "InterviewerScreen"))
    interviewer = app.screen
    await wait_for(pilot, lambda: interviewer_ready(interviewer))
    return interviewer


def test_interviewer_view_from_a_row_and_its_what_if(small_bank):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            interviewer = await as_interviewer(app, pilot, "kv-bytes-per-token")
            await pilot.press("w")
            await wait_for(pilot, on_screen(app, "WhatIfScreen"))
            explored = app.screen.base
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.screen is interviewer)
            return interviewer.solution, explored, app.loaded_session.reviewer.store.attempts()

    solution, explored, attempts = asyncio.run(scenario())
    assert solution.question.id == "kv-bytes-per-token" and explored is solution
    assert attempts == []


@pytest.mark.parametrize("typed, screen", [("what if: weight-read", "WhatIfScreen"),
                                           ("as interviewer: weight-read", "InterviewerScreen")])
def test_the_palette_opens_a_question_as_interviewer_or_in_the_what_if(small_bank, typed, screen):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            await palette_pick(app, pilot, typed, typed.split(":")[0])
            await wait_for(pilot, on_screen(app, screen))
            return app.screen.solution.question.id, app.loaded_session.reviewer.store.attempts()

    opened, attempts = asyncio.run(scenario())
    assert opened == "weight-read-intensity" and attempts == []


def test_every_screen_has_a_name_for_its_help_page():
    """F1's title showed a class name (`WhatIf`): each screen says its own name, in its own class (AppScreen and
    CardScreen are only bases)."""
    screens = []
    for module in pkgutil.iter_modules(tui.screens.__path__):
        loaded = importlib.import_module(f"tui.screens.{module.name}")
        screens += [cls for _, cls in inspect.getmembers(loaded, inspect.isclass) if issubclass(cls, Screen)
                    and cls.__module__ == loaded.__name__ and cls.__name__ not in ("AppScreen", "CardScreen")]
    assert len(screens) >= 14
    unnamed = [cls.__name__ for cls in screens if not vars(cls).get("HELP_TITLE")]
    assert unnamed == []


def test_help_over_the_what_if_names_it(small_bank):
    async def scenario():
        async with running_app(bank_loader=lambda: small_bank) as (app, pilot):
            await browsing(app, pilot, at="weight-read-intensity")
            await pilot.press("w")
            await wait_for(pilot, on_screen(app, "WhatIfScreen"))
            await pilot.press("f1")
            await wait_for(pilot, on_screen(app, "HelpScreen"))
            return text_of(app.screen.body()).splitlines()[0]

    assert asyncio.run(scenario()).split() == ["Keys", "on", "this", "screen", "What", "if"]


def test_the_interviewers_view_says_the_figures_a_stage_gives(bank):
    """hidden-memory-budget holds its memory consumers back to stage 3: the candidate's screen shows them in that
    stage's table, and the interviewer's view said nothing of them (nothing to read out)."""
    async def scenario():
        one = Bank({"hidden-memory-budget": bank.questions["hidden-memory-budget"]})
        async with running_app(bank_loader=lambda: one) as (app, pilot):
            interviewer = await as_interviewer(app, pilot, "hidden-memory-budget")
            words = {index: " ".join(text_of(interviewer.query_one(f"#stage-{index}-words", Static).content).split())
                     for index in (0, 2)}  # the lines as one: a figure may wrap at 80 columns
            return interviewer.solution, words

    solution, words = asyncio.run(scenario())
    graphs = solution.param("cuda_graphs")
    assert "Give now: " in words[2] and f"{graphs.label} {graphs.shown}" in words[2]
    assert "Give now" not in words[0]
