"""What a screen asks of the app. A screen posts one of these and the app, where it bubbles up to,
acts on it: no screen calls a method of the app's, and each request names what it carries."""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from textual.message import Message

from tui.modes import Mode

if TYPE_CHECKING:
    from solvers.engine import Solution
    from solvers.followup import FollowUp
    from tui.app import FirstRound


class OpenQuestion(Message):
    """A new variant of a question (its default with `default`), over the screen on top with `replace`."""

    def __init__(self, question_id: str, *, default: bool = False, replace: bool = False,
                 mode: Mode = Mode.PRACTICE) -> None:
        super().__init__()
        self.question_id, self.default, self.replace, self.mode = question_id, default, replace, mode


class RoundSubmitted(Message):
    """A question's first round, as typed: to be graded, saved, then followed up or revealed."""

    def __init__(self, solution: Solution, answers: dict[str, str], *, elapsed: float, hints_used: int,
                 started: datetime, mode: Mode, revealed: bool) -> None:
        super().__init__()
        self.solution, self.answers, self.mode, self.revealed = solution, answers, mode, revealed
        self.elapsed, self.hints_used, self.started = elapsed, hints_used, started


class FollowUpSubmitted(Message):
    """The follow-up's answers, as typed: graded and saved with the first round's attempt."""

    def __init__(self, first: FirstRound, followup: FollowUp, answers: dict[str, str]) -> None:
        super().__init__()
        self.first, self.followup, self.answers = first, followup, answers


class FollowUpSkipped(Message):
    """The first round's solution without its follow-up."""

    def __init__(self, first: FirstRound) -> None:
        super().__init__()
        self.first = first


class MockLeft(Message):
    """The candidate left a mock interview half way: what was answered is kept."""


class ReviewAttempt(Message):
    """A saved attempt shown again as it was answered: regraded, nothing recorded."""

    def __init__(self, variant: str, typed: dict[str, str], seconds: float, hints_used: int) -> None:
        super().__init__()
        self.variant, self.typed, self.seconds, self.hints_used = variant, typed, seconds, hints_used


class NextInDrill(Message):
    """The drill's next question, in place of the solution on top."""


class Reopen(Message):
    """The same variant asked again after its key was shown."""

    def __init__(self, solution: Solution, mode: Mode) -> None:
        super().__init__()
        self.solution, self.mode = solution, mode
