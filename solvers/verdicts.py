"""What a grade says of one answer. A StrEnum: the progress store keeps the text, and text read
back compares equal to the member."""
from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    CORRECT = "correct"
    CLOSE = "close"
    WRONG = "wrong"
    UNPARSED = "unparsed"
    MISMATCH = "unit mismatch"
