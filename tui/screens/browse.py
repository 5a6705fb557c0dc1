"""Browse the bank: a table of questions; Enter opens a fresh variant, d the default one."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from solvers.bank import Question
from tui.modes import Mode
from tui.render import plain
from tui.screens.base import AppScreen
from tui.widgets.tables import selected_key


class BrowseScreen(AppScreen):
    BINDINGS = [
        Binding("enter", "open", "Open (new variant)", priority=True),
        Binding("d", "open_default", "Default variant"),
        Binding("i", "open_as_interviewer", "As interviewer"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, questions: list[Question]) -> None:
        super().__init__()
        self.questions = questions

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True, id="bank")
        table.add_columns("group", "id", "topic", "title")
        for q in self.questions:
            table.add_row(*plain(q.group, q.id, q.topic, q.title), key=q.id)
        yield table
        yield Footer(compact=True)

    def _selected(self) -> str | None:
        return selected_key(self.query_one(DataTable))

    def action_open(self) -> None:
        if (qid := self._selected()) is not None:
            self.infradrill.open_question(qid)

    def action_open_default(self) -> None:
        if (qid := self._selected()) is not None:
            self.infradrill.open_question(qid, default=True)

    def action_open_as_interviewer(self) -> None:
        if (qid := self._selected()) is not None:
            self.infradrill.open_question(qid, mode=Mode.INTERVIEWER)
