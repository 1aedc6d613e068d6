"""What the experiment drivers share (their loop is experiments/driver.py): train one row unless it is done,
resuming a killed run, summarise its run record for the result files, and mark a result's provenance.

A row's run lives in its own folder (`hydra.run.dir`); a row is done when its metrics.json says
"finished". The drivers write one small JSON result per row and build their README tables from
those files only.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
DATA_DIR = os.environ.get("NPLM_DATA_DIR", str(ROOT / "data_cache"))  # as conf/paths/default.yaml


def compose(overrides: list[str]):
    """The config `nplm-train *overrides` composes (unresolved: its run folders are set where it is trained)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    from nplm.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def corpus_datamodule(overrides: list[str]):
    """The set-up DataModule of the corpus that `nplm-train *overrides` would train on."""
    from nplm.data.datamodule import LMDataModule

    cfg = compose(overrides)
    dm = LMDataModule(dict(cfg.corpus), cfg.model.context_size, 1, 1024, data_dir=DATA_DIR)
    dm.setup()
    return dm


def class_ngram(num_classes: int, dm, order: int = 3):
    """Back-off class n-gram on exchange-algorithm classes (clustered once); the within-class add-a
    smoothing of P(w | c) (0.5-8) and the pooling of rare words (`min_count` 0, 2 or 3) chosen on
    validation."""
    from nplm.inference.mixture import ngram_log_probs, perplexity
    from nplm.ngram.class_based import ClassNgram
    from nplm.ngram.class_based import pool_rare_words

    train, V = dm.ids["train"], len(dm.vocab)
    clustered = ClassNgram(order=order, num_classes=num_classes, min_count=0).fit(train, V)  # min_count 0 as is
    pooled = [clustered, *(ClassNgram(order=order, num_classes=num_classes, min_count=k)
                           .fit(train, V, classes=pool_rare_words(clustered.classes, clustered.word_counts, k))
                           for k in (2, 3))]
    models = [model.with_word_smoothing(a) for model in pooled for a in (0.5, 1.0, 2.0, 4.0, 8.0)]
    return min(models, key=lambda m: perplexity(ngram_log_probs(m, dm, "valid")))


def count(n: int, noun: str) -> str:
    """`n` and its noun, plural unless n is 1: count(1, "torch thread") = "1 torch thread"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def machine() -> str:
    import torch

    threads = count(torch.get_num_threads(), "thread")
    return f"{platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__} with {threads}"


def read_record(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else None


FORWARDED = (signal.SIGTERM, signal.SIGHUP)  # what `kill PID` or a closed terminal sends the driver alone


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stop_with(driver: int) -> None:
    """In the child, before it runs its program (Linux): a SIGTERM when the driver dies, even by a SIGKILL,
    which no handler of the driver's sees (prctl PR_SET_PDEATHSIG); a child whose driver is already gone
    stops at once."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != driver:
        os.kill(os.getpid(), signal.SIGTERM)


def run_child(argv: list[str], log) -> int:
    """Run `argv` in the repository with its output to `log`, and return its exit code. A SIGTERM or SIGHUP
    the driver gets is passed on to the child (the training run stops at its checkpoint, as it would have
    if killed itself), the driver waits for it to end and then stops with the same signal: killing a
    driver never leaves its training run going on in (and holding) the row's folder. On Linux a driver killed
    by SIGKILL takes its child with it too (`_stop_with`)."""
    die_with_driver = functools.partial(_stop_with, os.getpid()) if sys.platform == "linux" else None
    child = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_driver)
    received = []

    def forward(signum, frame):
        received.append(signum)
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        os.kill(os.getpid(), received[0])  # the driver's own default action (or its caller's handler)
    return code


def train_row(name: str, overrides: list[str], run_dir: Path, threads: int, rerun: bool = False) -> dict | None:
    """`nplm-train *overrides` into `run_dir` (resumed from its last checkpoint if a run was killed),
    unless it already finished; returns the finished run record, or None (with a message) if it failed.
    `rerun`: run a finished row again from its last checkpoint, so that a raised `trainer.max_epochs`
    trains on (and the same one only tests again). Its output is appended to `<run_dir>.log`."""
    record = read_record(run_dir)
    if rerun or record is None or record.get("status") != "finished":
        command = ["nplm-train", *overrides, f"threads={threads}", f"hydra.run.dir={run_dir}"]
        if (Path(run_dir) / "checkpoints" / "last.ckpt").exists():
            command.append(f"resume={run_dir}")
            if rerun:  # the chosen row goes on, also with overrides changed since it ran
                command.append("resume_allow_changes=true")
        print(f"{name}: {' '.join(command)}", flush=True)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(f"{run_dir}.log")
        with open(log_path, "a") as log:
            code = run_child([sys.executable, "-m", "nplm.cli.train", *command[1:]], log)
        record = read_record(run_dir)
        status = record["status"] if record else "missing"
        if code != 0 or status != "finished":
            print(f"{name}: exit {code}, status {status}; see {log_path}", flush=True)
            return None
    return record


