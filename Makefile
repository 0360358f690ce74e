# The two commands of the quick start: `make run` and `make test`.
# Both create .venv on first use (and again when pyproject.toml changes).
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test docs property bench bench-peers baseline clean

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

# Property tests run derandomized (hypothesis profile "ci", tests/conftest.py): the same
# commit gives the same result on every run, here and in CI. The suite runs on two processes
# (most of it waits on real processes, sockets and databases); the `serial` tests (the
# regression gate's CPU ratios) run alone after it.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict taskfuse/core
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .site
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -n 2 --dist loadfile -m "not serial"
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -m serial

# The docs site (MkDocs, strict: a broken link or reference fails), into site/. Its examples
# run as tests in `make test` (docs/conftest.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The property tests and state machines, randomized, x10 examples and x2 steps: run it before
# you stop. A failure is saved in tests/hypothesis-examples (commit it; every later run replays
# it first) and printed as steps: fix it, and replay the steps as a regression test.
property: $(STAMP)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest -m property

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-only

# taskfuse beside pgqueuer and procrastinate on the same PostgreSQL, in one run (installs the
# `peers` extra).
bench-peers: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[peers]'
	$(BIN)/python -m pytest benchmarks/test_bench_peers.py benchmarks/test_bench_peers_async.py \
		--benchmark-only

# Rewrite benchmarks/baseline.json (the regression gate of `make test`) on purpose.
baseline: $(STAMP)
	$(BIN)/python -m benchmarks.regression --update

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks .hypothesis site .site
