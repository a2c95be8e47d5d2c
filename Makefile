PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

NATIVE := build/native/manifest.json
# A superset of what tools/build_native.py compiles, so a module added there is never stale,
# and the training it runs (tools/native_training.py, on tools/bench.py's workload).
NATIVE_SOURCES := $(wildcard engine/core/*.py sim/*.py sim/cost/*.py sim/cluster/*.py) \
	tools/build_native.py \
	tools/native_training.py \
	tools/bench.py \
	engine/_native.py

.PHONY: setup native test sim bench lint clean gpu-check gpu-wheels

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP)

# engine/core and the simulator's step code compiled with mypyc (tools/build_native.py);
# stale or absent, the Python sources run instead.
$(NATIVE): $(STAMP) $(NATIVE_SOURCES)
	$(BIN)/python -m tools.build_native

native: $(NATIVE)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy engine/core

# The whole suite on the compiled build, then the core and simulator tests again on the
# Python sources (what the GPU image, a different Python, runs).
test: lint native
	LOOPSERVE_EXPECT_NATIVE=1 $(BIN)/python -m pytest
	LOOPSERVE_NATIVE=0 $(BIN)/python -m pytest tests/core tests/sim

sim: native
	$(BIN)/loopserve run scenarios/interference.yaml --target sim

bench: native
	$(BIN)/python -m tools.bench
	$(BIN)/python -m tools.bench_serving
	$(BIN)/python -m tools.bench_outputs

# On the GPU machine: the image's python3, no venv, no network (docs/gpu.md).
# DEVICE=cpu: the dry run in the venv, tiny model, seconds.
DEVICE ?= cuda
gpu-check: $(if $(filter cpu,$(DEVICE)),$(STAMP))
	PYTHONUNBUFFERED=1 $(if $(filter cpu,$(DEVICE)),$(BIN)/python,python3) -m tools.gpu --device $(DEVICE)

gpu-wheels: $(STAMP)
	$(BIN)/python -m tools.gpu.wheels

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
