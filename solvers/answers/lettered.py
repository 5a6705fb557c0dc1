"""Reading letters typed for items listed A, B, C... (orderings and selections)."""
from __future__ import annotations

import re

from solvers.answers.base import Shown, letter
from solvers.parse import ParseError


def read_letters(text: str, shown: Shown, example: str) -> list[str]:
    """'BADC', 'b a d c', 'B > A > D > C', 'A, C' or '2 1 4 3' as items of `shown`, in the
    order typed. Raises ParseError for anything else or a letter nothing was listed under."""
    if not re.fullmatch(r"[\sA-Za-z0-9,;>\-]*", text) or not (tokens := re.findall(r"[A-Za-z]|\d+", text)):
        raise ParseError(f"type the letters, e.g. {example}")
    # A number too long to be a position is out of range without int() (which refuses 4,301 digits).
    positions = [ord(t.upper()) - ord("A") if t.isalpha() else int(t) - 1 if len(t) <= 4 else len(shown)
                 for t in tokens]
    if any(not 0 <= p < len(shown) for p in positions):
        raise ParseError(f"the letters run from A to {letter(len(shown) - 1)}")
    return [shown[p] for p in positions]
