"""`infradrill new GROUP/ID --topic T`: a question's three files from the templates in
solvers/templates/ — the question file, its solver where the bank looks for it by convention, and its
test beside the topic's — as a working staged example that passes `validate --strict` as written.

Written into a source checkout (the folder holding questions/, solvers/ and tests/): a question is
code as well as data, and it belongs where the bank and its tests are."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from solvers.bank import conventional_solver
from solvers.paths import question_files

TEMPLATES = Path(__file__).resolve().parent / "templates"
CHECKOUT = Path(__file__).resolve().parent.parent
_GROUP = re.compile(r"^[A-Z][A-Z0-9]*$")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # a dash, not a dot: the id names a module too
_TOPIC = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


class ScaffoldError(ValueError):
    """A request the scaffold refuses: a malformed name, a question that exists, no checkout to write to."""


@dataclass(frozen=True)
class NewQuestion:
    group: str
    id: str
    topic: str
    title: str

    @property
    def folder(self) -> str:
        """The topic's folder under solvers/topics (and tests/topics): its name with '_' for '-'."""
        return conventional_solver(self.topic, self.id).split(".")[0]

    @property
    def module(self) -> str:
        return conventional_solver(self.topic, self.id).split(".")[1]

    def paths(self, root: Path) -> dict[str, Path]:
        """Where each template goes, by template name."""
        return {"question.yaml": root / "questions" / self.group / f"{self.id}.yaml",
                "solver.py": root / "solvers" / "topics" / self.folder / f"{self.module}.py",
                "test.py": root / "tests" / "topics" / self.folder / f"test_{self.module}.py"}


def parse_request(spec: str, topic: str, title: str | None) -> NewQuestion:
    group, _, qid = spec.partition("/")
    if not _GROUP.match(group) or not _ID.match(qid):
        raise ScaffoldError(f"{spec!r}: expected GROUP/ID, e.g. F/prefill-time (a group code in capitals, "
                            "an id of lower-case words joined by '-')")
    if not _TOPIC.match(topic):
        raise ScaffoldError(f"--topic {topic!r}: lower-case words joined by '-' (kv-cache, serving, ...)")
    return NewQuestion(group, qid, topic, title or qid.replace("-", " ").capitalize())


def write(request: NewQuestion, root: Path | None = None) -> list[Path]:
    """Write the three files into the checkout `root` (this one by default), and the topic's package marker
    where the topic is new; nothing is written when any of them exists or the id is taken in any group.
    Returns the paths written, the question file, the solver and the test last."""
    root = CHECKOUT if root is None else root
    if not all((root / folder).is_dir() for folder in ("questions", "solvers", "tests")):
        raise ScaffoldError(f"{root} is not a source checkout of infradrill (no questions/, solvers/ and tests/): "
                            "a new question is written where the bank and its tests live")
    taken = next((path for path in question_files(root / "questions") if path.stem == request.id), None)
    if taken is not None:
        raise ScaffoldError(f"a question '{request.id}' exists already: {taken}")
    targets = request.paths(root)
    if existing := [str(path) for path in targets.values() if path.exists()]:
        raise ScaffoldError(f"would overwrite {', '.join(existing)}")
    fields = {"id": request.id, "title": request.title, "group": request.group, "topic": request.topic}
    texts = {name: Template((TEMPLATES / f"{name}.template").read_text(encoding="utf-8")).substitute(fields)
             for name in targets}
    written = []
    marker = root / "solvers" / "topics" / request.folder / "__init__.py"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f'"""The {request.topic} questions: one module a question, each with solve(p, s)."""\n',
                          encoding="utf-8")
        written.append(marker)
    for name, path in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[name], encoding="utf-8")
        written.append(path)
    return written
