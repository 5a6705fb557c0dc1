"""`infradrill stats`, `progress export/import` and the global --data-dir."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from practice.review import Reviewer, replay
from practice.schema import FILE_NAME
from practice.store import open_store
from practice.transfer import EXPORT_SCHEMA, export_progress
from solvers.answers import CORRECT, WRONG, Grade
from tests.test_cli import run_cli

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_real_data_dir(monkeypatch, tmp_path):
    """Nothing here may touch the developer's own progress."""
    monkeypatch.setenv("INFRADRILL_DATA_DIR", str(tmp_path / "env-default"))




def fill(directory: Path, question_id="kv-bytes-per-token", start=T0, count=3, mock=False) -> list[str]:
    """Some drill attempts (and a mock interview) in the store at `directory`; their uids."""
    store, _ = open_store(directory)
    with store:
        reviewer = Reviewer(store)
        uids = []
        mock_id = store.start_mock(1, 300.0, started=start) if mock else None
        for i in range(count):
            at = start + timedelta(days=i)
            wrong = i % 2 == 1
            grades = [Grade("kv_per_token", CORRECT, "320 KiB", "320 KiB", 0.0),
                      Grade("users", WRONG if wrong else CORRECT, "324", "162", 1.0 if wrong else 0.0,
                            "x2: one factor of 2 too many" if wrong else None)]
            done = reviewer.submit(question_id=question_id, variant=f"{question_id}@{i}",
                                   mode="mock" if mock else "drill", grades=grades,
                                   typed={"kv_per_token": "320 KiB", "users": "324"},
                                   started=at - timedelta(seconds=45), submitted=at, mock_id=mock_id)
            uids.append(done.attempt.uid)
        if mock_id:
            store.finish_mock(mock_id, start + timedelta(minutes=5))
    return uids


def snapshot(directory: Path) -> dict:
    store, _ = open_store(directory)
    with store:
        data = export_progress(store)
    data.pop("exported")
    return data


# --data-dir and stats ------------------------------------------------------------------------------
def test_stats_on_a_fresh_store(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--data-dir", str(tmp_path / "d"), "stats")
    assert code == 0 and err == ""
    assert f"Progress in {tmp_path / 'd' / FILE_NAME}" in out and "No attempts yet" in out
    assert (tmp_path / "d" / FILE_NAME).exists()


def test_data_dir_defaults_to_the_environment(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "stats")
    assert code == 0 and str(tmp_path / "env-default" / FILE_NAME) in out


def test_stats_summary(capsys, tmp_path):
    fill(tmp_path)
    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "stats")
    assert code == 0
    assert "3 attempt(s) on 3 day(s) since 2025-03-03" in out
    assert "Accuracy by group" in out and "  F " in out and "memory" in out
    assert "1×  x2: a factor of 2 left out or counted twice" in out
    assert "kv-bytes-per-token" in out  # among the lowest retrievability
    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "stats", "--json")
    data = json.loads(out)
    assert code == 0 and data["attempts"] == 3 and data["by_topic"]["memory"]["answers"] == 6


def test_stats_reports_a_file_moved_aside(capsys, tmp_path):
    (tmp_path / FILE_NAME).write_bytes(b"\x00garbage" * 40)
    code, out, err = run_cli(capsys, "--data-dir", str(tmp_path), "stats")
    assert code == 0 and "No attempts yet" in out
    assert err.startswith("infradrill: warning: The progress file") and "moved aside" in err
    assert len(list(tmp_path.glob(f"{FILE_NAME}.corrupt-*"))) == 1


def test_unusable_data_dir(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path / "file" / "sub"), "stats")
    assert code == 2 and err.count("\n") == 1 and "cannot create the data directory" in err


