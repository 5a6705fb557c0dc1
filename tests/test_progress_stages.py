"""Each stored answer keeps the interview stage that asked it: the v4 migration and its backfill,
submit and regrade with stages, the suggestion over every stage, repair, export and import."""
from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fsrs import Rating
from hypothesis import given, settings
from hypothesis import strategies as st

import practice.schema as schema
from practice.records import default_stage
from practice.review import Reviewer
from practice.schema import APPLICATION_ID, FILE_NAME, MIGRATIONS, SCHEMA_VERSION, StoreError
from practice.store import ProgressStore
from practice.transfer import EXPORT_SCHEMA, ProgressFormatError, export_progress, import_progress
from solvers.answers import CORRECT, WRONG, Grade
from solvers.bank import STAGE_KINDS
from solvers.engine import VariantCode, make_variant
from solvers.interview import stage_run, stored_stages
from solvers.report import typed_key

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
V3 = 3  # the schema before stages
FIXTURE_V1 = Path(__file__).with_name("fixtures") / "progress-v1.sqlite3"

# Keys as stores before stages hold them: an opening's, the follow-up's, and look-alikes that are not a push's.
OLD_KEYS = ("kv_per_token", "users", "followup.kv_per_token", "followup2.users", "follow", "Followup.x",
            "xfollowup.y")
keys = st.lists(st.one_of(st.sampled_from(OLD_KEYS),
                          st.builds(str.__add__, st.sampled_from(("", "followup.", "followup2.", "followup")),
                                    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                            max_size=12))),
                unique=True, max_size=8)


