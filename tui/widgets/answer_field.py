"""One answer: its label and unit, a text input, and a live note on what the grader will read."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Static

from solvers.answers import Answer


class AnswerField(Vertical):
    DEFAULT_CSS = """
    AnswerField { height: auto; }
    AnswerField > Horizontal { height: 1; }
    AnswerField Label { width: 2fr; max-width: 44; padding-right: 1; }
    AnswerField Input { width: 1fr; height: 1; border: none; padding: 0 1; background: $boost; }
    AnswerField Input:focus { border: none; background: $primary 30%; }
    AnswerField > .note { height: 1; padding-left: 2; color: $text-muted; }
    AnswerField > .note.-bad { color: $error; }
    """

    def __init__(self, spec: Answer, number: int, shown: tuple[str, ...] = ()) -> None:
        super().__init__(id=f"field-{spec.key}")
        self.spec = spec
        self.number = number
        self.shown = shown  # items listed in the prompt (orderings, selections)

    def compose(self) -> ComposeResult:
        spec = self.spec
        suggester = SuggestFromList(spec.suggestions, case_sensitive=False) if spec.suggestions else None
        with Horizontal():
            yield Label(f"{self.number}. {spec.box_label}", markup=False)
            yield Input(placeholder=spec.placeholder(self.shown), id=f"answer-{spec.key}", suggester=suggester)
        yield Static("", classes="note", markup=False)

    @property
    def value(self) -> str:
        return self.query_one(Input).value

    @property
    def readable(self) -> bool:
        return self.spec.note(self.value, self.shown)[0]

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.has_focus:  # the question opens at its prompt; typing brings the box into view
            self.scroll_visible(animate=False)
        ok, note = self.spec.note(event.value, self.shown)
        status = self.query_one(".note", Static)
        status.update(note)
        status.set_class(not ok, "-bad")
