"""The bank's groups (groups.yaml): each code's name, in the order a new user meets them."""
from __future__ import annotations

from functools import cache

from solvers.paths import data_file
from solvers.yamlload import read_yaml


class GroupsError(ValueError):
    """groups.yaml breaks its schema (a shipped file: a bug, not user input)."""


@cache
def group_names() -> dict[str, str]:
    """Each group's code and name, in learning order."""
    document = read_yaml(data_file("groups.yaml"))
    entries = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise GroupsError("groups.yaml: expected a mapping 'groups'")
    if not all(isinstance(name, str) and name for name in entries.values()):
        raise GroupsError("groups.yaml: every group needs a name")
    return {str(code): name for code, name in entries.items()}


def group_rank(code: str) -> int:
    """Where a group comes in learning order; a group the file does not name (a user's pack) comes last."""
    order = list(group_names())
    return order.index(code) if code in order else len(order)


def spelled(code: str) -> str:
    """A group's code with its name ("F foundations"); a code the file does not name, alone."""
    name = group_names().get(code)
    return f"{code} {name}" if name else code
