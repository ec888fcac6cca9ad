# Two commands on a fresh machine: `make demo` (the tiny study end to end) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VLMEVAL_ENV ?= .vlmeval-env
VLMEVAL_STAMP := $(VLMEVAL_ENV)/.installed
VLMEVAL_HOOK := $(VLMEVAL_ENV)/.sparsectx-hook
LMMS_ENV ?= .lmms-env
LMMS_STAMP := $(LMMS_ENV)/.installed
# make test also builds the two harness environments (docs/harnesses.md: about 9 GB and 3 minutes), so the
# tests that compare with VLMEvalKit and lmms-eval run instead of skipping; HARNESS_ENVS=0 leaves them out.
# Their installs skip pip's cache: its copy of the CUDA wheels would double their disk footprint.
HARNESS_ENVS ?= 1
TEST_ENVS := $(if $(filter 1,$(HARNESS_ENVS)),$(VLMEVAL_HOOK) $(LMMS_STAMP))
# make test also installs Debian's chromium (about 300 MB) when it is missing and apt-get is usable (as root), so the
# HTML report's browser test (tests/report/test_html_report.py) runs instead of skipping; BROWSER_TESTS=0 leaves it out.
BROWSER_TESTS ?= 1
TEST_BROWSER := $(if $(filter 1,$(BROWSER_TESTS)),chromium)

.PHONY: demo study test test-long lint constraints clean-results protocol-cards rehearse slurm-demo test-slurm vlmeval-env lmms-env chromium

# Through constraints.txt, the pinned stack: CI and a user get the same versions of every distribution.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: the index's build of that version (CUDA from PyPI on Linux x86-64, CPU elsewhere)
	$(BIN)/python -m pip install --quiet torch==2.13.0 -c constraints.txt
	$(BIN)/python -m pip install --quiet -e '.[dev]' -c constraints.txt
	touch $(STAMP)

# After changing a dependency in pyproject.toml: install without the old pins (pip changes only what the change
# needs), then pin what is installed (scripts/write_constraints.py; docs/install.md). Commit both files.
constraints:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python scripts/write_constraints.py constraints.txt
	touch $(STAMP)

# The suite runs on a worker per core (pytest-xdist), a test file per worker at a time: the files that hold
# slow end-to-end runs go first (tests/conftest.py). One worker: `.venv/bin/python -m pytest -q`.
test: $(STAMP) $(TEST_ENVS) $(TEST_BROWSER) lint
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slurm_long and not long"

# The real-scheduler tests too long for CI (as root, like make slurm-demo; docs/testing.md): a training job stopped
# by its early SIGTERM and resumed by the retries (442 s here at 1f64a03), the real presets' submitted jobs (235 s).
test-slurm: $(STAMP)
	$(BIN)/python -m pytest -q -m slurm_long tests/workflow/test_local_slurm.py

# The end-to-end variants whose siblings run in CI (marker long, docs/testing.md), then make test-slurm's; run
# before closing an issue.
test-long: $(STAMP) $(TEST_ENVS)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m long
	$(MAKE) test-slurm

# The formatter decides layout (no `# fmt: skip`); make test runs this first, so CI fails on an unformatted file.
lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

# sparsectx.pipeline runs snakemake, first removing a lock that a killed run left (none running there).
# demo: the seeds' headline claims on the whole synthetic suite (conf/experiment/tiny_demo.yaml);
# study: every table of both seeds in the tiny world, three training seeds, 600 items (conf/experiment/
# tiny_scopd.yaml, tiny_ltopd.yaml), then the image-to-video table (tiny_video.yaml). On a machine where
# nvidia-smi lists a GPU every job runs there (workflow/profiles/gpu); elsewhere on the CPU (profiles/local:
# hours on two cores). STUDY_PROFILE=<dir> picks another profile.
STUDY_PROFILE ?= $(if $(shell nvidia-smi -L 2>/dev/null),workflow/profiles/gpu,workflow/profiles/local)
STUDY_EXPERIMENTS := tiny_scopd tiny_ltopd tiny_video
# With the gpu profile each experiment runs under a private CUDA MPS daemon (python -m sparsectx.mps), so the
# sixteen jobs' kernels share the GPU at once instead of time-slicing it: all 154 jobs of tiny_scopd in 363 s
# against 118 of them in 547 s without (docs/performance.md). STUDY_MPS=0 turns it off; where no daemon
# starts, the study runs without one (slower, the same results).
STUDY_MPS ?= $(if $(findstring profiles/gpu,$(STUDY_PROFILE)),1,0)
STUDY_RUN := $(if $(filter 1,$(STUDY_MPS)),$(BIN)/python -m sparsectx.mps --)

demo: $(STAMP)
	cd $(CURDIR) && $(BIN)/python -m sparsectx.pipeline --profile workflow/profiles/local all_tables --config experiment=tiny_demo

study: $(STAMP)
	@echo "make study: profile $(STUDY_PROFILE), MPS $(STUDY_MPS)"
	cd $(CURDIR) && for e in $(STUDY_EXPERIMENTS); do \
		$(STUDY_RUN) $(BIN)/python -m sparsectx.pipeline --profile $(STUDY_PROFILE) all_tables --config experiment=$$e || exit 1; done

clean-results:
	rm -rf results

# The real presets' protocol cards (every setting, its source, where it differs from the paper), pasted in
# docs/protocols/; tests/config/test_protocol_cards.py fails when they are stale.
PROTOCOL_EXPERIMENTS := scopd_qwen2_5_vl_7b ltopd_qwen3_5_4b
protocol-cards: $(STAMP)
	mkdir -p docs/protocols
	for e in $(PROTOCOL_EXPERIMENTS); do $(BIN)/python -m sparsectx.protocol experiment=$$e out=docs/protocols/$$e.md || exit 1; done

