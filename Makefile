# The README's two commands: `make train` (the main job) and `make test` (lint + tests).
# Both create .venv and install the project from its own files on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extra pip requirement for the accelerator, e.g. `make train JAX_EXTRA='jax[cuda12]'`.
JAX_EXTRA ?=
TRAIN_ARGS ?=

.PHONY: setup train test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]" $(JAX_EXTRA)
	# WarpDrive's NumPy Tag classes: the independent reference of the Tag tests.
	$(BIN)/python -m pip install -q --no-deps rl-warp-drive==2.7.1 gym==0.26.2 gym-notices
	touch $@

train: setup
	$(BIN)/python -m experiments.train --config=experiments/configs/tag_continuous.py:cpu \
	  --workdir=runs/tag $(TRAIN_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -n 2 --durations=15

bench: setup
	$(BIN)/python -m experiments.benchmarks.run --suite=quick

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
