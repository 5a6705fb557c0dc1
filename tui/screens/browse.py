"""Browse the bank: a table of questions in learning order, each with what the drill does with it now;
`/`, or any letter no key is bound to, narrows it as you type. Enter opens a fresh variant, d the default
one, i the interviewer view, w the what-if explorer (nothing recorded), s suspends or releases."""
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Header, Input, Static

from solvers.bank import Question
from solvers.groups import spelled
from solvers.lookup import matching
from tui import messages
from tui.modes import Mode
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter
from tui.widgets.tables import selected_key

STATE_STYLE = {"due": "bold", "later": "dim", "suspended": "italic", "buried": "italic"}  # held: the theme's warning
STATE_SAYS = {"due": "due now", "new": "new: never reviewed", "later": "scheduled, not due yet",  # short: one line
              "suspended": "suspended: skipped until released (s)", "buried": "buried: skipped until tomorrow (s)"}


class BrowseScreen(AppScreen):
    HELP_TITLE = "Browse the bank"
    DEFAULT_CSS = """
    #filter-bar { height: 1; }
    #filter { width: 1fr; height: 1; border: none; padding: 0 1; background: $boost; }
    #filter:focus { border: none; background: $primary 30%; }
    #shown { width: auto; height: 1; padding: 0 1; color: $text-muted; }
    #bank { height: 1fr; overflow-x: hidden; }  /* the title is cut here, and shown whole below */
    #detail { height: 2; padding: 0 1; background: $boost; }
    """
    BINDINGS = [
        Binding("enter", "open", "Open", priority=True, id="browse.open",
                tooltip="a fresh variant of the question under the cursor (from the filter: back to the list)"),
        Binding("d", "open_default", "Default", id="browse.default",
                tooltip="every parameter at its default: the catalogue's variant"),
        Binding("i", "open_as_interviewer", "Interviewer", id="browse.interviewer",
                tooltip="a fresh variant with its key beside it, revealed a step at a time"),
        Binding("w", "what_if", "What if", id="browse.what-if",
                tooltip="a fresh variant in the what-if explorer: move a parameter, nothing is recorded"),
        Binding("slash", "filter", "Filter", id="browse.filter",
                tooltip="type to narrow the list by id, title, topic or group (a group's code, e.g. K1); "
                        "typing a letter no key is bound to starts it too"),
        Binding("s", "toggle_suspend", "Suspend/release", show=False, id="browse.suspend",
                tooltip="keep it out of the drill and mocks, or let it back in"),
        Binding("down", "to_list", "To the list", show=False, id="browse.to-list",
                tooltip="from the filter, back to the list"),
        Binding("escape", "back", "Back", id="browse.back",
                tooltip="clear the filter first, then back to the previous screen"),
    ]

    def __init__(self, questions: list[Question], states: dict[str, str] | None = None) -> None:
        """`states`: each question's state in the drill (practice.review.Reviewer.states); none without a store."""
        super().__init__()
        self.questions = {q.id: q for q in questions}
        self.states = dict(states or {})
        self._to_filter = False  # `/` pressed or a letter typed: letters go to the filter until the list has the focus

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="filter-bar"):
            yield Input(placeholder="/ to filter by id, title, topic or group", id="filter", select_on_focus=False)
            yield Static(id="shown")
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True, id="bank")
        table.add_columns("group", "state", "id", "topic", "title")
        yield table
        yield Static(id="detail")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._fill("")
        self.query_one(DataTable).focus()

    def _fill(self, query: str) -> None:
        """The rows the filter keeps, the cursor on the same question where it still is."""
        table = self.query_one(DataTable)
        keep = selected_key(table)
        table.clear()
        shown = matching(self.questions.values(), query)
        for qid in shown:
            q = self.questions[qid]
            table.add_row(Text(q.group), self._state_cell(qid), Text(q.id), Text(q.topic), Text(q.title), key=qid)
        if keep in shown:
            table.move_cursor(row=shown.index(keep))
        self.query_one("#shown", Static).update(f"{len(shown)} of {len(self.questions)}")
        self._show_detail()

    def _state_cell(self, qid: str) -> Text:
        state = self.states.get(qid, "")
        style = STATE_STYLE.get(state, "")
        if state in ("suspended", "buried"):
            style += f" {self.app.current_theme.warning or 'yellow'}"
        return Text(state, style=style)

    def _show_detail(self) -> None:
        """The row under the cursor in full: its title (the column cuts it at 80), its group spelled out, its state."""
        qid = selected_key(self.query_one(DataTable))
        detail = self.query_one("#detail", Static)
        if qid is None:
            detail.update(Text("No question matches: esc clears the filter.", style="italic"))
            return
        q = self.questions[qid]
        said = [spelled(q.group), q.topic, STATE_SAYS.get(self.states.get(qid, ""), "")]
        detail.update(Text.assemble((q.title, "bold"), "\n" + " · ".join(part for part in said if part)))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill(event.value)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "to_list":
            return self.focused is self.query_one("#filter")
        return True

    def action_filter(self) -> None:
        self._to_filter = True
        self.query_one("#filter").focus()

    def on_key(self, event: events.Key) -> None:
        """Typing on the list types into the filter: a letter no key is bound to starts it, and once `/` is
        pressed every letter goes there, those typed before the focus has moved included (keys typed fast,
        or pasted, arrive ahead of it)."""
        box = self.query_one("#filter", Input)
        if box.has_focus or not event.is_printable or event.character in (None, " "):
            return
        if event.key == "slash":  # here, not by its binding: that runs after the letters typed behind it reach here
            self.action_filter()
            event.stop()
            event.prevent_default()
        elif self._to_filter or event.key not in self.active_bindings:
            self._to_filter = True
            box.insert_text_at_cursor(event.character)
            box.focus()
            event.stop()
            event.prevent_default()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if event.widget is self.query_one(DataTable):
            self._to_filter = False  # back on the list: its letters are keys again

    def action_to_list(self) -> None:
        self.query_one(DataTable).focus()

    def action_back(self) -> None:
        box = self.query_one("#filter", Input)
        if box.value:
            box.value = ""  # Input.Changed refills the list
            self.query_one(DataTable).focus()
        elif box.has_focus:
            self.query_one(DataTable).focus()
        else:
            self.app.pop_screen()

    def action_toggle_suspend(self) -> None:
        """Suspend the question under the cursor, or release it if it is held (suspended or buried); say which."""
        reviewer = self.infradrill.loaded_session.reviewer
        if (qid := self._selected()) is None:
            return
        if reviewer is None:
            self.notify("Suspending needs the progress store, which could not be opened.", severity="error")
            return
        if self.states.get(qid) in ("suspended", "buried"):
            reviewer.release(qid)
        else:
            reviewer.suspend(qid)
        self.states[qid] = reviewer.states()[qid]
        table = self.query_one(DataTable)
        table.update_cell(qid, table.ordered_columns[1].key, self._state_cell(qid), update_width=True)
        self._show_detail()
        if self.states[qid] == "suspended":
            self.notify(f"{qid} suspended: the drill and mocks skip it until you release it (s).")
        else:
            self.notify(f"{qid} released: back in the drill ({STATE_SAYS[self.states[qid]]}).")

    def _selected(self) -> str | None:
        """The question under the cursor (while the filter has the focus, its letters are text, not keys)."""
        return selected_key(self.query_one(DataTable))

    def action_open(self) -> None:
        if self.focused is self.query_one("#filter"):
            self.action_to_list()
        elif (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid))

    def action_open_default(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid, default=True))

    def action_open_as_interviewer(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid, mode=Mode.INTERVIEWER))

    def action_what_if(self) -> None:
        if (qid := self._selected()) is not None:
            self.post_message(messages.OpenQuestion(qid, mode=Mode.WHAT_IF))