# The real presets rehearsed (docs/rehearsal.md): every job of each, through the same DAG and commands, on tiny
# random-weight instances of the published model classes and miniature real-layout benchmark and training files,
# in rehearsal/<preset>/ on the CPU (never results/). `make rehearse EXPERIMENT=<preset>` rehearses one.
REHEARSE_EXPERIMENTS := $(or $(EXPERIMENT),$(PROTOCOL_EXPERIMENTS))
REHEARSE_CORES ?= 2
rehearse: $(STAMP)
	for e in $(REHEARSE_EXPERIMENTS); do $(BIN)/python -m sparsectx.rehearsal experiment=$$e cores=$(REHEARSE_CORES) || exit 1; done

# The cluster command against a real scheduler on this machine (docs/cluster.md): a single-node SLURM from Debian's
# packages (as root; python -m sparsectx.local_slurm installs and starts it, and stops it after), `make demo`'s study
# submitted through `--profile slurm` in slurm-demo/, and its tables compared with make demo's (the timing tables aside:
# efficiency, training_cost).
SLURM_DEMO_DIR ?= slurm-demo
slurm-demo: demo
	$(BIN)/python -m sparsectx.local_slurm run root=/tmp/sparsectx-slurm -- env SPARSECTX_SLURM_PARTITION=debug \
		$(BIN)/python -m sparsectx.pipeline --profile slurm all_tables --directory $(SLURM_DEMO_DIR) --config experiment=tiny_demo
	diff -r -x .hydra -x '*.log' -x 'efficiency*' -x 'training_cost*' results/tiny_demo/tables $(SLURM_DEMO_DIR)/results/tiny_demo/tables
	@echo "slurm-demo: the tables submitted through SLURM equal make demo's"

# VLMEvalKit's own environment (docs/harnesses.md): nvidia-vlmeval with PyPI's CUDA torch + torchvision, which
# vlmeval imports and which break beside the project's CPU torch; sparsectx beside them for the model adapter.
# Never imported into the project's process: src/vlmeval_score.py runs it as a subprocess. About 6 GB.
$(VLMEVAL_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLMEVAL_ENV)
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet --no-cache-dir nvidia-vlmeval==26.3 torch==2.14.1 torchvision==0.29.1
	$(VLMEVAL_ENV)/bin/python -m pip install --quiet --no-cache-dir -e . transformers==5.17.0
	$(VLMEVAL_ENV)/bin/python -c "import vlmeval, torchvision, sparsectx"
	touch $(VLMEVAL_STAMP)

# VLMEvalKit's own run.py finds SparsectxVLM (--config class, --model names of $SPARSECTX_VLMEVAL_MODELS): a .pth file
# installs sparsectx.integrations.vlmeval_register's import hook at interpreter start; the vlmeval package is not edited.
$(VLMEVAL_HOOK): $(VLMEVAL_STAMP)
	$(VLMEVAL_ENV)/bin/python -m sparsectx.integrations.vlmeval_register
	$(VLMEVAL_ENV)/bin/python -c "import vlmeval.vlm; assert hasattr(vlmeval.vlm, 'SparsectxVLM')"
	touch $(VLMEVAL_HOOK)

vlmeval-env: $(VLMEVAL_HOOK)

# Debian's chromium for the report's browser test (docs/report.md). Where it is missing and cannot be installed (not
# root, no apt-get, no network), a line says so and the test skips with the same command.
CHROMIUM_INSTALL := apt-get install -y --no-install-recommends chromium
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && $(CHROMIUM_INSTALL) || echo "chromium: $(CHROMIUM_INSTALL) failed; the browser test skips"; \
		else echo "chromium: not installed and apt-get is not usable here (needs root): run $(CHROMIUM_INSTALL)"; fi; }

# lmms-eval's environment (docs/harnesses.md), with the project's CPU torch. lmms-eval 0.7.3 pins wandb==0.25.0,
# which the project's wandb-workspaces (wandb>=0.28.2) excludes: it goes in without its own dependencies, then
# those bar wandb and torchvision, held to torch 2.13.0; PyPI's torchvision (CUDA only) breaks beside a CPU torch,
# so any that a dependency pulls in is removed.
$(LMMS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(LMMS_ENV)
	$(LMMS_ENV)/bin/python -m pip install --quiet --upgrade pip
	$(LMMS_ENV)/bin/python -m pip install --quiet --no-cache-dir torch==2.13.0
	$(LMMS_ENV)/bin/python -m pip install --quiet --no-cache-dir -e .
	$(LMMS_ENV)/bin/python -m pip install --quiet --no-cache-dir --no-deps lmms-eval==0.7.3
	$(LMMS_ENV)/bin/python -c "from importlib.metadata import requires; print('\n'.join(r for r in requires('lmms-eval') \
		if 'extra ==' not in r and not r.startswith(('wandb', 'torchvision'))))" > $(LMMS_ENV)/lmms-requirements.txt
	echo torch==2.13.0 > $(LMMS_ENV)/constraints.txt
	$(LMMS_ENV)/bin/python -m pip install --quiet --no-cache-dir -r $(LMMS_ENV)/lmms-requirements.txt "filelock<4.3" -c $(LMMS_ENV)/constraints.txt
	$(LMMS_ENV)/bin/python -m pip uninstall --quiet -y torchvision
	$(LMMS_ENV)/bin/python -c "import lmms_eval.models, sparsectx"
	touch $(LMMS_STAMP)

lmms-env: $(LMMS_STAMP)
