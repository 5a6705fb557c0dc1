"""The settings screen through Pilot at 80x24: every setting changed there is in force and is
found again by a new app on the same directories; what they change in the drill; a broken file."""
from __future__ import annotations

import asyncio
import tomllib
from datetime import UTC, datetime

import pytest
from fsrs import Card, Rating
from textual.widgets import Input, Select

from practice.config import SETTINGS_FILE
from practice.review import ReviewSettings
from tests.old_shape import OLD, with_old_shape
from tests.pilot_helpers import (
    SIZE,
    open_default,
    palette_pick,
    push_showing,
    question_ready,
    reveal,
    running_app,
    wait_for,
)
from tui.modes import FollowUps
from tui.render import interval_text
from tui.screens.home import HomeScreen
from tui.screens.question import QuestionScreen
from tui.screens.settings import SettingsScreen
from tui.screens.solution import SolutionScreen
from tui.widgets.setting_field import SettingField


@pytest.fixture
def config(config_dir):
    """A config directory (and a store) of the test's own: settings are written there."""
    return config_dir


async def open_settings(app, pilot) -> SettingsScreen:
    await pilot.press("comma")
    await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen) and isinstance(app.screen.focused, Input))
    return app.screen


def field(screen, name: str) -> SettingField:
    return screen.query_one(f"#setting-{name}", SettingField)


async def choose(app, pilot, name: str, option: str) -> None:
    """Open the focused list, type the option's name to find it, take it."""
    await pilot.press("enter", *option, "enter")
    await wait_for(pilot, lambda: app.screen.query_one(f"#choose-{name}", Select).value == option)


def shown_values(screen) -> dict[str, str]:
    return {f.setting.name: str(f.query_one(Select).value) if f.setting.choices else f.query_one(Input).value
            for f in screen.query(SettingField)}


def test_every_setting_changed_on_the_screen_is_in_force_after_a_restart(config):
    async def change():
        async with running_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            fits = all(f.region.right <= SIZE[0] for f in screen.query(SettingField))  # seven: the list scrolls
            await pilot.press(*"3", "tab", *"0.8", "tab", *"12", "tab")  # each box's text is selected on focus
            await choose(app, pilot, "theme", "nord")
            theme_at_once = app.theme
            await pilot.press("tab")
            await choose(app, pilot, "followups", "skip")
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            return fits, theme_at_once, app.loaded_session.settings, app.loaded_session.reviewer.settings

    async def restart():
        async with running_app() as (app, pilot):
            theme = app.theme
            screen = await open_settings(app, pilot)
            return theme, app.loaded_session.settings, app.app_settings, shown_values(screen)

    fits, theme_at_once, in_force, reviewer_settings = asyncio.run(change())
    wanted = ReviewSettings(new_per_day=3, desired_retention=0.8, quick_seconds_per_answer=12.0)
    assert fits and theme_at_once == "nord"
    assert in_force == reviewer_settings == wanted
    theme, review, app_settings, shown = asyncio.run(restart())  # a new app on the same directories
    assert theme == "nord" and review == wanted and app_settings.followups == FollowUps.SKIP
    assert shown == {"new_per_day": "3", "desired_retention": "0.8", "quick_seconds_per_answer": "12",
                     "theme": "nord", "followups": "skip", "between_stages": "key", "mock_answers": "practice"}
    assert tomllib.loads((config / SETTINGS_FILE).read_text()) == {
        "review": {"new_per_day": 3, "desired_retention": 0.8, "quick_seconds_per_answer": 12.0},
        "app": {"theme": "nord", "followups": "skip", "between_stages": "key", "mock_answers": "practice"}}


def test_a_typed_value_that_does_not_read_is_shown_inline_and_never_saved(config):
    async def scenario():
        async with running_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            await pilot.press(*"lots", "enter")
            note = field(screen, "new_per_day").query_one(".note")
            shown = (str(note.content), note.has_class("-bad"))
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            return shown, [n.message for n in app._notifications], app.loaded_session.settings.new_per_day

    (note, bad), notices, in_force = asyncio.run(scenario())
    assert note == "'lots' is not a whole number from 0 to 1000" and bad
    assert any(n.startswith("New questions per day not changed: 'lots'") for n in notices)
    assert in_force == 5 and not (config / SETTINGS_FILE).exists()


def test_new_questions_per_day_caps_the_drill(config):
    async def scenario():
        async with running_app() as (app, pilot):
            await open_settings(app, pilot)
            await pilot.press("1", "enter", "escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            before = str(app.screen.query_one("#bank-status").content)
            await pilot.press("d")
            await wait_for(pilot, lambda: question_ready(app))
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))  # give up: Again, due again in a minute
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            after = str(app.screen.query_one("#bank-status").content)
            await pilot.press("d")  # the one new question of the day is taken, and nothing is due yet
            await wait_for(pilot, lambda: any("Nothing due now" in n.message for n in app._notifications))
            return before, after, isinstance(app.screen, QuestionScreen)

    before, after, asked = asyncio.run(scenario())
    assert "new questions left today 1." in before and "new questions left today 0." in after and not asked


