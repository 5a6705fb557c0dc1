"""Mock interviews after the fact: the score sheet of one, and the list of past ones."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from tui import messages
from tui.render import plain
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter
from tui.widgets.tables import selected_key

if TYPE_CHECKING:
    from practice.store import ProgressStore
    from solvers.bank import Question


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


class MockSheetScreen(AppScreen):
    """Per question: answers correct stage by stage, time against the budget, slips. Enter shows the
    saved answers against the solution."""

    DEFAULT_CSS = """
    #sheet-title { padding: 0 1; background: $boost; height: auto; }
    """
    BINDINGS = [
        Binding("enter", "review", "Review this answer", priority=True, id="mock-sheet.review",
                tooltip="the saved answers against the solution; nothing is recorded"),
        Binding("escape", "app.pop_screen", "Back", id="mock-sheet.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, store: ProgressStore, mock_id: str, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.sheet = store.mock_sheet(mock_id)
        self.questions = questions  # to place each saved answer in its stage

    def compose(self) -> ComposeResult:
        sheet, mock = self.sheet, self.sheet.mock
        budget = f", budget {_clock(mock.budget_seconds)} each" if mock.budget_seconds else ""
        yield Header()
        yield Static(f"[b]Mock interview[/b] of {mock.started.astimezone():%a %d %b %H:%M}: "
                     f"{sheet.correct}/{mock.planned} questions all correct in {_clock(sheet.seconds)}{budget}",
                     id="sheet-title")
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True, id="sheet")
        table.add_columns("question", "correct by stage", "time", "slips")
        for attempt in sheet.attempts:  # ids, not titles, and short slips: the sheet fits 80 columns
            over = mock.budget_seconds is not None and attempt.seconds > mock.budget_seconds
            slips = "; ".join(sorted({a.slip.split(":")[0] for a in attempt.answers if a.slip})) or "—"
            time_taken = _clock(attempt.seconds) + (" over" if over else "")
            right = self._correct(attempt.question_id, {a.key: a.verdict == "correct" for a in attempt.answers})
            table.add_row(*plain(attempt.question_id, right, time_taken, slips), key=attempt.uid)
        yield table
        yield KeysFooter()

    def _correct(self, question_id: str, verdicts: Mapping[str, bool]) -> str:
        """Answers right over asked, a figure a stage where the question runs in more than one."""
        from solvers.transcript import by_stage

        question = self.questions.get(question_id)  # a question no longer in the bank: one figure
        scores = by_stage(question, verdicts) if question is not None else []
        if len(scores) < 2:
            return f"{sum(verdicts.values())}/{len(verdicts)}"
        return " ".join(f"{right}/{asked}" for right, asked in scores)

    def action_review(self) -> None:
        if (uid := selected_key(self.query_one(DataTable))) is not None:
            attempt = next(a for a in self.sheet.attempts if a.uid == uid)
            typed = {a.key: a.typed for a in attempt.answers}
            self.post_message(messages.ReviewAttempt(attempt.variant, typed, attempt.seconds, attempt.hints_used))


class PastMocksScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open score sheet", priority=True, id="past-mocks.open",
                tooltip="per question: answers correct, time, slips"),
        Binding("escape", "app.pop_screen", "Back", id="past-mocks.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, store: ProgressStore, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.store = store
        self.questions = questions

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True, id="mocks")
        table.add_columns("started", "questions", "all correct", "time", "finished")
        store = self.store
        for mock in store.mocks():
            sheet = store.mock_sheet(mock.id)
            table.add_row(f"{mock.started.astimezone():%Y-%m-%d %H:%M}", f"{len(sheet.attempts)}/{mock.planned}",
                          str(sheet.correct), _clock(sheet.seconds), "yes" if mock.finished else "no", key=mock.id)
        yield table
        if not table.row_count:
            yield Static("No mock interviews yet: press m on the home screen to start one.")
        yield KeysFooter()

    def action_open(self) -> None:
        if (mock_id := selected_key(self.query_one(DataTable))) is not None:
            self.app.push_screen(MockSheetScreen(self.store, mock_id, self.questions))
