# Two entry points do all set-up on a fresh machine (see README.md):
#   make train   trains GePPO on Hopper-v5 on an embedded local Ray
#   make test    runs the test suite
# Another Python: make PYTHON=python3.11 test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Python versions that Ray 2.60, torch and gymnasium all support; keep in step with
# requires-python in pyproject.toml.
PY_MIN := 3.10
PY_MAX := 3.13
# Where pip looks for torch first: PyTorch's CPU wheel index (PyPI's Linux wheels of torch are
# the multi-GB CUDA build). Where that index cannot be reached, pip's configured index (with
# PyPI, the CUDA build on Linux x86_64). TORCH_INDEX= (empty) uses pip's configured index only.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install train test check-python

install: $(STAMP)

# Stops with what to do, before any venv or pip step, when $(PYTHON) is missing or unsupported.
CHECK_PYTHON = $(PYTHON) -c 'import sys; lo, hi = (tuple(map(int, v.split("."))) for v in sys.argv[1:]); \
	sys.exit(0 if lo <= sys.version_info[:2] <= hi else 1)' $(PY_MIN) $(PY_MAX) 2>/dev/null || { \
	found=$$($(PYTHON) --version 2>/dev/null) || found="no $(PYTHON) on PATH"; \
	echo "rllib-geppo needs Python $(PY_MIN) to $(PY_MAX) (Ray 2.60, torch); found: $$found." >&2; \
	echo "Install a supported Python and name it, e.g.: make PYTHON=python3.11 $(or $(MAKECMDGOALS),install)" >&2; \
	exit 1; }

check-python:
	@$(CHECK_PYTHON)

# torch first, pinned (2.13.0, from TORCH_INDEX), so that pip does not pull another build while
# resolving the package's looser torch range; pyproject.toml accepts any torch >= 2.6.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(CHECK_PYTHON)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/pip install --quiet torch==2.13.0 --index-url $(TORCH_INDEX) --timeout 20 --retries 1 || )$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test,report,baselines,examples]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/rllib-geppo train file tuned_examples/geppo_hopper.yaml

# ruff first: the format and the lint rules of pyproject.toml, on everything that is Python; then
# the suite on two workers (tests/conftest.py says why).
LINTED := rllib_geppo tests benchmarks tuned_examples

test: $(STAMP)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests
