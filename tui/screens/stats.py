"""Statistics: reviews per day, cards by state, retention by week (bars on a 0-100% scale, not a
sparkline, which scales to its own range), the answers missed by interview stage, the forecast,
accuracy, slips, weak spots."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Sparkline, Static

from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from practice.review import Reviewer
    from solvers.bank import Question

SPARK_DAYS = 60


class StatsScreen(Screen):
    DEFAULT_CSS = """
    #stats-body { padding: 1 2; }
    StatsScreen Sparkline { height: 3; margin-bottom: 1; }
    .caption { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="stats.back", tooltip="back to the previous screen")]

    def __init__(self, reviewer: Reviewer, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.reviewer = reviewer
        self.questions = questions

    def compose(self) -> ComposeResult:
        from textual.markup import escape

        from practice.records import now_utc
        from practice.stats import format_summary, summarize

        reviewer = self.reviewer
        now = now_utc()
        summary = summarize(reviewer.store.attempts(), self.questions, reviewer.retrievability(now), now,
                            reviewer.tz, reviewer.summary(now), mocks=len(reviewer.store.mocks()),
                            cards=reviewer.store.cards())
        days = [summary.today - timedelta(days=back) for back in range(SPARK_DAYS - 1, -1, -1)]
        yield Header()
        with VerticalScroll(id="stats-body"):
            yield Static(f"Reviews per day, last {SPARK_DAYS} days (peak {max(summary.per_day.values(), default=0)})",
                         classes="caption")
            yield Sparkline([summary.per_day.get(day, 0) for day in days], summary_function=max, id="per-day")
            yield Static(escape(format_summary(summary)), id="stats")
        yield KeysFooter()
