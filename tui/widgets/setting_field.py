"""One setting on the settings screen: its label, a box (numbers) or a list (options) holding the
current value, and a note with its range and what it does, or what is wrong with the typed text."""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label, Select, Static

from practice.config import Setting, Value


def shown(value: Value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class SettingField(Vertical):
    """Posts Chosen with a valid value when it is committed: at once from a list, on enter or on
    leaving the box for typed text. A value that does not read is shown in the note and never posted."""

    DEFAULT_CSS = """
    SettingField { height: auto; margin-bottom: 1; }
    SettingField > Horizontal { height: 1; }
    SettingField Label { width: 26; padding-right: 1; text-style: bold; }
    SettingField Input { width: 1fr; max-width: 24; height: 1; border: none; padding: 0 1; background: $boost; }
    SettingField Input:focus { border: none; background: $primary 30%; }
    SettingField Select { width: 1fr; max-width: 30; }
    SettingField > .note { height: auto; padding-left: 2; color: $text-muted; }
    SettingField > .note.-bad { color: $error; }
    """

    @dataclass
    class Chosen(Message):
        field: SettingField
        value: Value

    def __init__(self, table: str, setting: Setting, value: Value) -> None:
        super().__init__(id=f"setting-{setting.name}")
        self.table = table  # the settings file's table it belongs to
        self.setting = setting
        self.value = value  # the value in force

    def compose(self) -> ComposeResult:
        setting = self.setting
        with Horizontal():
            yield Label(setting.label, markup=False)
            if setting.choices:
                yield Select([(choice, choice) for choice in setting.choices], value=self.value, allow_blank=False,
                             compact=True, id=f"choose-{setting.name}")
            else:
                yield Input(shown(self.value), id=f"type-{setting.name}", select_on_focus=True)
        yield Static(self._about(), classes="note", markup=False)

    def _about(self) -> str:
        setting = self.setting
        return " · ".join(part for part in (setting.bounds, setting.help) if part)

    @property
    def problem(self) -> str | None:
        """What is wrong with the text in the box; None when it reads (lists always do)."""
        if self.setting.choices:
            return None
        try:
            self.setting.parse(self.query_one(Input).value)
        except ValueError as error:
            return str(error)
        return None

    def _note(self, problem: str | None) -> None:
        note = self.query_one(".note", Static)
        note.update(problem or self._about())
        note.set_class(problem is not None, "-bad")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._note(self.problem)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.commit()

    def on_input_blurred(self, event: Input.Blurred) -> None:
        event.stop()
        self.commit()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if isinstance(event.value, str) and event.value != self.value:
            self.value = event.value
            self.post_message(self.Chosen(self, event.value))

    def commit(self) -> bool:
        """Post the typed value if it reads and differs from the one in force; False if it does not read."""
        if self.setting.choices:
            return True
        try:
            value = self.setting.parse(self.query_one(Input).value)
        except ValueError as error:
            self._note(str(error))
            return False
        if value != self.value:
            self.value = value
            self.post_message(self.Chosen(self, value))
        return True
