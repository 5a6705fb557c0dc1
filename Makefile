# Two commands for people (README): `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The exact Textual and Rich the screen snapshots were taken with (see .ci/constraints.txt).
CONSTRAINTS := .ci/constraints.txt

.PHONY: run test bench fuzz clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/infradrill

test: $(STAMP)
	$(BIN)/ruff check solvers practice tui tests scripts
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/vulture  # dead code: the paths and the allow-list are in pyproject.toml
	$(BIN)/python -m pytest -n auto  # one worker a core; runs the bank self-test of `infradrill validate --strict` once

bench: $(STAMP)
	$(BIN)/python scripts/benchmark.py

fuzz: $(STAMP)
	$(BIN)/python -m tests.test_fuzz_answers 100000

clean:
	rm -rf $(VENV) build dist .pytest_cache .hypothesis snapshot_report.html
