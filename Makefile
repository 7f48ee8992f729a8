# Two entry points do all set-up on a fresh machine (see README.md):
#   make train   trains GePPO on Hopper-v5 on an embedded local Ray
#   make test    runs the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install train test

install: $(STAMP)

# torch first, pinned: its CPU build lies on this machine's disk, while an unpinned torch pulls
# a multi-GB CUDA build. pyproject.toml keeps a loose range for real users.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test,report,baselines]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/rllib-geppo train file tuned_examples/geppo_hopper.yaml

test: $(STAMP)
	$(BIN)/python -m pytest tests
