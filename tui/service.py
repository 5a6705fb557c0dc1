"""The application's access to the engine and the progress store: loads the bank and the
store once, makes variants, records attempts.

Imports of solvers.engine (and so sympy) and of the scheduler happen inside the methods,
off the start-up path.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from solvers.bank import Bank, Question, load_bank
from solvers.data import Catalog, load_catalog
from solvers.groups import group_rank

if TYPE_CHECKING:
    from practice.review import Reviewer, ReviewSettings
    from solvers.engine import Solution


@dataclass
class Session:
    bank: Bank
    catalog: Catalog
    settings: ReviewSettings
    reviewer: Reviewer | None = None  # None: progress cannot be saved this session
    notices: list[str] = field(default_factory=list)  # about the progress store
    setting_notices: list[str] = field(default_factory=list)  # about the settings file
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def load(cls, bank_loader: Callable[[], Bank] | None = None) -> Session:
        """The bank (from `bank_loader`, else the shipped one), the catalogue and the progress store."""
        from practice.review import Reviewer, ReviewSettings
        from practice.schema import StoreError
        from practice.store import open_store

        bank = (bank_loader or load_bank)()
        try:
            store, notices = open_store()
        except StoreError as error:
            settings, problems = ReviewSettings.load()
            return cls(bank, load_catalog(), settings, None, [f"Progress will not be saved this session: {error}"],
                       problems)
        settings, problems = ReviewSettings.load(store)  # moves settings an older version kept in the store
        return cls(bank, load_catalog(), settings, Reviewer(store, bank.questions.values(), settings), notices,
                   problems)

    def apply_settings(self, settings: ReviewSettings) -> None:
        """Review with these settings from now on (the caller saves them)."""
        self.settings = settings
        if self.reviewer is not None:
            self.reviewer.apply(settings)

    @property
    def problems(self) -> list[str]:
        return self.bank.problems + self.catalog.problems

    def questions(self) -> list[Question]:
        """The bank in learning order (groups.yaml), by id within a group."""
        return sorted(self.bank.questions.values(), key=lambda q: (group_rank(q.group), q.id))

    def new_seed(self) -> int:
        return self.rng.randint(1, 99_999)

    def variant(self, question_id: str, seed: int | None) -> Solution:
        from solvers.engine import VariantCode, make_variant

        return make_variant(self.bank, self.catalog, VariantCode(question_id, seed))

    def variant_from_code(self, text: str) -> Solution:
        """Raises VariantError with a readable message for a bad code."""
        from solvers.engine import VariantCode, make_variant

        return make_variant(self.bank, self.catalog, VariantCode.parse(text))


def warm_up() -> None:
    """Import the engine (sympy) and render one expression, so the first variant is quick."""
    import sympy

    from solvers import engine  # noqa: F401

    sympy.sstr(sympy.Symbol("x") * 2)
