"""Variant sheets for interviewers: a candidate sheet, an answer key, JSON, or an Anki deck.

Each variant is headed by its code, so the app reproduces it exactly. `count` variants from a
seed S are seeds S, S+1, ... of each question, each the variant the app makes from that seed's code:
a parameter value turns up as often as its weight says. Every format is written
a variant at a time, as each is solved: an export of thousands holds one solution at a time.
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
from solvers.engine import MAX_SEED, Solution, VariantCode, VariantError, make_variant
from solvers.report import expected_text, judgement_lines, to_dict


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
             progress: Callable[[int, int], None] | None = None) -> Iterator[Solution]:
    """`count` variants per question, seeds base_seed to base_seed + count − 1 (a seed whose draw a
    solver refuses is drawn again from that seed, as the app does: its code still names it), each made
    as it is asked for. `progress(done, total)` hears of each variant made. A bad count or seed is
    refused here, before any is made."""
    if count < 1:
        raise SelectionError("the count must be at least 1")
    if not 0 <= base_seed <= MAX_SEED - count + 1:
        raise SelectionError(f"the seed must be between 0 and {MAX_SEED - count + 1} for {count} variants "
                             f"(seeds end at {MAX_SEED})")
    return _variants(bank, catalog, questions, count, base_seed, progress)


def _variants(bank: Bank, catalog: Catalog, questions: list[Question], count: int, base_seed: int,
              progress: Callable[[int, int], None] | None) -> Iterator[Solution]:
    made = 0
    for question in questions:
        for seed in range(base_seed, base_seed + count):
            try:
                solution = make_variant(bank, catalog, VariantCode(question.id, seed))
            except VariantError as error:  # no draw from this seed is valid: a broken question, said as such
                raise SelectionError(str(error)) from None
            made += 1
            if progress is not None:
                progress(made, count * len(questions))
            yield solution


@dataclass(frozen=True)
class Sheet:
    """One text file of an export, written as its variants come: `head`, then `entry(number, solution)`
    for each variant in turn (numbered from 1), then `tail`."""
    head: str
    entry: Callable[[int, Solution], str]
    tail: str = ""


def write_sheets(solutions: Iterable[Solution], outputs: Sequence[tuple[Sheet, TextIO]]) -> None:
    """Each solution written into every sheet as it comes, then dropped."""
    for sheet, out in outputs:
        out.write(sheet.head)
    for number, solution in enumerate(solutions, 1):
        for sheet, out in outputs:
            out.write(sheet.entry(number, solution))
    for sheet, out in outputs:
        out.write(sheet.tail)


def _markdown(head: list[str], entry: Callable[[int, Solution], list[str]]) -> Sheet:
    # A sheet is its lines joined by newlines: each entry's lines follow the head's after a newline.
    return Sheet("\n".join(head), lambda number, solution: "\n" + "\n".join(entry(number, solution)))


def _heading(number: int, solution: Solution) -> list[str]:
    q = solution.question
    return [f"## {number}. {q.title}", "", f"Variant `{solution.code}` · group {q.group} · {q.topic}", ""]


def _conventions_markdown() -> list[str]:
    lines = ["## Conventions", "", "Every question assumes these unless its prompt says otherwise.", ""]
    return lines + [f"- **{c.title}**: {c.text} *({c.source})*" for c in conventions()] + [""]


def candidate_sheet() -> Sheet:
    return _markdown(["# Candidate sheet", "", *_conventions_markdown()], _candidate_entry)


def _candidate_entry(number: int, solution: Solution) -> list[str]:
    lines = _heading(number, solution) + [solution.prompt, "", "Given:", ""]
    lines += [f"- {param.label}: {param.shown}" for param in solution.problem_data()] + ["", "Answers:", ""]
    return lines + [f"- {_blank(a)}:" for a in solution.question.answers] + [""]


def _blank(answer: Answer) -> str:
    """An answer's line on the candidate's sheet: its label, and its unit or its options."""
    if isinstance(answer, Choice):
        return f"{answer.label} (one of: {' / '.join(answer.choices)})"
    return f"{answer.label}{f' ({answer.unit})' if answer.unit and answer.numeric else ''}"


def key_sheet() -> Sheet:
    return _markdown(["# Answer key", "", *_conventions_markdown()], _key_entry)


def _key_entry(number: int, solution: Solution) -> list[str]:
    lines = _heading(number, solution) + ["| answer | key |", "|---|---|"]
    lines += [f"| {a.label} | {expected_text(solution, a.key)} |" for a in solution.question.answers]
    if judged := judgement_lines(solution):
        lines += ["", "### Judgements", ""] + [f"- {line.strip()}" for line in judged]
    lines += ["", "### Steps", ""]
    for step_number, step in enumerate(solution.sheet.steps, 1):
        lines.append(f"{step_number}. {step.title}: ${step.latex}$ = {step.substituted} = **{step.result}**")
    regime = solution.sheet.regime
    if regime is not None:
        lines += ["", f"### Regime: {regime.name}", "", regime.summary, "",
                  f"Boundary ${regime.boundary.latex}$ = {regime.boundary.result}; this variant "
                  f"{regime.position.result} ({regime.margin_text}). Other side: {regime.other_side}"]
    return lines + ["", "### Assumptions", ""] + [f"- {a}" for a in solution.sheet.assumptions] + [""]


def json_sheet() -> Sheet:
    """The variants as one JSON array, the text `json.dumps(array, indent=2)` gives, and a newline."""
    return Sheet("[", _json_entry, "\n]\n")


def _json_entry(number: int, solution: Solution) -> str:
    # An element of the array sits one level in: each of its lines two spaces further (a string in
    # JSON holds no raw newline, so every newline is the layout's).
    return ("\n  " if number == 1 else ",\n  ") + json.dumps(to_dict(solution), indent=2).replace("\n", "\n  ")


# Anki ------------------------------------------------------------------------------------------
ANKI_MODEL_ID = 1_707_204_511  # fixed ids: re-exporting updates the same note type and deck in Anki
ANKI_DECK_ID = 1_707_204_512


def _html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def anki_back(solution: Solution) -> str:
    rows = "".join(f"<tr><td>{_html(a.label)}</td><td><b>{_html(expected_text(solution, a.key))}</b></td></tr>"
                   for a in solution.question.answers)
    steps = "".join(f"<li>{_html(s.title)}: \\({html.escape(s.latex)}\\) = {_html(s.substituted)} = "
                    f"<b>{_html(s.result)}</b></li>" for s in solution.sheet.steps)
    regime = solution.sheet.regime
    regime_html = "" if regime is None else (f"<p><b>Regime: {_html(regime.name)}</b>. {_html(regime.summary)} "
                                             f"Other side: {_html(regime.other_side)}</p>")
    return f"<table>{rows}</table><ol>{steps}</ol>{regime_html}"


def write_anki(solutions: Iterable[Solution], path: Path) -> None:
    """One note per variant: front = prompt, back = answers, steps, regime; tagged by group and
    topic; the note's guid is its variant code, so a re-export updates rather than duplicates.

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
            for solution in solutions:
                q = solution.question
                note = genanki.Note(
                    model=model, fields=[str(solution.code), _html(solution.prompt), anki_back(solution)],
                    tags=[f"group::{q.group}", f"topic::{q.topic}"], guid=genanki.guid_for(str(solution.code)))
                note.write_to_db(cursor, timestamp, ANKI_DECK_ID, ids)
            connection.commit()
        finally:
            connection.close()
        with zipfile.ZipFile(path, "w") as package:
            package.write(collection, "collection.anki2")
            package.writestr("media", "{}")  # no media files
