"""Run directories across invocations: skipping finished sweep jobs and resuming killed runs.

- A multirun re-run with the same `hydra.sweep.dir` skips every job whose metrics.json says
  "finished" with the same overrides, continues killed jobs from their last checkpoint, and runs the
  missing and failed ones again (other templates start the whole sweep again).
- `resume=true` continues a killed run from its last checkpoint in its own folder: the run folder
  itself first (a fixed `hydra.run.dir`), then the earlier runs of the same experiment with the same
  training overrides, newest first. A finished one ends the search (nothing to do); a run still
  alive, one killed before its first checkpoint, and one with other overrides are passed over, and
  when nothing can be continued one line says what was looked at and why, and the run starts afresh
  (in a run folder of its own: a fixed run folder that holds a run with other overrides is refused).
  `resume=<run dir or .ckpt>` names the run; one with other overrides is refused, naming the keys,
  unless `resume_allow_changes=true` (e.g. to raise `trainer.max_epochs` of a finished run), which
  also lets `resume=true` take the newest run whatever its overrides.
- Every record says which process writes it (`pid`, `host`): a "running" record whose process is
  gone was killed, and one without a checkpoint is marked "killed" with `checkpoint: null` when
  `resume` or `nplm-compare` first sees it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
from pathlib import Path

from nplm.errors import UserError
from nplm.files import atomic_write, pid_alive

log = logging.getLogger(__name__)

HYDRA_ONLY = {".hydra", "train.log"}  # what Hydra writes into a job folder before nplm runs
# What a run writes as it trains; a fresh start in an old job folder removes them first.
RUN_OUTPUTS = ("metrics.csv", "csv", "checkpoints", "wandb", "wandb_id.txt")
# Keys that change how a run is watched or continued, not what it trains.
NOT_TRAINING = ("resume", "resume_allow_changes", "verbose", "progress.interval",
                "stop_at", "trainer.max_time",  # (when to stop, not what is trained: nplm.training.stopping)
                "steps_per_execution",  # (the same updates, grouped)
                "threads")  # (the record's machine.torch_threads says it)


def override_key(override: str) -> str:
    """The key a command-line override sets (`+a.b=1`, `~a.b`: a.b)."""
    return override.split("=", 1)[0].lstrip("+~")


def job_overrides() -> list[str]:
    """The job's command-line overrides, without those that do not change what is trained."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return training_overrides(HydraConfig.get().overrides.task)


def training_overrides(overrides: list[str]) -> list[str]:
    """`overrides` without those in NOT_TRAINING, sorted (also for records written before a key joined it)."""
    return sorted(o for o in overrides if override_key(o) not in NOT_TRAINING)


