"""Shared fixtures: compose the real Hydra configs, make tiny corpora, run `train(cfg)` and the command-line
entry points in-process, and one toy run trained once per test process for the tests that only read one."""

from __future__ import annotations

import copy
import functools
import io
import logging
import os
import sys
import traceback
import warnings
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from nplm.config import CONF_DIR

os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))  # the drivers' shared helpers (experiments/replication.py)
SHARED_NLTK = REPO.parent / "shared" / "data" / "nltk_data"


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Each test process computes on one thread (pytest-xdist's two workers share the two cores). Here, not at
    import: the controller process loads this file too, and needs neither torch nor Lightning."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def hydra_job_put_back():
    """Hydra's job config (`HydraConfig`, process-wide) as it was before each test: nplm-train's checks and Hydra's
    run, called in-process, leave theirs set, and `train(cfg)` records that job's overrides as its own (a later
    test's resume check then compares the wrong runs)."""
    from hydra.core.hydra_config import HydraConfig

    before = HydraConfig.instance().cfg
    yield
    HydraConfig.instance().cfg = before


def train(cfg) -> dict:
    """`nplm.training.train.train` (imported on first use: see `one_thread`)."""
    from nplm.training.train import train as train_run

    return train_run(cfg)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: runs that train more than a few batches (to convergence, several runs, torch.compile), "
        "what needs a process of its own (a fresh interpreter's imports, kill and resume, DDP, the install), "
        "the real Brown corpus; `make test` runs them, `make test-fast` (-m 'not slow') leaves them out")


# A few Brown-format documents: "word/tag" tokens, one sentence per line (NLTK's tagged reader format).
FAKE_BROWN_SENTENCES = [
    "The/at jury/nn said/vbd ``/`` the/at election/nn was/bedz fair/jj ''/'' ./.",
    "It/pps said/vbd the/at city/nn had/hvd a/at plan/nn ,/, and/cc the/at plan/nn worked/vbd ./.",
    "The/at mayor/nn 's/$ office/nn was/bedz closed/vbn (/( briefly/rb )/) ./.",
    "A/at man/nn did/dod n't/* say/vb much/ap ;/. the/at jury/nn said/vbd more/ap ./.",
]


def make_fake_brown(root: Path, copies: int = 12) -> Path:
    """An NLTK data dir holding corpora/brown with two tiny documents; returns the nltk_data dir."""
    brown = root / "nltk_data" / "corpora" / "brown"
    brown.mkdir(parents=True)
    doc = "\n\n".join("\t" + s for s in FAKE_BROWN_SENTENCES * copies) + "\n"
    (brown / "ca01").write_text(doc)
    (brown / "cb01").write_text(doc)
    (brown / "cats.txt").write_text("ca01 news\ncb01 editorial\n")
    return root / "nltk_data"


def experiment_driver(name: str):
    """experiments/<name>/run.py imported as a module (the drivers are scripts, not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "experiments" / name / "run.py"
    spec = importlib.util.spec_from_file_location(f"{name}_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def warm_children(monkeypatch):
    """The experiment drivers' nplm-train children (`replication.run_child`) forked from the warm interpreter
    (`warm_python`) instead of started afresh; that a driver's child dies with it (its `preexec_fn`) is tested
    with real processes in tests/test_replication.py."""
    import subprocess
    from types import SimpleNamespace

    import replication
    import warm_python

    def popen(argv, preexec_fn=None, **kwargs):
        return warm_python.popen(argv, **kwargs)

    monkeypatch.setattr(replication, "subprocess", SimpleNamespace(**{**vars(subprocess), "Popen": popen}))


def run_driver(name: str, monkeypatch, *argv: str) -> str:
    """experiments/<name>/run.py's main in this process (`argv` its command line; results written from this
    uncommitted checkout too, NPLM_ALLOW_DIRTY=1): what it printed. Its trainings are children (`warm_children`)."""
    monkeypatch.setenv("NPLM_ALLOW_DIRTY", "1")
    monkeypatch.setattr(sys, "argv", [f"experiments/{name}/run.py", *argv])
    module = experiment_driver(name)
    out = io.StringIO()
    with redirect_stdout(out):
        module.DRIVER.main(module.__doc__)
    return out.getvalue()


def compose_cfg(tmp_path: Path, *overrides: str):
    """The real `conf/train.yaml` with `overrides`, writing under `tmp_path/run`, no W&B by default."""
    cfg = copy.deepcopy(_composed(tuple(overrides)))  # train(cfg) may change its config: each test its own
    for key, folder in (("output_dir", "run"), ("data_dir", "data")):
        if not any(o.startswith(f"paths.{key}=") for o in overrides):
            cfg.paths[key] = str(tmp_path / folder)
    return cfg


@functools.lru_cache(maxsize=256)
def _composed(overrides: tuple[str, ...]):
    """Hydra's composition of `overrides` (a quarter of a second each), once per test process: configs
    are not resolved when composed, so the run's folders are set on a copy (`compose_cfg`)."""
    from hydra import compose, initialize_config_dir

    defaults = ["logger=none", "threads=1"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=defaults + list(overrides))


@pytest.fixture
def run_train(tmp_path):
    """`run(*overrides) -> metrics`: a run in `tmp_path/run`. A second call trains a run of its own in
    `tmp_path/call2/run` (then call3, ...): `train` skips a finished run in its folder, so sharing one
    would hand back the first run's metrics. A call with `resume=...` goes on in the first folder."""
    calls = []

    def run(*overrides: str) -> dict:
        calls.append(overrides)
        resuming = any(o.startswith("resume=") for o in overrides)
        folder = tmp_path if len(calls) == 1 or resuming else tmp_path / f"call{len(calls)}"
        return train(compose_cfg(folder, *overrides))

    return run


