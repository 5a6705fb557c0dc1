"""What the app's Pilot tests share: the app at 80x24 once its bank is in, a wait on a condition
(never a fixed sleep), and the steps many scenarios take (open a default variant, answer its stages,
reveal it, pick from the command palette, step the what-if explorer)."""
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


def stage_ready(app: InfradrillApp, screen: QuestionScreen) -> bool:
    """A condition: `screen` is on top asking a stage, its first box focused (the stage below the last
    one's keys is mounted and can be typed into)."""
    stage = screen.current
    if app.screen is not screen or stage is None or not question_ready(app):
        return False
    focused = screen.focused
    return focused is not None and focused in screen.query_one(f"#stage-{stage.index}").query(Input)


def push_showing(app: InfradrillApp) -> bool:
    """A push (the follow-up stage) is being asked on the question screen on top."""
    screen = app.screen
    return isinstance(screen, QuestionScreen) and stage_ready(app, screen) and screen.at_push


async def submit_stage(app: InfradrillApp, pilot: Pilot, keys: tuple[str, ...] = ("ctrl+s",)) -> None:
    """Press `keys` on the stage being asked (a second ctrl+s where a box was empty), and wait until
    the next stage is asked or the question has left the screen."""
    screen = app.screen
    assert isinstance(screen, QuestionScreen)
    await wait_for(pilot, lambda: stage_ready(app, screen))
    stage = screen.current
    await pilot.press(*keys)

    def moved() -> bool:
        return app.screen is not screen or (screen.current is not stage and (
            screen.current is None or stage_ready(app, screen)))

    await wait_for(pilot, lambda: moved() or screen.confirm_empty)
    if not moved():
        await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: moved() and (app.screen is not screen or screen.current is not None))


async def through_stages(app: InfradrillApp, pilot: Pilot, keys: tuple[str, ...] = ("ctrl+s",),
                         skip_pushes: bool = True) -> None:
    """Submit every stage of the question on screen with `keys` until it leaves the screen; a push is
    skipped with ctrl+k where `skip_pushes` (a mock answers it, unanswered)."""
    screen = app.screen
    assert isinstance(screen, QuestionScreen)
    while app.screen is screen:
        await wait_for(pilot, lambda: app.screen is not screen or stage_ready(app, screen))
        if app.screen is not screen:
            break
        if skip_pushes and screen.at_push and screen.mode != "mock":
            stage = screen.current
            await pilot.press("ctrl+k")
            await wait_for(pilot, lambda s=stage: app.screen is not screen or screen.current is not s)
        else:
            await submit_stage(app, pilot, keys)


@asynccontextmanager
async def running_app(app: InfradrillApp | None = None, **kwargs: Any) -> AsyncIterator[tuple[InfradrillApp, Pilot]]:
    """The app (`app`, or a new one made with `kwargs`, e.g. bank_loader) at 80x24, once its bank
    has loaded. Its progress store is wherever INFRADRILL_DATA_DIR points (the `data_dir` fixture)."""
    app = app or InfradrillApp(**kwargs)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.session is not None)
        yield app, pilot


async def start_mock(app: InfradrillApp, pilot: Pilot) -> None:
    """`m`, then enter on the line that says what the mock does; wait for its first question."""
    await pilot.press("m")
    await wait_for(pilot, on_screen(app, "MockStartScreen"))
    await pilot.press("enter")
    await wait_for(pilot, lambda: question_ready(app))


async def open_default(app: InfradrillApp, pilot: Pilot, question_id: str) -> None:
    app.open_question(question_id, default=True)
    await wait_for(pilot, lambda: question_ready(app))


async def reveal(app: InfradrillApp, pilot: Pilot, keys: tuple[str, ...] = ("ctrl+s",)) -> None:
    """Submit every stage of the question on screen with `keys`, skip its pushes, wait for the solution."""
    await through_stages(app, pilot, keys)
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
    """The interviewer view composed, each of its pushes worded (found, or found to be none) by its worker, and
    the question's published measurements solved where it has any."""
    words, question = screen.query(".stage-words"), screen.solution.question
    asked = [i for i in range(len(question.stages)) if question.asks_on(i, screen.solution.regime_name)]
    return len(words) == len(asked) and all(
        "finding the push" not in text_of(w.content) for w in words) and (
        screen.practice is not None or not screen.solution.question.reality)
