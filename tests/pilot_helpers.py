"""What the app's Pilot tests share: the app at 80x24 once its bank is in, a wait on a condition
(never a fixed sleep), and the steps many scenarios take (open a default variant, reveal it, pick
from the command palette, step the what-if explorer)."""
from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from rich.console import Console
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input

from tui.app import InfradrillApp
from tui.screens.question import QuestionScreen
from tui.screens.solution import SolutionScreen

SIZE = (80, 24)
TIMEOUT = 60.0  # generous: only a failing test waits this long, and a loaded 2-core machine is slow
POLL = 0.02  # seconds between looks; a sleep that lets the workers' threads run, not a wait for an outcome


async def wait_for(pilot: Pilot, condition: Callable[[], object], timeout: float = TIMEOUT) -> None:
    """Pause until `condition()` holds. Workers run in threads and post their results as messages:
    the UI reflects them some rounds later, however loaded the machine is."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            where = type(pilot.app.screen).__name__
            raise AssertionError(f"not reached in {timeout:g} s on {where}: {getattr(condition, '__qualname__', '')}")
        await pilot.pause(POLL)


def on_screen(app: InfradrillApp, name: str) -> Callable[[], bool]:
    """A condition: the screen on top is the one named (screens are imported lazily by the app)."""
    return lambda: type(app.screen).__name__ == name


def notices(app: InfradrillApp) -> list[str]:
    return [n.message for n in app._notifications]


def notice_posted(app: InfradrillApp, text: str) -> Callable[[], bool]:
    """A condition: a notice containing `text` is up (notices arrive as messages)."""
    return lambda: any(text in message for message in notices(app))


def question_ready(app: InfradrillApp) -> bool:
    """A question screen whose answer boxes are mounted and whose own start-up focus has landed
    (pushing it is not enough to type into it: a focus set before then would be taken back), its
    Focus event handled too: until then the box would still select, on focus, what a test typed."""
    focused = app.screen.focused
    return (isinstance(app.screen, QuestionScreen) and bool(app.screen.query("AnswerField Input"))
            and isinstance(focused, Input) and focused.has_focus)


def followup_showing(app: InfradrillApp) -> bool:
    return question_ready(app) and getattr(app.screen, "followup", None) is not None


@asynccontextmanager
async def running_app(app: InfradrillApp | None = None, **kwargs: Any) -> AsyncIterator[tuple[InfradrillApp, Pilot]]:
    """The app (`app`, or a new one made with `kwargs`, e.g. bank_loader) at 80x24, once its bank
    has loaded. Its progress store is wherever INFRADRILL_DATA_DIR points (the `data_dir` fixture)."""
    app = app or InfradrillApp(**kwargs)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.drill is not None)
        yield app, pilot


async def open_default(app: InfradrillApp, pilot: Pilot, question_id: str) -> None:
    app.open_question(question_id, default=True)
    await wait_for(pilot, lambda: question_ready(app))


async def past_followup(app: InfradrillApp, pilot: Pilot, screen: object, answer: bool = False) -> None:
    """After submitting the first round on `screen`: skip the follow-up if one is asked (or, as
    a mock interview must, reveal it unanswered)."""
    def moved_on() -> bool:
        if app.screen is screen:
            return False
        return not isinstance(app.screen, QuestionScreen) or question_ready(app)

    await wait_for(pilot, moved_on)
    if followup_showing(app):
        await pilot.press(*(("ctrl+s", "ctrl+s") if answer else ("ctrl+k",)))


async def reveal(app: InfradrillApp, pilot: Pilot, keys: tuple[str, ...] = ("ctrl+s",)) -> None:
    """Submit the question on screen, skip any follow-up, and wait for the solution."""
    screen = app.screen
    await pilot.press(*keys)
    await past_followup(app, pilot, screen)
    await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen))


async def palette_pick(app: InfradrillApp, pilot: Pilot, typed: str, first_hit: str) -> None:
    """Open the palette, type, wait until `first_hit` leads the list (the search runs in a task), take it."""
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
    await pilot.press(*typed)
    hits = app.screen.query_one(CommandList)

    def leading() -> bool:
        return hits.option_count > 0 and first_hit in str(hits.get_option_at_index(0).prompt)

    await wait_for(pilot, leading)
    await pilot.press("enter")


async def open_what_if(app: InfradrillApp, pilot: Pilot, question_id: str) -> Any:
    """The what-if explorer over a question's default variant (given up on), its first solve shown."""
    await open_default(app, pilot, question_id)
    await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
    await pilot.press("w")
    await wait_for(pilot, on_screen(app, "WhatIfScreen"))
    screen = app.screen
    await wait_for(pilot, lambda: screen.asked > 0 and screen.solved == screen.asked)  # 0 == 0 before its mount
    return screen


async def step_what_if(pilot: Pilot, screen: Any, key: str) -> None:
    """A move is solved in a worker: wait until its result is on screen."""
    await pilot.press(key)
    await wait_for(pilot, lambda: screen.solved == screen.asked)


def text_of(renderable: object, width: int = SIZE[0]) -> str:
    """What a Rich renderable prints as plain text at `width` columns."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def interviewer_ready(screen: Any) -> bool:
    """The interviewer view composed, each of its pushes worded (found, or found to be none) by its worker."""
    words = screen.query(".stage-words")
    return len(words) == len(screen.solution.question.stages) and all(
        "finding the push" not in text_of(w.content) for w in words)
