"""Small modal screens: enter a variant code, the days to review ahead, what a mock does before it starts,
the help page, the conventions card."""
from __future__ import annotations

from rich.console import Group, RenderableType
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Label, Static

ANSWERS_HELP = (
    "[b]Answers[/b]  tab or enter moves to the next box (enter on the last one submits). Type numbers "
    "with units as you would write them: 320 GiB, 343.6GB, 3.4e11, 40%, 1.2 ms, 6,200, 2.4×10^25 (or "
    "2.4e25), $1.2M, 120 rps; a bare number is read in the unit shown beside the box. Choices: as much of an "
    "option as tells it apart (\"mem\", or \"rep\" for kv-replicated). Orderings: the letters in order "
    "(CADB). Selections: every letter that holds (ACD). "
    "Checklists are ticked on the solution. A variant code (kv-bytes-per-token@4821) reproduces a variant "
    "exactly."
)


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


_NOT_HELP = {"screen.copy_text", "app.copy_text", "copy_text"}  # Textual's own, not this app's


class HelpScreen(CardScreen):
    """The keys of the screen it was opened over, read from its bindings (and the app's), each with
    its tooltip, then how answers are typed: the page follows the screen instead of a hand-kept list."""
    HELP_TITLE = "Help"

    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close", tooltip="back to the screen")]

    def __init__(self, over: Screen) -> None:
        super().__init__()
        self.over = over

    def body(self) -> RenderableType:
        from rich.table import Table
        from rich.text import Text

        keys = Table(show_header=False, box=None, pad_edge=False)
        keys.add_column(style="bold", no_wrap=True)
        keys.add_column()
        seen: set[str] = set()
        for active in self.over.active_bindings.values():
            binding = active.binding
            described = binding.description
            if active.node not in (self.over, self.app) or not described or described in seen or \
                    binding.action in _NOT_HELP:
                continue  # a focused widget's own keys (an input's cursor keys) are not the screen's
            seen.add(described)
            what = Text(described)
            if binding.tooltip:  # the binding's own line on what it does
                what.append(f"  {binding.tooltip}", style="dim")
            keys.add_row(self.app.get_key_display(binding), what)
        name = getattr(self.over, "HELP_TITLE", "")  # the screen's name as its user knows it, never its class
        title = Text.assemble(("Keys on this screen", "bold"), (f"  {name}" if name else "", "dim"), "\n")
        return Group(title, keys, Text.from_markup("\n" + ANSWERS_HELP))


class ConventionsScreen(CardScreen):
    """The bank's conventions card: what every question assumes unless it says otherwise; over a
    question, the cards its solver used."""
    HELP_TITLE = "Conventions card"

    BINDINGS = [Binding("escape,f2,q", "dismiss", "Close", id="conventions.close", tooltip="back to the screen")]

    def __init__(self, cards: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.cards = cards  # card ids to show (empty: every card)

    def body(self) -> RenderableType:
        from rich.text import Text

        from solvers.conventions import conventions

        text = Text()
        text.append("Conventions", style="bold")
        if self.cards:
            text.append(" this question's solver used (every card: the palette's Conventions card, ctrl+p)\n",
                        style="dim")
        else:
            text.append(" (every question assumes these unless its prompt says otherwise)\n", style="dim")
        for entry in (e for e in conventions() if not self.cards or e.id in self.cards):
            text.append(f"\n{entry.title}", style="bold")
            text.append(f"  {entry.id}\n", style="dim")
            text.append(f"{entry.text}\n")
            text.append(f"source: {entry.source}\n", style="dim italic")
        return text


class CodeScreen(ModalScreen[str | None]):
    """Asks for a variant code; dismisses with the text, or None."""
    HELP_TITLE = "Enter a variant code"

    DEFAULT_CSS = """
    CodeScreen { align: center middle; }
    #code-box { width: 70; max-width: 100%; height: auto; border: round $accent; padding: 0 1;
                background: $surface; }
    #code-box Label { width: 1fr; }  /* wraps, not cut, at 80 columns */
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="code.cancel", tooltip="open nothing")]

    def compose(self) -> ComposeResult:
        with Vertical(id="code-box"):
            yield Label("Variant code (e.g. kv-bytes-per-token@4821), enter to open, esc to cancel:")
            yield Input(placeholder="question-id@seed", id="code")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


class AheadScreen(ModalScreen[int | None]):
    """Asks how many days ahead to review; dismisses with the days, or None."""
    HELP_TITLE = "Review ahead"

    DEFAULT_CSS = """
    AheadScreen { align: center middle; }
    #ahead-box { width: 70; max-width: 100%; height: auto; border: round $accent; padding: 0 1;
                 background: $surface; }
    #ahead-box Label { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="ahead.cancel", tooltip="review nothing")]
    MAX_DAYS = 30

    def compose(self) -> ComposeResult:
        with Vertical(id="ahead-box"):
            yield Label("Review the cards due in the next days (1 to 30), enter to start, esc to cancel. "
                        "Each is reviewed now and logged as early: FSRS grows its interval less.")
            yield Input("3", type="integer", id="days")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        days = int(event.value) if event.value.strip().lstrip("-").isdigit() else 0
        if not 1 <= days <= self.MAX_DAYS:
            self.notify(f"A number of days from 1 to {self.MAX_DAYS}.", severity="warning")
            return
        self.dismiss(days)


class MockStartScreen(ModalScreen[bool]):
    """What a mock interview is and does with its answers, before it starts; dismisses with whether to start."""
    HELP_TITLE = "Mock interview"

    DEFAULT_CSS = """
    MockStartScreen { align: center middle; }
    #mock-box { width: 70; max-width: 100%; height: auto; border: round $accent; padding: 0 1;
                background: $surface; }
    #mock-box Label { width: 1fr; }
    """
    BINDINGS = [
        Binding("enter", "dismiss(True)", "Start", id="mock-start.start", tooltip="start the mock interview"),
        Binding("escape", "dismiss(False)", "Cancel", id="mock-start.cancel", tooltip="start nothing"),
    ]

    def __init__(self, said: str) -> None:
        super().__init__()
        self.said = said

    def compose(self) -> ComposeResult:
        with Vertical(id="mock-box"):
            yield Label(self.said, markup=False)
            yield Label("enter to start, esc to cancel", classes="keys")
