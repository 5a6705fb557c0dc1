"""Statistics: reviews per day, cards by state, retention by week (bars on a 0-100% scale, not a
sparkline, which scales to its own range), the answers missed by interview stage, the forecast,
accuracy, slips, weak spots."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Header, Sparkline, Static

from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from practice.review import Reviewer
    from solvers.bank import Question

SPARK_DAYS = 60


class StatsScreen(AppScreen):
    HELP_TITLE = "Statistics"

    DEFAULT_CSS = """
    #stats-body { padding: 1 2; }
    StatsScreen Sparkline { height: 3; margin-bottom: 1; }
    .caption { color: $text-muted; }
    """
    BINDINGS = [
        Binding("t", "drill_topic", "Topic", id="stats.drill-topic",
                tooltip="drill the weakest topic: its questions, the least often right first"),
        Binding("k", "drill_stage", "Stage", id="stats.drill-stage",
                tooltip="drill the questions that ask the kind of stage you miss most"),
        Binding("a", "app.review_ahead", "Ahead", id="stats.ahead",
                tooltip="review ahead: the cards due in the next days, reviewed now"),
        Binding("escape", "app.pop_screen", "Back", id="stats.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, reviewer: Reviewer, questions: Mapping[str, Question]) -> None:
        super().__init__()
        self.reviewer = reviewer
        self.questions = questions
        self.topic: str | None = None  # the weakest topic, for "drill these" (set in compose)
        self.stage: str | None = None  # the kind of stage missed most

    def compose(self) -> ComposeResult:
        from textual.markup import escape

        from practice.records import now_utc
        from practice.stats import format_summary, summarize_progress, weakest_stage, weakest_topic

        summary = summarize_progress(self.reviewer, self.questions, now_utc())
        self.topic, self.stage = weakest_topic(summary), weakest_stage(summary)
        days = [summary.today - timedelta(days=back) for back in range(SPARK_DAYS - 1, -1, -1)]
        yield Header()
        with VerticalScroll(id="stats-body"):
            offers = []
            if self.topic is not None:
                share = summary.by_topic[self.topic].answer_share or 0.0
                offers.append(f"t drills {escape(self.topic)}, your weakest topic ({share:.0%} of answers right)")
            if self.stage is not None:
                missed = summary.by_stage[self.stage].share or 0.0
                offers.append(f"k the questions with a stage of kind {self.stage} ({missed:.0%} of its answers "
                              "missed)")
            if offers:
                yield Static(f"[b]Drill these:[/b] {'; '.join(offers)}; a reviews ahead the cards due in the next "
                             "days.", id="drill-these")
            yield Static(f"Reviews per day, last {SPARK_DAYS} days (peak {max(summary.per_day.values(), default=0)})",
                         classes="caption")
            yield Sparkline([summary.per_day.get(day, 0) for day in days], summary_function=max, id="per-day")
            yield Static(escape(format_summary(summary)), id="stats")
        yield KeysFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "drill_topic":
            return self.topic is not None
        if action == "drill_stage":
            return self.stage is not None
        return True

    def action_drill_topic(self) -> None:
        if self.topic is not None:
            topic = self.topic
            self._drill(f"Topic {topic}", lambda q: q.topic == topic)

    def action_drill_stage(self) -> None:
        if self.stage is not None:
            kind = self.stage
            self._drill(f"Stage {kind}", lambda q: any(stage.kind == kind for stage in q.stages))

    def _drill(self, name: str, chosen: Callable[[Question], bool]) -> None:
        """Drill the questions `chosen` picks (none suspended), the least often right first."""
        from practice.stats import weakest_questions

        held = self.reviewer.held()
        ids = [qid for qid, q in self.questions.items() if chosen(q) and held.get(qid) != "suspended"]
        self.app.pop_screen()
        self.infradrill.drill_queue(name, weakest_questions(self.reviewer.store.attempts(), ids))
