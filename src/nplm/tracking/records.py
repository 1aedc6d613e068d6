"""What a run leaves behind: metrics.json, metrics.csv, the resolved config, and its trackers.

Every run directory holds
- `config.yaml`: the resolved config; `metrics.json`: status (running / finished / failed / diverged), final
  and best metrics, corpus statistics, the training step's FLOPs and the device's peak (`flops`, from
  `nplm.training.flops`) and what reproduces the run (seed, the package's version `nplm_version`, git
  commit, data checksums, versions, command line);
- `metrics.csv`: one row per epoch (train/ppl, val/ppl, val/ppl_best, tokens/s, model FLOP utilisation, lr,
  time, and val/bpb, val/word_ppl: `nplm.data.text_units`);
- with `logger=wandb` (the default) an offline W&B run under `wandb/` (its id in `wandb_id.txt`, so a
  resumed run reopens it), and Lightning's CSV log `csv/metrics.csv`. Both metrics files hold each
  epoch once however often the run was killed and resumed.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import platform
import secrets
import socket
import string
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import Checkpoint
from pytorch_lightning.utilities import rank_zero_only

from nplm import __version__
from nplm.errors import UserError
from nplm.tracking.provenance import code_version, git_commit  # noqa: F401 (git_commit: the drivers and benchmarks import it here)
from nplm.files import atomic_open, atomic_write
from nplm.tracking.runs import job_overrides

log = logging.getLogger(__name__)

HISTORY_FIELDS = ["epoch", "step", "train/ppl", "train/ppl_sampled", "val/ppl", "val/ppl_best", "train/tokens_per_s",
                  "train/mfu", "train/epoch_time_s", "train/lr", "elapsed_s", "val/bpb", "val/word_ppl"]
TRAIN_EPOCH_FIELDS = ["train/ppl", "train/ppl_sampled", "train/tokens_per_s", "train/mfu", "train/epoch_time_s",
                      "train/lr"]


def _number(value):
    if isinstance(value, torch.Tensor):
        value = value.item()
    return finite_or_none(value)


def finite_or_none(data):
    """`data` with every float that is not finite (NaN, an overflowed perplexity) as None: JSON has no
    Infinity or NaN, and a reader of standard JSON fails on them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite_or_none(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_or_none(value) for value in data]
    return data


def standard_json(data) -> str:
    """`data` as standard JSON text, indented, a float that is not finite as null (`finite_or_none`)."""
    return json.dumps(finite_or_none(data), indent=2, default=str, allow_nan=False)


def write_json(path: Path, data: dict) -> None:
    """Write `standard_json` atomically (`nplm.files`), so a reader never sees half a file; a full disk or a
    folder that cannot be written is a `WriteError`, and the previous file stays."""
    atomic_write(path, standard_json(data) + "\n")


def writer() -> dict:
    """Which process writes a run (`nplm.tracking.runs.process_alive` tells a killed run by it)."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def mark_started(out_dir: Path, cfg: DictConfig, overrides: list[str]) -> None:
    """metrics.json of a run from its first moment, before the corpus is read: a run killed before
    `RunRecord` replaces this still says what it was (and, once seen dead, that it was killed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "metrics.json", {"status": "running", **writer(), "experiment": cfg.get("experiment_name"),
                                          "command": " ".join(sys.argv), "overrides": overrides, "metrics": {}})


def check_same_data(run_dir: Path, files: dict[str, str], resuming: bool, sweep: bool) -> None:
    """Refuse a run whose data files are not what its related runs read (their sha256 in metrics.json),
    naming the file: `resuming`, the run's own record in `run_dir` (a file edited, replaced or gone
    since the run started); `sweep`, the other jobs of its sweep (the folders beside `run_dir`), so a
    sweep's rows compare models on the same data. A file of the same content under another path (a
    moved cache) is the same data."""
    runs = [run_dir] if resuming else []
    if sweep and run_dir.parent.is_dir():
        runs += sorted(p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir)
    for run in runs:
        try:
            stored = json.loads((run / "metrics.json").read_text()).get("data_files") or {}
        except (OSError, ValueError, AttributeError):
            continue
        which = "this run" if run == run_dir else f"job {run.name} of this sweep"
        same_files(stored, files, which, run, "start a new run (a new sweep) on the new data", renamed_ok=run != run_dir)


