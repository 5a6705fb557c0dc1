"""Small modal screens: enter a variant code, the help page, the conventions card."""
from __future__ import annotations

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

HELP = """\
[b]Everywhere[/b]
  ctrl+p   command palette: find a question by id, title or topic
  F1       this help          ctrl+q  quit

[b]Home[/b]
  d  drill what is due (new questions start with group F, a few a day)
  b  browse the bank   r  random question   v  enter a variant code
  m  mock interview (5 questions, 5 min each, no hints)   p  past mocks
  s  statistics        q  quit

[b]Browse[/b]
  ↑/↓  move   enter  open a fresh variant   d  the default variant
  i    open as interviewer (the key beside it; space reveals a step)
  esc  back

[b]Question[/b] (printable keys go to the answer boxes)
  tab / enter   next answer (enter on the last one submits)
  ctrl+s  submit        ctrl+t  show a hint      ctrl+n  new variant
  f2      the conventions card (usable HBM, dense peaks, FLOPs per token...)
  esc     back          after the answers, the interviewer pushes: a follow-up
                        round (ctrl+k skips it, except in a mock interview)

[b]Solution[/b]
  1 2 3 4  rate it Again / Hard / Good / Easy (the grade suggests one)
  n  next (a new variant, or the next due question when drilling)
  a  answer the same variant again    w  what-if (←/→ step, ↑/↓ parameter)
  ↑/↓ pgup/pgdn  scroll               esc  back

[b]Answers[/b]
  Numbers with units, as you would write them: 320 GiB, 343.6GB, 3.4e11, 40%,
  1.2 ms, 6,200, 2.4×10^25 (or 2.4e25), $1.2M. A bare number is read in the unit
  shown beside the answer. Choices: type the start of an option, e.g. "mem".
  Orderings: the letters in order, e.g. CADB. Checklists: tick them on the solution.
  A variant code (like kv-bytes-per-token@4821) reproduces a variant exactly.
"""


class CardScreen(ModalScreen):
    """A read-only card over the current screen: it scrolls and closes on Esc, q or its own key."""

    DEFAULT_CSS = """
    CardScreen { align: center middle; }
    CardScreen > .card { width: 84; max-width: 100%; height: auto; max-height: 90%; border: round $accent;
                         padding: 0 1; background: $surface; }
    """

    def body(self) -> RenderableType:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="card"):
            yield Static(self.body())


class HelpScreen(CardScreen):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def body(self) -> RenderableType:
        return HELP


class ConventionsScreen(CardScreen):
    """The bank's conventions card: what every question assumes unless it says otherwise."""

    BINDINGS = [Binding("escape,f2,q", "dismiss", "Close")]

    def body(self) -> RenderableType:
        from rich.text import Text

        from solvers.conventions import conventions

        text = Text()
        text.append("Conventions", style="bold")
        text.append(" (every question assumes these unless its prompt says otherwise)\n", style="dim")
        for entry in conventions():
            text.append(f"\n{entry.title}", style="bold")
            text.append(f"  {entry.id}\n", style="dim")
            text.append(f"{entry.text}\n")
            text.append(f"source: {entry.source}\n", style="dim italic")
        return text


class CodeScreen(ModalScreen[str | None]):
    DEFAULT_CSS = """
    CodeScreen { align: center middle; }
    #code-box { width: 70; max-width: 100%; height: auto; border: round $accent; padding: 0 1;
                background: $surface; }
    """

    """Asks for a variant code; dismisses with the text, or None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="code-box"):
            yield Label("Variant code (e.g. kv-bytes-per-token@4821), enter to open, esc to cancel:")
            yield Input(placeholder="question-id@seed", id="code")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)
