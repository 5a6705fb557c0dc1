"""What every answer kind shares: the grade it gives, its test inputs, and its interface.

An answer kind (number, estimate, choice, order, select, checklist) owns everything about
one way of asking: the fields it takes from a question file, how it reads typed text, the
live note under its box (which says exactly what the grader will read), how it grades,
how it shows its key, and a correct, a wrong and an invalid input for the bank self-test.
Adding a kind is one module here and one line in `KINDS`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from solvers.parse import ParseError
from solvers.verdicts import Verdict

CORRECT, CLOSE, WRONG, UNPARSED, MISMATCH = Verdict


@dataclass(frozen=True)
class Grade:
    key: str
    verdict: Verdict
    given: str
    expected: str
    error: float | None = None  # relative error, decades for estimates, share missed for the others
    slip: str | None = None
    message: str | None = None

    @property
    def correct(self) -> bool:
        return self.verdict == CORRECT


@dataclass(frozen=True)
class Slip:
    """A classic mistake, recognised from the ratio typed / key."""

    label: str
    factor: float


@dataclass(frozen=True)
class TestInputs:
    """What the bank self-test types for an answer: grades correct, not correct, unparsed."""

    correct: str
    wrong: str
    invalid: str


class SpecError(ValueError):
    """A kind's field in a question file breaks the kind's rules."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class UnitMismatch(ValueError):
    """A value whose unit measures something else (seconds typed for bytes)."""


Shown = Sequence[str]  # items listed to the candidate, lettered A, B, C... (order, select)


@dataclass(frozen=True)
class Answer:
    """One answer as a question file asks it. Subclasses are the kinds."""

    key: str
    label: str
    unit: str = ""
    # A variant's reading of each text with a {field} (label, listed items): (template, as filled). The
    # template stays the text's identity (the solver judges it, a golden pin names it); the candidate
    # reads the filled text (engine.fill_answers).
    said: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)

    kind: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()  # the question-file fields this kind reads
    numeric: ClassVar[bool] = False
    self_graded: ClassVar[bool] = False  # ticked after the reveal; what was typed are notes

    @classmethod
    def from_fields(cls, key: str, label: str, unit: str, fields: Mapping[str, Any]) -> Answer:
        """Build from the kind's own fields of a question file (raises SpecError)."""
        return cls(key, label, unit)

    @property
    def texts(self) -> tuple[str, ...]:
        """The texts a candidate reads: the label, and the items listed or chosen from."""
        return (self.label,)

    def text(self, template: str) -> str:
        """A text as this variant reads it (its fields filled)."""
        return dict(self.said).get(template, template)

    @property
    def shown_label(self) -> str:
        return self.text(self.label)

    # The key: what the solver gives, how it is listed and shown --------------------------
    def check_result(self, result: Any) -> str | None:
        """A problem with the solver's result for this answer, or None."""
        return None

    def refusal(self, result: Any) -> str | None:
        """Why a well-formed result still makes no question of this variant (the draw is refused), or None."""
        return None

    def present(self, result: Any, seed: str) -> tuple[tuple[str, ...], Any]:
        """(items listed to the candidate, the key) for this variant; `seed` names it."""
        return (), result

    def listing(self, shown: Shown) -> str:
        """Text added under the prompt for listed items ('' when nothing is listed)."""
        return ""

    def tells_apart(self, factor: float) -> bool:
        """Whether an answer `factor` times the key grades otherwise than the key: a declared slip it does not
        tell apart is no slip here (a candidate making it is right, and the reveal should not warn of it)."""
        return True

    def key_text(self, key: Any, shown: Shown) -> str:
        return str(key)

    def display_value(self, key: Any) -> Any:
        """The key as data, in the answer's own unit (JSON)."""
        return key

    def typed(self, key: Any, shown: Shown) -> str:
        """The key as a person would type it; grading it gives correct."""
        return str(key)

    def test_inputs(self, key: Any, shown: Shown) -> TestInputs:
        raise NotImplementedError

    # Golden pins: the key a question file's golden: entry states for a named variant --------
    def pin(self, value: Any) -> Any:
        """A golden entry's value for this answer, checked, in the form `pin_mismatch` compares
        (raises SpecError). A kind with no key of its own (a self-graded checklist) has nothing to pin."""
        raise SpecError("golden", f"a {self.kind} answer has no key to pin")

    def pin_mismatch(self, pinned: Any, result: Any, rel: float | None) -> tuple[str, str] | None:
        """(what the solver gives, what the file pins) where the solver's result for this answer
        disagrees with the pin; None where they agree. `rel`: the entry's tolerance, if it gives one."""
        raise NotImplementedError

    # Reading and grading ------------------------------------------------------------------
    def read(self, text: str, shown: Shown) -> Any:
        """What the grader will take `text` to mean (raises ParseError or UnitMismatch)."""
        raise NotImplementedError

    def describe(self, reading: Any, shown: Shown) -> str:
        """A reading in words, for the note under the box."""
        return str(reading)

    def note(self, text: str, shown: Shown = ()) -> tuple[bool, str]:
        """(readable, note) for text typed so far: exactly the reading the grader uses."""
        if not text.strip():
            return True, ""
        try:
            reading = self.read(text, shown)
        except (ParseError, UnitMismatch) as error:
            return False, str(error)
        return True, "→ " + self.describe(reading, shown)

    def grade(self, text: str, key: Any, shown: Shown = (), slips: Sequence[Slip] = ()) -> Grade:
        raise NotImplementedError

    def error_text(self, grade: Grade) -> str:
        """The error column of the grade table ('' where the note says how far off)."""
        return ""

    # The answer box -----------------------------------------------------------------------
    @property
    def box_label(self) -> str:
        return self.shown_label

    def placeholder(self, shown: Shown) -> str:
        return ""

    @property
    def suggestions(self) -> tuple[str, ...]:
        return ()


def letter(index: int) -> str:
    return chr(ord("A") + index)


def letters(items: Sequence[str], shown: Shown) -> str:
    """Items as the letters they were listed under: ['c', 'a'] with shown [a, b, c] -> 'C A'."""
    return " ".join(letter(list(shown).index(item)) for item in items)


def lettered_list(title: str, shown: Shown) -> str:
    lines = [f"  {letter(i)}. {item}" for i, item in enumerate(shown)]
    return f"{title}\n" + "\n".join(lines)
