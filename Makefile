# Two commands on a fresh machine: `make demo` (the tiny study end to end) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean-results

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: the CPU build; an open range would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts

# sparsectx.pipeline runs snakemake, first removing a lock that a killed run left (none running there)
demo: $(STAMP)
	cd $(CURDIR) && $(BIN)/python -m sparsectx.pipeline --profile workflow/profiles/local all_tables

clean-results:
	rm -rf results
