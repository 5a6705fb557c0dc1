"""`infradrill export`: candidate sheet and answer key in Markdown, JSON, and bad input."""
from __future__ import annotations

import html
import io
import itertools
import json
import re

import pytest

from solvers.engine import VariantError
from solvers.export import ExportFile, candidate_sheet, key_sheet, variants, write_sheets
from solvers.report import expected_text, judgements
from solvers.script import script
from tests.test_cli import run_cli
from tui import cli


def test_markdown_sheet_and_key(tmp_path, capsys):
    out = tmp_path / "sheet"
    code, _, _ = run_cli(capsys, "export", "kv-bytes-per-token", "weight-read-intensity", "--count", "2",
                         "--out", str(out))
    assert code == 0
    candidate = (tmp_path / "sheet-candidate.md").read_text()
    key = (tmp_path / "sheet-key.md").read_text()
    headings = re.findall(r"^## \d+\. (.+)$", candidate, re.M)
    assert len(headings) == 4 and headings == re.findall(r"^## \d+\. (.+)$", key, re.M)
    codes = re.findall(r"Variant `([^`]+)`", candidate)
    assert codes == re.findall(r"Variant `([^`]+)`", key) and len(set(codes)) == 4
    # No answers on the candidate's sheet: a choice's options are listed, never which one holds.
    assert "Regime" not in candidate and "capacity-limited" not in candidate.replace(
        "(one of: capacity-limited / latency-limited)", "")
    assert key.count("### Regime:") == 4 and "$KV_{tok} = " in key  # formulas as LaTeX


def test_an_export_writes_the_seeds_it_names(tmp_path, capsys, bank, catalog):
    """--count N --seed S writes seeds S to S+N−1 of each question, each the variant its code makes in the
    app, answers repeating or not; and it says which seeds those were."""
    from solvers.engine import VariantCode, make_variant
    from solvers.report import to_dict
    from solvers.script import script

    code, out, _ = run_cli(capsys, "export", "--group", "F", "--count", "3", "--seed", "7001", "--format", "json",
                           "--out", str(tmp_path / "f.json"))
    assert code == 0 and "seeds 7001-7003 of each" in out
    written = json.loads((tmp_path / "f.json").read_text())
    ids = sorted({variant["id"] for variant in written})
    assert len(ids) == 8 and [v["code"] for v in written] == [f"{i}@{s}" for i in ids for s in (7001, 7002, 7003)]
    for variant in written[::5]:
        solution = make_variant(bank, catalog, VariantCode.parse(variant["code"]))
        assert variant == json.loads(json.dumps(to_dict(solution, script(solution, catalog))))


def test_a_rare_choice_turns_up_as_often_as_its_weight(bank, catalog):
    """fp8-scale-formats' round-up rule, weighted 3/8: seeds 7001-7100 all written, so its share is the draw's
    (the sheet once skipped variants whose answers repeated, and kept 10 of them in seeds 7001-8075)."""
    from solvers.export import variants

    made = [v.solution for v in variants(bank, catalog, [bank.get("fp8-scale-formats")], 100, 7001)]
    assert [s.code.seed for s in made] == list(range(7001, 7101))
    up = sum(s.param("mx_rule").raw == "up" for s in made)
    assert 25 <= up <= 50  # 37.5 expected; the binomial's sd is 4.8


def test_never_overwrites_without_force(tmp_path, capsys):
    target = tmp_path / "k.json"
    target.write_text("mine")
    code, _, err = run_cli(capsys, "export", "kv-bytes-per-token", "--format", "json", "--out", str(target))
    assert code == 2 and "already exists" in err and target.read_text() == "mine"
    code, _, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--format", "json", "--out", str(target), "--force")
    assert code == 0 and json.loads(target.read_text())[0]["id"] == "kv-bytes-per-token"