def converged(record: dict | None, patience: int, max_epochs: int) -> bool:
    """The run ended by early stopping (or at the `max_epochs` safety net), not by a time limit."""
    history = (record or {}).get("history") or []
    if (record or {}).get("status") != "finished" or not history:
        return False
    return stopped_by(history, patience) == "early stopping" or len(history) >= max_epochs


def train_to_convergence(name: str, overrides: list[str], run_dir: Path, threads: int, deadline: float | None,
                         patience: int, max_epochs: int, margin_s: float = 120) -> dict | None:
    """A row trained to early stopping across calls: None (with a line saying why) when it did not
    finish this time, else its finished run record, converged or not. A converged run is returned as it
    is; any other (killed, or stopped by an earlier budget) goes on from its last checkpoint. `deadline`
    (Unix time): the run stops `margin_s` before it (`stop_at`), leaving time to test its best checkpoint;
    a row with less than twice that left does not start, and its last finished record (an earlier
    budget's) is returned as it is."""
    record = read_record(run_dir)
    if converged(record, patience, max_epochs):
        return record
    budget = []
    if deadline is not None:
        if deadline - time.time() < 2 * margin_s:
            print(f"{name}: not started, less than {2 * margin_s:.0f} s of the budget left", flush=True)
            return record if record and record.get("status") == "finished" else None
        budget = [f"stop_at={deadline - margin_s:.0f}"]
    # go on from the last checkpoint, whatever stopped it (a kill, or the budget: then stop_at differs)
    rerun = (Path(run_dir) / "checkpoints" / "last.ckpt").exists()
    record = train_row(name, [*overrides, *budget], run_dir, threads, rerun=rerun)
    if record is not None and not record.get("history"):
        print(f"{name}: stopped before its first epoch ended; no result yet (the next call goes on)", flush=True)
        return None
    return record


def best_epoch(history: list[dict]) -> int:
    """The epoch (counted from 1) with the lowest val/ppl in a run record's history."""
    return 1 + min(range(len(history)), key=lambda i: history[i]["val/ppl"])


def epoch_steps(history: list[dict]) -> list[int] | None:
    """The optimizer steps each epoch of a run record's history made (its `step` column: the count at the
    epoch's end), or None for records without the column."""
    if not history or not all("step" in r for r in history):
        return None
    return [history[0]["step"]] + [b["step"] - a["step"] for a, b in zip(history, history[1:])]


def cut_epochs(history: list[dict]) -> list[int]:
    """The epochs (counted from 1) a time limit cut short: fewer optimizer steps than the longest epoch. A
    run resumed after an earlier budget's limit goes on from the cut epoch's end, so a cut epoch can sit
    inside a finished run's history; [] for records without the `step` column."""
    steps = epoch_steps(history)
    return [] if steps is None or len(steps) < 2 else [i + 1 for i, n in enumerate(steps) if n < max(steps)]