@dataclass
class CliResult:
    """What a command left: its exit status, its standard output and its standard error."""

    code: int
    out: str
    err: str


def run_cli(main, *argv, cwd: Path | None = None) -> CliResult:
    """The console script `main` (e.g. `nplm.cli.train.main`) run in this process as the shell runs it:
    `sys.argv` set, its output captured, its warnings written to its stderr, its `SystemExit` turned into the
    exit status, an uncaught exception into a traceback on stderr and status 1 (as the interpreter does).
    The process state a command sets (Hydra's global state and run config, the root logger's handlers and
    level, the working folder, torch's threads) is put back, so that the next command and the next test
    start as in a fresh process."""
    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    out, err = io.StringIO(), io.StringIO()
    hydra_config = HydraConfig.instance().cfg  # what `train` reads of a Hydra run (its job name, its launcher)
    root = logging.getLogger()
    handlers, level, threads = root.handlers[:], root.level, torch.get_num_threads()
    argv_before, cwd_before = sys.argv, os.getcwd()
    sys.argv = [main.__module__, *map(str, argv)]
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings(record=True) as shown:
            try:
                main()
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
            for w in shown:  # on stderr, as the interpreter prints them (the filters: the suite's and the command's)
                err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        sys.argv = argv_before
        os.chdir(cwd_before)
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_num_threads(threads)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_config
    return CliResult(code, out.getvalue(), err.getvalue())


def error_lines(result: CliResult) -> list[str]:
    """The `nplm: error:` lines of a command's stderr (a traceback fails the test)."""
    assert "Traceback" not in result.err, result.err[-3000:]
    return [line for line in result.err.splitlines() if line.startswith("nplm: error:")]


TOY_FAST = ["corpus=toy", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16",
            "data.batch_size=32", "optimizer.lr=0.01", "trainer.max_epochs=2"]


@dataclass
class ToyRun:
    """A finished run of `TOY_FAST`: its folder, best and last checkpoints, `train`'s metrics and the data
    folder its corpus was read into. Shared: a test reads it, and writes anything of its own elsewhere."""

    folder: Path
    best: str
    last: str
    metrics: dict
    data_dir: str

    @property
    def record(self) -> dict:
        """The run's metrics.json."""
        import json

        return json.loads((self.folder / "metrics.json").read_text())


@pytest.fixture(scope="session")
def toy_run(tmp_path_factory) -> ToyRun:
    """`TOY_FAST` (the toy corpus, two epochs) trained once per test process, for the tests that only need
    a trained model: evaluate, generate, predict, mix, compare, the commands' errors on its files."""
    root = tmp_path_factory.mktemp("toy_run")
    metrics = train(compose_cfg(root, *TOY_FAST))
    return ToyRun(root / "run", metrics["best_checkpoint"], str(root / "run" / "checkpoints" / "last.ckpt"),
                  metrics, str(root / "data"))


@pytest.fixture
def compile_backend(monkeypatch):
    """The override of the backend compile=true uses in a test, `compile_backend=aot_eager` (the graph capture
    through AOT autograd, as inductor's; seconds), or `compile_backend=inductor` with NPLM_TEST_INDUCTOR=1 (code
    generation too; gpu_check.py): a test adds it beside compile=true. Under
    inductor, random ops (sampling heads, dropout) fall back to eager's generator, so that a compiled run
    draws the same numbers as the eager one it is compared with (inductor's own stream differs); and the eager
    runs drop out with torch's dropout, as compiled steps do (`nplm.fast.dropout`'s CPU mask is eager-only)."""
    from nplm.fast import dropout

    backend = "inductor" if os.environ.get("NPLM_TEST_INDUCTOR") else "aot_eager"
    monkeypatch.setattr(dropout, "applies", lambda *_: False)
    if backend != "inductor":
        yield f"compile_backend={backend}"
        return
    from torch._inductor import config

    with config.patch(fallback_random=True):
        yield f"compile_backend={backend}"


def head_variants() -> list[tuple[str, dict]]:
    """(name, options) of every registered head, once per option set its class lists as taking another code
    path (`Head.variants`): the conformance tests parametrize over these, so a new head is checked by them
    as soon as it registers."""
    from nplm.heads import HEADS

    return [(name, dict(options)) for name, option in HEADS.options().items() for options in option.target.variants]


def head_id(name: str, options: dict) -> str:
    """A test id: `hierarchical-node_form=logistic`."""
    return "-".join([name, *(f"{k}={v}" for k, v in options.items())])


def head_params() -> list:
    """`pytest.param(name, options, id=...)` for `head_variants()`, for `parametrize("name,options", ...)`."""
    return [pytest.param(name, options, id=head_id(name, options)) for name, options in head_variants()]


def head_overrides(name: str, options: dict) -> list[str]:
    """The command-line overrides of a head and its options, with `tree=balanced` where the head uses a tree."""
    from nplm.heads import head_class

    tree = ["tree=balanced"] if head_class(name).uses_tree(options) else []
    return [f"head={name}", *(f"head.{key}={value}" for key, value in options.items()), *tree]


def balanced_tree(vocab_size: int):
    """A balanced binary tree over word ids 0..V-1."""
    from nplm.trees.tree import Tree, balanced_nested

    return Tree.from_nested(balanced_nested(list(range(vocab_size))), vocab_size)


def build_any_head(name: str, options: dict, feature_dim: int, vocab_size: int, counts: list[int] | None, **kwargs):
    """`build_head` of head `name` with `options`, given a balanced tree over the vocabulary where it uses one."""
    from nplm.heads import build_head, head_class

    tree = balanced_tree(vocab_size) if head_class(name).uses_tree(options) else None
    return build_head({"name": name, **options}, feature_dim, vocab_size, counts, tree, **kwargs)
