"""The conventions card (conventions.yaml): the counting rules and efficiencies the bank
assumes, said once, shown in the app and in exports, named by prompts."""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any

from solvers.paths import data_file
from solvers.yamlload import read_yaml


@dataclass(frozen=True)
class Convention:
    id: str
    title: str
    text: str
    source: str
    value: float | None = None


class ConventionError(ValueError):
    """conventions.yaml breaks its schema (a shipped file: a bug, not user input)."""


_WORD_RUN = re.compile(r"[\w-]+")  # what a card's id is made of


@cache
def conventions() -> tuple[Convention, ...]:
    document = read_yaml(data_file("conventions.yaml"))  # libyaml's loader where built: a tenth of the time
    entries = document.get("conventions") if isinstance(document, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ConventionError("conventions.yaml: expected a mapping 'conventions'")
    card = []
    for key, entry in entries.items():
        if not _WORD_RUN.fullmatch(str(key)):
            raise ConventionError(f"conventions.yaml: {key}: an id is letters, digits, '_' and '-' only")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in ("title", "text", "source")):
            raise ConventionError(f"conventions.yaml: {key}: needs title, text and source")
        value = entry.get("value")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConventionError(f"conventions.yaml: {key}.value: expected a number")
        card.append(Convention(str(key), entry["title"], " ".join(entry["text"].split()), entry["source"], value))
    return tuple(card)


def named_cards(text: str) -> list[str]:
    """The ids of the cards `text` names as words (not inside a longer id), in the card's order. An id
    is a run of word characters and hyphens (conventions() checks it), so a card is named where one
    whole such run of the text is its id: one pass over the text, not a search per card."""
    words = set(_WORD_RUN.findall(text))
    return [c.id for c in conventions() if c.id in words]


# The cards a solver reads while it runs (engine.run_solver records them into its sheet): the question
# screen lists the conventions in play instead of a prompt naming them.
_IN_PLAY: ContextVar[list[str] | None] = ContextVar("cards_in_play", default=None)


@contextmanager
def recording(into: list[str]) -> Iterator[None]:
    """Collect into `into` the id of every card read (convention, convention_value) within."""
    token = _IN_PLAY.set(into)
    try:
        yield
    finally:
        _IN_PLAY.reset(token)


def convention(key: str) -> Convention:
    for entry in conventions():
        if entry.id == key:
            cards = _IN_PLAY.get()
            if cards is not None and key not in cards:
                cards.append(key)
            return entry
    raise KeyError(f"no convention '{key}' in conventions.yaml")


def convention_value(key: str) -> float:
    """The number a numeric convention states (most are; a counting rule may be text only)."""
    value = convention(key).value
    if value is None:
        raise ConventionError(f"conventions.yaml: {key}: states no value")
    return value


def scale_up_domain(gpu: Mapping[str, Any] | None) -> int:
    """GPUs that share one NVLink domain: the GPU's own `nvlink_domain`, else the card's value."""
    return int((gpu.get("nvlink_domain") if gpu is not None else None) or convention_value("scale-up-domain"))
