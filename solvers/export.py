"""Variant sheets for interviewers: a candidate sheet, an answer key, JSON, or an Anki deck.

Each variant is headed by its code, so the app reproduces it exactly. `count` variants from a
seed S are seeds S, S+1, ... of each question, each the variant the app makes from that seed's code:
a parameter value turns up as often as its weight says. Each comes with its whole interview (its
script: every stage, its pushes solved). Every format is written a variant at a time, as each is
solved: an export of thousands holds one variant's script at a time.
"""
from __future__ import annotations

import html
import itertools
import json
import sqlite3
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from solvers.answers import Answer
from solvers.answers.choice import Choice
from solvers.bank import Bank, Question
from solvers.conventions import conventions
from solvers.data import Catalog
from solvers.derivation import Step
from solvers.engine import MAX_SEED, Solution, VariantCode, VariantError, listings, make_variant
from solvers.interview import StageRun, steps_by_stage
from solvers.reality import compare
from solvers.report import answer_rows, key_notes, prompt_markdown, script_markdown, to_dict
from solvers.script import Script, ScriptStage, script


class SelectionError(ValueError):
    """A selection that names nothing, or names what does not exist."""


@dataclass(frozen=True)
class Selection:
    ids: tuple[str, ...] = ()
    group: str | None = None
    topic: str | None = None
    difficulty: int | None = None


def select(bank: Bank, selection: Selection) -> list[Question]:
    unknown = [qid for qid in selection.ids if qid not in bank.questions]
    if unknown:
        raise SelectionError(f"unknown question(s): {', '.join(unknown)} (see `infradrill list`)")
    for value, field, known in ((selection.group, "group", {q.group for q in bank.questions.values()}),
                                (selection.topic, "topic", {q.topic for q in bank.questions.values()})):
        if value is not None and value not in known:
            raise SelectionError(f"unknown {field} '{value}' (known: {', '.join(sorted(known))})")
    chosen = [q for q in sorted(bank.questions.values(), key=lambda q: (q.group, q.id))
              if (not selection.ids or q.id in selection.ids)
              and (selection.group is None or q.group == selection.group)
              and (selection.topic is None or q.topic == selection.topic)
              and (selection.difficulty is None or q.difficulty == selection.difficulty)]
    if not chosen:
        raise SelectionError("the selection matches no question")
    return chosen


def variants(bank: Bank, catalog: Catalog, questions: list[Question], count: int, base_seed: int,
             progress: Callable[[int, int], None] | None = None) -> Iterator[Script]:
    """`count` variants per question, seeds base_seed to base_seed + count − 1 (a seed whose draw a
    solver refuses is drawn again from that seed, as the app does: its code still names it), each made
    with its script as it is asked for. `progress(done, total)` hears of each variant made. A bad count or seed is
    refused here, before any is made."""
    if count < 1:
        raise SelectionError("the count must be at least 1")
    if not 0 <= base_seed <= MAX_SEED - count + 1:
        raise SelectionError(f"the seed must be between 0 and {MAX_SEED - count + 1} for {count} variants "
                             f"(seeds end at {MAX_SEED})")
    return _variants(bank, catalog, questions, count, base_seed, progress)


def _variants(bank: Bank, catalog: Catalog, questions: list[Question], count: int, base_seed: int,
              progress: Callable[[int, int], None] | None) -> Iterator[Script]:
    made = 0
    for question in questions:
        try:
            reality = compare(question, catalog)  # the same for every variant of the question: solved once
        except VariantError as error:
            raise SelectionError(str(error)) from None
        for seed in range(base_seed, base_seed + count):
            try:
                solution = make_variant(bank, catalog, VariantCode(question.id, seed))
            except VariantError as error:  # no draw from this seed is valid: a broken question, said as such
                raise SelectionError(str(error)) from None
            made += 1
            if progress is not None:
                progress(made, count * len(questions))
            yield script(solution, catalog, reality)


@dataclass(frozen=True)
class ExportFile:
    """One text file of an export, written as its variants come: `head`, then `entry(number, script)`
    for each variant in turn (numbered from 1), then `tail`."""
    head: str
    entry: Callable[[int, Script], str]
    tail: str = ""


def write_sheets(scripts: Iterable[Script], outputs: Sequence[tuple[ExportFile, TextIO]]) -> None:
    """Each variant written into every sheet as it comes, then dropped."""
    for sheet, out in outputs:
        out.write(sheet.head)
    for number, variant in enumerate(scripts, 1):
        for sheet, out in outputs:
            out.write(sheet.entry(number, variant))
    for sheet, out in outputs:
        out.write(sheet.tail)


def _markdown(head: list[str], entry: Callable[[int, Script], list[str]]) -> ExportFile:
    # A sheet is its lines joined by newlines: each entry's lines follow the head's after a newline.
    return ExportFile("\n".join(head), lambda number, variant: "\n" + "\n".join(entry(number, variant)))