def same_files(stored: dict[str, str], files: dict[str, str], which: str, where: Path, fix: str,
               renamed_ok: bool = True) -> None:
    """Refuse data `files` (name -> sha256) that are not the `stored` ones `which` (recorded in `where`) read,
    naming the first file that changed or is gone and, besides putting it back, `fix`. A file of the same
    content under another name is the same data (unless not `renamed_ok` and the name was kept)."""
    now = set(files.values())
    for name, digest in stored.items():
        if files.get(name, digest) == digest and (name in files or digest in now or renamed_ok):
            continue
        if name in files:
            raise UserError(f"{name}: changed since {which} read it ({where}: sha256 {digest[:12]}..., now "
                            f"{files[name][:12]}...); put the file back as it was, or {fix}")
        raise UserError(f"{name}: {which} was trained on that file ({where}) and no file read now has its content "
                        f"(sha256 {digest[:12]}...); put it back, or {fix}")


def gpu_trained_on(cfg: DictConfig) -> str | None:
    """The name of the CUDA GPU the run trains on (`trainer.accelerator` gpu or cuda, or auto where one is
    visible); None on a CPU, also on a machine that has a GPU."""
    accelerator = str(cfg.get("trainer", {}).get("accelerator", "cpu"))
    if torch.cuda.is_available() and accelerator in ("gpu", "cuda", "auto"):
        return torch.cuda.get_device_name(0)
    return None


class RunRecord:
    """Owns `metrics.json` and `config.yaml` of one run directory (written by rank 0 only)."""

    def __init__(self, out_dir: Path, cfg: DictConfig, corpus: dict, data_files: dict[str, str],
                 overrides: list[str], resumed_s: float = 0.0, earlier: dict | None = None,
                 resumed_from: dict | None = None):
        """`resumed_s`: the seconds a resumed run had already spent (`EpochHistory.resumed_s`), so that
        `wall_time_s` counts the whole run, not only its last invocation. `earlier`: the record of the run this
        one continues, whose `pieces` it goes on with; `resumed_from`: where its checkpoint left off."""
        self.out_dir = out_dir
        self.started = time.time() - resumed_s
        commit = dict(zip(("git_commit", "commit_from"), code_version()))
        # each invocation that trained the run: when, where it began and ended, on what (nplm-compare, the drivers)
        pieces = list((earlier or {}).get("pieces") or [])
        pieces.append({"started": _now(), "from": resumed_from, "git_commit": commit["git_commit"],
                       "host": socket.gethostname(), "torch_threads": torch.get_num_threads()})
        self.data = {
            "status": "running",
            **writer(),
            "experiment": cfg.get("experiment_name"),
            "seed": cfg.seed,
            "nplm_version": __version__,  # the package that trained this invocation, beside its commit
            **commit,
            "data_files": data_files,
            "corpus": corpus,
            "command": " ".join(sys.argv),
            "overrides": overrides,
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "pytorch_lightning": pl.__version__},
            "machine": {"platform": platform.platform(), "processor": platform.processor(),
                        "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                        "gpu": gpu_trained_on(cfg)},
            "metrics": {},
            "pieces": pieces,
        }
        self.enabled = rank_zero_only.rank == 0
        if self.enabled:
            out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(out_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        self.save()

    def save(self) -> None:
        if not self.enabled:
            return
        self.data["wall_time_s"] = round(time.time() - self.started, 3)
        write_json(self.out_dir / "metrics.json", self.data)

    def end_piece(self, status: str, by: str | None = None, where: dict | None = None) -> None:
        """This invocation's piece of the run ended: how (`status`, stopped `by` what) and `where` (epoch, batch)."""
        self.data["pieces"][-1].update(ended=_now(), status=status, by=by, at=where)

    def finish(self, metrics: dict, **extra) -> None:
        self.data.update(status="finished", metrics=metrics, **extra)
        self.data.pop("stopped", None)
        self.save()

    def stop(self, metrics: dict, by: str, where: dict, **extra) -> None:
        """Stopped before its end (`nplm.training.stopping`) by `by`, `where`: `resume` continues it."""
        self.data.update(status="stopped", metrics=metrics, stopped={"by": by, **where}, **extra)
        self.save()

    def diverge(self, error: BaseException, **extra) -> None:
        """The training diverged (`nplm.training.divergence.Diverged`): the run stopped; its checkpoints stay."""
        self.end_piece("diverged")
        self.data.update(status="diverged", error=str(error), **extra)
        self.save()

    def fail(self, error: BaseException) -> None:
        self.end_piece("failed")
        self.data.update(status="failed", error=f"{type(error).__name__}: {error}")
        self.save()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class EpochHistory(Checkpoint):
    """Appends one row per training epoch to `metrics.csv` and prints it as a plain log line.

    A `Checkpoint` subclass because Lightning calls those after the LightningModule's own
    `on_train_epoch_end`, where the epoch's perplexity is logged.
    """

    def __init__(self, path: Path, resume_from: Path | None = None):
        """With `resume_from` (a checkpoint), keep the rows of the epochs it had completed."""
        self.path = path
        self.rows: list[dict] = []
        self.resumed_s = 0.0  # elapsed seconds at the end of the last epoch kept from a resumed run
        if resume_from is not None and path.exists():
            done, _ = checkpoint_progress(resume_from)
            self.rows = [row for row in _readable_rows(path)[1] if row["epoch"] < done]  # (a fresh row's keys)
            self.resumed_s = self.rows[-1]["elapsed_s"] if self.rows else 0.0
            self._write_all()
        self._start = time.time() - self.resumed_s

    def _write_all(self) -> None:
        """The whole file, atomically: a kill while a row is written leaves the rows before it."""
        with atomic_open(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=HISTORY_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.global_rank != 0:
            return
        metrics = trainer.callback_metrics
        row = {"epoch": trainer.current_epoch, "step": trainer.global_step,
               "elapsed_s": round(time.time() - self._start, 3)}
        row.update({k: _number(metrics.get(k)) for k in HISTORY_FIELDS if k in metrics})
        self.rows.append(row)
        self._write_all()
        for logger in trainer.loggers:  # Lightning's CSV log, up to this epoch's validation, before last.ckpt
            if type(logger).__name__ == "CSVLogger":
                logger.save()
        mfu = f"  MFU {row['train/mfu']:.2%}" if row.get("train/mfu") is not None else ""
        # the figures that compare across tokenisations (nplm.data.text_units), where the epoch has them
        text = "".join(f"  {key} {_fmt(row[key], spec)}" for key, spec in (("val/bpb", ".4f"), ("val/word_ppl", ".3f"))
                       if row.get(key) is not None)
        log.info("epoch %d: train/ppl %s  val/ppl %s  (best %s)%s  %s tokens/s%s  %.1f s", row["epoch"],
                 _fmt(row.get("train/ppl")), _fmt(row.get("val/ppl")), _fmt(row.get("val/ppl_best")), text,
                 _fmt(row.get("train/tokens_per_s"), ",.0f"), mfu, row.get("train/epoch_time_s") or 0.0)


def checkpoint_progress(checkpoint: Path) -> tuple[int, int]:
    """(the whole epochs a checkpoint holds, its optimizer steps). The epochs are Lightning's count of those it
    has processed: one written at an epoch's end holds that epoch, one written inside an epoch
    (`nplm.training.stopping`) only those before."""
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=True)
    progress = ckpt.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {})
    return progress.get("processed", ckpt["epoch"] + 1), ckpt["global_step"]


