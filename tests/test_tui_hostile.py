"""The app stays up through what a person types and what they drop in the config directory:
every crash kind typed into an answer box, and hostile user data files at start-up."""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from datetime import UTC, datetime

import pytest
from textual.widgets import Input

from practice.schema import FILE_NAME
from practice.store import ProgressStore
from solvers.bankindex import cache_file
from solvers.paths import questions_dir
from tests.pilot_helpers import (
    notice_posted,
    notices,
    on_screen,
    open_default,
    question_ready,
    reveal,
    running_app,
    submit_stage,
    text_of,
    wait_for,
)
from tests.test_hostile_files import HOSTILE
from tests.test_store import first_review, make_attempt
from tui.modes import Mode
from tui.screens.solution import SolutionScreen
from tui.widgets.answer_field import AnswerField

AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

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


# Issue 33: what took the app down or lost an attempt in the second probe ------------------------------------
CRASH_KINDS = [  # (variant, answer box, text): each once raised in the live note or in grading
    ("million-token-context@default", "breaks", "9" * 4301),  # a select box: int() of 4,301 digits (R4)
    ("model-runner-v2@1", "why_triton", "1" + "0" * 4300),  # a checklist's notes, the same digits (R4)
    ("users-per-gpu@1", "kv_per_request_gpu", "0.00000000000000000000001e-300"),  # underflow in slips (R3)
]


async def submitted_with(app, pilot, code: str, key: str, text: str) -> None:
    """Open `code`, type `text` into the box of `key` (in whichever stage asks it), and submit with the
    other boxes empty."""
    app.open_code(code)
    await wait_for(pilot, lambda: question_ready(app))
    while not app.screen.query(f"#answer-{key}"):  # a later stage's box: the stages before it submitted empty
        await submit_stage(app, pilot, keys=("ctrl+s", "ctrl+s"))
    box = app.screen.query_one(f"#answer-{key}", Input)
    box.value = text
    await wait_for(pilot, lambda: box.value == text and app.screen.query_one(f"#field-{key} .note") is not None)
    assert app.is_running, code
    if not app.screen.query_one(f"#field-{key}", AnswerField).readable:
        box.value = ""  # refused in the note, as it should be: the user clears it to submit
    await reveal(app, pilot, keys=("ctrl+s", "ctrl+s"))


def test_each_crash_kind_typed_into_the_real_app_leaves_it_up_and_the_attempt_saved(data_dir):
    async def scenario():
        async with running_app() as (app, pilot):
            store = app.session.reviewer.store
            for number, (code, key, text) in enumerate(CRASH_KINDS, 1):
                await submitted_with(app, pilot, code, key, text)
                assert app.is_running and isinstance(app.screen, SolutionScreen), code
                assert app.screen.submitted is not None and store.attempt_count() == number, code
                await pilot.press("escape")
                await wait_for(pilot, lambda: not isinstance(app.screen, SolutionScreen))
            underflow = store.attempts(question_id="users-per-gpu")[0].answers
            assert [a.verdict for a in underflow if a.key == "kv_per_request_gpu"] == ["wrong"]

    asyncio.run(scenario())


def test_a_card_no_review_can_start_from_costs_no_attempt(data_dir):
    store, _ = ProgressStore.open(data_dir / FILE_NAME)
    with store:
        store.record_attempt(make_attempt("weight-read-intensity", at=AT), first_review("weight-read-intensity", AT))
        card = store.card("weight-read-intensity")
    assert card is not None
    nan_card = json.dumps(card.to_dict() | {"stability": float("nan")})

    async def scenario():
        async with running_app() as (app, pilot):
            # Damaged after the store was opened and checked (another program, a merge): R1's case.
            with sqlite3.connect(data_dir / FILE_NAME) as conn:
                conn.execute("UPDATE cards SET card = ?", (nan_card,))
            await submitted_with(app, pilot, "weight-read-intensity@default", "crossover", "1")
            assert app.screen.submitted is not None and app.session.reviewer.store.attempt_count() == 2
            assert not any("not saved" in message for message in notices(app))

    asyncio.run(scenario())