@pytest.mark.parametrize("argv, message", [
    (("export", "no-such-question"), "unknown question"),
    (("export", "--topic", "astrology"), "unknown topic"),
    (("export", "--count", "0"), "between 1 and 200"),
    (("export", "--seed", "-1"), "seed must be"),
    (("export", "kv-bytes-per-token", "--out", "/nonexistent-dir/x"), "cannot write"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and message in err and err.count("\n") == 1


def _anki_notes(path):
    import sqlite3
    import zipfile

    with zipfile.ZipFile(path) as package:
        package.extract("collection.anki2", path.parent / path.stem)
    connection = sqlite3.connect(path.parent / path.stem / "collection.anki2")
    try:
        return connection.execute("SELECT guid, flds, tags FROM notes ORDER BY guid").fetchall()
    finally:
        connection.close()


def test_anki_deck_has_one_note_per_stage_with_stable_ids(tmp_path, capsys, bank, catalog):
    """A note a stage of each variant (a skipped push has none): the opening's keyed by the variant's code,
    as a variant's one note was, so a re-export updates an older deck; a later stage's front is the
    conversation so far, the earlier keys included, and its back that stage's keys."""
    import genanki

    for name in ("first", "second"):
        code, _, _ = run_cli(capsys, "export", "--group", "F", "--count", "2", "--format", "anki", "--seed", "1",
                             "--out", str(tmp_path / name))
        assert code == 0
    first, second = _anki_notes(tmp_path / "first.apkg"), _anki_notes(tmp_path / "second.apkg")
    made = list(variants(bank, catalog, [q for q in bank.questions.values() if q.group == "F"], 2, 1))
    stages = [(v, s) for v in made for s in v.stages if s.run is not None]
    assert len(first) == len(stages) > len(made)
    assert [guid for guid, _, _ in first] == [guid for guid, _, _ in second]  # re-export updates, not duplicates
    notes = {guid: (fields.split("\x1f"), tags) for guid, fields, tags in first}
    for variant, stage in stages:
        code = str(variant.solution.code)
        (named, front, back), tags = notes[genanki.guid_for(code, *((stage.index,) if stage.index else ()))]
        assert named == code and f"stage::{stage.kind}" in tags and "group::F" in tags
        assert all(html.escape(line) in back for _, line in stage.run.key_lines())
        earlier = [line for s in variant.stages[:stage.index] if s.run for _, line in s.run.key_lines()]
        assert all(html.escape(line) in front for line in earlier)
        why = [line for key, line in stage.run.key_lines() if line != expected_text(stage.run.solution, key)]
        assert not any(html.escape(line) in front for line in why if line not in earlier)  # no key before its stage
    assert any("\\(" in fields for _, fields, _ in first)  # the steps' formulas in LaTeX


def _text(sheet: ExportFile, made) -> str:
    out = io.StringIO()
    write_sheets(made, [(sheet, out)])
    return out.getvalue()


def test_sheets_carry_the_conventions_card_and_the_judgements(bank, catalog):
    from solvers.conventions import convention
    from solvers.engine import VariantCode, make_variant

    solution = make_variant(bank, catalog, VariantCode("weight-read-intensity", None))
    usable = convention("usable-hbm")
    made = [script(solution, catalog)]
    candidate, key = _text(candidate_sheet(), made), _text(key_sheet(), made)
    for text in (candidate, key):
        assert "## Conventions" in text and usable.text in text
    judged = judgements(solution, "levers")
    assert {holds for *_, holds, _ in judged} == {True, False}
    for mark, option, holds, why in judged:  # a reason for every listed option, the key's line giving those that hold
        assert why in key and (holds or f"✗ {mark}. {option}: {why}" in key)
        assert why not in candidate  # the candidate sees the options, not the verdicts


def test_the_candidate_sheet_gives_every_parameter_the_app_shows(variant, catalog):
    """An independent check answered from a sheet that printed no parameters (a weight dtype the prompt
    does not name was nowhere): the sheet lists what the app's parameter table lists."""
    solution = variant("mla-vs-gqa-under-tp@11")
    sheet = _text(candidate_sheet(), [script(solution, catalog)])
    assert all(f"- {param.label}: {param.shown}" in sheet for param in solution.problem_data())
    assert any(param.name == "weight_dtype" for param in solution.problem_data())


def test_progress_hears_of_every_variant_in_order(bank, catalog):
    heard = []
    questions = [bank.get("kv-bytes-per-token"), bank.get("weight-read-intensity")]
    made = variants(bank, catalog, questions, 3, 1, progress=lambda done, total: heard.append((done, total)))
    assert heard == []  # each variant is made as the writer asks for it
    for number, _ in enumerate(made, 1):
        assert heard[-1] == (number, 6)
    assert heard == [(n, 6) for n in range(1, 7)]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_export_draws_a_bar_on_a_terminal_and_nothing_elsewhere(monkeypatch):
    clock = iter([0.0, 0.5, 2.0])
    terminal = _Terminal()
    monkeypatch.setattr(cli.sys, "stderr", terminal)
    with cli._progress("Solving variants", clock=lambda: next(clock)) as update:
        update(1, 4)  # half a second in: no bar yet
        assert terminal.getvalue() == ""
        update(2, 4)
        update(4, 4)
    assert "Solving variants" in terminal.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr(cli.sys, "stderr", piped)
    with cli._progress("Solving variants", after=0) as update:
        update(4, 4)
    assert piped.getvalue() == ""


def test_an_export_to_standard_output_and_its_seeds_cannot_be_guessed(capsys):
    """Seeds 1, 2, 3 let a candidate look every variant of the sheet up in the app."""
    code, out, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--count", "2", "--format", "json", "--out", "-")
    first = [v["code"] for v in json.loads(out)]
    _, again, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--count", "2", "--format", "json", "--out", "-")
    assert code == 0 and len(first) == 2 and first != [v["code"] for v in json.loads(again)]
    assert all(int(c.split("@")[1]) > 1000 for c in first)
    code, out, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--count", "1", "--seed", "5", "--out", "-")
    assert code == 0 and out.startswith("# Answer key") and "kv-bytes-per-token@5" in out
    assert run_cli(capsys, "export", "--format", "anki", "--out", "-")[0] == 2


def test_the_candidate_sheet_lists_a_choice_answers_options(tmp_path, capsys):
    run_cli(capsys, "export", "kv-bytes-per-token", "--count", "1", "--out", str(tmp_path / "s"))
    assert "What caps concurrency? (one of: capacity-limited / latency-limited):" in (
        tmp_path / "s-candidate.md").read_text()


def test_a_streamed_sheet_is_the_text_the_whole_sheet_was(tmp_path, capsys, bank, catalog):
    """Written a variant at a time, each file is what the sheet made whole at the end gave: the JSON array
    dumped at once, each Markdown sheet every line of its head and its variants joined by newlines."""
    from solvers.export import _candidate_entry, _conventions_markdown, _key_entry
    from solvers.report import to_dict

    ids = ("kv-bytes-per-token", "weight-read-intensity")
    made = list(variants(bank, catalog, [bank.get(qid) for qid in ids], 2, 3))
    whole_json = json.dumps([to_dict(v.solution, v) for v in made], indent=2) + "\n"
    whole = {heading: "\n".join([heading, "", *_conventions_markdown()]
                                + [line for n, s in enumerate(made, 1) for line in entry(n, s)])
             for heading, entry in (("# Candidate sheet", _candidate_entry), ("# Answer key", _key_entry))}
    for form in ("json", "markdown"):
        assert run_cli(capsys, "export", *ids, "--count", "2", "--seed", "3", "--format", form,
                       "--out", str(tmp_path / "s"))[0] == 0
    assert (tmp_path / "s.json").read_text() == whole_json
    assert (tmp_path / "s-candidate.md").read_text() == whole["# Candidate sheet"]
    assert (tmp_path / "s-key.md").read_text() == whole["# Answer key"]
    for form, text in (("json", whole_json), ("markdown", whole["# Answer key"])):
        code, out, _ = run_cli(capsys, "export", *ids, "--count", "2", "--seed", "3", "--format", form, "--out", "-")
        assert code == 0 and out == text


class _Stop(Exception):
    """A bug in the fourth solve."""


@pytest.mark.parametrize("form", ["json", "markdown", "anki"])
@pytest.mark.parametrize("stop", [KeyboardInterrupt, _Stop, "a seed with no valid draw"])
def test_an_export_stopped_midway_leaves_no_file_behind(tmp_path, capsys, monkeypatch, form, stop):
    """Ctrl+C, a bug or a seed no draw of the question is valid from, three variants into the sheet: no sheet, no
    partial file, no temporary file (the Anki collection's included), and a file it was to replace kept."""
    import tempfile

    import solvers.export as export

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    solved = export.make_variant
    calls = itertools.count()

    def solve(*args):
        if next(calls) == 3:
            raise VariantError("kv-bytes-per-token@3: no valid variant") if isinstance(stop, str) else stop()
        return solved(*args)

    monkeypatch.setattr(export, "make_variant", solve)
    out = tmp_path / "out"
    out.mkdir()
    kept = out / {"json": "s.json", "markdown": "s-key.md", "anki": "s.apkg"}[form]
    kept.write_text("the last sheet")
    argv = ("export", "--group", "F", "--count", "2", "--seed", "0", "--format", form, "--out", str(out / "s"),
            "--force")
    code, _, err = run_cli(capsys, *argv)
    expected = {KeyboardInterrupt: (130, "interrupted"), _Stop: (1, "internal error")}.get(
        stop, (2, "no valid variant"))
    assert code == expected[0] and err.count("\n") == 1 and expected[1] in err
    assert [p.name for p in out.iterdir()] == [kept.name] and kept.read_text() == "the last sheet"
    assert list(scratch.iterdir()) == []


def test_an_anki_export_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    """genanki's own write_to_file leaves its SQLite collection in the temporary folder, every time."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    code, _, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--format", "anki", "--out", str(tmp_path / "d"))
    assert code == 0 and len(_anki_notes(tmp_path / "d.apkg")) >= 3 and list(scratch.iterdir()) == []


def test_a_sheet_streamed_to_standard_output_goes_there_while_the_bar_runs(capsys, monkeypatch):
    """The bar draws on standard error (a terminal) while the variants go to standard output (a pipe)."""
    terminal = _Terminal()
    monkeypatch.setattr(cli.sys, "stderr", terminal)
    progress = cli._progress
    monkeypatch.setattr(cli, "_progress", lambda label: progress(label, after=0))
    code, out, _ = run_cli(capsys, "export", "kv-bytes-per-token", "--count", "3", "--format", "json", "--out", "-")
    assert code == 0 and len(json.loads(out)) == 3
    assert "Solving variants" in terminal.getvalue() and "kv-bytes-per-token@" not in terminal.getvalue()


def test_an_answer_only_a_push_asks_is_not_keyed_on_the_variant_before_the_push(bank, catalog):
    """hidden-memory-budget asks max_util only in its push: the key's table points to the push, whose stage
    keys it on the pushed variant (a reader found the table's figure was not the one graded)."""
    from solvers.engine import VariantCode, make_variant
    from solvers.report import PUSHED_KEY

    solution = make_variant(bank, catalog, VariantCode("hidden-memory-budget", 9401))
    question = solution.question
    assert "max_util" in question.push_only
    read = script(solution, catalog)
    sheet = key_sheet().entry(1, read)
    label = question.answer("max_util").shown_label
    assert f"| {label} | {PUSHED_KEY} |" in sheet
    push = next(stage.run for stage in read.stages if stage.stage.push and stage.run is not None)
    assert f"**{label}** — {expected_text(push.solution, 'max_util')}" in sheet
    assert all(f"| {a.shown_label} | {expected_text(solution, a.key)} |" in sheet
               for a in question.answers if a.key not in question.push_only)


def test_the_candidate_sheet_gives_a_push_the_figures_it_moved(variant, catalog):
    """continuous-batching-padding@9622's push redraws the lengths ("new lengths in the table") and the step:
    the app's table shows both with what they were, and so must the sheet, or the gain cannot be worked."""
    read = script(variant("continuous-batching-padding@9622"), catalog)
    push = read.stages[-1].run
    sheet = candidate_sheet().entry(1, read).split("### Stage 4")[1]
    assert set(push.moved) >= {"lengths", "step"}
    for name in ("lengths", "step"):
        now, was = push.solution.param(name).shown, read.solution.param(name).shown
        assert f"{push.solution.param(name).label}: {now} (was {was})" in sheet
    assert "spread" not in sheet  # a generator's setting is not a figure the candidate is given


def test_an_answer_only_the_other_sides_push_asks_is_not_in_the_key_table(bank, catalog):
    """flash-attention-exp-bound@4's push does not ask overlap_ceiling (the other side's push does): the key's
    table left it pointing to a push that never asks it. A reader took the row for a push answer."""
    from solvers.engine import VariantCode, make_variant

    solution = make_variant(bank, catalog, VariantCode("flash-attention-exp-bound", 4))
    read = script(solution, catalog)
    asked = {key for stage in read.stages if stage.stage.push and stage.run is not None for key in stage.run.ask}
    assert "overlap_ceiling" in solution.question.push_only and "overlap_ceiling" not in asked
    table = key_sheet().entry(1, read).split("## Interview")[0].split("### ")[0]
    assert f"| {solution.question.answer('overlap_ceiling').shown_label} |" not in table
    assert all(f"| {solution.question.answer(key).shown_label} |" in table for key in asked)


def test_a_stage_the_interviewer_says_aloud_still_lists_its_options(variant, catalog):
    """r15 (a re-derivation): chunked-prefill-budget's third stage quotes an earlier key, so the candidate's sheet
    leaves its words to the interviewer, and it left out the options asked about too: the select could not be
    answered from the sheet."""
    run = script(variant("chunked-prefill-budget@9600"), catalog)
    stage = next(stage for stage in run.stages if stage.run is not None and stage.quotes_key())
    sheet = _text(candidate_sheet(), [run])
    section = sheet.split("(The interviewer asks this one aloud.)")[1].split("### Stage")[0]
    for option in stage.run.solution.shown["remedies"]:
        assert f". {option}" in section