def _parse(value: str):
    number = float(value)
    return int(number) if number.is_integer() and "." not in value else number


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def wandb_mode(configured: str) -> str:
    """W&B is offline unless the user sets WANDB_MODE=online; online without credentials is refused
    up front instead of waiting for an interactive login."""
    mode = os.environ.get("WANDB_MODE", configured or "offline")
    if mode not in ("offline", "online", "disabled"):
        raise UserError(f"WANDB_MODE={mode!r} is not one of: offline, online, disabled")
    if mode == "online" and not os.environ.get("WANDB_API_KEY"):
        netrc = Path.home() / ".netrc"
        if not (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")):
            raise UserError("WANDB_MODE=online needs credentials: set WANDB_API_KEY or run `wandb login`")
    return mode


def build_loggers(cfg: DictConfig, out_dir: Path, run_name: str, group: str | None,
                  resume_from: Path | None = None) -> list:
    """Lightning loggers for `cfg.logger`: W&B (offline by default) and/or Lightning's CSV log.
    With `resume_from` (a checkpoint of this run), both go on with the same record: the W&B run id
    stored in `<run>/wandb_id.txt` and the CSV rows of the epochs the checkpoint completed."""
    from pytorch_lightning.loggers import CSVLogger, WandbLogger

    loggers = []
    if cfg.logger.get("csv"):
        csv_logger = CSVLogger(str(out_dir), name="csv", version="")
        if rank_zero_only.rank == 0:
            _continue_csv(csv_logger, resume_from)
        loggers.append(csv_logger)
    wb = cfg.logger.get("wandb")
    if wb:
        mode = wandb_mode(wb.get("mode", "offline"))
        import wandb

        id_file = out_dir / "wandb_id.txt"
        run_id = id_file.read_text().strip() if resume_from is not None and id_file.is_file() else None
        if run_id is None:
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
            if rank_zero_only.rank == 0:
                out_dir.mkdir(parents=True, exist_ok=True)
                atomic_write(id_file, run_id + "\n")
        logger = WandbLogger(
            project=wb.project, entity=wb.get("entity"), name=wb.get("name") or run_name, notes=wb.get("notes"),
            group=group, id=run_id, resume="allow",
            job_type=wb.get("job_type"), tags=[*(wb.get("tags") or []), *(o[:64] for o in job_overrides())],
            save_dir=str(out_dir),
            mode=mode, config=OmegaConf.to_container(cfg, resolve=True),
            settings=wandb.Settings(init_timeout=90, console="off"),
        )
        drop_anonymous(logger)
        try:  # W&B starts here, not at the first log: a setting it refuses is one line, before training
            logger.experiment
        except (wandb.errors.UsageError, ValueError) as err:  # (ValueError: its settings' validation)
            found = err.errors() if callable(getattr(err, "errors", None)) else []  # pydantic: the first problem
            first = found[0].get("msg") if found else str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(f"logger.wandb: W&B refuses these settings ({first}); change the logger.wandb "
                            "key it names, or use logger=csv") from None
        loggers.append(logger)
    return loggers


def drop_anonymous(logger) -> None:
    """Lightning's WandbLogger passes `anonymous=None` to `wandb.init`, which W&B >= 0.19 answers with a
    one-line warning: taken out of the logger's init arguments where they are where Lightning 2.x keeps
    them (`_wandb_init`, not a public API); elsewhere the warning shows."""
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict):
        init.pop("anonymous", None)


