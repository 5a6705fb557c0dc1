"""Mock interviews after the fact: the score sheet of one, and the list of past ones."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Static

from tui import messages
from tui.render import plain
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter
from tui.widgets.tables import selected_key

if TYPE_CHECKING:
    from practice.review import Reviewer
    from practice.store import ProgressStore
    from solvers.bank import Question


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


RATINGS = {1: "Again", 2: "Hard", 3: "Good", 4: "Easy"}


class MockSheetScreen(AppScreen):
    """Per question: answers correct stage by stage, time against the budget, slips, the rating where it
    was scheduled (1-4 change it). Enter shows the saved answers against the solution, n there the next."""
    HELP_TITLE = "Mock interview score sheet"

    DEFAULT_CSS = """
    #sheet-title { padding: 0 1; background: $boost; height: auto; }
    """
    BINDINGS = [
        Binding("enter", "review", "Review this answer", priority=True, id="mock-sheet.review",
                tooltip="the saved answers against the solution; nothing is recorded"),
        *(Binding(str(n), f"rate({n})", name, show=False, id=f"mock-sheet.{name.lower()}",
                  tooltip=f"rate this question {name} (where the mock was scheduled)") for n, name in RATINGS.items()),
        Binding("escape", "app.pop_screen", "Back", id="mock-sheet.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, store: ProgressStore, mock_id: str, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.store = store
        self.sheet = store.mock_sheet(mock_id)
        self.questions = questions  # to place each saved answer in its stage

    def compose(self) -> ComposeResult:
        sheet, mock = self.sheet, self.sheet.mock
        budget = f", budget {_clock(mock.budget_seconds)} each" if mock.budget_seconds else ""
        stages = sheet.answers_by_stage_kind()
        right, asked = sum(r for r, _ in stages.values()), sum(a for _, a in stages.values())
        by_kind = " · ".join(f"{kind} {r}/{a}" for kind, (r, a) in stages.items())
        yield Header()
        yield Static(f"[b]Mock interview[/b] of {mock.started.astimezone():%a %d %b %H:%M}: [b]{right}/{asked} "
                     f"answers right[/b] ({by_kind}); {sheet.correct}/{mock.planned} questions all right; "
                     f"{_clock(sheet.seconds)}{budget}", id="sheet-title")
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True, id="sheet")
        table.add_columns("question", "correct by stage", "time", "rating", "slips")
        for attempt in sheet.attempts:  # ids, not titles, and short slips: the sheet fits 80 columns
            over = mock.budget_seconds is not None and attempt.seconds > mock.budget_seconds
            slips = "; ".join(sorted({a.slip.split(":")[0] for a in attempt.answers if a.slip})) or "—"
            time_taken = _clock(attempt.seconds) + (" over" if over else "")
            right_here = self._correct(attempt.question_id, {a.key: a.verdict == "correct" for a in attempt.answers})
            table.add_row(*plain(attempt.question_id, right_here, time_taken, self._rating(attempt.uid), slips),
                          key=attempt.uid)
        yield table
        yield KeysFooter()

    def _rating(self, uid: str) -> str:
        """The rating its card was scheduled with (chosen, else the suggestion); '—' where not scheduled."""
        review = self.store.review_of(uid)
        return RATINGS[review.rating] if review is not None else "—"

    def _correct(self, question_id: str, verdicts: Mapping[str, bool]) -> str:
        """Answers right over asked, a figure a stage where the question runs in more than one."""
        from solvers.transcript import by_stage

        question = self.questions.get(question_id)  # a question no longer in the bank: one figure
        scores = by_stage(question, verdicts) if question is not None else []
        if len(scores) < 2:
            return f"{sum(verdicts.values())}/{len(verdicts)}"
        return " ".join(f"{right}/{asked}" for right, asked in scores)

    def action_rate(self, rating: int) -> None:
        """A rating for the question under the cursor, where the mock scheduled it (as the solution's 1-4)."""
        table = self.query_one(DataTable)
        uid = selected_key(table)
        reviewer = self.infradrill.loaded_session.reviewer
        if uid is None or reviewer is None:
            return
        if self.store.review_of(uid) is None:
            self.notify("This mock's answers were saved as practice: nothing to rate (Settings, Mock answers).")
            return
        reviewer.rate(uid, rating)
        table.update_cell(uid, table.ordered_columns[3].key, self._rating(uid))

    def action_review(self) -> None:
        if (uid := selected_key(self.query_one(DataTable))) is not None:
            self._review(uid)

    def _review(self, uid: str) -> None:
        attempt = next(a for a in self.sheet.attempts if a.uid == uid)
        typed = {a.key: a.typed for a in attempt.answers}
        self.post_message(messages.ReviewAttempt(attempt.variant, typed, attempt.seconds, attempt.hints_used))

    def review_next(self) -> bool:
        """The answer after the one under the cursor, reviewed (`n` on a review); False after the last."""
        table = self.query_one(DataTable)
        if table.cursor_row + 1 >= table.row_count:
            return False
        table.move_cursor(row=table.cursor_row + 1)
        self.action_review()
        return True


class PastMocksScreen(AppScreen):
    HELP_TITLE = "Past mock interviews"

    BINDINGS = [
        Binding("enter", "open", "Open score sheet", priority=True, id="past-mocks.open",
                tooltip="per question: answers correct, time, slips"),
        Binding("r", "resume", "Resume", id="past-mocks.resume",
                tooltip="go on with a mock left half way: the questions it has left, across topics"),
        Binding("delete,x", "delete", "Delete", id="past-mocks.delete",
                tooltip="forget a mock left half way (its answers stay in your history); press twice"),
        Binding("escape", "app.pop_screen", "Back", id="past-mocks.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, reviewer: Reviewer, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.reviewer = reviewer
        self.store = reviewer.store  # read here; written through the reviewer
        self.questions = questions
        self.confirm_delete: str | None = None  # the mock a second press deletes

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

    def _unfinished(self) -> str | None:
        """The mock under the cursor if it was left half way."""
        tables = self.query(DataTable)
        mock_id = selected_key(tables.first()) if tables else None
        if mock_id is None or self.store.mock_sheet(mock_id).mock.finished is not None:
            return None
        return mock_id

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Resume and delete are offered on a mock left half way only (a finished one keeps its sheet)."""
        return self._unfinished() is not None if action in ("resume", "delete") else True

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()

    def action_open(self) -> None:
        if (mock_id := selected_key(self.query_one(DataTable))) is not None:
            self.app.push_screen(MockSheetScreen(self.store, mock_id, self.questions))

    def action_resume(self) -> None:
        if (mock_id := self._unfinished()) is not None:
            self.app.pop_screen()
            self.app.post_message(messages.ResumeMock(mock_id))  # this screen is gone: straight to the app

    async def action_delete(self) -> None:
        if (mock_id := self._unfinished()) is None:
            return
        if self.confirm_delete != mock_id:
            self.confirm_delete = mock_id
            self.infradrill.prompt("Press delete again to forget this mock (its answers stay in your history).")
            return
        self.reviewer.forget_mock(mock_id)
        self.confirm_delete = None
        self.infradrill.withdraw_prompts()
        await self.recompose()
        self.notify("Mock interview deleted.")
