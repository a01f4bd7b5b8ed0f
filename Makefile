# Two commands for a fresh machine: `make demo` and `make test`. Each builds what it needs by itself.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Rollouts view's browser test drives Debian's chromium through Playwright (which never downloads one).
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
LINT_PATHS := airflow_provider tests example_dags bench scripts docs

.PHONY: demo test lint typecheck unit docs dist bench e2e lock clean

$(STAMP): pyproject.toml requirements/test.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv>=0.5"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements/test.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@touch $(STAMP)

## make demo: roll out a revision through Airflow against the local emulator (SQLite, no network)
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

## make test: ruff, mypy, the documentation site (warnings are errors) and the whole pytest suite
# ruff first (seconds); then the suite on two workers (a file stays on one worker: its module fixtures are built
# once; the slowest files first, in the order tests/worker_order.py gives, so that no long file starts last); then
# the tests that start real Airflow services (-m e2e), two modules at a time, each module on a stack of its own:
# SQLite stacks copy the database the session migrated, PostgreSQL ones a template database migrated once
# (tests/e2e/e2e_backends.py), so no stack migrates. They mostly wait on real rollouts, so mypy and the
# documentation site are built meanwhile (their output printed after the e2e tests'); last the timing-sensitive tests
# of a browser or a stalled API server (-m "alone and not e2e"), one at a time on a quiet machine. Exit code 5 ("no
# tests selected", e.g. PYTEST_ARGS naming one file) is not a failure; any other failure fails the target.
PYTEST_UNIT = $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not e2e and not alone" $(PYTEST_ARGS)
PYTEST_E2E = $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m e2e $(PYTEST_ARGS)
PYTEST_ALONE = $(BIN)/python -m pytest -m "alone and not e2e" $(PYTEST_ARGS)
CHECKS_LOG := $(VENV)/checks.log
KEEP_STATUS = || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }

test: lint $(STAMP) $(CHROMIUM)
	@status=0; \
	$(PYTEST_UNIT) $(KEEP_STATUS); \
	$(MAKE) --no-print-directory typecheck docs > $(CHECKS_LOG) 2>&1 & checks=$$!; \
	$(PYTEST_E2E) $(KEEP_STATUS); \
	wait $$checks || status=1; \
	echo "--- mypy and the documentation site (built while the e2e tests ran):"; cat $(CHECKS_LOG); \
	$(PYTEST_ALONE) $(KEEP_STATUS); \
	exit $$status

lint: $(STAMP)
	$(BIN)/ruff check $(wildcard $(LINT_PATHS))
	$(BIN)/ruff format --check $(wildcard $(LINT_PATHS))

typecheck: $(STAMP)
	$(BIN)/mypy

# The pytest suite alone, in make test's order (without its checks).
unit: $(STAMP) $(CHROMIUM)
	@status=0; \
	$(PYTEST_UNIT) $(KEEP_STATUS); \
	$(PYTEST_E2E) $(KEEP_STATUS); \
	$(PYTEST_ALONE) $(KEEP_STATUS); \
	exit $$status

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "the browser test needs Debian's chromium at $(CHROMIUM)"; exit 1; }
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

## make docs: the documentation site in docs/_build/html; any warning (a broken reference) fails it
docs: $(STAMP)
	rm -rf docs/_build/html
	$(BIN)/sphinx-build -b html -E -W --keep-going -n -q docs docs/_build/html

## make dist: sdist and wheel in dist/ (the wheel is built from the sdist, as an installer would)
dist: $(STAMP)
	rm -rf dist
	$(BIN)/uv build --out-dir dist

## extras
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

e2e: $(STAMP)
	$(PYTEST_E2E) tests/e2e

## refresh the pinned dependency set after changing pyproject.toml
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra test --python-version 3.11 -o requirements/test.lock

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache docs/_build dist
