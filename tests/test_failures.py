"""Issue 29, items 2 and 3: every failure a user can cause outside the config schema is one line, exit
2, nothing half-written; every write is atomic; one writer per run folder.

Cases: a run folder that cannot be made or written (nplm-train and the other commands' outputs), W&B
settings W&B refuses, a model that cannot fit in memory, a full disk while writing a checkpoint or a
record (the previous checkpoint stays loadable), data files that change or vanish between a run and
its resume or between the jobs of a sweep, a SIGKILL in the middle of a checkpoint write, and two
nplm-train writing the same run folder at once.

A full disk and a read-only folder are real where the tests may mount (root: a small tmpfs, mounted
read-only or filled up); elsewhere those tests are skipped and the same paths are driven by an
`OSError(ENOSPC)` raised by the write.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import warm_python
from conftest import CliResult, TOY_FAST, balanced_tree, compose_cfg, head_overrides, head_params, run_cli
from nplm.cli import compare, evaluate, mix
from nplm.cli.train import main as nplm_train
from nplm.errors import UserError, WriteError
from nplm.files import atomic_open, atomic_write, folder_problem
from nplm.training.checkpoint import read_checkpoint

ENV = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
TOY = ["corpus=toy", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16", "data.batch_size=32",
       "optimizer.lr=0.01", "threads=1", "logger=csv"]

# nplm-train with one checkpoint write changed: the N-th write of a checkpoint named NAME (`*`: any)
# `pause`s, waiting until <MARK>/go exists, or is `torn`: half of its bytes are written into its
# temporary file and the process hangs there (to be killed). Both first write <MARK>/paused.
RUNNER = """
import os, sys, time
from pathlib import Path
import nplm.training.checkpoint_io as cio
MODE, NAME, N, MARK = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
sys.argv = ["nplm-train", *sys.argv[5:]]
real_write, real_save, calls, target = cio._write, cio.AtomicCheckpointIO.save_checkpoint, [], []
def save(self, checkpoint, path, *args, **kwargs):
    target[:] = [Path(path).name]
    return real_save(self, checkpoint, path, *args, **kwargs)
