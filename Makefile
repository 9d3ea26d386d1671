# protofed: `make run` sets everything up and runs a small federation; `make test` tests it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where the datasets live, the same rule as the protofed command's: data.dir in the config,
# else $PROTOFED_DATA_DIR, else ./data (git-ignored). DATA_DIR=... sets PROTOFED_DATA_DIR.
DATA_DIR ?= $(PROTOFED_DATA_DIR)
DATA_ENV := $(if $(DATA_DIR),PROTOFED_DATA_DIR="$(abspath $(DATA_DIR))",)
CONFIG ?= examples/quick.toml
# torch is pinned to the CPU build first so pip never pulls a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv run test test-fast test-swarm lint docs clean

$(BIN)/protofed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

venv: $(BIN)/protofed

run: venv
	$(DATA_ENV) $(BIN)/protofed up -c $(CONFIG)

# Three workers on two cores, each test file whole in one of them: most of a federation or
# container test is waiting for processes. --no-loadscope-reorder (pytest-xdist 3.8) keeps
# the files in the order tests/conftest.py gives them: since 3.5 xdist sends the files with
# the most tests first, and the Docker files, few tests but long, went last.
# The packages are compiled first: where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines) every launcher the tests start would compile them again.
test: venv
	$(BIN)/python -m compileall -q protofed node topology quant deploy experiments
	$(DATA_ENV) $(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder

# A three-engine Docker Swarm with a registry on this machine (root, Docker installed): see
# docs/backends.md ("A federation across machines"); the lab is left up for the next run
# (`down` with $(BIN)/python -m tests.swarm_lab down).
test-swarm: venv
	$(BIN)/python -m tests.swarm_lab up
	$(DATA_ENV) $(BIN)/python -m pytest -q -m swarm tests/test_swarm.py

test-fast: venv
	$(DATA_ENV) $(BIN)/python -m pytest -q -m "not integration and not swarm"

lint: venv
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check .

# The documentation site (docs/, mkdocs.yml) into site/; strict: a broken link fails it.
docs: venv
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) results *.egg-info
