"""The base of the screens that call the app: `self.infradrill` is the running InfradrillApp, typed.

Textual types `self.app` as a plain App; the cast to this app's class is made here, once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, cast

from textual.screen import Screen

if TYPE_CHECKING:
    from tui.app import InfradrillApp  # tui.app imports the screens: no import at run time

ResultType = TypeVar("ResultType")


class AppScreen(Screen[ResultType]):
    """A screen of infradrill that opens questions, records answers or reads the loaded bank."""

    @property
    def infradrill(self) -> InfradrillApp:
        return cast("InfradrillApp", self.app)

    def on_screen_suspend(self) -> None:
        """A prompt asks for a key on this screen: covered or left, it would stand over another."""
        self.infradrill.withdraw_prompts()

    def on_unmount(self) -> None:
        self.infradrill.withdraw_prompts()
