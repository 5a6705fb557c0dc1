"""What a screen asks of the app. A screen posts one of these and the app, where it bubbles up to,
acts on it: no screen calls a method of the app's, and each request names what it carries."""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from textual.message import Message

from tui.modes import Mode

if TYPE_CHECKING:
    from solvers.engine import Solution
    from solvers.interview import StageRun
    from solvers.transcript import Answered


class OpenQuestion(Message):
    """A new variant of a question (its default with `default`), over the screen on top with `replace`."""

    def __init__(self, question_id: str, *, default: bool = False, replace: bool = False,
                 mode: Mode = Mode.PRACTICE) -> None:
        super().__init__()
        self.question_id, self.default, self.replace, self.mode = question_id, default, replace, mode


class InterviewDone(Message):
    """Every stage of a question asked and graded (`given`: those shown before a stage asked again): to be
    saved as one attempt, then revealed."""

    def __init__(self, solution: Solution, answered: tuple[Answered, ...], given: tuple[StageRun, ...], *,
                 elapsed: float, hints_used: int, started: datetime, mode: Mode, revealed: bool) -> None:
        super().__init__()
        self.solution, self.answered, self.given, self.mode, self.revealed = solution, answered, given, mode, revealed
        self.elapsed, self.hints_used, self.started = elapsed, hints_used, started


class MockLeft(Message):
    """The candidate left a mock interview half way: what was answered is kept."""


class ResumeMock(Message):
    """A mock interview left half way, gone on with."""

    def __init__(self, mock_id: str) -> None:
        super().__init__()
        self.mock_id = mock_id


class ReviewNext(Message):
    """On a mock's review, the next answer of the mock."""


class ReviewAttempt(Message):
    """A saved attempt shown again as it was answered: regraded, nothing recorded."""

    def __init__(self, variant: str, typed: dict[str, str], seconds: float, hints_used: int) -> None:
        super().__init__()
        self.variant, self.typed, self.seconds, self.hints_used = variant, typed, seconds, hints_used


class NextInDrill(Message):
    """The drill's next question, in place of the solution on top."""


class Reopen(Message):
    """One stage of the same variant asked again after its key was shown, the stages before it given."""

    def __init__(self, solution: Solution, mode: Mode, given: tuple[StageRun, ...], stage: StageRun) -> None:
        super().__init__()
        self.solution, self.mode, self.given, self.stage = solution, mode, given, stage
