# The two commands of the quick start: `make run` and `make test`.
# Both create .venv on first use (and again when pyproject.toml changes).
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-baseline clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/lab simulate scenarios/incident.yaml

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-only

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks .hypothesis
