# The README's two commands: `make train` (the main job) and `make test` (lint + tests).
# Both create .venv and install the project from its own files on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extra pip requirement for the accelerator, e.g. `make train JAX_EXTRA='jax[cuda12]'`.
# The setup stamp names it: a changed JAX_EXTRA reinstalls.
JAX_EXTRA ?=
TRAIN_ARGS ?=

# `$(call id,TEXT)`: a short number identifying TEXT (POSIX cksum).
quote = '$(subst ','\'',$(1))'
id = $(shell printf '%s' $(call quote,$(1)) | cksum | cut -d' ' -f1)

STAMP := $(VENV)/.installed-$(call id,$(JAX_EXTRA))
# One run folder per TRAIN_ARGS and JAX_EXTRA: `make train` again resumes (or, when
# finished, leaves alone) its own run; other arguments train a new run in their own
# folder (printed first). `make train RUN=runs/x` chooses the folder.
RUN ?= runs/tag$(if $(strip $(TRAIN_ARGS)$(JAX_EXTRA)),-$(call id,$(TRAIN_ARGS) $(JAX_EXTRA)))

.PHONY: setup train test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,mujoco,interop]" $(JAX_EXTRA)
	# WarpDrive's NumPy Tag classes: the independent reference of the Tag tests.
	$(BIN)/python -m pip install -q --no-deps rl-warp-drive==2.7.1 gym==0.26.2 gym-notices
	rm -f $(VENV)/.installed-*
	touch $@

train: setup
	@echo "run folder: $(RUN)"
	$(BIN)/python -m experiments.train --config=experiments/configs/tag_continuous.py:cpu \
	  --workdir=$(RUN) $(TRAIN_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Tests of one module run on one worker (--dist loadscope): a module's compiled
# fixtures and in-memory programs are built once instead of once per worker.
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadscope --durations=15

bench: setup
	$(BIN)/python -m experiments.benchmarks.run --suite=quick

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
