# The two commands of the quick start: `make run` and `make test`.
# Both create .venv on first use (and again when pyproject.toml changes).
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench baseline clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The incident breaks its SLO on purpose, so `lab simulate` exits 1 there: that is the
# expected outcome of the main job, not a failure of `make run`.
run: $(STAMP)
	@$(BIN)/lab simulate scenarios/incident.yaml; rc=$$?; \
	if [ $$rc -eq 1 ]; then echo "(exit 1: the incident breaks its SLO, as it should;" \
	"compare: $(BIN)/lab simulate scenarios/incident-fixed.yaml)"; exit 0; fi; exit $$rc

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict taskfuse/core
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-only

# Rewrite benchmarks/baseline.json (the regression gate of `make test`) on purpose.
baseline: $(STAMP)
	$(BIN)/python -m benchmarks.regression --update

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks .hypothesis