def test_desired_retention_sets_the_intervals_the_rating_keys_give(config):
    def easy_after_a_first_review(retention: float) -> str:
        now = datetime(2025, 3, 3, 9, tzinfo=UTC)
        card, _ = ReviewSettings(desired_retention=retention).scheduler().review_card(Card(due=now), Rating.Easy, now)
        return interval_text(card.due - now)

    async def scenario():
        async with running_app() as (app, pilot):
            await open_settings(app, pilot)
            await pilot.press("tab", *"0.7", "enter", "escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            await open_default(app, pilot, "kv-bytes-per-token")
            await reveal(app, pilot, ("ctrl+s", "ctrl+s"))
            return str(app.screen.query_one("#rating").content)

    keys = asyncio.run(scenario())
    easy, usual = easy_after_a_first_review(0.7), easy_after_a_first_review(0.9)
    assert easy != usual and f"4 Easy {easy}" in keys


def test_a_broken_settings_file_gives_a_notice_and_the_rest_loads(config):
    (config / SETTINGS_FILE).write_text('[review]\nnew_per_day = lots\ndesired_retention = 0.8\n'
                                        'quick_seconds_per_answer = 0\n'
                                        '[app]\ntheme = "nord"\nfollowups = "sometimes"\n')

    async def scenario():
        async with running_app() as (app, pilot):
            await wait_for(pilot, lambda: len(app._notifications) >= 3)  # the review table's come with the bank
            return [n.message for n in app._notifications], app.theme, app.app_settings, app.loaded_session.settings

    notices, theme, app_settings, review = asyncio.run(scenario())
    assert len(notices) == 3 and all("\n" not in n and "Traceback" not in n for n in notices)
    assert notices[0].startswith("settings.toml line 2 is not TOML (")  # told once, though both tables read it
    assert notices[0].endswith("new_per_day keeps its default")
    assert "[app] followups = 'sometimes' must be one of ask, if-correct, skip; it keeps its default 'ask'" \
        in notices[1]
    assert "[review] quick_seconds_per_answer = 0 must be a number from 1 to 3600; it keeps its default 30" \
        in notices[2]
    assert theme == "nord" and app_settings.followups == FollowUps.ASK
    assert (review.new_per_day, review.desired_retention, review.quick_seconds_per_answer) == (5, 0.8, 30.0)


@pytest.mark.parametrize(("policy", "answered", "asked"), [
    ("skip", True, False), ("if-correct", False, False), ("if-correct", True, True), ("ask", False, True),
])
def test_the_follow_up_setting_decides_whether_the_round_is_asked(config, policy, answered, asked):
    (config / SETTINGS_FILE).write_text(f'[app]\nfollowups = "{policy}"\n')

    async def scenario():
        from solvers.report import typed_key

        async with running_app(bank_loader=with_old_shape) as (app, pilot):
            await open_default(app, pilot, OLD)  # a question in the old shape: every answer, then the push
            first = app.screen
            if answered:
                for spec in first.solution.question.answers:
                    first.query_one(f"#answer-{spec.key}").insert_text_at_cursor(typed_key(first.solution, spec.key))
            await pilot.press("ctrl+s", "ctrl+s")
            await wait_for(pilot, lambda: isinstance(app.screen, SolutionScreen) or push_showing(app))
            return push_showing(app)

    assert asyncio.run(scenario()) == asked


def test_the_palette_opens_the_settings_and_a_theme_picked_there_is_kept(config):
    from textual.command import CommandList, CommandPalette

    async def pick(app, pilot, typed: str, first_hit: str) -> None:
        """Type into the palette on screen, wait until `first_hit` leads its list, take it."""
        await pilot.press(*typed)
        hits = app.screen.query_one(CommandList)
        await wait_for(pilot, lambda: hits.option_count > 0 and first_hit in str(hits.get_option_at_index(0).prompt))
        await pilot.press("enter")

    async def scenario():
        async with running_app() as (app, pilot):
            await palette_pick(app, pilot, "settings", "Settings")
            await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            await pilot.press("ctrl+p")
            await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
            palette = app.screen
            await pick(app, pilot, "theme", "Theme")  # Textual's own command: a second palette, of themes
            await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen is not palette)
            await pick(app, pilot, "dracula", "dracula")
            await wait_for(pilot, lambda: (config / SETTINGS_FILE).exists())
            return app.theme

    assert asyncio.run(scenario()) == "dracula"
    assert tomllib.loads((config / SETTINGS_FILE).read_text())["app"]["theme"] == "dracula"
