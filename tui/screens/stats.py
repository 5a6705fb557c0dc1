"""Statistics: reviews per day, retention by week, accuracy by group and topic, slips, weak spots."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

if TYPE_CHECKING:
    from tui.service import Drill


class StatsScreen(Screen):
    DEFAULT_CSS = """
    #stats-body { padding: 1 2; }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, drill: Drill) -> None:
        super().__init__()
        self.drill = drill

    def compose(self) -> ComposeResult:
        from textual.markup import escape

        from tui.stats import format_summary, summarize
        from tui.store import now_utc

        reviewer = self.drill.reviewer
        now = now_utc()
        summary = summarize(reviewer.store.attempts(), self.drill.bank.questions, reviewer.retrievability(now), now,
                            reviewer.tz, reviewer.summary(now), mocks=len(reviewer.store.mocks()))
        yield Header()
        with VerticalScroll(id="stats-body"):
            yield Static(escape(format_summary(summary)), id="stats")
        yield Footer()
