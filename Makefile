PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test sim bench lint clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy engine/core

test: lint
	$(BIN)/python -m pytest

sim: $(STAMP)
	$(BIN)/loopserve run scenarios/interference.yaml --target sim

bench: $(STAMP)
	$(BIN)/python -m tools.bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