def _heading(number: int, variant: Script) -> list[str]:
    solution = variant.solution
    q = solution.question
    return [f"## {number}. {q.title}", "", f"Variant `{solution.code}` · group {q.group} · {q.topic}", ""]


def _conventions_markdown() -> list[str]:
    lines = ["## Conventions", "", "Every question assumes these unless its prompt says otherwise.", ""]
    return lines + [f"- **{c.title}**: {c.text} *({c.source})*" for c in conventions()] + [""]


def candidate_sheet() -> ExportFile:
    return _markdown(["# Candidate sheet", "", *_conventions_markdown()], _candidate_entry)


def _candidate_entry(number: int, variant: Script) -> list[str]:
    """The givens, then each stage's words with a blank for each answer it asks (a skipped push is left out;
    a stage whose words quote an earlier key is left to the interviewer to say, as it gives that key)."""
    solution = variant.solution
    lines = _heading(number, variant) + ["Given:", ""]
    lines += [f"- {param.label}: {param.shown}" for param in solution.problem_data(0)] + [""]
    for stage in variant.stages:
        if stage.run is None:
            continue
        run = stage.run
        # Words that quote an earlier key are the interviewer's to say; the options they ask about are listed still.
        words = (["(The interviewer asks this one aloud.)",
                  "", *prompt_markdown(listings(run.solution.question, run.solution.shown, run.ask).strip())]
                 if stage.quotes_key() else prompt_markdown(run.prompt))
        in_play = solution.cards() if stage.turn == 1 else stage.run.cards_added
        cards = [f"{'Conventions in play' if stage.turn == 1 else 'Conventions now also in play'}: "
                 f"{_card_titles(in_play)}.", ""] if in_play else []
        given = [f"- {p.label}: {p.shown}" for p in solution.newly_given(stage.run.index)]
        lines += [f"### Stage {stage.turn}: {stage.kind}", "", *words, "", *cards,
                  *(["Now given:", "", *given, ""] if given else []), *_moved_figures(stage.run, solution)]
        lines += [f"- {_blank(stage.run.solution.question.answer(key))}:" for key in stage.run.ask] + [""]
    return lines


def _moved_figures(run: StageRun, base: Solution) -> list[str]:
    """What a push moved, as the app's table shows it (the new figure, what it was): a table it redrew in
    full, since the candidate works from it. A generator's own settings (a spread) are not data."""
    settings = base.question.generator_settings
    lines = []
    for param in run.solution.params:
        if param.name not in run.moved or param.name in settings:
            continue
        was = base.param(param.name).shown
        lines.append(f"- {param.label}:\n\n{param.shown}\n" if "\n" in param.shown
                     else f"- {param.label}: {param.shown} (was {was})")
    return ["Now given:", "", *lines, ""] if lines else []


def _card_titles(ids: Iterable[str]) -> str:
    """Cards by the titles the sheet's Conventions section lists them under (the app shows their ids, F2)."""
    titles = {card.id: card.title for card in conventions()}
    return "; ".join(titles[card] for card in ids)


def _blank(answer: Answer) -> str:
    """An answer's line on the candidate's sheet: its label, and its unit or its options."""
    if isinstance(answer, Choice):
        return f"{answer.shown_label} (one of: {' / '.join(answer.choices)})"
    return f"{answer.shown_label}{f' ({answer.unit})' if answer.unit and answer.numeric else ''}"


def key_sheet() -> ExportFile:
    return _markdown(["# Answer key", "", *_conventions_markdown()], _key_entry)


def _key_entry(number: int, variant: Script) -> list[str]:
    solution = variant.solution
    lines = _heading(number, variant) + ["| answer | key |", "|---|---|"]
    lines += answer_rows(solution, variant)
    lines += ["", *script_markdown(variant, 3), "### Steps", ""]
    for step_number, step in enumerate(solution.sheet.steps, 1):
        lines.append(f"{step_number}. {step.title}: ${step.latex}$ = {step.substituted} = **{step.result}**")
    regime = solution.sheet.regime
    if regime is not None:
        lines += ["", f"### Regime: {regime.name}", "", regime.summary, "",
                  f"Boundary ${regime.boundary.latex}$ = {regime.boundary.result}; this variant "
                  f"{regime.position.result} ({regime.margin_text}). Other side: {regime.other_side}"]
    if variant.reality:
        lines += ["", "### In practice", ""] + [f"- {c.sentence()}" for c in variant.reality]
    return lines + ["", "### Assumptions", ""] + [f"- {a}" for a in solution.sheet.assumptions] + [""]


def json_sheet() -> ExportFile:
    """The variants as one JSON array, the text `json.dumps(array, indent=2)` gives, and a newline."""
    return ExportFile("[", _json_entry, "\n]\n")


def _json_entry(number: int, variant: Script) -> str:
    # An element of the array sits one level in: each of its lines two spaces further (a string in
    # JSON holds no raw newline, so every newline is the layout's).
    data = to_dict(variant.solution, variant)
    return ("\n  " if number == 1 else ",\n  ") + json.dumps(data, indent=2).replace("\n", "\n  ")


