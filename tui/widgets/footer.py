"""The screens' footer: Textual's, rebuilt only when the keys it shows or its width change, and showing only
the keys that fit whole."""
from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def key_width(key: FooterKey) -> int:
    """Columns a compact key takes: its key, a space and its description, then its margin."""
    return len(key.key_display) + (len(key.description) + 1 if key.description else 0) + 1


class KeysFooter(Footer):
    """Textual rebuilds its footer on every change of bindings, and a question opening makes three
    (the push, the stack, the focus on the first answer) with the same keys each time: each
    rebuild mounts its keys again (~50 ms of CPU between the question and an idle app). Past the
    screen's width Textual's footer scrolls its keys under the palette key, cutting one in half
    (`f▏^p palette` at 60 columns): the keys that do not fit whole are left out (F1 lists them all)."""

    # Compact mode's margin after every key also held the palette key, docked right, one column off the
    # edge: where the keys overran the width a letter of a hidden key showed there.
    DEFAULT_CSS = """
    KeysFooter.-compact FooterKey.-command-palette { margin-right: 0; }
    """

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        palette = [w for w in widgets if isinstance(w, FooterKey) and w.has_class("-command-palette")]
        keys = [w for w in widgets if w not in palette]
        # Grouped keys (a KeyGroup and its label) are left as Textual lays them out; plain keys are cut to fit.
        fitting = all(isinstance(w, FooterKey) for w in keys)
        room = self.app.size.width - sum(key_width(w) for w in palette)
        used = 0
        for widget in widgets:
            if isinstance(widget, FooterKey):  # else its `compact` watcher adds the class once mounted: a restyle a key
                widget.set_class(self.compact, "-compact", update=False)
                if fitting and widget not in palette:
                    used += key_width(widget)
                    if used > room:
                        continue
            yield widget

    async def recompose(self) -> None:
        if not self.is_attached:  # a screen popped while its rebuild was queued
            return
        shown = (self.app.size.width, *((binding.key, binding.action, binding.description, enabled, tooltip)
                 for _, binding, enabled, tooltip in self.screen.active_bindings.values() if binding.show))
        if shown == self._shown and self.children:  # (no children: not built yet, or nothing to show)
            return
        self._shown = shown
        await super().recompose()

    def on_resize(self, event: events.Resize) -> None:
        if self._shown is not None and self._shown[0] != self.app.size.width:
            self.call_later(self.recompose)
