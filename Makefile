# protofed: `make run` sets everything up and runs a small federation; `make test` tests it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?= $(if $(PROTOFED_DATA_DIR),$(PROTOFED_DATA_DIR),$(abspath ../shared/datasets))
CONFIG ?= examples/quick.toml
# torch is pinned to the CPU build first so pip never pulls a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv run test test-fast lint clean

$(BIN)/protofed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

venv: $(BIN)/protofed

run: venv
	PROTOFED_DATA_DIR="$(DATA_DIR)" $(BIN)/protofed up -c $(CONFIG)

test: venv
	PROTOFED_DATA_DIR="$(DATA_DIR)" $(BIN)/python -m pytest -q

test-fast: venv
	PROTOFED_DATA_DIR="$(DATA_DIR)" $(BIN)/python -m pytest -q -m "not integration"

lint: venv
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) results *.egg-info