def old_store(conn: sqlite3.Connection, version: int, answer_keys: tuple[str, ...]) -> list[tuple]:
    """Make `conn` a store of schema `version` (the frozen migrations) holding one attempt with these
    answer keys, its review and card, a mock and a hold; returns its answer rows as written."""
    conn.execute("BEGIN")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for statements in MIGRATIONS[:version]:
        for statement in statements:
            conn.execute(statement)
    stamp = T0.isoformat(timespec="microseconds")
    conn.execute("INSERT INTO meta VALUES ('created', ?)", (stamp,))
    conn.execute("INSERT INTO mocks (id, started, planned) VALUES ('m1', ?, 2)", (stamp,))
    conn.execute("INSERT INTO attempts (uid, question_id, variant, mode, started, submitted, seconds, hints_used, "
                 "rating, mock_id, suggested) VALUES ('a1', 'q', 'q@1', 'mock', ?, ?, 30.0, 0, 3, 'm1', 2)",
                 (stamp, stamp))
    rows = [("a1", i, key, f"{i} GiB", "wrong" if i % 2 else "correct", 0.5 * i, "x2" if i % 2 else None)
            for i, key in enumerate(answer_keys)]
    conn.executemany("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO holds VALUES ('q', 'suspended', NULL)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("COMMIT")
    return rows


def answer_rows(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute("SELECT attempt_uid, position, key, typed, verdict, error, slip, stage, stage_kind "
                        "FROM answers ORDER BY attempt_uid, position").fetchall()


# The migration -----------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(keys)
def test_v4_keeps_every_answer_and_backfills_its_stage_from_its_key(answer_keys):
    conn = sqlite3.connect(":memory:", isolation_level=None)
    written = old_store(conn, V3, tuple(answer_keys))
    schema._migrate(conn)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    migrated = answer_rows(conn)
    assert [row[:7] for row in migrated] == written  # nothing lost, nothing changed
    assert [row[7:] for row in migrated] == [default_stage(key) for key in answer_keys]  # the rule, said twice, agrees
    assert all((row[8] == "push") == row[2].startswith("followup") for row in migrated)
    schema._migrate(conn)  # idempotent: a second pass changes nothing
    assert answer_rows(conn) == migrated and schema._schema_problem(conn) is None


def test_a_v3_file_opens_migrated_with_everything_kept(tmp_path):
    path = tmp_path / FILE_NAME
    conn = sqlite3.connect(path, isolation_level=None)
    old_store(conn, V3, OLD_KEYS)
    conn.close()
    store, notices = ProgressStore.open(path)
    with store:
        assert notices == [] and store.schema_version == SCHEMA_VERSION
        [attempt] = store.attempts()
        assert (attempt.uid, attempt.mock_id, attempt.rating, attempt.suggested) == ("a1", "m1", 3, 2)
        assert [(a.key, a.stage, a.stage_kind) for a in attempt.answers] == [
            ("kv_per_token", 0, "opening"), ("users", 0, "opening"), ("followup.kv_per_token", 1, "push"),
            ("followup2.users", 1, "push"), ("follow", 0, "opening"), ("Followup.x", 0, "opening"),
            ("xfollowup.y", 0, "opening")]
        assert [a.slip for a in attempt.answers] == [None, "x2"] * 3 + [None]
        assert store.holds()[0].kind == "suspended" and store.mocks()[0].id == "m1"
    again, notices = ProgressStore.open(path)  # opening it again migrates nothing more
    with again:
        assert notices == [] and again.attempts() == [attempt]


def test_the_v1_fixture_reaches_v4_with_its_answers_in_the_opening(tmp_path):
    shutil.copy(FIXTURE_V1, tmp_path / FILE_NAME)
    store, notices = ProgressStore.open(tmp_path / FILE_NAME)
    with store:
        [attempt] = store.attempts()
        assert notices == [] and [(a.key, a.stage, a.stage_kind) for a in attempt.answers] == [
            ("kv_per_token", 0, "opening"), ("users", 0, "opening")]


def test_a_failing_v4_leaves_the_v3_store_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / FILE_NAME
    conn = sqlite3.connect(path, isolation_level=None)
    written = old_store(conn, V3, OLD_KEYS)
    conn.close()
    broken = (*MIGRATIONS[:V3], (*MIGRATIONS[V3], "CREATE TABLE answers (x)"))  # fails after the backfill
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="already exists"):
        ProgressStore.open(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (V3,)
        assert [row[1] for row in conn.execute("PRAGMA table_info(answers)")][-2:] == ["error", "slip"]
        assert conn.execute("SELECT * FROM answers ORDER BY position").fetchall() == written
    conn.close()
    monkeypatch.undo()  # the sound migration then runs on it
    store, notices = ProgressStore.open(path)
    with store:
        assert notices == [] and len(store.attempts()[0].answers) == len(OLD_KEYS)


def test_the_schema_refuses_a_stage_kind_it_does_not_know(tmp_path):
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    with store, store.transaction() as conn:
        conn.execute("INSERT INTO attempts (uid, question_id, variant, mode, started, submitted, seconds) "
                     "VALUES ('a', 'q', 'q@1', 'drill', '', '', 1)")
        for i, kind in enumerate(STAGE_KINDS):  # every kind the engine has is one the schema takes
            conn.execute("INSERT INTO answers (attempt_uid, position, key, typed, verdict, stage, stage_kind) "
                         "VALUES ('a', ?, ?, '', 'wrong', ?, ?)", (i, f"k{i}", i, kind))
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO answers (attempt_uid, position, key, typed, verdict, stage, stage_kind) "
                         "VALUES ('a', 9, 'k9', '', 'wrong', 0, 'followup')")


def test_a_stage_out_of_range_is_set_from_its_key_with_a_notice(tmp_path):
    path = tmp_path / FILE_NAME
    store, _ = ProgressStore.open(path)
    with store:
        reviewer = Reviewer(store)
        done = submit(reviewer, ("a", "followup.b", "c"), {"a": (0, "opening"), "followup.b": (3, "push"),
                                                           "c": (2, "recall")})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA ignore_check_constraints = 1")  # as another tool, or a flipped bit, would
    conn.execute("UPDATE answers SET stage = -4 WHERE key = 'a'")
    conn.execute("UPDATE answers SET stage_kind = 'tangent' WHERE key = 'followup.b'")
    conn.commit()
    conn.close()
    store, notices = ProgressStore.open(path)
    with store:
        assert len(notices) == 1 and "2 answer(s) with a stage out of range" in notices[0]
        assert [(a.key, a.stage, a.stage_kind) for a in store.attempt(done.attempt.uid).answers] == [
            ("a", 0, "opening"), ("followup.b", 1, "push"), ("c", 2, "recall")]  # the sound one untouched
    assert ProgressStore.open(path)[1] == []  # repaired for good


# Submitting and regrading with stages ------------------------------------------------------------------
def grades(verdicts: dict[str, str]) -> list[Grade]:
    return [Grade(key, v, "1", "1", 0.0 if v == CORRECT else 0.5) for key, v in verdicts.items()]


def submit(reviewer: Reviewer, keys, stages=None, wrong=(), seconds=3600.0):
    return reviewer.submit(question_id="q", variant="q@1", mode="practice",
                           grades=grades({k: WRONG if k in wrong else CORRECT for k in keys}),
                           typed={k: "1" for k in keys}, started=T0 - timedelta(seconds=seconds), submitted=T0,
                           stages=stages)


@pytest.fixture
def reviewer(tmp_path):
    store, _ = ProgressStore.open(tmp_path / FILE_NAME)
    yield Reviewer(store)
    store.close()


def test_stages_are_stored_and_read_back_and_default_as_the_backfill(reviewer):
    stages = {"a": (0, "opening"), "b": (1, "ask"), "c": (2, "recall"), "followup.d": (3, "push")}
    done = submit(reviewer, stages, stages)
    assert [(a.key, a.stage, a.stage_kind) for a in reviewer.store.attempt(done.attempt.uid).answers] == [
        (k, *v) for k, v in stages.items()]
    plain = submit(reviewer, ("a", "followup.d", "followup2.e"))  # no stages: as migration v4 backfills
    assert [(a.stage, a.stage_kind) for a in reviewer.store.attempt(plain.attempt.uid).answers] == [
        (0, "opening"), (1, "push"), (1, "push")]


@pytest.mark.parametrize("bad", [(0, "aside"), (-1, "ask"), (True, "ask"), ("1", "ask"), (1,)])
def test_a_stage_the_store_would_refuse_writes_nothing(reviewer, bad):
    with pytest.raises(ValueError, match="stage"):
        submit(reviewer, ("a", "b"), {"a": (0, "opening"), "b": bad})
    assert reviewer.store.attempt_count() == 0 and reviewer.store.reviews() == []


def test_regrade_keeps_the_stored_stages_unless_given(reviewer):
    stages = {"a": (0, "opening"), "b": (1, "ask"), "followup.c": (2, "push")}
    uid = submit(reviewer, ("a", "b"), {k: stages[k] for k in "ab"}).attempt.uid
    reviewer.regrade(uid, grades({"a": CORRECT, "b": WRONG, "followup.c": CORRECT}), {})  # the push added
    assert [(a.key, a.stage, a.stage_kind, a.verdict) for a in reviewer.store.attempt(uid).answers] == [
        ("a", 0, "opening", CORRECT), ("b", 1, "ask", WRONG), ("followup.c", 1, "push", CORRECT)]
    reviewer.regrade(uid, grades({"a": CORRECT, "b": WRONG, "followup.c": CORRECT}), {}, stages)
    assert [(a.stage, a.stage_kind) for a in reviewer.store.attempt(uid).answers] == list(stages.values())


@settings(max_examples=25, deadline=None)
@given(opening=st.integers(1, 6), push=st.integers(1, 4), slipped=st.data(), seconds=st.sampled_from((1.0, 3600.0)))
def test_a_wrong_push_answer_lowers_the_suggestion(tmp_path_factory, opening, push, slipped, seconds):
    keys = [f"o{i}" for i in range(opening)] + [f"followup.p{i}" for i in range(push)]
    stages = {k: (1, "push") if k.startswith("followup") else (0, "opening") for k in keys}
    wrong = slipped.draw(st.sampled_from(keys[opening:]))
    store, _ = ProgressStore.open(tmp_path_factory.mktemp("s") / FILE_NAME)
    with store:
        reviewer = Reviewer(store)
        right = submit(reviewer, keys, stages, seconds=seconds).suggested
        missed = submit(reviewer, keys, stages, wrong={wrong}, seconds=seconds)
        assert right >= Rating.Good and missed.suggested < right
        assert store.attempt(missed.attempt.uid).suggested == missed.suggested


def test_a_staged_interview_is_stored_stage_by_stage(bank, catalog, reviewer):
    """The engine's stages of a staged question, submitted as the app does: read back per stage."""
    solution = make_variant(bank, catalog, VariantCode.parse("kv-bytes-per-token@4"))
    runs = [run for i in range(len(solution.question.stages)) if (run := stage_run(solution, catalog, i))]
    typed = {run.prefix + key: typed_key(run.solution, key) for run in runs for key in run.ask}
    graded = [replace(g, key=run.prefix + g.key) for run in runs
              for g in run.grade({key: typed[run.prefix + key] for key in run.ask})]
    stages = stored_stages(runs)
    assert {kind for _, kind in stages.values()} == {"opening", "ask", "push"}  # what this question asks
    done = reviewer.submit(question_id=solution.question.id, variant=str(solution.code), mode="practice",
                           grades=graded, typed=typed, started=T0 - timedelta(minutes=5), submitted=T0, stages=stages)
    stored = reviewer.store.attempt(done.attempt.uid).answers
    assert {a.key: (a.stage, a.stage_kind) for a in stored} == stages
    assert sorted({a.stage for a in stored}) == sorted({run.index for run in runs if run.ask})
    assert [a.key for a in stored] == list(stages)


# Export and import -------------------------------------------------------------------------------------
def test_export_and_import_carry_the_stages(reviewer, tmp_path):
    stages = {"a": (0, "opening"), "b": (1, "ask"), "c": (2, "recall"), "followup.d": (3, "push")}
    submit(reviewer, stages, stages, wrong={"c"})
    data = json.loads(json.dumps(export_progress(reviewer.store)))
    assert data["schema"] == EXPORT_SCHEMA
    assert [(x["stage"], x["stage_kind"]) for x in data["attempts"][0]["answers"]] == list(stages.values())
    other, _ = ProgressStore.open(tmp_path / "other" / FILE_NAME)
    with other:
        import_progress(other, data)
        assert other.attempts() == reviewer.store.attempts()


def test_an_export_before_stages_imports_with_the_backfills_stages(reviewer, tmp_path):
    submit(reviewer, ("a", "followup.b"), {"a": (0, "opening"), "followup.b": (4, "push")})
    data = export_progress(reviewer.store)
    data["schema"] = 2
    for answer in data["attempts"][0]["answers"]:
        del answer["stage"], answer["stage_kind"]
    other, _ = ProgressStore.open(tmp_path / "other" / FILE_NAME)
    with other:
        import_progress(other, data)
        assert [(a.stage, a.stage_kind) for a in other.attempts()[0].answers] == [(0, "opening"), (1, "push")]


@pytest.mark.parametrize("change", [{"stage_kind": "tangent"}, {"stage": -1}, {"stage": None}, {"stage": 1.5},
                                    {"stage_kind": None}])
def test_an_export_with_a_bad_stage_is_refused_whole(reviewer, tmp_path, change):
    submit(reviewer, ("a", "b"), {"a": (0, "opening"), "b": (1, "ask")})
    data = export_progress(reviewer.store)
    data["attempts"][0]["answers"][1].update(change)
    other, _ = ProgressStore.open(tmp_path / "other" / FILE_NAME)
    with other:
        with pytest.raises(ProgressFormatError) as refused:
            import_progress(other, data)
        assert refused.value.problems[0].startswith("attempts[0].answers[1]: ") and other.attempt_count() == 0
