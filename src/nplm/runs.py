"""Run directories across invocations: skipping finished sweep jobs and resuming killed runs.

- A multirun re-run with the same `hydra.sweep.dir` skips every job whose metrics.json says
  "finished" with the same overrides (other templates start the whole sweep again).
- `resume=true` continues a killed run from its last checkpoint: in a multirun, the job's own
  folder; in a single run, the newest unfinished run of the same experiment with the same overrides.
  `resume=<run dir or .ckpt>` names it directly. The run then carries on in its old folder.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from nplm.errors import UserError

log = logging.getLogger(__name__)

HYDRA_ONLY = {".hydra", "train.log"}  # what Hydra writes into a job folder before nplm runs


def job_overrides() -> list[str]:
    """The job's command-line overrides, without `resume` (which does not change what is trained)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return sorted(o for o in HydraConfig.get().overrides.task if not o.startswith("resume="))


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def read_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def finished_job(out_dir: Path, overrides: list[str]) -> dict | None:
    """metrics.json of a finished job with these overrides in `out_dir`, else None."""
    record = read_record(out_dir)
    if record and record.get("status") == "finished" and record.get("overrides") == overrides:
        return record
    return None


def _last_checkpoint(run_dir: Path) -> Path | None:
    path = run_dir / "checkpoints" / "last.ckpt"
    return path if path.is_file() else None


def resolve_resume(resume, out_dir: Path, overrides: list[str]) -> tuple[Path, Path | None]:
    """(the folder the run writes to, the checkpoint to continue from or None)."""
    if resume in (None, False, "false", "null"):
        return out_dir, None
    if resume in (True, "true"):
        if is_multirun():
            return out_dir, _last_checkpoint(out_dir)
        candidates = sorted((p for p in out_dir.parent.iterdir() if p.is_dir() and p != out_dir),
                            key=lambda p: p.stat().st_mtime, reverse=True) if out_dir.parent.is_dir() else []
        for old in candidates:
            record = read_record(old)
            if record and record.get("status") != "finished" and record.get("overrides") == overrides \
                    and _last_checkpoint(old):
                _discard_fresh(out_dir)
                log.info("resuming %s from %s", old, _last_checkpoint(old))
                return old, _last_checkpoint(old)
        log.warning("resume=true: no unfinished run with these overrides in %s; starting afresh", out_dir.parent)
        return out_dir, None
    path = Path(str(resume)).expanduser()
    if path.is_dir():
        ckpt = _last_checkpoint(path)
        if ckpt is None:
            raise UserError(f"resume={resume}: no checkpoints/last.ckpt in that folder; give a .ckpt file instead")
        _discard_fresh(out_dir)
        return path, ckpt
    if path.is_file():
        return out_dir, path
    raise UserError(f"resume={resume}: no such run folder or checkpoint; use resume=true or a <run> folder")


def _discard_fresh(out_dir: Path) -> None:
    """Remove the folder Hydra made for this invocation when the run continues in an older one."""
    if out_dir.is_dir() and {p.name for p in out_dir.iterdir()} <= HYDRA_ONLY:
        shutil.rmtree(out_dir, ignore_errors=True)
