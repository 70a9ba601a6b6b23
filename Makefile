# distlab: two commands.
#   make lab    install what is needed, then open JupyterLab on notebooks/
#   make test   install the same way, then lint (ruff: pyproject.toml's rule set, zero
#               findings; mypy: tools/typecheck.py, no package above its recorded count) and
#               run every test (unit, property, multi-process, notebooks under
#               nbval, real browser)
#
# Environment: the active virtualenv or conda env if there is one, else ./.venv (created here).
# torch is installed first, pinned by TORCH_VERSION (default 2.13.0); a torch already present in
# the environment is kept (set TORCH_VERSION=keep to never touch torch, or another version to
# install that one). `pip install -e .` afterwards never replaces it.
# The notebook and test stack is installed at the versions CI passed with (constraints.txt);
# STACK=latest takes the newest releases instead (make test STACK=latest), and `make constraints`
# installs the newest and writes their versions to constraints.txt.

SHELL := /bin/bash
TORCH_VERSION ?= 2.13.0
VENV ?= .venv
LAB_PORT ?= 8888
PYTEST_ARGS ?=
STACK ?= tested
LAB_ARGS ?=

ifneq ($(strip $(VIRTUAL_ENV)),)
PY := $(VIRTUAL_ENV)/bin/python
else ifneq ($(strip $(CONDA_PREFIX)),)
PY := $(CONDA_PREFIX)/bin/python
else
PY := $(VENV)/bin/python
endif

.PHONY: install lab lint test clean constraints versions

install:
	@TORCH_VERSION="$(TORCH_VERSION)" STACK="$(STACK)" VENV="$(VENV)" PY="$(PY)" bash tools/install.sh

constraints:
	@TORCH_VERSION="$(TORCH_VERSION)" STACK=latest VENV="$(VENV)" PY="$(PY)" bash tools/install.sh
	$(PY) tools/constraints.py write

versions:
	@$(PY) tools/constraints.py versions

lab: install
	$(PY) -m jupyterlab --ServerApp.root_dir=notebooks --ServerApp.port=$(LAB_PORT) --ServerApp.ip=127.0.0.1 $(LAB_ARGS) $(if $(filter 0,$(shell id -u)),--allow-root,)

lint: install
	$(PY) -m ruff check lib tests tools notebooks conftest.py
	$(PY) tools/typecheck.py

test: install lint
	STACK="$(STACK)" $(PY) tools/run_tests.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build lib/*.egg-info .pytest_cache .mypy_cache test-artifacts