def test_the_interviewer_view_shows_a_bracketed_gpu_name_as_text(config_dir):
    (config_dir / "hardware.yaml").write_text(
        "gpus:\n" + "".join(f"  '{key}':\n    name: '{name}'\n    vendor: me\n    bf16_dense_tflops: 1000\n"
                            "    fp8_dense_tflops: 2000\n    hbm_gb: 80\n    hbm_tb_s: 3\n    nvlink_gb_s: 900\n"
                            "    nvlink_domain: 8\n    source: me\n"
                            for key, name in (("my-gpu", "[/x] GPU"), ("sxm", "H100 [SXM5]"), ("[/x]", "X"))))

    async def scenario():
        async with running_app() as (app, pilot):
            for key, name in (("my-gpu", "[/x] GPU"), ("sxm", "H100 [SXM5]")):
                code = f"kv-bytes-per-token@default+gpu={key}"
                app._make_variant(lambda session, code=code: session.variant_from_code(code), replace=False,
                                  mode=Mode.INTERVIEWER)
                await wait_for(pilot, on_screen(app, "InterviewerScreen"))
                await pilot.pause()
                assert name in text_of(app.screen.query_one("#stage-0-words").content, 1000) and app.is_running
                await pilot.press("escape")
                await wait_for(pilot, lambda: not on_screen(app, "InterviewerScreen")())
            # A user GPU keyed `[/x]` puts markup in the variant code itself, shown in every title.
            await submitted_with(app, pilot, "kv-bytes-per-token@default+gpu=[/x]", "kv_per_token", "1")
            assert isinstance(app.screen, SolutionScreen) and app.is_running

    asyncio.run(scenario())


@pytest.mark.parametrize("where", ["settings 5,000 digits", "settings 4,300 digits", "settings 3,000 deep",
                                   "settings FIFO", "cache FIFO"])
def test_the_app_starts_past_a_hostile_settings_file_or_cache(config_dir, tmp_path, monkeypatch, where):
    settings = config_dir / "settings.toml"
    if where == "settings 5,000 digits":
        settings.write_text("[review]\nnew_per_day = 1" + "0" * 4999 + "\n")
    elif where == "settings 4,300 digits":  # tomllib reads it; it overflowed a float in the load worker
        settings.write_text("[review]\nnew_per_day = 1" + "0" * 4299 + "\n")
    elif where == "settings 3,000 deep":
        settings.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    elif where == "settings FIFO":
        os.mkfifo(settings)
    else:
        monkeypatch.setenv("INFRADRILL_CACHE_DIR", str(tmp_path / "cache"))
        (tmp_path / "cache").mkdir()
        os.mkfifo(cache_file(tmp_path / "cache", questions_dir(), "bank", ".pickle"))

    async def scenario():
        async with running_app() as (app, pilot):  # the bank loaded: past "Loading the bank…"
            if where.startswith("settings"):
                await wait_for(pilot, notice_posted(app, "settings.toml"))
            await open_default(app, pilot, "weight-read-intensity")
            assert app.is_running

    asyncio.run(scenario())


def test_a_time_at_the_end_of_the_calendar_in_the_store_costs_neither_the_start_nor_statistics(data_dir):
    store, _ = ProgressStore.open(data_dir / FILE_NAME)
    with store:
        for question_id in ("kv-bytes-per-token", "weight-read-intensity"):
            store.record_attempt(make_attempt(question_id, at=AT), first_review(question_id, AT))
    with sqlite3.connect(data_dir / FILE_NAME) as conn:  # R2: the app died at load on this row, every start
        conn.execute("UPDATE attempts SET started = '0001-01-01T00:00:00+05:00' "
                     "WHERE question_id = 'kv-bytes-per-token'")
    conn.close()

    async def scenario():
        async with running_app() as (app, pilot):
            await wait_for(pilot, notice_posted(app, "1 damaged attempt row(s)"))
            await pilot.press("s")
            await wait_for(pilot, on_screen(app, "StatsScreen"))
            assert app.is_running and "1 attempt(s)" in str(app.screen.query_one("#stats").content)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not on_screen(app, "StatsScreen")())
            await submitted_with(app, pilot, "kv-bytes-per-token@default", "kv_per_token", "1")
            assert app.screen.submitted is not None and app.session.reviewer.store.attempt_count() == 2

    asyncio.run(scenario())


def test_the_app_leaves_once_its_terminal_is_gone(config_dir, monkeypatch):
    """A terminal deleted under the app (an SSH drop with no SIGHUP) reads as no terminal: the app leaves rather
    than spin in Textual's input thread; while the terminal stands it stays."""
    import os
    import pty

    from tui.app import InfradrillApp

    app = InfradrillApp()
    left: list[bool] = []
    monkeypatch.setattr(app, "exit", lambda *args, **kwargs: left.append(True))
    terminal, ours = pty.openpty()
    try:
        app.leave_if_terminal_gone(ours)
        assert not left
        os.close(terminal)
        app.leave_if_terminal_gone(ours)
        assert left == [True]
    finally:
        os.close(ours)
