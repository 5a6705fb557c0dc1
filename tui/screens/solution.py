"""Reveal, stage by stage as the interview went: each stage's words, its grades and keys, the derivation
steps it needed; the regime closes the last stage on the variant, a push's own regime closes it. Then
the chart, assumptions and sources."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Header, SelectionList, Static

from solvers.answers import CORRECT, Checklist, Grade
from solvers.interview import StageRun, steps_by_stage, stored_stages
from solvers.transcript import Answered, first_missed, stored
from tui import messages
from tui.chart import sweep_chart
from tui.modes import Mode
from tui.render import (
    givens_table,
    grade_table,
    interval_text,
    judgement_table,
    notes,
    practice_text,
    regime_panel,
    step_renderable,
)
from tui.screens.base import AppScreen
from tui.screens.question import given_text, keys_text
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from practice.review import Submitted
    from solvers.engine import Solution


class SolutionScreen(AppScreen):
    HELP_TITLE = "Solution"

    DEFAULT_CSS = """
    #solution-title { padding: 0 1; background: $boost; height: auto; }
    #rating { padding: 0 1; background: $boost; height: auto; color: $text-muted; }
    #solution-body { padding: 0 1; }
    .grades { margin: 1 0; }
    .stage-title { margin-top: 1; background: $boost; }
    .keys { padding: 0 1; border-left: thick $success; }
    .section, .step, .regime, #chart { margin-top: 1; }
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
                tooltip="a new variant, the next due question when drilling, a mock's next answer on its review"),
        Binding("a", "again", "Answer again", id="solution.answer-again",
                tooltip="the same variant again, as practice: the schedule does not move"),
        Binding("w", "what_if", "What if", id="solution.what-if", tooltip="move a parameter, watch the answers"),
        Binding("f1", "app.help", "Help", id="solution.help", tooltip="the keys of this screen"),
        Binding("f2", "app.conventions", "Conventions", id="solution.conventions",
                tooltip="the counting rules every question assumes"),
        Binding("escape", "app.pop_screen", "Back", id="solution.back", tooltip="back to the previous screen"),
    ]

    def __init__(self, solution: Solution, answered: Sequence[Answered], elapsed: float, hints_used: int,
                 submitted: Submitted | None = None, mode: Mode = Mode.PRACTICE, revealed: bool = False,
                 given: Sequence[StageRun] = ()) -> None:
        """`answered`: the stages asked, graded; `given`: those shown before a stage asked again."""
        super().__init__()
        self.solution = solution
        self.answered = list(answered)
        self.given = tuple(given)
        self.elapsed = elapsed
        self.hints_used = hints_used
        self.submitted = submitted  # the saved attempt and its suggested rating (None: not saved)
        self.mode = mode
        self.rating = int(submitted.suggested) if submitted else None
        self.rated = False  # the user picked a rating (else the suggestion stands)
        self.earlier: list[int | None] = []  # ratings picked before the current one (None: the suggestion)
        self.intervals: dict[int, timedelta] = {}  # what each rating gives the card (read once, after saving)
        self.revealed = revealed  # answered again after the key was shown: not a review
        self.ticks: dict[SelectionList, tuple[int, str]] = {}  # each checklist: (stage index, answer key)

    @property
    def grades(self) -> list[Grade]:
        """The grades of the variant's own stages (a push's are its pushed variant's)."""
        return [g for done in self.answered if not done.run.stage.push for g in done.grades]

    def compose(self) -> ComposeResult:
        q = self.solution.question
        right = sum(g.verdict == CORRECT for g in self.grades)
        minutes, seconds = divmod(int(self.elapsed), 60)
        pushes = [g for done in self.answered if done.run.stage.push for g in done.grades]
        pushed = f", follow-up {sum(g.verdict == CORRECT for g in pushes)}/{len(pushes)}" if pushes else ""
        yield Header()
        yield Static(f"[b]{escape(q.title)}[/b]   variant [b]{escape(str(self.solution.code))}[/b]   "
                     f"{right}/{len(self.grades)} correct in {minutes}:{seconds:02d}{pushed}, "
                     f"hints used {self.hints_used}", id="solution-title")
        yield Static(self._rating_text(), id="rating")
        answered = {done.run.index: done for done in self.answered}
        given = {run.index: run for run in self.given}
        steps = steps_by_stage(self.solution)
        last = q.last_unpushed
        number = 0
        givens_shown = False  # under the first stage past the pushes, however many steps the stages before it had
        with VerticalScroll(id="solution-body"):
            for index, stage in enumerate(q.stages):
                done = answered.get(index)
                run = done.run if done is not None else given.get(index)
                if stage.push and run is None:
                    continue  # skipped, or nothing to push
                yield Static(self._stage_title(index, run, done), classes="stage-title -push" if stage.push
                             else "stage-title", markup=False)
                if run is not None:
                    yield Static(run.prompt, classes="say", markup=False)
                if done is not None:
                    yield from self._graded(done)
                elif run is not None:
                    yield Static(given_text(run), classes="keys")
                if stage.push:
                    if run is not None and run.solution.sheet.regime is not None:
                        yield Static(regime_panel(run.solution), id=f"regime-{index}", classes="regime")
                    continue
                if not givens_shown:
                    givens_shown = True
                    yield Static("[b]Given[/b]", classes="section")
                    yield Static(givens_table(self.solution), id="givens")
                for step in steps[index]:
                    number += 1
                    yield Static(step_renderable(number, step), classes="step")
                if index == last and self.solution.sheet.regime is not None:
                    yield Static(regime_panel(self.solution), id="regime", classes="regime")
            if self.solution.question.chart:
                yield Static("[dim]Sweeping the variant for the chart…[/dim]", id="chart")
            if self.solution.question.reality:
                yield Static("[b]In practice[/b]", classes="section")
                yield Static("[dim]Solving the measured conditions…[/dim]", id="reality")
            yield Static(notes(self.solution), id="notes")
        yield KeysFooter()

    def _stage_title(self, index: int, run: StageRun | None, done: Answered | None) -> str:
        """A stage's heading: which turn of the interview, how it went; a push names its variant."""
        stage = self.solution.question.stages[index]
        turn = self.solution.question.turn_number(index)
        name = "Opening" if index == 0 else f"Stage {turn}: {stage.kind}"
        if stage.push and run is not None:
            name = f"Stage {turn}: push to {run.solution.code}"
        if done is None:
            return f"{name}  (given)" if run is not None else name
        right = sum(g.verdict == CORRECT for g in done.grades)
        return f"{name}  {right}/{len(done.grades)} correct"

    def _graded(self, done: Answered) -> ComposeResult:
        """A stage as answered: its grade table, each key with its why, the options judged, the
        checklists to tick."""
        run = done.run
        yield Static(grade_table(run.solution, list(done.grades)), id=f"grades-{run.index}", classes="grades")
        yield Static(keys_text(done, show_keys=True), classes="keys")
        for key in run.ask:
            spec = run.solution.question.answer(key)
            if key in run.solution.sheet.reasons:
                yield Static(f"[b]{escape(spec.shown_label)}[/b]", classes="section")
                yield Static(judgement_table(run.solution, key), classes="judged")
            if isinstance(spec, Checklist):  # self-graded: ticked here
                yield Static(f"[b]{escape(spec.shown_label)}[/b]: tick the points your answer covered (space)",
                             classes="section")
                if done.typed.get(key, "").strip():
                    yield Static(f"[dim]Your notes: {escape(done.typed[key])}[/dim]")
                points = [(spec.text(item), i) for i, item in enumerate(spec.points)]
                ticks: SelectionList[int] = SelectionList(*points, id=None if run.stage.push else f"tick-{key}",
                                                          classes="checklist")
                self.ticks[ticks] = (run.index, key)
                yield ticks

    def on_mount(self) -> None:
        self.query_one("#solution-body").focus()
        if self.solution.question.chart:
            self._sweep(*self.solution.question.chart)
        if self.solution.question.reality:
            self._compare()

    @work(thread=True, exclusive=True, group="reality")
    def _compare(self) -> None:
        """Solve each published measurement's conditions in this question's model (a few solves)."""
        said = practice_text(self.solution.question, self.infradrill.loaded_session.catalog)
        self.app.call_from_thread(self._show_reality, said)

    def _show_reality(self, said: Text) -> None:
        self.query_one("#reality", Static).update(said)

    @work(thread=True, exclusive=True)
    def _sweep(self, x: str, y: str) -> None:
        """Re-solve across the chart's parameter `x` for answer `y` through the engine (dozens of solves)."""
        from solvers.engine import sweep

        points = sweep(self.solution, self.infradrill.loaded_session.catalog, x, y)
        if points:
            # As wide as the screen leaves beside the labels and padding (56 plot columns from 72 up): at
            # 60 columns a fixed width wrapped every row.
            width = max(24, min(56, self.app.size.width - 16))
            chart = sweep_chart(points, self.solution.param(x).raw, self.solution.param(x).label,
                                self.solution.question.answer(y).shown_label, width=width)
            self.app.call_from_thread(self._show_chart, chart)

    def _show_chart(self, chart: Text) -> None:
        self.query_one("#chart", Static).update(chart)  # on the UI thread: a worker never touches a widget

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        if event.selection_list not in self.ticks:
            return
        index, key = self.ticks[event.selection_list]
        ticked = sorted(event.selection_list.selected)
        ticks = ",".join(str(i + 1) for i in ticked) if ticked else "none"
        position = next(i for i, done in enumerate(self.answered) if done.run.index == index)
        done = self.answered[position] = self.answered[position].regraded(key, ticks)
        self.query_one(f"#grades-{index}", Static).update(grade_table(done.run.solution, list(done.grades)))
        reviewer = self.infradrill.loaded_session.reviewer
        if self.submitted and reviewer is not None:
            suggested = reviewer.regrade(self.submitted.attempt.uid, *stored(self.answered),
                                         stages=stored_stages(done.run for done in self.answered))
            if not self.rated:
                self.rating = int(suggested)
            self.submitted = replace(self.submitted, suggested=suggested)
            self.query_one("#rating", Static).update(self._rating_text())

    def _rating_text(self) -> str:
        if self.mode == Mode.REGRADE:
            return "Your saved answers, regraded: reviewing them records nothing and does not move the schedule."
        if self.submitted is None:
            return "Not saved: progress is unavailable this session."
        if self.revealed:
            return "Saved as practice: you had seen this variant's key, so the schedule does not move."
        names = {1: "Again", 2: "Hard", 3: "Good", 4: "Easy"}
        reviewer = self.infradrill.loaded_session.reviewer
        if not self.intervals and reviewer is not None:
            self.intervals = reviewer.intervals(self.submitted.attempt.uid)

        def key(n: int, name: str) -> str:
            label = f"{n} {name} {interval_text(self.intervals[n])}" if n in self.intervals else f"{n} {name}"
            return f"[reverse] {label} [/reverse]" if n == self.rating else label

        choices = "  ".join(key(n, name) for n, name in names.items())
        state = "your rating, u undoes it" if self.rated else f"suggested {names[int(self.submitted.suggested)]}"
        return f"Saved. Rate it: {choices}  ({state}){self._ahead_text()}"

    def _ahead_text(self) -> str:
        """For a review made before its card was due: said, with what FSRS makes of it."""
        reviewer = self.infradrill.loaded_session.reviewer
        review = reviewer.store.review_of(self.submitted.attempt.uid) if reviewer and self.submitted else None
        if review is None or not review.ahead or review.card_before is None:
            return ""
        return (f"\nReviewed ahead: it was due {review.card_before.due.astimezone():%a %d %b %H:%M}. FSRS counts "
                "the days actually elapsed, so the interval grows less than on time.")

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
        if (reviewer := self.infradrill.loaded_session.reviewer) is not None:
            until = reviewer.bury(self.solution.question.id)
            self.notify(f"Buried until {until.astimezone():%a %d %b %H:%M}: the drill skips it till then.")

    def action_suspend(self) -> None:
        """Out of the drill until released from the bank's list (s there)."""
        if (reviewer := self.infradrill.loaded_session.reviewer) is not None:
            reviewer.suspend(self.solution.question.id)
            self.notify("Suspended: the drill skips it until you release it (Browse, s).")

    def _rate(self, rating: int) -> bool:
        reviewer = self.infradrill.loaded_session.reviewer
        if self.submitted is None or reviewer is None or self.revealed:
            return False
        reviewer.rate(self.submitted.attempt.uid, rating)
        return True

    def action_new_variant(self) -> None:
        if self.mode == Mode.REGRADE:
            self.post_message(messages.ReviewNext())
        elif self.mode == Mode.DRILL:
            self.post_message(messages.NextInDrill())
        else:
            self.post_message(messages.OpenQuestion(self.solution.question.id, replace=True, mode=self._practice_mode))

    @property
    def _practice_mode(self) -> Mode:
        """What answering again or a new variant counts as: a reviewed attempt is practice now."""
        return Mode.PRACTICE if self.mode == Mode.REGRADE else self.mode

    def action_what_if(self) -> None:
        from tui.screens.whatif import WhatIfScreen

        self.app.push_screen(WhatIfScreen(self.solution, self.infradrill.loaded_session.catalog))

    def action_again(self) -> None:
        """Ask again the first stage that went wrong (else the first asked), the stages before it given
        with their keys; saved as practice, the schedule does not move."""
        if not self.answered:
            return
        runs = sorted([*self.given, *(done.run for done in self.answered)], key=lambda run: run.index)
        target = self.answered[first_missed(self.answered) or 0].run
        given = tuple(run for run in runs if run.index < target.index)
        self.post_message(messages.Reopen(self.solution, self._practice_mode, given, target))
