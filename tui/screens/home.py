"""Home: what the app offers, one key each."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Header, OptionList, Static
from textual.widgets.option_list import Option

from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter

INTRO = (
    "[b]infradrill[/b] — drill the arithmetic of LLM inference and AI infrastructure.\n"
    "Each question draws a fresh variant; answer with units, then read the worked solution."
)


class HomeScreen(AppScreen):
    HELP_TITLE = "Home"

    DEFAULT_CSS = """
    #home { padding: 1 2; }
    #intro { margin-bottom: 1; }
    #menu { height: 1fr; max-height: 13; margin-bottom: 1; }  /* every entry at 80x24; shrinks and scrolls at 60x20 */
    #bank-status { color: $text-muted; }
    """

    BINDINGS = [
        Binding("d", "app.drill", "Drill", id="home.drill", tooltip="the next due review, else a new question"),
        Binding("b", "app.browse", "Browse", id="home.browse", tooltip="every question, by group and topic"),
        Binding("a", "app.review_ahead", "Review ahead", show=False, id="home.ahead",
                tooltip="the cards due in the next days, reviewed now (before an interview)"),
        Binding("r", "app.random_question", "Random", id="home.random", tooltip="a fresh variant of any question"),
        Binding("v", "app.enter_code", "Code", id="home.code", tooltip="exactly the variant a code names"),
        Binding("m", "app.mock", "Mock", id="home.mock", tooltip="questions across topics against the clock"),
        Binding("p", "app.past_mocks", "Past mocks", show=False, id="home.past-mocks",
                tooltip="score sheets of earlier mock interviews"),
        Binding("s", "app.stats", "Stats", id="home.stats", tooltip="reviews, retention, slips, the forecast"),
        Binding("comma", "app.settings", "Settings", show=False, id="home.settings",
                tooltip="new questions a day, retention, theme, follow-ups"),
        Binding("f1", "app.help", "Help", id="home.help", tooltip="the keys of this screen"),
        Binding("q", "app.quit", "Quit", show=False, id="home.quit", tooltip="leave infradrill"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="home"):
            yield Static(INTRO, id="intro")
            yield OptionList(
                Option("Drill what is due          d", id="drill"),
                Option("Review ahead               a", id="review_ahead"),
                Option("Browse the bank            b", id="browse"),
                Option("Random question            r", id="random_question"),
                Option("Enter a variant code       v", id="enter_code"),
                Option("Mock interview             m", id="mock"),
                Option("Past mock interviews       p", id="past_mocks"),
                Option("Statistics                 s", id="stats"),
                Option("Settings                   ,", id="settings"),
                Option("Help and key bindings      F1", id="help"),
                Option("Quit                       q", id="quit"),
                id="menu",
            )
            yield Static("Loading the bank…", id="bank-status")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.call_after_refresh(self.infradrill.after_first_paint)

    async def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:  # every option is named after the app action it runs
            await self.app.run_action(event.option.id)

    def on_screen_resume(self) -> None:
        self.refresh_status()

    def refresh_status(self) -> None:
        """Bank size, load problems and what the schedule has due."""
        session = self.infradrill.session
        if session is None:
            return
        text = f"{len(session.bank.questions)} questions in the bank."
        if session.problems:
            text += f"  [b $warning]{len(session.problems)} file(s) could not be loaded[/] — see the notice."
        if session.reviewer is not None:
            due = session.reviewer.summary()
            text += (f"\nDue now [b]{due.due_now}[/b], later today {due.due_today - due.due_now}; "
                     f"new questions left today {due.new_today}.")
            if not due.due_today and (upcoming := session.reviewer.next_due()) is not None:
                text += f" Next due {upcoming.astimezone():%a %d %b %H:%M}."
        self.query_one("#bank-status", Static).update(text)