# Export and import -----------------------------------------------------------------------------------
def test_export_import_round_trip(capsys, tmp_path):
    source, target, exported = tmp_path / "a", tmp_path / "b", tmp_path / "progress.json"
    uids = fill(source, mock=True)
    code, out, _ = run_cli(capsys, "--data-dir", str(source), "progress", "export", str(exported))
    assert code == 0 and out.startswith("exported 3 attempt(s), 3 review(s), 1 card(s), 1 mock interview(s) and 0 "
                                        "suspended or buried question(s)")
    data = json.loads(exported.read_text())
    assert data["format"] == "infradrill-progress" and data["schema"] == EXPORT_SCHEMA
    assert sorted(a["uid"] for a in data["attempts"]) == sorted(uids)

    code, out, _ = run_cli(capsys, "--data-dir", str(target), "progress", "import", str(exported))
    assert code == 0 and "3 attempt(s) added, 0 already present" in out
    assert snapshot(target) == snapshot(source)  # everything arrived, cards included

    code, out, _ = run_cli(capsys, "--data-dir", str(target), "progress", "import", str(exported))
    assert code == 0 and "0 attempt(s) added, 3 already present; 0 review(s) and 0 mock interview(s) added" in out
    assert snapshot(target) == snapshot(source)  # importing twice adds nothing


def test_import_merges_two_machines(capsys, tmp_path):
    laptop, desktop, exported = tmp_path / "laptop", tmp_path / "desktop", tmp_path / "laptop.json"
    fill(laptop, start=T0, count=2)
    fill(desktop, start=T0 + timedelta(hours=12), count=2)  # the same question, interleaved in time
    fill(desktop, question_id="users-per-gpu", count=1)
    assert run_cli(capsys, "--data-dir", str(laptop), "progress", "export", str(exported))[0] == 0
    code, out, _ = run_cli(capsys, "--data-dir", str(desktop), "progress", "import", str(exported))
    assert code == 0 and "2 attempt(s) added" in out and "1 card(s) and 0 hold(s) updated" in out
    store, _ = open_store(desktop)
    with store:
        assert len(store.attempts()) == 5
        log = store.reviews(question_id="kv-bytes-per-token")
        assert [r.reviewed for r in log] == sorted(r.reviewed for r in log) and len(log) == 4
        # the card is the merged log replayed in time order, and the log is one chain again
        assert store.card("kv-bytes-per-token") == replay(Reviewer(store).scheduler, "kv-bytes-per-token",
                                                          log)[-1].card_after
        assert all(b.card_before == a.card_after for a, b in zip(log, log[1:]))
        assert store.card("users-per-gpu") is not None  # untouched


def test_export_never_overwrites_without_force(capsys, tmp_path):
    exported = tmp_path / "progress.json"
    exported.write_text("precious")
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "export", str(exported))
    assert code == 2 and "exists; use --force" in err and exported.read_text() == "precious"
    code, _, _ = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "export", str(exported), "--force")
    assert code == 0 and json.loads(exported.read_text())["format"] == "infradrill-progress"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial file left


def test_export_to_standard_output(capsys, tmp_path):
    fill(tmp_path, count=1)
    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "export", "-")
    assert code == 0 and len(json.loads(out)["attempts"]) == 1


def test_export_into_a_missing_directory(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "export", str(tmp_path / "no" / "x.json"))
    assert code == 2 and "no directory" in err


@pytest.mark.parametrize("content, message", [
    ('{"format": "infradrill-progress", "schema": 99, "attempts": []}', "progress schema 99"),
    ('{"format": "something-else", "schema": 1}', "not an infradrill progress export"),
    ("[1, 2, 3]", "not an infradrill progress export"),
    ("this is not json", "not JSON"),
    ('{"format": "infradrill-progress", "schema": 1, "attempts": [{"uid": "x"}]}', "attempts[0]"),
    ('{"format": "infradrill-progress", "schema": 1, "attempts": [], "reviews": [{"uid": "r", "question_id": "q",'
     ' "rating": 7, "reviewed": "2025-03-03T09:00:00+00:00"}]}', "'rating' must be 1 (Again) to 4 (Easy)"),
    ('{"format": "infradrill-progress", "schema": 2, "holds": [{"question_id": "q", "kind": "frozen"}]}',
     "holds[0]: kind 'frozen' is not one of suspended, buried"),
    ('{"format": "infradrill-progress", "schema": 2, "holds": [{"question_id": "q", "kind": "buried"}]}',
     "holds[0]: a buried question needs 'until'"),
    ('{"format": "infradrill-progress", "schema": true}', "progress schema True"),
])
def test_import_refuses_other_files(capsys, tmp_path, content, message):
    fill(tmp_path / "store", count=1)
    before = snapshot(tmp_path / "store")
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run_cli(capsys, "--data-dir", str(tmp_path / "store"), "progress", "import", str(bad))
    lines = err.strip().splitlines()  # a line per refused record, then the verdict
    assert code == 2 and out == "" and message in err, err
    assert all(line.startswith("infradrill: ") for line in lines) and len(lines) <= 2
    assert snapshot(tmp_path / "store") == before  # nothing written