def last_epoch_cut(history: list[dict]) -> bool:
    """Whether a time limit (`trainer.max_time` or `stop_at`) cut the run's last epoch short (`cut_epochs`);
    records without the `step` column fall back to its time (a cut epoch is under 0.8x the median), which a
    shared machine's varying speed can fool."""
    if epoch_steps(history) is not None and len(history) > 1:
        return len(history) in cut_epochs(history)
    times = sorted(r["train/epoch_time_s"] for r in history)
    return len(history) > 2 and history[-1]["train/epoch_time_s"] < 0.8 * times[len(times) // 2]


def stopped_by(history: list[dict], patience: int) -> str:
    """What ended a run: early stopping (`patience` epochs without a better val/ppl, the last one a whole
    epoch), a time limit (`last_epoch_cut`), or the epoch cap."""
    best = best_epoch(history)
    if last_epoch_cut(history):
        return f"time limit ({len(history) - best} epochs after the best)"
    return "early stopping" if len(history) - best >= patience else "epoch limit"


def finished(result: dict) -> bool:
    """A row that ran as planned, which a target line may count: not marked unconverged, not stopped by a
    time limit (its last epoch cut, fewer epochs than planned), and with no epoch cut short inside its run (a
    resume before nplm resumed inside an epoch went on from the cut epoch's end: that epoch's other batches
    were never trained)."""
    inner = [e for e in result.get("cut_epochs") or [] if e < (result.get("epochs") or 0)]
    return (result.get("converged") is not False and not (result.get("stopped_by") or "").startswith("time limit")
            and not inner)


UNFINISHED = "*"  # on a row that did not finish (a time limit stopped it); target lines count finished rows only


def row_marks(result: dict) -> str:
    """A table cell's marks: UNFINISHED where the row did not finish, and its `provenance_mark`."""
    return ("" if finished(result) else UNFINISHED) + provenance_mark(result)


def seconds_per_epoch(epoch_times: list[float], cut: bool | list[int]) -> float:
    """The mean time of the whole epochs: a `cut` last epoch (True), or the epochs (counted from 1) of a
    list of cut ones, are left out."""
    cut = [len(epoch_times)] if cut is True else (cut or [])
    whole = [t for i, t in enumerate(epoch_times) if i + 1 not in cut] or epoch_times
    return round(sum(whole) / len(whole), 1)


def machine_line(machine: dict) -> str:
    """A run record's machine in words: platform, CPUs, torch threads, and its GPU where it had one."""
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ""
    return f"{machine['platform']}, {machine['cpus']} CPUs, {count(machine['torch_threads'], 'torch thread')}{gpu}"


def run_summary(record: dict, command: str) -> dict:
    """The figures a replication table reports about one finished run (the time of an epoch: of the whole ones)."""
    history = record["history"]
    machine = record["machine"]
    return {"command": command, "git_commit": record["git_commit"],
            "machine": machine_line(machine),
            "epochs": len(history),
            "best_epoch": best_epoch(history),
            "train_s_per_epoch": seconds_per_epoch([r["train/epoch_time_s"] for r in history], last_epoch_cut(history)),
            "wall_time_s": round(record["wall_time_s"]),
            "valid": record["metrics"]["val/ppl_best"], "test": record["metrics"]["test/ppl"]}


def parameters(checkpoint: str) -> int:
    """The trained parameters of a checkpoint's model and head (a tied table counted once, as `Module.parameters`
    yields it)."""
    from nplm.training.checkpoint import load_model

    return sum(p.numel() for p in load_model(checkpoint).parameters())


def load_result(results: Path, name: str) -> dict | None:
    path = Path(results) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


ALLOW_DIRTY = "NPLM_ALLOW_DIRTY"  # =1: keep a result written from uncommitted code or an unrecorded commit, marked
MARK = "\u2020"  # the dagger every table puts on a figure from such a result


def result_commit(result: dict) -> str | None:
    """The commit a result file records: "git_commit" (the replication drivers) or "commit" (scale)."""
    return result.get("git_commit", result.get("commit"))


def clean_commit(commit: str | None) -> bool:
    """A commit that names the code exactly: recorded (not "unknown", the benchmarks' word for none), and not
    "-dirty" / "+dirty" (uncommitted changes)."""
    return bool(commit) and commit != "unknown" and not commit.endswith("dirty")


def short_commit(commit: str | None) -> str:
    """A commit as a README names it: "3a4b020", "3a4b020-dirty" (or "+dirty"), or "unrecorded"."""
    if not commit or commit == "unknown":
        return "unrecorded"
    return commit[:7] + ("" if clean_commit(commit) else commit[-6:])


def provenance_mark(result: dict | None) -> str:
    """MARK for a result from uncommitted code or an unrecorded commit, else "" (also for no result)."""
    return "" if result is None or clean_commit(result_commit(result)) else MARK


def provenance_footnote(results) -> list[str]:
    """The one line explaining MARK, as a list to add to a README: empty when no result in `results` is marked."""
    commits = {result_commit(r) for r in results if provenance_mark(r)}
    if not commits:
        return []
    dirty = sorted(f"`{short_commit(c)}`" for c in commits if c and c != "unknown")
    unrecorded = any(not c or c == "unknown" for c in commits)
    where = [f"uncommitted code ({', '.join(dirty)})"] * bool(dirty) + ["an unrecorded commit"] * unrecorded
    return [f"{MARK} trained or measured from {' or '.join(where)}: no commit holds exactly the code behind the "
            f"figure; run the row again from a clean checkout to replace it."]


def writable(name: str, result: dict) -> bool:
    """Whether a result may be written: its commit is clean, or the environment has NPLM_ALLOW_DIRTY=1 (then its
    tables mark it). Else one line says why not; the row's run folder stays, so the driver run again with the
    variable writes it."""
    commit = result_commit(result)
    if clean_commit(commit) or os.environ.get(ALLOW_DIRTY) == "1":
        return True
    print(f"{name}: result not written, commit {commit or 'unrecorded'}: commit the code and run the row again, "
          f"or {ALLOW_DIRTY}=1 to keep it, marked {MARK}", flush=True)
    return False


def write_result(results: Path, name: str, result: dict) -> bool:
    """Write results/<name>.json unless `writable` refuses it; returns whether it was written."""
    if not writable(name, result):
        return False
    Path(results).mkdir(parents=True, exist_ok=True)
    (Path(results) / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return True


def pct(value: float, reference: float, digits: int = 1) -> str:
    """How far `value` sits from `reference`, as a table cell: "+3.4%" (`digits` decimals)."""
    return f"{100 * (value / reference - 1):+.{digits}f}%"


def valid_test(valid: float | None, test: float | None, digits: int = 0) -> str:
    """A "valid / test" table cell; empty when the row has not been run."""
    return "" if valid is None else f"{valid:.{digits}f} / {test:.{digits}f}"
