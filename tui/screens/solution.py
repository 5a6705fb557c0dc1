"""Reveal: the grade table, the derivation step by step, the regime, assumptions, sources."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Header, SelectionList, Static

from solvers.answers import CORRECT, Checklist, Grade
from solvers.followup import both_rounds
from tui import messages
from tui.chart import sweep_chart
from tui.modes import Mode
from tui.render import givens_table, grade_table, interval_text, judgement_table, notes, regime_panel, step_renderable
from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from rich.text import Text

    from practice.review import Submitted
    from solvers.engine import Solution
    from solvers.followup import FollowUp


class SolutionScreen(AppScreen):
    DEFAULT_CSS = """
    #solution-title { padding: 0 1; background: $boost; height: auto; }
    #rating { padding: 0 1; background: $boost; height: auto; color: $text-muted; }
    #solution-body { padding: 0 1; }
    #grades { margin: 1 0; }
    .section, .step, #regime, #chart { margin-top: 1; }
    #notes { margin: 1 0; color: $text-muted; }
    .checklist { height: auto; max-height: 16; text-wrap: wrap; }
    """

    BINDINGS = [
        Binding("1", "rate(1)", "Again", show=False, id="solution.again", tooltip="forgot it: ask again soon"),
        Binding("2", "rate(2)", "Hard", show=False, id="solution.hard", tooltip="got there with trouble"),
        Binding("3", "rate(3)", "Good", show=False, id="solution.good", tooltip="recalled it"),
        Binding("4", "rate(4)", "Easy", show=False, id="solution.easy", tooltip="recalled it at once"),
        Binding("u", "undo_rating", "Undo rating", show=False, id="solution.undo",
                tooltip="back to the rating before the last one"),
        Binding("minus", "bury", "Bury until tomorrow", show=False, id="solution.bury",  # Anki's keys
                tooltip="out of the drill until the next day"),
        Binding("at", "suspend", "Suspend", show=False, id="solution.suspend",
                tooltip="out of the drill until released (Browse, s)"),
        Binding("n", "new_variant", "Next", id="solution.next",
                tooltip="a new variant, or the next due question when drilling"),
        Binding("a", "again", "Answer again", id="solution.answer-again",
                tooltip="the same variant again, as practice: the schedule does not move"),
        Binding("w", "what_if", "What if", id="solution.what-if", tooltip="move a parameter, watch the answers"),
        Binding("f1", "app.help", "Help", id="solution.help", tooltip="the keys of this screen"),
        Binding("f2", "app.conventions", "Conventions", id="solution.conventions",
                tooltip="the counting rules every question assumes"),
        Binding("escape", "app.pop_screen", "Back", id="solution.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, solution: Solution, answers: dict[str, str], grades: list[Grade], elapsed: float,
                 hints_used: int, submitted: Submitted | None = None, mode: Mode = Mode.PRACTICE,
                 followup: tuple[FollowUp, list[Grade]] | None = None, revealed: bool = False) -> None:
        super().__init__()
        self.solution = solution
        self.answers = answers
        self.grades = grades
        self.elapsed = elapsed
        self.hints_used = hints_used
        self.submitted = submitted  # the saved attempt and its suggested rating (None: not saved)
        self.mode = mode
        self.rating = int(submitted.suggested) if submitted else None
        self.rated = False  # the user picked a rating (else the suggestion stands)
        self.earlier: list[int | None] = []  # ratings picked before the current one (None: the suggestion)
        self.intervals: dict[int, timedelta] = {}  # what each rating gives the card (read once, after saving)
        self.followup = followup  # (the push, its grades), or None where it was skipped or there was none
        self.revealed = revealed  # answered again after the key was shown: not a review

    def compose(self) -> ComposeResult:
        q = self.solution.question
        right = sum(g.verdict == CORRECT for g in self.grades)
        minutes, seconds = divmod(int(self.elapsed), 60)
        pushed = ""
        if self.followup is not None:
            pushed = f", follow-up {sum(g.verdict == CORRECT for g in self.followup[1])}/{len(self.followup[1])}"
        yield Header()
        yield Static(f"[b]{escape(q.title)}[/b]   variant [b]{escape(str(self.solution.code))}[/b]   "
                     f"{right}/{len(self.grades)} correct in {minutes}:{seconds:02d}{pushed}, "
                     f"hints used {self.hints_used}", id="solution-title")
        yield Static(self._rating_text(), id="rating")
        with VerticalScroll(id="solution-body"):
            yield Static(grade_table(self.solution, self.grades), id="grades")
            for spec in self.solution.question.answers:
                if spec.key in self.solution.sheet.reasons:
                    yield Static(f"[b]{escape(spec.shown_label)}[/b]", classes="section")
                    yield Static(judgement_table(self.solution, spec.key), id=f"judged-{spec.key}")
                if isinstance(spec, Checklist):  # self-graded: ticked here
                    yield Static(f"[b]{escape(spec.shown_label)}[/b]: tick the points your answer covered (space)",
                                 classes="section")
                    if self.answers.get(spec.key, "").strip():
                        yield Static(f"[dim]Your notes: {escape(self.answers[spec.key])}[/dim]")
                    points = [(spec.text(item), i) for i, item in enumerate(spec.points)]
                    yield SelectionList(*points, id=f"tick-{spec.key}", classes="checklist")
            if self.followup is not None:
                followup, grades = self.followup
                yield Static(f"[b]Follow-up[/b] [dim]{escape(str(followup.solution.code))}[/dim]", classes="section")
                yield Static(followup.say, markup=False)
                yield Static(grade_table(followup.solution, grades), id="followup-grades")
                if followup.solution.sheet.regime is not None:
                    yield Static(regime_panel(followup.solution), id="followup-regime")
            yield Static("[b]Given[/b]", classes="section")
            yield Static(givens_table(self.solution), id="givens")
            yield Static("[b]Derivation[/b]", classes="section")
            for number, step in enumerate(self.solution.sheet.steps, 1):
                yield Static(step_renderable(number, step), classes="step")
            if self.solution.sheet.regime is not None:
                yield Static(regime_panel(self.solution), id="regime")
            if self.solution.question.chart:
                yield Static("[dim]Sweeping the variant for the chart…[/dim]", id="chart")
            yield Static(notes(self.solution), id="notes")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#solution-body").focus()
        if self.solution.question.chart:
            self._sweep(*self.solution.question.chart)

    @work(thread=True, exclusive=True)
    def _sweep(self, x: str, y: str) -> None:
        """Re-solve across the chart's parameter `x` for answer `y` through the engine (dozens of solves)."""
        from solvers.engine import sweep

        points = sweep(self.solution, self.infradrill.loaded_drill.catalog, x, y)
        if points:
            chart = sweep_chart(points, self.solution.param(x).raw, self.solution.param(x).label,
                                self.solution.question.answer(y).shown_label)
            self.app.call_from_thread(self._show_chart, chart)

    def _show_chart(self, chart: Text) -> None:
        self.query_one("#chart", Static).update(chart)  # on the UI thread: a worker never touches a widget

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        if event.selection_list.id is None:
            return
        key = event.selection_list.id.removeprefix("tick-")
        ticked = sorted(event.selection_list.selected)
        ticks = ",".join(str(i + 1) for i in ticked) if ticked else "none"
        grade = self.solution.grade_one(key, ticks)
        self.grades = [grade if g.key == key else g for g in self.grades]
        self.query_one("#grades", Static).update(grade_table(self.solution, self.grades))
        reviewer = self.infradrill.loaded_drill.reviewer
        if self.submitted and reviewer is not None:
            grades, typed = self.grades, {**self.answers, key: ticks}
            if self.followup is not None:
                followup, pushed_grades = self.followup
                grades, typed = both_rounds(grades, typed, pushed_grades, {})
            suggested = reviewer.regrade(self.submitted.attempt.uid, grades, typed)
            if not self.rated:
                self.rating = int(suggested)
            self.submitted = replace(self.submitted, suggested=suggested)
            self.query_one("#rating", Static).update(self._rating_text())

    def _rating_text(self) -> str:
        if self.mode == Mode.REVIEW:
            return "Your saved answers, regraded: reviewing them records nothing and does not move the schedule."
        if self.submitted is None:
            return "Not saved: progress is unavailable this session."
        if self.revealed:
            return "Saved as practice: you had seen this variant's key, so the schedule does not move."
        names = {1: "Again", 2: "Hard", 3: "Good", 4: "Easy"}
        reviewer = self.infradrill.loaded_drill.reviewer
        if not self.intervals and reviewer is not None:
            self.intervals = reviewer.intervals(self.submitted.attempt.uid)

        def key(n: int, name: str) -> str:
            label = f"{n} {name} {interval_text(self.intervals[n])}" if n in self.intervals else f"{n} {name}"
            return f"[reverse] {label} [/reverse]" if n == self.rating else label

        choices = "  ".join(key(n, name) for n, name in names.items())
        state = "your rating, u undoes it" if self.rated else f"suggested {names[int(self.submitted.suggested)]}"
        return f"Saved. Rate it: {choices}  ({state})"

    def action_rate(self, rating: int) -> None:
        if self._rate(rating):
            self.earlier.append(self.rating if self.rated else None)
            self.rating, self.rated = rating, True
            self.query_one("#rating", Static).update(self._rating_text())

    def action_undo_rating(self) -> None:
        """Back to the rating before the last one picked (the suggestion, at the first)."""
        if not self.earlier or self.submitted is None:
            return
        previous = self.earlier.pop()
        rating = previous if previous is not None else int(self.submitted.suggested)
        if self._rate(rating):
            self.rating, self.rated = rating, previous is not None
            self.query_one("#rating", Static).update(self._rating_text())

    def action_bury(self) -> None:
        """Out of the drill until tomorrow (Anki's bury): its card keeps its schedule."""
        if (reviewer := self.infradrill.loaded_drill.reviewer) is not None:
            until = reviewer.bury(self.solution.question.id)
            self.notify(f"Buried until {until.astimezone():%a %d %b %H:%M}: the drill skips it till then.")

    def action_suspend(self) -> None:
        """Out of the drill until released from the bank's list (s there)."""
        if (reviewer := self.infradrill.loaded_drill.reviewer) is not None:
            reviewer.suspend(self.solution.question.id)
            self.notify("Suspended: the drill skips it until you release it (Browse, s).")

    def _rate(self, rating: int) -> bool:
        reviewer = self.infradrill.loaded_drill.reviewer
        if self.submitted is None or reviewer is None or self.revealed:
            return False
        reviewer.rate(self.submitted.attempt.uid, rating)
        return True

    def action_new_variant(self) -> None:
        if self.mode == Mode.DRILL:
            self.post_message(messages.NextInDrill())
        else:
            self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=self._practice_mode))

    @property
    def _practice_mode(self) -> Mode:
        """What answering again or a new variant counts as: a reviewed attempt is practice now."""
        return Mode.PRACTICE if self.mode == Mode.REVIEW else self.mode

    def action_what_if(self) -> None:
        from tui.screens.whatif import WhatIfScreen

        self.app.push_screen(WhatIfScreen(self.solution, self.infradrill.loaded_drill.catalog))

    def action_again(self) -> None:
        self.post_message(messages.Reopen(self.solution, self._practice_mode))
