"""One answer: its label and unit, a text input, and a live note on what the grader will read."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Static

from solvers.answers import Answer


class AnswerField(Vertical):
    # A field is two rows, its box and its note. One mounted `pending` holds those rows empty until
    # build(): its label, box and note are most of the work of opening a question, where the boxes
    # start below the prompt and out of sight.
    DEFAULT_CSS = """
    AnswerField { height: auto; }
    AnswerField.-pending { height: 2; }
    AnswerField > Horizontal { height: 1; }
    AnswerField Label { width: 2fr; max-width: 44; padding-right: 1; }
    AnswerField Input { width: 1fr; height: 1; border: none; padding: 0 1; background: $boost; }
    AnswerField Input:focus { border: none; background: $primary 30%; }
    AnswerField > .note { height: 1; padding-left: 2; color: $text-muted; }
    AnswerField > .note.-bad { color: $error; }
    """

    def __init__(self, spec: Answer, number: int, shown: tuple[str, ...] = (), pending: bool = False) -> None:
        super().__init__(id=f"field-{spec.key}", classes="-pending" if pending else "")
        self.spec = spec
        self.number = number
        self.shown = shown  # items listed in the prompt (orderings, selections)

    @property
    def pending(self) -> bool:
        return self.has_class("-pending")

    def compose(self) -> ComposeResult:
        if not self.pending:
            yield from self._parts()

    def _parts(self) -> ComposeResult:
        spec = self.spec
        suggester = SuggestFromList(spec.suggestions, case_sensitive=False) if spec.suggestions else None
        yield Horizontal(
            Label(f"{self.number}. {spec.box_label}", markup=False),
            Input(placeholder=spec.placeholder(self.shown), id=f"answer-{spec.key}", suggester=suggester),
        )
        yield Static("", classes="note", markup=False)

    async def build(self) -> None:
        """Mount the label, box and note of a pending field."""
        if self.pending:
            await self.mount_all(self._parts())
            self.remove_class("-pending")

    @property
    def value(self) -> str:
        return "" if self.pending else self.query_one(Input).value

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