def override_changes(stored: list[str], current: list[str]) -> list[str]:
    """`key=old -> new` for every key set differently (`(default)` where one side leaves it unset)."""
    old = {override_key(o): o.split("=", 1)[-1] if "=" in o else o for o in stored}
    new = {override_key(o): o.split("=", 1)[-1] if "=" in o else o for o in current}
    return [f"{k}={old.get(k, '(default)')} -> {new.get(k, '(default)')}"
            for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def read_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def process_alive(record: dict) -> bool | None:
    """Whether the process that wrote a "running" record still runs; None for a record from another
    host, or from before records named their process: nplm cannot tell."""
    pid = record.get("pid")
    if not isinstance(pid, int) or record.get("host") != socket.gethostname():
        return None
    return pid != os.getpid() and pid_alive(pid)


def observed_status(run_dir: Path, record: dict | None) -> str | None:
    """The record's status as it is now: a "running" record whose process is gone is "killed"; one
    killed before its first checkpoint is written back as such (status "killed", checkpoint null)."""
    if record is None or record.get("status") != "running" or process_alive(record) is not False:
        return None if record is None else record.get("status")
    if _last_checkpoint(run_dir) is None and record.get("checkpoint", "?") is not None:
        atomic_write(run_dir / "metrics.json", json.dumps({**record, "status": "killed", "checkpoint": None,
                                                           "error": "killed before its first checkpoint"}, indent=2) + "\n")
    return "killed"


def finished_job(out_dir: Path, overrides: list[str]) -> dict | None:
    """metrics.json of a finished job with these overrides in `out_dir`, else None."""
    record = read_record(out_dir)
    if record and record.get("status") == "finished" and training_overrides(record.get("overrides") or []) == overrides:
        return {**record, "dir": str(out_dir)}
    return None


LIMITS = ("trainer.max_epochs", "trainer.max_steps")  # raised, a finished run trains on
CHECKPOINT_GROUPS = ("model", "head", "tree", "corpus")  # what a checkpoint holds and refuses to change


def finished_named_run(resume, config: dict) -> dict | None:
    """`resume=<a run folder>` naming a finished run with nothing left to train: its record (with `dir`), which
    nothing may rewrite; else None. `config`: the resolved config asked for now. Nothing is left where it trains
    what the run's own config.yaml trained or differs from it without raising `trainer.max_epochs` or
    `trainer.max_steps` (the optimizer's settings, say: nothing would train). Raised limits train on; another
    model, head, tree or corpus goes on to the checkpoint's checks, which refuse it before anything is written."""
    if not names_a_run(resume) or is_multirun():
        return None
    run = Path(str(resume)).expanduser()
    record = read_record(run) if run.is_dir() else None
    if record is None or record.get("status") != "finished":
        return None
    try:
        from omegaconf import OmegaConf

        given = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=True)
    except Exception:  # no readable config: the usual checks decide
        return None
    old, new = _training_keys(given), _training_keys(config)
    changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}

    def limit(value) -> float:
        return math.inf if value in (None, -1) else float(value)

    if any(limit(new.get(k)) > limit(old.get(k)) for k in changed & set(LIMITS)):
        return None  # something left to train
    if any(k.split(".")[0] in CHECKPOINT_GROUPS for k in changed):
        return None  # (another model, head, tree or corpus than the checkpoint's: refused by its checks, nothing written)
    return {**record, "dir": str(run)}


