# Two commands on a fresh clone (no network needed beyond the package registry for the first install):
#   make train   - create .venv if missing, install, train the default experiment (quickstart)
#   make test    - create .venv if missing, install, run the test suite (both cores, the 15 slowest listed)
#   make test-fast - the same without the tests marked slow
#   make coverage - the suite under coverage.py (subprocesses too): statement coverage of src/nplm
#   make fuzz    - train 500 drawn configurations for a batch each (not part of make test; FUZZ_COUNT, FUZZ_SEED)
#   make wheel-check - build the wheel, install it in a fresh venv, train from a folder outside the checkout
#   make docs    - the documentation site (mkdocs.yml over docs/) into build/site; any broken link fails it
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The offline copy of NLTK's Brown corpus next to this checkout, when there is one.
SHARED_NLTK := $(abspath ../shared/data/nltk_data)
ifneq ($(wildcard $(SHARED_NLTK)),)
export NLTK_DATA ?= $(SHARED_NLTK)
endif

.PHONY: install train test test-fast coverage fuzz wheel-check docs bench replicate-bengio2003 replicate-morin2005 replicate-mnih2009 replicate-tinyshakespeare replicate-tokenizations replicate-heads-trees scale clean

install: $(VENV)/.installed

# pyproject.toml states ranges; constraints.txt the exact versions tested here. torch first, and the build for
# this machine: where no NVIDIA driver answers (no nvidia-smi), PyTorch's CPU wheel from its own index (PyPI's
# Linux torch is the CUDA build, several GB of packages); where one does, PyPI's CUDA build. TORCH_INDEX picks
# another index (https://download.pytorch.org/whl/cu126, say); where the index cannot be reached, pip says so
# in one warning and takes torch from PyPI or the machine's wheel folder.
CONSTRAINTS := -c $(abspath constraints.txt)
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
TORCH_FROM := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX) --retries 0 --timeout 15,)
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) $(TORCH_FROM) torch
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) -e ".[test,sweep,hf]"
	touch $@

train: install
	$(BIN)/nplm-train experiment=quickstart

# The suite on TEST_JOBS processes (pytest-xdist; worksteal: an idle process takes tests queued for a busy one).
# pytest keeps the test files with their asserts rewritten as bytecode: where PYTHONDONTWRITEBYTECODE is set (a
# container's default), every process of every run would rewrite and compile them again (seconds each).
TEST_JOBS ?= 2
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal --durations=15
test: install
	$(PYTEST)

# Everything but the tests marked slow (trainings to convergence, fresh interpreters, sweeps, DDP, kill/resume).
test-fast: install
	$(PYTEST) -m "not slow"

# Statement coverage of src/nplm over the whole suite, the nplm commands the tests start in fresh processes
# included ([tool.coverage.run] patch = subprocess); the data files go to this folder whatever a process's cwd.
coverage: export COVERAGE_FILE := $(abspath .coverage)
coverage: install
	rm -f .coverage .coverage.*
	$(BIN)/python -m coverage run -m pytest -q -n $(TEST_JOBS) --dist worksteal -p no:cacheprovider
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report --skip-covered --sort=cover

# Configurations drawn from the schema and the registries (every group's options, keys at their rules' bounds),
# each trained on toy for a batch: each must train or be refused in one line naming the key (tests/config_draw.py).
# Prints how many were tried, trained and refused (by key), and every failure with the overrides to replay it.
FUZZ_COUNT ?= 500
FUZZ_SEED ?= 0
fuzz: install
	OMP_NUM_THREADS=1 WANDB_MODE=offline $(BIN)/python tests/config_draw.py --count $(FUZZ_COUNT) --seed $(FUZZ_SEED)

