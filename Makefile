# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

## A memory session on the embedded log (needs nothing but Python).
demo: $(VENV)/.runtime
	$(BIN)/laser-memory demo

## The whole suite: both logs, the Kafka half against a real broker.
test: $(VENV)/.dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(BIN)/ruff check laser_memory folders tests benchmarks

bench: $(VENV)/.dev
	$(BIN)/python -m benchmarks.log_append
	$(BIN)/python -m benchmarks.recall

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis laser-data
