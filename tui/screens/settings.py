"""Settings: every setting of the settings file with its range and current value; a change is
applied and saved as it is made (the app does both), and the file's path is on screen."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Header, Static

from tui.screens.base import AppScreen
from tui.widgets.footer import KeysFooter
from tui.widgets.setting_field import SettingField, shown


class SettingsScreen(AppScreen):
    HELP_TITLE = "Settings"

    DEFAULT_CSS = """
    #settings-title { padding: 0 1; background: $boost; height: auto; }
    #settings-body { padding: 1 1 0 1; }
    #settings-status { padding: 0 1; height: auto; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "leave", "Back", id="settings.back", tooltip="leave; a valid value still typed is saved"),
        Binding("f1", "app.help", "Help", id="settings.help", tooltip="the keys of this screen"),
    ]

    def compose(self) -> ComposeResult:
        app = self.infradrill
        yield Header()
        yield Static(f"[b]Settings[/b]  [dim]saved as you change them, in {escape(str(app.settings_file))}[/dim]",
                     id="settings-title")
        with VerticalScroll(id="settings-body", can_focus=False):
            for table, setting, value in app.current_settings():
                yield SettingField(table, setting, value)
        yield Static("tab: the next setting · enter or tab keeps what you typed · enter opens a list",
                     id="settings-status", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(SettingField).query_one("Input, Select").focus()

    def on_setting_field_chosen(self, event: SettingField.Chosen) -> None:
        setting = event.field.setting
        problem = self.infradrill.change_setting(event.field.table, setting.name, event.value)
        status = self.query_one("#settings-status", Static)
        if problem is None:
            status.update(f"Saved: {setting.label} {shown(event.value)}.")
        else:
            status.update(f"Applied for this session, not saved: {problem}")

    def action_leave(self) -> None:
        """Keep what is typed and valid; say what was not kept, then leave."""
        for field in self.query(SettingField):
            if not field.commit():
                self.notify(f"{field.setting.label} not changed: {field.problem}", severity="warning")
        self.app.pop_screen()