# Anki ------------------------------------------------------------------------------------------
ANKI_MODEL_ID = 1_707_204_511  # fixed ids: re-exporting updates the same note type and deck in Anki
ANKI_DECK_ID = 1_707_204_512


def _html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def anki_front(variant: Script, stage: ScriptStage, run: StageRun) -> str:
    """The conversation up to this stage: each earlier stage's words and its keys as the interviewer gave
    them, then this stage's words (the opening's card is the opening alone)."""
    said = [f"<p><small>Stage {stage.turn} of {stage.turns}: {stage.kind}</small></p>"]
    for earlier in variant.stages[:stage.index]:
        if earlier.run is not None:
            keys = "".join(f"<li>{_html(line)}</li>" for _, line in earlier.run.key_lines())
            said.append(f"<p>{_html(earlier.run.prompt)}</p><ul><i>{keys}</i></ul>")
    return "".join(said) + f"<p>{_html(run.prompt)}</p>"


def anki_back(variant: Script, stage: ScriptStage, run: StageRun, steps: list[list[Step]]) -> str:
    """The stage's keys with their why, the reasons of the options that do not hold and the slips each
    answer invites; then its steps (`steps`: the variant's, by stage) and, closing the last stage
    before a push and each push, the regime (the last stage before a push also the question's model beside
    real systems)."""
    rows = []
    for key, line in run.key_lines():
        notes = key_notes(run.solution, key)
        extra = f"<br><small>{'<br>'.join(map(_html, notes))}</small>" if notes else ""
        rows.append(f"<tr><td>{_html(run.solution.question.answer(key).shown_label)}</td>"
                    f"<td><b>{_html(line)}</b>{extra}</td></tr>")
    listed = "".join(f"<li>{_html(s.title)}: \\({html.escape(s.latex)}\\) = {_html(s.substituted)} = "
                     f"<b>{_html(s.result)}</b></li>" for s in steps[stage.index])
    closing = stage.stage.push or stage.index == stage.question.last_unpushed
    regime = run.solution.sheet.regime if closing else None
    regime_html = "" if regime is None else (f"<p><b>Regime: {_html(regime.name)}</b>. {_html(regime.summary)} "
                                             f"Other side: {_html(regime.other_side)}</p>")
    practice = variant.reality if stage.index == stage.question.last_unpushed else ()
    practice_html = "".join(f"<p><small>{_html(c.sentence())}</small></p>" for c in practice)
    return f"<table>{''.join(rows)}</table>{f'<ol>{listed}</ol>' if listed else ''}{regime_html}{practice_html}"


def write_anki(scripts: Iterable[Script], path: Path) -> None:
    """One note per stage of each variant, as an interview asks one stage at a time: front = the
    conversation so far and the stage's words, back = its keys, steps and regime; tagged by group, topic
    and stage kind. A note's guid is its variant code (the opening's; a later stage's with its number), so
    a re-export updates rather than duplicates. A push that found nothing to push has no note.

    Each note goes into the collection (SQLite) as its variant comes; the collection is zipped into
    `path` at the end. This is genanki's `Package.write_to_file` a note at a time, with its SQLite
    file in a folder of its own that goes when it is done (genanki's stays in the temporary folder)."""
    import genanki

    model = genanki.Model(
        ANKI_MODEL_ID, "infradrill variant",
        fields=[{"name": "Code"}, {"name": "Front"}, {"name": "Back"}],
        templates=[{"name": "Variant", "qfmt": "<small>{{Code}}</small><br>{{Front}}",
                    "afmt": "{{FrontSide}}<hr id=answer>{{Back}}"}])
    deck = genanki.Deck(ANKI_DECK_ID, "infradrill")
    deck.add_model(model)  # the deck has no notes yet to bring their model into the collection
    timestamp = time.time()
    ids = itertools.count(int(timestamp * 1000))  # the notes' and cards' ids, counted as genanki counts them
    with tempfile.TemporaryDirectory(prefix="infradrill-anki-") as scratch:
        collection = Path(scratch) / "collection.anki2"
        connection = sqlite3.connect(collection)
        try:
            cursor = connection.cursor()
            genanki.Package(deck).write_to_db(cursor, timestamp, ids)
            for variant in scripts:
                q, code = variant.solution.question, str(variant.solution.code)
                steps = steps_by_stage(variant.solution)
                for stage in variant.stages:
                    if (run := stage.run) is None:
                        continue
                    fields = [code, anki_front(variant, stage, run), anki_back(variant, stage, run, steps)]
                    note = genanki.Note(
                        model=model, fields=fields,
                        tags=[f"group::{q.group}", f"topic::{q.topic}", f"stage::{stage.kind}"],
                        guid=genanki.guid_for(code, *(() if stage.index == 0 else (stage.index,))))
                    note.write_to_db(cursor, timestamp, ANKI_DECK_ID, ids)
            connection.commit()
        finally:
            connection.close()
        with zipfile.ZipFile(path, "w") as package:
            package.write(collection, "collection.anki2")
            package.writestr("media", "{}")  # no media files