def test_import_a_file_that_is_not_there(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "progress", "import", str(tmp_path / "none.json"))
    assert code == 2 and "cannot read" in err


def test_progress_needs_an_action(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "progress")
    assert code == 2 and "infradrill progress --help" in err


# Suspended and buried questions ---------------------------------------------------------------------
FAR = datetime(2100, 1, 1, tzinfo=UTC)  # a burial still in force whenever the test runs


def holds(directory: Path) -> list:
    store, _ = open_store(directory)
    with store:
        return store.holds()


def test_suspended_and_buried_questions_travel_in_an_export(capsys, tmp_path):
    source, target, exported = tmp_path / "a", tmp_path / "b", tmp_path / "progress.json"
    fill(source, count=1)
    store, _ = open_store(source)
    with store:
        store.hold("kv-bytes-per-token", "suspended")
        store.hold("users-per-gpu", "buried", FAR)
    code, out, _ = run_cli(capsys, "--data-dir", str(source), "progress", "export", str(exported))
    assert code == 0 and "and 2 suspended or buried question(s)" in out
    assert json.loads(exported.read_text())["holds"] == [
        {"question_id": "kv-bytes-per-token", "kind": "suspended", "until": None},
        {"question_id": "users-per-gpu", "kind": "buried", "until": "2100-01-01T00:00:00.000000+00:00"}]
    code, out, _ = run_cli(capsys, "--data-dir", str(target), "progress", "import", str(exported))
    assert code == 0 and "2 hold(s) updated" in out
    assert holds(target) == holds(source) and snapshot(target) == snapshot(source)
    store, _ = open_store(target)
    with store:  # in force on the other machine: the drill skips them there too
        assert store.held(datetime.now(UTC)) == {"kv-bytes-per-token": "suspended", "users-per-gpu": "buried"}
    code, out, _ = run_cli(capsys, "--data-dir", str(target), "progress", "import", str(exported))
    assert code == 0 and "0 hold(s) updated" in out


def test_an_imported_hold_is_taken_where_it_holds_longer(capsys, tmp_path):
    here, exported = tmp_path / "here", tmp_path / "there.json"
    there = {"format": "infradrill-progress", "schema": 2, "holds": [
        {"question_id": "kept-suspended", "kind": "buried", "until": "2100-01-01T00:00:00+00:00"},
        {"question_id": "buried-longer", "kind": "buried", "until": "2100-01-01T00:00:00+00:00"},
        {"question_id": "now-suspended", "kind": "suspended", "until": None},
        {"question_id": "new", "kind": "suspended", "until": None}]}
    exported.write_text(json.dumps(there))
    store, _ = open_store(here)
    with store:
        store.hold("kept-suspended", "suspended")
        store.hold("buried-longer", "buried", datetime(2099, 1, 1, tzinfo=UTC))
        store.hold("now-suspended", "buried", FAR)
    code, out, _ = run_cli(capsys, "--data-dir", str(here), "progress", "import", str(exported))
    assert code == 0 and "3 hold(s) updated" in out
    assert {h.question_id: (h.kind, h.until) for h in holds(here)} == {
        "kept-suspended": ("suspended", None), "buried-longer": ("buried", FAR),
        "now-suspended": ("suspended", None), "new": ("suspended", None)}


def test_an_export_from_before_holds_still_imports(capsys, tmp_path):
    source, old = tmp_path / "a", tmp_path / "old.json"
    fill(source, count=2)
    data = snapshot(source)
    del data["holds"]
    old.write_text(json.dumps({**data, "schema": 1, "exported": "2025-03-05T09:00:00+00:00"}))
    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path / "b"), "progress", "import", str(old))
    assert code == 0 and "2 attempt(s) added" in out and "0 hold(s) updated" in out
    assert holds(tmp_path / "b") == []
