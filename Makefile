# Two commands on a fresh clone (no network needed beyond the package registry for the first install):
#   make train   - create .venv if missing, install, train the default experiment (quickstart)
#   make test    - create .venv if missing, install, run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The offline copy of NLTK's Brown corpus next to this checkout, when there is one.
SHARED_NLTK := $(abspath ../shared/data/nltk_data)
export NLTK_DATA ?= $(if $(wildcard $(SHARED_NLTK)),$(SHARED_NLTK),)

.PHONY: install train test bench replicate-bengio2003 replicate-morin2005 clean

install: $(VENV)/.installed

# torch first, pinned to the CPU wheel: an unpinned resolve pulls several GB of CUDA packages.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[test,sweep]"
	touch $@

train: install
	$(BIN)/nplm-train experiment=quickstart

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python experiments/bench/bench.py

# Bengio et al. (2003) Table 1: runs the rows not yet done (resumable), rewrites experiments/bengio2003/README.md.
replicate-bengio2003: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/bengio2003/run.py

# Morin & Bengio (2005) Tables 1-3: timing, n-grams, every output layer and tree; writes experiments/morin2005/README.md.
replicate-morin2005: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/morin2005/run.py

clean:
	rm -rf $(VENV) outputs
