"""The application's own settings, the [app] table of the settings file (practice.config): the theme,
when follow-up rounds (pushes) are asked, what shows between stages and what a mock's answers count as.
The scheduler's settings are practice.review's."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from textual.theme import BUILTIN_THEMES

from practice.config import Setting, read_table, write_table
from tui.modes import BetweenStages, FollowUps, MockAnswers

APP_TABLE = "app"
DEFAULT_THEME = "textual-dark"
APP_SETTINGS = (
    Setting("theme", "Theme", DEFAULT_THEME, choices=tuple(sorted(BUILTIN_THEMES)),
            help="applies at once; the palette's Theme command (ctrl+p) sets it too"),
    Setting("followups", "Follow-up rounds", FollowUps.ASK.value, choices=tuple(f.value for f in FollowUps),
            help="ask: always · if-correct: after all correct · skip: never (mocks ask)"),
    Setting("between_stages", "Between stages", BetweenStages.KEY.value,
            choices=tuple(b.value for b in BetweenStages),
            help="key: each answer's key and why · verdict-only: right or wrong, keys at the end"),
    Setting("mock_answers", "Mock answers", MockAnswers.PRACTICE.value, choices=tuple(m.value for m in MockAnswers),
            help="practice: saved, not scheduled · schedule: rated and scheduled, new questions spent"),
)


@dataclass(frozen=True)
class AppSettings:
    theme: str = DEFAULT_THEME
    followups: FollowUps = FollowUps.ASK
    between_stages: BetweenStages = BetweenStages.KEY
    mock_answers: MockAnswers = MockAnswers.PRACTICE

    def __post_init__(self) -> None:  # as read from the file: strs
        object.__setattr__(self, "followups", FollowUps(self.followups))
        object.__setattr__(self, "between_stages", BetweenStages(self.between_stages))
        object.__setattr__(self, "mock_answers", MockAnswers(self.mock_answers))

    @classmethod
    def load(cls, path: Path | None = None) -> tuple[AppSettings, list[str]]:
        """The [app] table (an invalid or missing value keeps its default), and a notice per problem."""
        values, notices = read_table(APP_TABLE, APP_SETTINGS, path)
        return replace(cls(), **values), notices

    def save(self, path: Path | None = None) -> Path:
        """Raises practice.config.SettingsError when the file cannot be written."""
        return write_table(APP_TABLE, {"theme": self.theme, "followups": str(self.followups),
                                       "between_stages": str(self.between_stages),
                                       "mock_answers": str(self.mock_answers)}, path)
