"""Browse the bank: a table of questions; Enter opens a fresh variant, d the default one."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header

from solvers.bank import Question
from tui import messages
from tui.modes import Mode
from tui.render import plain
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter
from tui.widgets.tables import selected_key


class BrowseScreen(AppScreen):
    BINDINGS = [
        Binding("enter", "open", "Open (new variant)", priority=True, id="browse.open",
                tooltip="a fresh variant of the question under the cursor"),
        Binding("d", "open_default", "Default variant", id="browse.default",
                tooltip="every parameter at its default: the catalogue's variant"),
        Binding("i", "open_as_interviewer", "As interviewer", id="browse.interviewer",
                tooltip="the variant with its key beside it, revealed a step at a time"),
        Binding("s", "toggle_suspend", "Suspend/release", show=False, id="browse.suspend",
                tooltip="keep it out of the drill and mocks, or let it back in"),
        Binding("escape", "app.pop_screen", "Back", id="browse.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, questions: list[Question], held: dict[str, str] | None = None) -> None:
        super().__init__()
        self.questions = questions
        self.held = dict(held or {})  # question id -> suspended | buried

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True, id="bank")
        table.add_columns("group", "id", "topic", "title", "held")
        for q in self.questions:
            table.add_row(*plain(q.group, q.id, q.topic, q.title, self.held.get(q.id, "")), key=q.id)
        yield table
        yield KeysFooter()

    def action_toggle_suspend(self) -> None:
        """Suspend the question under the cursor, or release it if it is held (suspended or buried)."""
        reviewer = self.infradrill.loaded_drill.reviewer
        if (qid := self._selected()) is None or reviewer is None:
            return
        if qid in self.held:
            reviewer.release(qid)
            del self.held[qid]
        else:
            reviewer.suspend(qid)
            self.held[qid] = "suspended"
        table = self.query_one(DataTable)
        table.update_cell(qid, table.ordered_columns[-1].key, Text(self.held.get(qid, "")))

    def _selected(self) -> str | None:
        return selected_key(self.query_one(DataTable))

    def action_open(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid))

    def action_open_default(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid, default=True))

    def action_open_as_interviewer(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid, mode=Mode.INTERVIEWER))
