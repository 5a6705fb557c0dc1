"""The screens' footer: Textual's, rebuilt only when the keys it shows change."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeysFooter(Footer):
    """Textual rebuilds its footer on every change of bindings, and a question opening makes three
    (the push, the stack, the focus on the first answer) with the same keys each time: each
    rebuild mounts its keys again (~50 ms of CPU between the question and an idle app)."""

    # Compact mode's margin after every key also held the palette key, docked right, one column off the
    # edge: where the keys overran the width (browse at 60 columns) a letter of a hidden key showed there.
    DEFAULT_CSS = """
    KeysFooter.-compact FooterKey.-command-palette { margin-right: 0; }
    """

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._shown: tuple[tuple[str, str, str, bool, str], ...] | None = None

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey):  # else its `compact` watcher adds the class once mounted: a restyle a key
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    async def recompose(self) -> None:
        if not self.is_attached:  # a screen popped while its rebuild was queued
            return
        shown = tuple((binding.key, binding.action, binding.description, enabled, tooltip)
                      for _, binding, enabled, tooltip in self.screen.active_bindings.values() if binding.show)
        if shown == self._shown and self.children:  # (no children: not built yet, or nothing to show)
            return
        self._shown = shown
        await super().recompose()
