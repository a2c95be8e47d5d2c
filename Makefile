PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test sim bench lint clean gpu-check gpu-wheels

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

# On the GPU machine: the image's python3, no venv, no network (docs/gpu.md).
# DEVICE=cpu: the dry run in the venv, tiny model, seconds.
DEVICE ?= cuda
gpu-check: $(if $(filter cpu,$(DEVICE)),$(STAMP))
	PYTHONUNBUFFERED=1 $(if $(filter cpu,$(DEVICE)),$(BIN)/python,python3) -m tools.gpu_check --device $(DEVICE)

gpu-wheels: $(STAMP)
	$(BIN)/python -m tools.gpu_wheels

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