def _continue_csv(logger, resume_from: Path | None) -> None:
    """Lightning's CSVLogger deletes `csv/metrics.csv` when it starts; a resumed run keeps the rows logged before its
    checkpoint's optimizer step (each once: the epochs it holds, and the steps and validations of an epoch it
    stopped inside), and appends to them.

    Lightning writes that file in place (appending, or rewriting it whole when a new column comes), so a kill
    can tear it or lose rows, and one between last.ckpt and Lightning's epoch-end row loses that row. The run's
    own metrics.csv (written atomically, before last.ckpt) has every epoch the checkpoint holds: a training or
    validation row that is missing is taken from there, so both files agree after any kill."""
    path = Path(logger.log_dir) / "metrics.csv"
    rows, fields = [], []
    if resume_from is not None:
        done, steps = checkpoint_progress(resume_from)
        fields, readable = _readable_rows(path)
        rows = [row for row in readable if row["step"] < steps]  # (Lightning's axis: the optimizer steps before each row)
        history = Path(logger.save_dir) / "metrics.csv"
        for row in _readable_rows(history)[1] if history.is_file() else []:
            epoch = row["epoch"]
            if epoch >= done:
                continue
            for kind, names in (("train/epoch_time_s", TRAIN_EPOCH_FIELDS), ("val/ppl", VALIDATION_FIELDS)):
                if row.get(kind) is not None and not any(r.get("epoch") == epoch and r.get(kind) is not None
                                                         for r in rows):
                    rows.append({"epoch": epoch, "step": row["step"] - 1,
                                 **{k: row[k] for k in names if row.get(k) is not None}})
                    fields += [k for k in rows[-1] if k not in fields]
        rows.sort(key=lambda row: (row["step"], row.get("epoch") is not None))
    writer = logger.experiment  # creates the writer, which removes the file
    if rows:
        fields = sorted(fields)  # Lightning appends its rows in its keys' sorted order: the header's
        with atomic_open(path, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=fields)
            out.writeheader()
            out.writerows(rows)
        writer.metrics_keys = fields  # later rows are appended (the header grows if keys are new)


VALIDATION_FIELDS = ["val/ppl", "val/ppl_best", "val/bpb", "val/word_ppl"]  # an epoch's validation row (in history)


def _readable_rows(path: Path) -> tuple[list[str], list[dict]]:
    """(the header, the rows) of a metrics CSV, values as numbers (empty: left out), `epoch` and `step` as
    integers; a row torn by a kill (cut short, or a value that is not a number) is left out."""
    if not path.is_file():
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), []
        for raw in reader:
            if None in raw.values() or None in raw or not raw.get("step"):  # (a short or long row)
                continue
            try:
                row = {k: _parse(v) for k, v in raw.items() if v != ""}
            except ValueError:
                continue
            row["step"] = int(row["step"])
            if "epoch" in row:
                row["epoch"] = int(row["epoch"])
            rows.append(row)
    return fields, rows


def finish_wandb(failed: bool) -> None:
    """Always close the W&B run, also on error, so multirun jobs never merge into one run."""
    if "wandb" not in sys.modules:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
