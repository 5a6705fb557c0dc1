"""Write solvers/question.schema.json from the loader's field sets and kinds (solvers/question_schema.py).
Run after changing what a question file may hold; tests/test_question_schema.py fails while the shipped
file is stale."""
from __future__ import annotations

import json
from pathlib import Path

from solvers.question_schema import SCHEMA_FILE, question_schema

TARGET = Path(__file__).resolve().parent.parent / "solvers" / SCHEMA_FILE


def rendered() -> str:
    return json.dumps(question_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    TARGET.write_text(rendered(), encoding="utf-8")
    print(f"wrote {TARGET}")
