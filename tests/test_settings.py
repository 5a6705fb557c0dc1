"""The settings file (practice.config): kinds and ranges, broken values and lines, atomic writes,
and the move of settings an older infradrill kept in the progress store."""
from __future__ import annotations

import sqlite3
import tomllib

import pytest

from practice.config import SETTINGS_FILE, Setting, SettingsError, read_table, settings_path, write_table
from practice.review import REVIEW_SETTINGS, REVIEW_TABLE, Reviewer, ReviewSettings
from practice.schema import FILE_NAME
from practice.store import ProgressStore
from tui.app_settings import AppSettings
from tui.modes import FollowUps

WHOLE = Setting("count", "Count", 5, 0, 10)
SHARE = Setting("share", "Share", 0.5, 0.1, 0.9)
COLOUR = Setting("colour", "Colour", "red", choices=("red", "blue"))


@pytest.fixture
def path(tmp_path):
    return tmp_path / SETTINGS_FILE


def test_the_file_lives_in_the_config_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRADRILL_CONFIG_DIR", str(tmp_path / "cfg"))
    assert settings_path() == tmp_path / "cfg" / "settings.toml"


@pytest.mark.parametrize(("setting", "text", "value"), [
    (WHOLE, " 7 ", 7), (WHOLE, "0", 0), (WHOLE, "10", 10), (SHARE, "0.25", 0.25), (SHARE, "1e-1", 0.1),
    (COLOUR, "blue", "blue"),
])
def test_typed_values_that_read(setting, text, value):
    assert setting.parse(text) == value and type(setting.parse(text)) is type(value)


@pytest.mark.parametrize(("setting", "text", "message"), [
    (WHOLE, "11", "must be a whole number from 0 to 10"), (WHOLE, "-1", "must be a whole number from 0 to 10"),
    (WHOLE, "2.5", "'2.5' is not a whole number from 0 to 10"), (WHOLE, "", "'' is not a whole number"),
    (SHARE, "nan", "must be a number from 0.1 to 0.9"), (SHARE, "inf", "must be a number from 0.1 to 0.9"),
    (SHARE, "0.95", "must be a number from 0.1 to 0.9"), (SHARE, "lots", "'lots' is not a number"),
    (COLOUR, "green", "must be one of red, blue"),
])
def test_typed_values_that_do_not_read_say_what_is_allowed(setting, text, message):
    with pytest.raises(ValueError, match=message):
        setting.parse(text)


def test_a_missing_file_gives_the_defaults_quietly(path):
    assert read_table("t", (WHOLE, SHARE), path) == ({}, [])
    assert ReviewSettings.load(path=path) == (ReviewSettings(), [])


def test_each_bad_value_keeps_its_default_and_the_rest_load(path):
    path.write_text('[t]\ncount = 11\nshare = "half"\ncolour = "blue"\nflag = true\n'
                    '[other]\ncount = "unrelated"\n')
    values, notices = read_table("t", (WHOLE, SHARE, COLOUR), path)
    assert values == {"colour": "blue"}  # an unknown key (flag) and another table are not this table's business
    assert notices == [
        "settings.toml: [t] count = 11 must be a whole number from 0 to 10; it keeps its default 5",
        "settings.toml: [t] share = 'half' must be a number from 0.1 to 0.9; it keeps its default 0.5",
    ]


def test_kinds_are_strict(path):
    path.write_text("[t]\ncount = 5.0\nshare = true\n")  # a float for a count, a boolean for a number
    values, notices = read_table("t", (WHOLE, SHARE), path)
    assert values == {} and len(notices) == 2


def test_a_line_that_is_not_toml_costs_only_its_own_key(path):
    path.write_text("# mine\n[t]\ncount = lots\nshare = 0.25\n\n[u]\ncolour = 'blue'\nnot toml at all\n")
    values, notices = read_table("t", (WHOLE, SHARE), path)
    assert values == {"share": 0.25}
    assert len(notices) == 2 and notices[0].startswith("settings.toml line 3 is not TOML (")
    assert notices[0].endswith("): count keeps its default") and "line 8" in notices[1]
    assert read_table("u", (COLOUR,), path)[0] == {"colour": "blue"}  # the table after the broken line reads too


@pytest.mark.parametrize(("content", "says"), [
    (b"\xff\xfe[t]\n", "is not UTF-8 text"), (b"#" * 70_000, "is over 64 KB"),
    (b"t = 1\n", "[t] is not a table"),
])
def test_a_file_that_is_not_a_settings_file(path, content, says):
    path.write_bytes(content)
    values, notices = read_table("t", (WHOLE,), path)
    assert values == {} and len(notices) == 1 and says in notices[0]