def write(f, data):
    if NAME in ("*", target[0]):
        calls.append(1)
    if len(calls) == N and MODE == "pause":
        (MARK / "paused").write_text(str(os.getpid()))
        while not (MARK / "go").exists():
            time.sleep(0.05)
    if len(calls) == N and MODE == "torn":
        f.write(data[: len(data) // 2]); f.flush(); os.fsync(f.fileno())
        (MARK / "paused").write_text(str(os.getpid()))
        time.sleep(600)
    real_write(f, data)
cio._write, cio.AtomicCheckpointIO.save_checkpoint = write, save
from nplm.cli.train import main
main()
"""


def one_line(result: CliResult, *parts: str) -> str:
    """The run ended with exit 2 and stderr is exactly one `nplm: error:` line holding each of `parts`."""
    lines = result.err.splitlines()
    assert result.code == 2, result.err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("nplm: error: "), result.err[-3000:]
    assert "Traceback" not in result.err
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def nplm(cwd: Path, main, *args: str) -> CliResult:
    """A command's entry point (`nplm_train`, `evaluate.main`, ...) run in this process from `cwd`."""
    return run_cli(main, *args, cwd=cwd)


def runner(cwd: Path, mode: str, name: str, n: int, mark: Path, *args: str):
    """The runner in a process of its own, forked from the warm interpreter (`warm_python`)."""
    mark.mkdir(parents=True, exist_ok=True)
    return warm_python.popen([sys.executable, "-c", RUNNER, mode, name, str(n), str(mark), *args], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc, timeout: float = 300) -> None:
    end = time.time() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {proc.stderr.read()[-3000:]}")
        assert time.time() < end, f"{path} did not appear"
        time.sleep(0.05)


def temps(folder: Path) -> list[Path]:
    return sorted(folder.rglob(".*.tmp"))


# -- mounts: a real read-only folder and a real full disk, where this process may mount -----------------------
def _mount(folder: Path, options: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    return folder


@pytest.fixture
def mounts():
    made = []

    def mount(folder: Path, options: str) -> Path:
        made.append(_mount(folder, options))
        return folder

    yield mount
    for folder in reversed(made):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(folder: Path) -> None:
    """Write into `folder` until its file system has no byte left."""
    for size in (65536, 4096, 512, 1):  # then the last blocks
        with open(folder / f"filler{size}", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC


# -- the one helper: atomic writes ----------------------------------------------------------------------------
def test_an_atomic_write_replaces_the_file_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    atomic_write(path, "old\n")
    assert path.read_text() == "old\n" and temps(tmp_path) == []
    with pytest.raises(RuntimeError):
        with atomic_open(path, "w") as f:
            f.write("half")
            raise RuntimeError("killed while writing")
    assert path.read_text() == "old\n" and temps(tmp_path) == []

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # the disk fills while the new content is flushed
    with pytest.raises(WriteError) as err:
        atomic_write(path, "new\n", what="--json")
    assert str(err.value) == (f"--json={path}: cannot be written (No space left on device); the disk is full: "
                              "free space on it or write to another disk")
    assert path.read_text() == "old\n" and temps(tmp_path) == []


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".last.ckpt.{int(dead.stdout)}.abc123.tmp"
    stale.write_bytes(b"torn")
    atomic_write(tmp_path / "last.ckpt", b"whole")
    assert not stale.exists() and (tmp_path / "last.ckpt").read_bytes() == b"whole"


def test_a_folder_that_cannot_be_written_is_found_by_trying(tmp_path, mounts):
    assert folder_problem(tmp_path / "new" / "deeper") is None and not (tmp_path / "new").exists()
    assert folder_problem("/proc/nope").startswith("cannot be written in /proc (No such file or directory)")
    (tmp_path / "file").write_text("x")
    assert folder_problem(tmp_path / "file" / "run") == f"{tmp_path / 'file'} is a file, not a folder"
    ro = mounts(tmp_path / "ro", "ro,size=1m")
    assert folder_problem(ro / "run") == (f"cannot be written in {ro} (Read-only file system); a read-only file "
                                          "system: write to a folder elsewhere")


# -- checkpoints ------------------------------------------------------------------------------------------
def test_a_full_disk_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    import nplm.training.checkpoint_io as cio

    io_ = cio.AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io_.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, path)

    def full(f, data):
        f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cio, "_write", full)
    with pytest.raises(WriteError) as err:
        io_.save_checkpoint({"epoch": 2, "w": torch.zeros(3)}, path)
    assert str(err.value) == (f"{path}: cannot be written (No space left on device); the disk is full: free space "
                              "on it or write to another disk; the previous checkpoint is kept; fix this, then "
                              "continue the run with resume=true")
    assert torch.load(path, weights_only=True)["epoch"] == 1 and temps(tmp_path) == []


@pytest.mark.slow
def test_a_full_disk_during_training_ends_in_one_line_and_the_run_can_be_continued(tmp_path, mounts):
    """A real full disk: the run folder on a small tmpfs, filled up after the first epoch's checkpoints."""
    disk = mounts(tmp_path / "disk", "size=8m")
    mark = tmp_path / "mark"
    run = disk / "r"
    # the disk fills before epoch 1's last.ckpt is written
    proc = runner(tmp_path, "pause", "last.ckpt", 2, mark, *TOY, "trainer.max_epochs=3", f"hydra.run.dir={run}")
    wait_for(mark / "paused", proc)
    before = read_checkpoint(run / "checkpoints" / "last.ckpt")
    fill(disk)
    (mark / "go").touch()
    out, err = proc.communicate(timeout=300)
    one_line(CliResult(proc.returncode, out, err),
             "cannot be written (No space left on device); the disk is full",
             "the previous checkpoint is kept; fix this, then continue the run with resume=true")
    after = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert after["epoch"] == before["epoch"] == 0
    assert temps(run) == []  # no half-written file
    assert json.loads((run / "metrics.json").read_text())["status"] in ("running", "failed")
    for filler in disk.glob("filler*"):  # space again: the run goes on from its checkpoint
        filler.unlink()
    result = nplm(tmp_path, nplm_train, *TOY, "trainer.max_epochs=3", f"hydra.run.dir={run}", "resume=true")
    assert result.code == 0, result.err[-3000:]
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"
    epochs = [line.split(",")[0] for line in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == ["0", "1", "2"]  # each epoch once


@pytest.mark.slow
def test_a_sigkill_in_the_middle_of_a_checkpoint_write_leaves_the_previous_one_loadable(tmp_path):
    mark = tmp_path / "mark"
    run = tmp_path / "r"
    # epoch 1's last.ckpt is torn (epoch 0's is whole)
    proc = runner(tmp_path, "torn", "last.ckpt", 2, mark, *TOY, "trainer.max_epochs=3", f"hydra.run.dir={run}")
    wait_for(mark / "paused", proc)
    torn = [p for p in temps(run) if p.name.startswith(".last.ckpt.")]
    assert len(torn) == 1 and torn[0].stat().st_size > 0  # half of the new checkpoint, under its temporary name
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["epoch"] == 0  # the previous one, whole
    with pytest.raises(UserError):
        read_checkpoint(torn[0])  # (what it would have been without the rename: torn)
    result = nplm(tmp_path, nplm_train, *TOY, "trainer.max_epochs=3", f"hydra.run.dir={run}", "resume=true")
    assert result.code == 0, result.err[-3000:]
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"
    assert temps(run) == []  # the killed writer's temporary file went with the next write of last.ckpt


# -- nplm-train: run folders, W&B, memory ---------------------------------------------------------------------
@pytest.mark.slow  # three nplm-train command lines composed and checked
def test_a_run_folder_that_cannot_be_made_is_one_line(tmp_path):
    one_line(nplm(tmp_path, nplm_train, *TOY, "hydra.run.dir=/proc/nope"),
             "hydra.run.dir=/proc/nope: cannot be written in /proc (No such file or directory)")
    (tmp_path / "file").write_text("x")
    one_line(nplm(tmp_path, nplm_train, *TOY, f"hydra.run.dir={tmp_path / 'file' / 'r'}"),
             f"hydra.run.dir={tmp_path / 'file' / 'r'}: {tmp_path / 'file'} is a file, not a folder; give "
             "hydra.run.dir a folder you can write")
    one_line(nplm(tmp_path, nplm_train, "-m", *TOY, "seed=1,2", "hydra.sweep.dir=/proc/nope"),
             "hydra.sweep.dir=/proc/nope: cannot be written in /proc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_read_only_run_folder_is_one_line(tmp_path, mounts):
    ro = mounts(tmp_path / "ro", "ro,size=1m")
    one_line(nplm(tmp_path, nplm_train, *TOY, f"hydra.run.dir={ro / 'r'}"),
             f"hydra.run.dir={ro / 'r'}: cannot be written in {ro} (Read-only file system)")


@pytest.mark.parametrize("override, message", [
    ("logger.wandb.project=a/b", "logger.wandb.project=a/b: must be a non-empty name of at most 128 characters "
                                 "without any of: / \\ # ? % : (W&B's rule)"),
    ("logger.wandb.entity=me:you", "logger.wandb.entity=me:you: must be a non-empty name"),
    (f"logger.wandb.tags=[{'x' * 65}]", "must be a list of strings of 1 to 64 characters each, e.g. [a,b] (W&B's limit)"),
    ("logger.wandb.mode=live", "logger.wandb.mode=live: must be one of: offline, online, disabled"),
])
def test_settings_wandb_refuses_are_refused_before_anything_runs(tmp_path, override, message):
    one_line(nplm(tmp_path, nplm_train, *TOY, "logger=wandb", override, "hydra.run.dir=r"), message)
    assert not (tmp_path / "r").exists()


def test_what_wandb_still_refuses_at_its_start_is_one_line(tmp_path, monkeypatch):
    """The schema's rules are W&B's as of now; a rule W&B adds later is still one line, not a traceback."""
    from omegaconf import OmegaConf

    import wandb
    from nplm.tracking.records import build_loggers

    def refuse(*args, **kwargs):
        raise wandb.errors.UsageError("Invalid project name 'x': a new rule")

    monkeypatch.setattr(wandb, "init", refuse)
    cfg = OmegaConf.create({"logger": {"csv": False, "wandb": {"project": "x", "mode": "offline"}}})
    with pytest.raises(UserError) as err:
        build_loggers(cfg, tmp_path, "run", None)
    assert str(err.value) == ("logger.wandb: W&B refuses these settings (Invalid project name 'x': a new rule); "
                              "change the logger.wandb key it names, or use logger=csv")


def test_a_model_that_cannot_fit_in_memory_is_refused_before_it_is_allocated(tmp_path):
    from nplm.training.memory import check_memory

    vocab = {"tokens": [f"w{i}" for i in range(1000)], "counts": [1] * 1000, "unk": "w0", "joiner": " ",
             "tokenizer": "whitespace"}
    cfg = compose_cfg(tmp_path, "corpus=toy", "model.embed_dim=100000", "model.hidden_dim=100000")
    with pytest.raises(UserError) as err:
        check_memory(cfg, vocab)
    text = str(err.value)
    assert text.startswith("model.embed_dim=100000 model.hidden_dim=100000: the run needs about ")
    assert "optimizer state" in text and "its largest weights are model.H.weight [100000, 400000]" in text
    assert text.endswith("lower model.embed_dim, model.hidden_dim")
    check_memory(compose_cfg(tmp_path, *TOY_FAST), vocab)  # a small one fits
    big_batch = compose_cfg(tmp_path, "corpus=toy", "data.batch_size=10000000")
    with pytest.raises(UserError, match=r"^data.batch_size=10000000: the run needs about .*: lower data.batch_size$"):
        check_memory(big_batch, vocab)


@pytest.mark.parametrize("name,options", head_params())
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_memory_estimate_builds_every_head_on_the_meta_device(tmp_path, name, options):
    """Every registered head (each of its variants), with a balanced tree where it uses one."""
    from nplm.heads import head_class
    from nplm.training.memory import estimate

    V = 1000
    vocab = {"tokens": [f"w{i}" for i in range(V)], "counts": list(range(V, 0, -1)), "unk": "w0", "joiner": " ",
             "tokenizer": "whitespace"}
    cfg = compose_cfg(tmp_path, "corpus=toy", "model.embed_dim=16", "model.hidden_dim=32",
                      *head_overrides(name, options))
    tree = balanced_tree(V) if head_class(name).uses_tree(options) else None
    need = estimate(cfg, vocab, tree)
    assert need is not None and need["vocab_size"] == V and need["params"] > V * 32  # the output layer alone


@pytest.mark.slow  # the corpus read and the model's size estimated
def test_nplm_train_refuses_the_issues_model_in_one_line_and_writes_nothing(tmp_path):
    one_line(nplm(tmp_path, nplm_train, *TOY, "model.embed_dim=100000", "model.hidden_dim=100000",
                  "hydra.run.dir=r"),
             "model.embed_dim=100000 model.hidden_dim=100000: the run needs about ", "lower model.embed_dim")
    assert not (tmp_path / "r").exists()


# -- data that changes or vanishes ----------------------------------------------------------------------------
def corpus_files(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["the cat sat on the mat", "a dog sat on the log", "the cat saw a dog"] * 30
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return ["corpus=text_files", *(f"corpus.{s}={folder / f'{s}.txt'}" for s in ("train", "valid", "test"))]


def test_a_changed_or_vanished_data_file_is_named(tmp_path):
    from nplm.tracking.records import check_same_data, write_json

    run = tmp_path / "sweep" / "0"
    run.mkdir(parents=True)
    write_json(run / "metrics.json", {"data_files": {"/d/train.txt": "a" * 64, "/d/valid.txt": "b" * 64}})
    check_same_data(run, {"/d/train.txt": "a" * 64, "/d/valid.txt": "b" * 64}, resuming=True, sweep=False)
    check_same_data(run, {"/cache/train.txt": "a" * 64, "/d/valid.txt": "b" * 64}, resuming=True, sweep=False)
    with pytest.raises(UserError, match=r"^/d/train.txt: changed since this run read it \(.*sha256 aaaaaaaaaaaa\.\.\., "
                                        r"now cccccccccccc\.\.\.\); put the file back as it was"):
        check_same_data(run, {"/d/train.txt": "c" * 64, "/d/valid.txt": "b" * 64}, resuming=True, sweep=False)
    with pytest.raises(UserError, match=r"^/d/valid.txt: this run was trained on that file"):
        check_same_data(run, {"/d/train.txt": "a" * 64}, resuming=True, sweep=False)
    other = tmp_path / "sweep" / "1"  # another job of the sweep, after the file was edited
    with pytest.raises(UserError, match=r"^/d/train.txt: changed since job 0 of this sweep read it"):
        check_same_data(other, {"/d/train.txt": "c" * 64}, resuming=False, sweep=True)
    check_same_data(other, {"/d/other.txt": "c" * 64}, resuming=False, sweep=True)  # other files: other data
    write_json(run / "metrics.json", {"data_files": {"/d/train.txt": "a" * 64, "/d/valid.txt": "a" * 64}})
    with pytest.raises(UserError, match=r"^/d/train.txt: changed since"):  # its old content is still another file's
        check_same_data(run, {"/d/train.txt": "c" * 64, "/d/valid.txt": "a" * 64}, resuming=True, sweep=False)


@pytest.mark.slow  # a run through nplm-train, then three refused resumes
def test_a_resume_after_the_data_changed_is_refused_naming_the_file(tmp_path):
    data = corpus_files(tmp_path / "data")
    run = tmp_path / "r"
    done = nplm(tmp_path, nplm_train, *TOY, *data, "trainer.max_epochs=1", f"hydra.run.dir={run}")
    assert done.code == 0, done.err[-3000:]
    train = tmp_path / "data" / "train.txt"
    train.write_text(train.read_text().replace("mat", "hat"))
    more = ["trainer.max_epochs=2", "resume_allow_changes=true"]
    one_line(nplm(tmp_path, nplm_train, *TOY, *data, *more, f"hydra.run.dir={run}", f"resume={run}"),
             f"{train}: changed since this run read it", "put the file back as it was, or start a new run")
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"  # the run as it was
    train.unlink()
    one_line(nplm(tmp_path, nplm_train, *TOY, *data, *more, f"hydra.run.dir={run}", f"resume={run}"),
             f"corpus.train={train}: no such file")
    ckpt = run / "checkpoints" / "last.ckpt"  # nplm-eval of the run's own corpus reads that file too
    one_line(nplm(tmp_path, evaluate.main, str(ckpt), "--split", "test"), f"{train}: no such file")


# -- one writer per run folder --------------------------------------------------------------------------------
def test_a_second_lock_on_a_run_folder_is_refused_naming_the_first_process(tmp_path):
    from nplm.tracking.lock import LOCK_NAME, RunLock, holder

    code = ("import sys, time; from nplm.tracking.lock import RunLock; lock = RunLock(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(60)")
    first = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert first.stdout.readline().strip() == "locked"
        message = (f"{tmp_path}: another nplm-train (process {first.pid}) is writing this run folder; wait for it "
                   "to end, or give this run another folder (hydra.run.dir=...)")
        assert holder(tmp_path) == message
        with pytest.raises(UserError) as err:
            RunLock(tmp_path)
        assert str(err.value) == message
    finally:
        first.kill()
        first.wait()
    assert (tmp_path / LOCK_NAME).exists() and holder(tmp_path) is None  # killed: a stale lock
    with RunLock(tmp_path):  # taken over
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()  # removed when the run ends


@pytest.mark.slow
def test_two_nplm_train_on_one_run_folder_the_second_is_refused(tmp_path):
    mark, run = tmp_path / "mark", tmp_path / "r"
    first = runner(tmp_path, "pause", "*", 2, mark, *TOY, "trainer.max_epochs=2", f"hydra.run.dir={run}")
    wait_for(mark / "paused", first)
    hydra_config = (run / ".hydra" / "config.yaml").read_text()
    second = nplm(tmp_path, nplm_train, *TOY, "trainer.max_epochs=2", "seed=5", f"hydra.run.dir={run}")
    one_line(second, f"{run}: another nplm-train (process {first.pid}) is writing this run folder")
    assert (run / ".hydra" / "config.yaml").read_text() == hydra_config  # refused before Hydra wrote there
    (mark / "go").touch()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "finished" and record["seed"] == 1234


def test_two_train_calls_on_one_folder_the_second_touches_nothing(tmp_path):
    """The lock in `train()` itself (sweeps and tests call it without the command line). A lock taken by
    another open of the file counts as another writer, in this process too (flock locks open files)."""
    from nplm.training.train import train
    from nplm.tracking.lock import RunLock

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("the first run's rows\n")
    with RunLock(run):  # as if another process held it
        with pytest.raises(UserError) as err:
            train(compose_cfg(tmp_path, *TOY_FAST))
    assert str(err.value).startswith(f"{run}: another nplm-train (process {os.getpid()}) is writing this run folder")
    assert (run / "metrics.csv").read_text() == "the first run's rows\n"


# -- the other commands' outputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("command, args", [
    ("evaluate", ["{ckpt}", "--json", "{out}/x.json"]),
    ("mix", ["{ckpt}", "--json", "{out}/x.json"]),
    ("mix", ["{ckpt}", "--data-dir", "{out}/data"]),
    ("evaluate", ["{ckpt}", "--data-dir", "{out}/data"]),
    ("compare", ["{run}", "--markdown", "{out}/t.md"]),
    ("compare", ["{run}", "--csv", "{out}/t.csv"]),
    ("compare", ["{run}", "--plots", "{out}/plots"]),
    ("compare", ["{run}", "--html", "{out}/r.html"]),
])
def test_other_commands_outputs_that_cannot_be_written_are_one_line(tmp_path, toy_run, mounts, command, args):
    ro = mounts(tmp_path / "ro", "ro,size=1m")
    main = {"evaluate": evaluate.main, "mix": mix.main, "compare": compare.main}[command]
    names = {"ckpt": toy_run.last, "run": str(toy_run.folder)}
    for out, reason in (("/proc/nope", "No such file or directory"), (str(ro), "Read-only file system")):
        argv = [a.format(out=out, **names) for a in args]
        flag = next(a for a in argv if a.startswith("--"))
        one_line(nplm(tmp_path, main, *argv), f"{flag}={argv[argv.index(flag) + 1]}: cannot be written", reason)


# matplotlib's layout warning on long axis labels (the run folder's path in the plots) is not this test's line
@pytest.mark.filterwarnings("ignore:Tight layout not applied")
def test_nplm_compare_on_a_full_disk_leaves_no_partial_report(tmp_path, toy_run, mounts):
    disk = mounts(tmp_path / "disk", "size=256k")
    (disk / "r.html").write_text("the previous report\n")
    fill(disk)
    line = one_line(nplm(tmp_path, compare.main, str(toy_run.folder), "--html", str(disk / "r.html")),
                    f"--html={disk / 'r.html'}: cannot be written (No space left on device); the disk is full")
    assert line
    assert (disk / "r.html").read_text() == "the previous report\n" and temps(disk) == []


def test_writers_of_records_trees_and_reports_go_through_the_one_helper():
    """Every file nplm writes goes through nplm.files (a temporary name, then a rename): no writer opens
    its target for writing itself."""
    import re

    src = Path(__file__).resolve().parents[1] / "src" / "nplm"
    direct = re.compile(r"(?<!arg)\.write_(text|bytes)\(|(?<!\w)open\([^)]*[\"'][wa]b?[\"']|torch\.save\([^,]+,(?!\s*buffer)")
    allowed = {"files/__init__.py",  # the helper
               "ngram/arpa.py",  # ARPA export to a path the caller gives
               # downloads and unpacked archives (streamed and hashed into mkstemp files, renamed when verified);
               # the id cache (a folder of files renamed whole)
               "data/sources.py", "data/id_cache.py"}
    hits = [f"{p.relative_to(src)}:{i}" for p in src.rglob("*.py") if str(p.relative_to(src)) not in allowed
            for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert hits == []


def test_a_full_disk_while_the_id_cache_is_built_is_one_line_and_leaves_no_part(tmp_path, monkeypatch):
    """The id cache is built in a temporary folder renamed into place; a full disk stops it in one line
    and removes the temporary folder."""
    import errno

    from omegaconf import OmegaConf

    from conftest import compose_cfg
    from nplm.data import id_cache
    from nplm.data.corpora.ptb import PTB
    from nplm.data.datamodule import LMDataModule

    copy = tmp_path / "ptb"
    copy.mkdir()
    for split in ("train", "valid", "test"):
        (copy / f"ptb.{split}.txt").write_text(" the cat sat \n a dog ran \n" * 10)
    monkeypatch.setattr(PTB, "member_sha256", {})  # not the published files
    cfg = compose_cfg(tmp_path, "corpus=ptb", f"corpus.path={copy}", "corpus.verify=false")

    def full_disk(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(id_cache, "_write_ids", full_disk)
    dm = LMDataModule(OmegaConf.to_container(cfg.corpus, resolve=True), 3, 8, 16, data_dir=cfg.paths.data_dir)
    with pytest.raises(UserError) as err:
        dm.setup()
    message = str(err.value)
    assert "\n" not in message and message.endswith(": cannot be written (No space left on device); free space "
                                                    "under paths.data_dir, or point paths.data_dir at another disk")
    assert [p.name for p in Path(cfg.paths.data_dir).rglob("*.part")] == []
