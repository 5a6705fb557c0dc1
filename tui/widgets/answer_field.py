"""One answer: its label and unit, a text input, and a live note on what was understood."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Static

from solvers.grade import AnswerSpec, UnitMismatch, match_choice, read_number, read_order
from solvers.parse import ParseError
from solvers.units import format_quantity


def understood(spec: AnswerSpec, text: str, shown: list[str] | None = None) -> tuple[bool, str]:
    """(ok, note) for what the user typed so far, without grading it."""
    if not text.strip() or spec.kind == "checklist":
        return True, ""
    if spec.kind == "order":
        try:
            return True, "→ " + " › ".join(read_order(text, shown or list(spec.order)))
        except ParseError as error:
            return False, str(error)
    if spec.choice:
        picked = match_choice(text, spec.choice)
        return (True, f"→ {picked}") if picked else (False, f"pick one of: {', '.join(spec.choice)}")
    try:
        value = read_number(spec, text)
    except (ParseError, UnitMismatch) as error:
        return False, str(error)
    return True, f"→ {format_quantity(value, spec.unit)}"


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

    def __init__(self, spec: AnswerSpec, number: int, shown: list[str] | None = None) -> None:
        super().__init__(id=f"field-{spec.key}")
        self.spec = spec
        self.number = number
        self.shown = shown  # ordering items as listed in the prompt

    def compose(self) -> ComposeResult:
        spec = self.spec
        with Horizontal():
            if spec.kind == "choice":
                yield Label(f"{self.number}. {spec.label}")
                yield Input(placeholder=" / ".join(spec.choice), id=f"answer-{spec.key}",
                            suggester=SuggestFromList(spec.choice, case_sensitive=False))
            elif spec.kind == "order":
                yield Label(f"{self.number}. {spec.label}")
                example = "".join(chr(ord("A") + i) for i in range(len(spec.order)))
                yield Input(placeholder=f"letters in order, e.g. {example}", id=f"answer-{spec.key}")
            elif spec.kind == "checklist":
                yield Label(f"{self.number}. {spec.label}")
                yield Input(placeholder="your points (tick them after the reveal)", id=f"answer-{spec.key}")
            else:
                unit = f" \\[{spec.unit}]" if spec.unit else ""
                yield Label(f"{self.number}. {spec.label}{unit}")
                yield Input(placeholder=spec.unit or "a number", id=f"answer-{spec.key}")
        yield Static("", classes="note")

    @property
    def value(self) -> str:
        return self.query_one(Input).value

    def on_input_changed(self, event: Input.Changed) -> None:
        ok, note = understood(self.spec, event.value, self.shown)
        status = self.query_one(".note", Static)
        status.update(note)
        status.set_class(not ok, "-bad")