def _training_keys(config: dict, prefix: str = "") -> dict:
    """`config` flattened to dotted keys, without those that do not change what is trained (`NOT_TRAINING`,
    where files go, the trackers)."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if name in NOT_TRAINING or name in ("paths", "logger", "hydra", "progress", "experiment_name"):
            continue
        if isinstance(value, dict):
            out.update(_training_keys(value, name + "."))
        else:
            out[name] = value
    return out


def _last_checkpoint(run_dir: Path) -> Path | None:
    path = run_dir / "checkpoints" / "last.ckpt"
    return path if path.is_file() else None


RESUME_OFF = (None, False, "false", "null")  # resume=null: a fresh run
RESUME_NEWEST = (True, "true")  # resume=true: the newest run with these overrides (any other value names one)


def names_a_run(resume) -> bool:
    """Whether `resume` names a run folder or a checkpoint (neither off nor true)."""
    return resume not in RESUME_OFF and resume not in RESUME_NEWEST


def resolve_resume(resume, out_dir: Path, overrides: list[str], allow_changes: bool = False
                   ) -> tuple[Path, Path | None]:
    """(the folder the run writes to, the checkpoint to continue from or None).

    Raises `UserError` before anything is written when the run to continue was started with other
    overrides and `allow_changes` is false."""
    if is_multirun():
        # A re-run sweep: the job's own folder; a killed or crashed job goes on from its last checkpoint.
        record, ckpt = read_record(out_dir), _last_checkpoint(out_dir)
        if record is not None and ckpt is not None and record.get("status") != "finished":
            _check_same(out_dir, record, overrides, allow_changes)
            log.info("continuing %s from %s", out_dir, ckpt)
            return out_dir, ckpt
        if resume in RESUME_NEWEST or not Path(str(resume)).is_file():
            return out_dir, None
    if resume in RESUME_OFF:
        record = read_record(out_dir)
        if record is not None and record.get("status") == "stopped" and _last_checkpoint(out_dir) is not None:
            raise UserError(f"hydra.run.dir={out_dir}: holds a run that was stopped before its end (by "
                            f"{(record.get('stopped') or {}).get('by')}); add resume=true to continue it, or give "
                            "another hydra.run.dir")
        return out_dir, None
    if resume in RESUME_NEWEST:
        old = latest_to_continue(out_dir, overrides, allow_changes)
        if old is None:  # nothing to continue: a fresh start
            return out_dir, None
        if finished_job(old, overrides) is not None:  # nothing to do (train() skips it)
            if old != out_dir:
                discard_fresh(out_dir)
            return old, None
    else:
        path = Path(str(resume)).expanduser()
        if path.is_file():  # a checkpoint: a new run starts from its weights and state
            return out_dir, path
        if not path.is_dir():
            raise UserError(f"resume={resume}: no such run folder or checkpoint; use resume=true or a <run> folder")
        if _last_checkpoint(path) is None:
            raise UserError(f"resume={resume}: no checkpoints/last.ckpt in that folder; give a .ckpt file instead")
        old = path
        _check_same(old, read_record(old) or {}, overrides, allow_changes)
    if old != out_dir:
        discard_fresh(out_dir)
    log.info("resuming %s from %s", old, _last_checkpoint(old))
    return old, _last_checkpoint(old)


def latest_to_continue(out_dir: Path, overrides: list[str], allow_changes: bool) -> Path | None:
    """`resume=true`: the run to continue (a killed one with a checkpoint), a finished one (nothing
    to do), or None: start afresh in `out_dir`, after one line saying what was looked at and why each
    was passed over. Candidates: `out_dir` itself, then its siblings (the experiment's other runs),
    newest first."""
    siblings = [p for p in out_dir.parent.iterdir() if p.is_dir() and p != out_dir] if out_dir.parent.is_dir() else []
    siblings.sort(key=lambda p: (p / "metrics.json").stat().st_mtime if (p / "metrics.json").is_file()
                  else p.stat().st_mtime, reverse=True)
    passed = []
    for run in [out_dir, *siblings]:
        record = read_record(run)
        if record is None:
            continue  # not a run (or this invocation's new folder)
        status = observed_status(run, record)
        changes = override_changes(training_overrides(record.get("overrides") or []), overrides)
        if changes and not allow_changes and run == out_dir:  # the folder named is another run's: refused
            _check_same(run, record, overrides, allow_changes)
        if changes and not allow_changes:
            passed.append(f"{run.name}: other overrides ({'; '.join(changes)})")
        elif status == "finished":  # nothing to do; or, with changes allowed, go on from its last checkpoint
            return run
        elif status == "running" and process_alive(record):
            passed.append(f"{run.name}: still running (pid {record.get('pid')})")
        elif _last_checkpoint(run) is None:  # (a run of unknown state without one: nothing to continue either)
            passed.append(f"{run.name}: {status}, no checkpoint" + (" (killed before its first checkpoint)"
                                                                     if status == "killed" else ""))
        else:
            if changes:
                log.warning("resume_allow_changes=true: continuing %s with %s", run, "; ".join(changes))
            return run
    looked = "; ".join(passed) if passed else f"no earlier run in {out_dir.parent}"
    log.warning("resume=true: nothing to continue (%s); starting afresh in %s", looked, out_dir)
    return None


def _check_same(run_dir: Path, record: dict, overrides: list[str], allow_changes: bool) -> None:
    changes = override_changes(training_overrides(record.get("overrides") or []), overrides)
    if not changes:
        return
    if not allow_changes:
        raise UserError(f"resume: {run_dir} was run with other overrides ({'; '.join(changes)}); repeat its "
                        "overrides, or add resume_allow_changes=true to continue it with these")
    log.warning("resume_allow_changes=true: continuing %s with %s", run_dir, "; ".join(changes))


def clear_outputs(out_dir: Path) -> None:
    """Before a fresh start in an old job folder: drop a previous attempt's history and checkpoints,
    so every CSV holds each epoch once."""
    for name in RUN_OUTPUTS:
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def discard_fresh(out_dir: Path) -> None:
    """Remove the folder Hydra made for this invocation when the run continues in an older one."""
    if out_dir.is_dir() and {p.name for p in out_dir.iterdir()} <= HYDRA_ONLY:
        shutil.rmtree(out_dir, ignore_errors=True)
