"""A question in the old shape (one `prompt:`, no `stages:`), for the tests of that shape: every question
the bank ships is staged, and user packs written before stages must keep working. It is
weight-read-intensity's file with its stages folded into one prompt."""
from __future__ import annotations

import re
from pathlib import Path

from solvers.bank import Bank, Question, load_bank, parse_question, questions_dir

OLD = "weight-read-intensity"
PROMPT = "prompt: |\n  {model} on TP {tp} x {gpu}: a prompt of {prompt}, decode at {batch}.\n"


def old_source(before_answers: str = "") -> str:
    """The file's text in the old shape, with `before_answers` (a `followups:` block) put before `answers:`."""
    text = (questions_dir() / "F" / f"{OLD}.yaml").read_text()
    text = re.sub(r"^stages:\n(?:[ \n].*\n)*", PROMPT, text, count=1, flags=re.M)
    return text.replace("\nanswers:", f"\n{before_answers}answers:", 1)


def old_question(before_answers: str = "") -> Question:
    question = parse_question(Path(f"{OLD}.yaml"), old_source(before_answers))
    assert not question.staged
    return question


def with_old_shape(bank: Bank | None = None) -> Bank:
    """The shipped bank with weight-read-intensity in the old shape (an app's `bank_loader`)."""
    bank = load_bank() if bank is None else bank
    return Bank({**bank.questions, OLD: old_question()}, list(bank.problems))