# The installed package must find its configs and shipped data without this checkout: build the wheel,
# install it into a fresh venv (torch first, versions from constraints.txt), then from an empty temporary folder
# ask for the help page, make a bad setting fail with exit 2, train a few batches of quickstart, print the
# version, and run the quickstart notebook to its end with the wheel's own nplm.
WHEEL_DIR := build/wheel-check
wheel-check: install
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w $(WHEEL_DIR)/dist .
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	# The wheel's dependencies from the package index, and what runs the notebook (nbclient, ipykernel); with no
	# index reachable (offline CI), the wheel alone, the rest taken from $(VENV) through a .pth (the wheel's own
	# nplm still comes first on sys.path).
	$(WHEEL_DIR)/venv/bin/python -m pip install --quiet --retries 0 --timeout 10 $(CONSTRAINTS) $(TORCH_FROM) torch \
	  && $(WHEEL_DIR)/venv/bin/python -m pip install --quiet --retries 0 --timeout 10 $(CONSTRAINTS) $(WHEEL_DIR)/dist/nplm_lab-*.whl \
	  && $(WHEEL_DIR)/venv/bin/python -m pip install --quiet --retries 0 --timeout 10 $(CONSTRAINTS) nbclient nbformat ipykernel \
	  || { $(WHEEL_DIR)/venv/bin/python -m pip install --quiet --no-index --no-deps $(WHEEL_DIR)/dist/nplm_lab-*.whl \
	       && $(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
	          > $$($(WHEEL_DIR)/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/deps.pth; }
	tmp=$$(mktemp -d) && cd $$tmp && export OMP_NUM_THREADS=1 WANDB_MODE=offline && bin=$(abspath $(WHEEL_DIR))/venv/bin \
	  && $$bin/nplm-train --help > help.txt && grep -q "experiment=quickstart" help.txt \
	  && { $$bin/nplm-train seed=abc 2>err.txt; test $$? -eq 2; } && grep -q "seed=abc: must be an integer" err.txt \
	  && $$bin/nplm-train experiment=quickstart debug=fast logger=none threads=1 hydra.run.dir=run \
	  && grep -q '"status": "finished"' run/metrics.json \
	  && $$bin/nplm-train --version | grep -qx "nplm-train $$($$bin/python -c 'import nplm; print(nplm.__version__)')" \
	  && $$bin/python $(abspath examples/run_notebook.py) $(abspath examples/quickstart.ipynb) | grep -q "quickstart: done" \
	  && echo "wheel-check: the installed wheel trained from $$tmp, and ran the quickstart notebook"; status=$$?; rm -rf $$tmp; exit $$status

# The documentation site: the `docs` extra (mkdocs) into $(VENV) once, docs/options.md checked against the
# schema, then a strict build (a warning, such as a link to a missing page or heading, fails it) into build/site.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	$(BIN)/python docs/options.py --check
	$(BIN)/mkdocs build --strict --quiet -d build/site

# MLP1 on Brown: writes experiments/bench/results/<machine>/bench.json, then the bench README's tables from the result files.
bench: install
	$(BIN)/python experiments/bench/bench.py
	$(BIN)/python experiments/bench/harness.py

# Bengio et al. (2003) Table 1: runs the rows not yet done (resumable), rewrites experiments/bengio2003/README.md.
replicate-bengio2003: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/bengio2003/run.py

# Morin & Bengio (2005) Tables 1-3: timing, n-grams, every output layer and tree; writes experiments/morin2005/README.md.
replicate-morin2005: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/morin2005/run.py

# Mnih & Hinton (2009) on Brown (LBL, HLBL, learned trees) and Mnih & Teh's NCE: resumable; writes experiments/mnih2009/README.md.
replicate-mnih2009: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/mnih2009/run.py

# Tiny Shakespeare characters: the notebook's network and the modern NPLM's search against the Kneser-Ney 5-gram
# (the search rounds: src/nplm/conf/sweep/tinyshakespeare_*.yaml); resumable; writes experiments/tinyshakespeare_char/README.md.
replicate-tinyshakespeare: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/tinyshakespeare_char/run.py

# Characters, words and byte-level BPE on bits per byte; resumable; writes experiments/tokenizations/README.md.
replicate-tokenizations: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/tokenizations/run.py

# Every head and tree on Brown at MLP1's shape, 2 epochs each; writes experiments/heads_trees/README.md.
replicate-heads-trees: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python experiments/heads_trees/run.py

# WikiText-103-sized vocabularies: makes the WikiText-103-shaped corpus under data_cache/ (~0.5 GB,
# git-ignored), measures every head, the id cache and the trees (stages resumable); writes experiments/scale/README.md.
scale: install
	OMP_NUM_THREADS=1 $(BIN)/python experiments/scale/run.py

clean:
	rm -rf $(VENV) outputs