def test_writing_keeps_the_other_tables_and_keys_and_leaves_no_temporary_file(path):
    path.write_text('[t]\ncount = 3\nfuture = "kept"\n[u]\ncolour = "blue"\n')
    write_table("t", {"count": 4, "share": 0.5}, path)
    assert tomllib.loads(path.read_text()) == {"t": {"count": 4, "future": "kept", "share": 0.5},
                                                "u": {"colour": "blue"}}
    assert [p.name for p in path.parent.iterdir()] == [SETTINGS_FILE]


def test_writing_creates_the_directory_and_reports_one_it_cannot_make(tmp_path):
    target = tmp_path / "new" / "dir" / SETTINGS_FILE
    write_table("t", {"count": 1}, target)
    assert tomllib.loads(target.read_text()) == {"t": {"count": 1}}
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingsError, match="cannot write"):
        write_table("t", {"count": 1}, tmp_path / "file" / SETTINGS_FILE)


def test_a_failed_write_leaves_the_old_file_whole(path, monkeypatch):
    path.write_text("[t]\ncount = 3\n")

    def crash(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("practice.config.os.replace", crash)
    with pytest.raises(SettingsError, match="No space left on device"):
        write_table("t", {"count": 4}, path)
    assert path.read_text() == "[t]\ncount = 3\n" and [p.name for p in path.parent.iterdir()] == [SETTINGS_FILE]


def test_review_settings_round_trip(path):
    ReviewSettings(desired_retention=0.85, new_per_day=8).save(path)
    settings, notices = ReviewSettings.load(path=path)
    assert notices == [] and settings == ReviewSettings(desired_retention=0.85, new_per_day=8)
    assert {s.name for s in REVIEW_SETTINGS} <= set(tomllib.loads(path.read_text())[REVIEW_TABLE])


def test_app_settings_round_trip_and_an_unknown_theme(path):
    AppSettings(theme="nord", followups=FollowUps.SKIP).save(path)
    assert AppSettings.load(path) == (AppSettings(theme="nord", followups=FollowUps.SKIP), [])
    path.write_text('[app]\ntheme = "no-such-theme"\nfollowups = "if-correct"\n')
    settings, notices = AppSettings.load(path)
    assert settings == AppSettings(followups=FollowUps.IF_CORRECT) and len(notices) == 1
    assert "theme = 'no-such-theme' must be one of" in notices[0] and "keeps its default 'textual-dark'" in notices[0]


@pytest.fixture
def legacy_store(tmp_path):
    """A store as an older infradrill left it: settings in its meta table."""
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    with sqlite3.connect(store.path) as conn:
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                         [("setting.new_per_day", "8"), ("setting.desired_retention", "0.85"),
                          ("setting.quick_seconds_per_answer", "lots")])
    yield store
    store.close()


def test_settings_kept_in_the_store_move_to_the_file_once(legacy_store, path):
    settings, notices = ReviewSettings.load(legacy_store, path)
    assert settings == ReviewSettings(new_per_day=8, desired_retention=0.85)  # the unreadable one was never in force
    assert notices == [f"moved new_per_day, desired_retention from the progress store to {path}"]
    assert tomllib.loads(path.read_text())["review"] == {"new_per_day": 8, "desired_retention": 0.85}
    assert legacy_store.legacy_settings() == {}
    assert ReviewSettings.load(legacy_store, path) == (settings, [])  # once


def test_the_file_wins_over_the_store_for_a_key_it_names(legacy_store, path):
    path.write_text("[review]\nnew_per_day = 2\n")
    settings, _ = ReviewSettings.load(legacy_store, path)
    assert (settings.new_per_day, settings.desired_retention) == (2, 0.85)


def test_settings_stay_in_the_store_when_the_file_cannot_be_written(legacy_store, tmp_path):
    (tmp_path / "file").write_text("")
    settings, notices = ReviewSettings.load(legacy_store, tmp_path / "file" / SETTINGS_FILE)
    assert settings == ReviewSettings() and "settings stay in the progress store for now" in notices[0]
    assert legacy_store.legacy_settings()["new_per_day"] == "8"  # not lost: moved on a later start


def test_applied_settings_change_what_the_reviewer_does(tmp_path):
    from tests.test_review import BANK, T0

    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    reviewer = Reviewer(store, BANK, tz=T0.tzinfo)
    assert len(reviewer.new_questions(T0)) == 5
    reviewer.apply(ReviewSettings(new_per_day=2, desired_retention=0.7))
    assert len(reviewer.new_questions(T0)) == 2 and reviewer.scheduler.desired_retention == 0.7
    store.close()


def test_a_file_that_does_not_read_is_never_overwritten(path):
    """Over 64 KB, or not UTF-8: the settings keep their defaults, and a save refuses rather than replace the
    file with one table (a comment with one Latin-1 byte would otherwise cost the user every other setting)."""
    original = b"[review]\nnew_per_day = 30\n# caf\xe9\n"
    path.write_bytes(original)
    with pytest.raises(SettingsError, match="not UTF-8 text: left as it is"):
        write_table("app", {"theme": "nord"}, path)
    assert path.read_bytes() == original
