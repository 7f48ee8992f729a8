# Two entry points do all set-up on a fresh machine (see README.md):
#   make train   trains GePPO on Hopper-v5 on an embedded local Ray
#   make test    runs the test suite on the newest supported Ray, then the compatibility pass on
#                the oldest
# Another Python: make PYTHON=python3.11 test
# Another Ray release, in its own virtualenv: make ray-check RAY=2.59.0 (CONTRIBUTING.md)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Python versions that Ray 2.58-2.60, torch and gymnasium all support; keep in step with
# requires-python in pyproject.toml.
PY_MIN := 3.10
PY_MAX := 3.13
# Where pip looks for torch first: PyTorch's CPU wheel index (PyPI's Linux wheels of torch are
# the multi-GB CUDA build). Where that index cannot be reached, pip's configured index (with
# PyPI, the CUDA build on Linux x86_64). TORCH_INDEX= (empty) uses pip's configured index only.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The oldest Ray of the range pyproject.toml supports: the compatibility pass runs on it, in a
# virtualenv of its own (.venv-ray<version>). RAY names any other release for `make ray-check`.
RAY_OLDEST := 2.58.1
RAY ?= $(RAY_OLDEST)
RAY_VENV = .venv-ray$(RAY)
EXTRAS := test,report,baselines,examples
comma := ,

.PHONY: install train test ray-check check-python

install: $(STAMP)

# Stops with what to do, before any venv or pip step, when $(PYTHON) is missing or unsupported.
CHECK_PYTHON = $(PYTHON) -c 'import sys; lo, hi = (tuple(map(int, v.split("."))) for v in sys.argv[1:]); \
	sys.exit(0 if lo <= sys.version_info[:2] <= hi else 1)' $(PY_MIN) $(PY_MAX) 2>/dev/null || { \
	found=$$($(PYTHON) --version 2>/dev/null) || found="no $(PYTHON) on PATH"; \
	echo "rllib-geppo needs Python $(PY_MIN) to $(PY_MAX) (Ray 2.58-2.60, torch); found: $$found." >&2; \
	echo "Install a supported Python and name it, e.g.: make PYTHON=python3.11 $(or $(MAKECMDGOALS),install)" >&2; \
	exit 1; }

check-python:
	@$(CHECK_PYTHON)

# A virtualenv with torch first, pinned (2.13.0, from TORCH_INDEX), so that pip does not pull
# another build while resolving the package's looser torch range (pyproject.toml accepts any
# torch >= 2.6), then this package with its extras ($(3): more of them) and $(2) (nothing: the
# newest Ray of the range).
define make_venv
	@test -x $(1)/bin/python || $(CHECK_PYTHON)
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(1)/bin/pip install --quiet torch==2.13.0 --index-url $(TORCH_INDEX) --timeout 20 --retries 1 || )$(1)/bin/pip install --quiet torch==2.13.0
	$(1)/bin/pip install --quiet -e ".[$(EXTRAS)$(3)]" $(2)
	touch $(1)/.installed
endef

$(STAMP): pyproject.toml
	$(call make_venv,$(VENV))

# With the dmc extra, whose tests the main suite skips: RLlib imports dm-control wherever it is
# installed, a second more for every process that imports RLlib.
$(RAY_VENV)/.installed: pyproject.toml
	$(call make_venv,$(RAY_VENV),"ray[rllib$(comma)tune]==$(RAY)",$(comma)dmc)

train: $(STAMP)
	$(BIN)/rllib-geppo train file tuned_examples/geppo_hopper.yaml

# ruff first: the format and the lint rules of pyproject.toml, on everything that is Python; then
# the suite on two workers (tests/conftest.py says why), then the compatibility pass.
LINTED := rllib_geppo tests benchmarks tuned_examples
PYTEST := -m pytest -n 2 --dist loadfile --no-loadscope-reorder
# The compatibility pass: the tests that touch RLlib and Tune, the private names among them. Left
# out: the pure math, the report's arithmetic on files, the checks of the docs and the layout
# (the docs' examples included), the SB3 baseline, the learning checks (their outcome is the
# math's, not the release's), and the simulated cluster and several learners (Ray's multi-node
# machinery and RLlib's LearnerGroup, which the package reaches through public calls only).
COMPAT_TESTS := tests --ignore=tests/core --ignore=tests/report --ignore=tests/test_docs.py \
	--ignore=tests/test_package_layout.py --ignore=tests/rl_module/test_your_environment.py \
	--ignore=tests/baselines --ignore=tests/algorithm/test_learning.py \
	--ignore=tests/cli/test_cluster.py --ignore=tests/learner/test_scale.py \
	--deselect tests/algorithm/test_multi_agent.py::test_two_independent_cartpole_policies_learn

test: $(STAMP)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/python $(PYTEST) tests
	$(MAKE) ray-check RAY=$(RAY_OLDEST)

# The compatibility pass on Ray $(RAY), in its own virtualenv: make ray-check RAY=2.59.0
ray-check: $(RAY_VENV)/.installed
	$(RAY_VENV)/bin/python $(PYTEST) $(COMPAT_TESTS)
