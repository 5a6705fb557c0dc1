"""Finding questions as a person types to narrow a list (Browse's filter): each word must name the
question's group (its code, as a word) or appear in its id, title, topic or group name."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from solvers.groups import group_names


class Listed(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def topic(self) -> str: ...


def matches(question: Listed, query: str) -> bool:
    """Whether every word of `query` (case aside) is the question's group code, or is found in its id,
    title, topic or group name. A group code is short ('M', 'K1'): as a word it means the group, not
    every title with an m in it."""
    codes = {code.casefold() for code in group_names()}
    text = " ".join((question.id, question.title, question.topic,
                     group_names().get(question.group, ""))).casefold()
    for word in query.casefold().split():
        if word in codes:
            if word != question.group.casefold():
                return False
        elif word not in text:
            return False
    return True


def matching(questions: Iterable[Listed], query: str) -> list[str]:
    """The ids of the questions `query` matches, in the order given (an empty query: all of them)."""
    return [q.id for q in questions if matches(q, query)]
