# Two commands on a fresh machine: `make demo` (the tiny study end to end) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean-results vlmeval-env

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

# VLMEvalKit's own environment (docs/harnesses.md): nvidia-vlmeval with PyPI's CUDA torch + torchvision, which
# vlmeval imports and which break beside the project's CPU torch; sparsectx beside them for the model adapter.
# Never imported into the project's process: src/vlmeval_score.py runs it as a subprocess. About 6 GB.
VLMEVAL_ENV ?= .vlmeval-env
VLMEVAL_STAMP := $(VLMEVAL_ENV)/.installed

$(VLMEVAL_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLMEVAL_ENV)
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet nvidia-vlmeval==26.3 torch torchvision
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet -e . transformers==5.17.0
	$(VLMEVAL_ENV)/bin/python -c "import vlmeval, torchvision, sparsectx"
	touch $(VLMEVAL_STAMP)

vlmeval-env: $(VLMEVAL_STAMP)
