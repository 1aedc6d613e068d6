"""`train(cfg) -> metrics`: one training run from a composed config (tests and sweeps call it directly;
`nplm.cli.train` is the console command around it).

    1. check every setting (`nplm.config.schema.validate`);
    2. find the run's folder: skip a finished job, continue a killed one (`resume`), or start afresh;
    3. set up the process (threads, seed), read the corpus, plan the steps, build the tree and the module;
    4. fit, test the best checkpoint, write the run's record.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from typing import Sequence

import pytorch_lightning as pl
from omegaconf import DictConfig
from pytorch_lightning.utilities import rank_zero_only

from nplm.config.schema import validate, yaml_default
from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError, WriteError
from nplm.files import atomic_write, folder_problem
from nplm.models import data_layout
from nplm.tracking.quiet import quiet
from nplm.tracking.lock import RunLock
from nplm.tracking.records import (EpochHistory, RunRecord, build_loggers, check_same_data, finish_wandb, mark_started,
                                   write_json)
from nplm.tracking.runs import (RESUME_NEWEST, clear_outputs, discard_fresh, finished_job, finished_named_run, is_multirun,
                                job_overrides, names_a_run, override_key, read_record, resolve_resume)
from nplm.training.checkpoint import (DataFilesInCheckpoint, check_resumable_data, check_resumable_position,
                                      check_resumable_settings)
from nplm.training.execution import ExecutionPlan
from nplm.training.flops import FlopCount, FlopReport
from nplm.training.memory import check_memory
from nplm.training.module import Diverged, LanguageModel
from nplm.training.process import set_up_process
from nplm.training.stopping import StopRequests, TrainingStopped, check_budget_left, seconds_of
from nplm.training.trainer import build_trainer, check_trainer
from nplm.training.tree_phase import container, tree_of_run

log = logging.getLogger(__name__)


def _hydra_job() -> tuple[str, str | None]:
    """(W&B run name from the job's overrides, W&B group: the sweep for multiruns)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return "run", None
    hc = HydraConfig.get()
    name = hc.job.override_dirname or "defaults"
    group = Path(hc.sweep.dir).name if hc.mode == RunMode.MULTIRUN else None
    return name, group


def train(cfg: DictConfig, callbacks: Sequence[pl.Callback] = ()) -> dict:
    """Train, validate each epoch, test the best checkpoint; return the final metrics. `callbacks`: added to
    the run's Trainer after nplm's own (a benchmark's clock, a test's watch).

    A `UserError` raised before training begins (bad config value, bad data) removes the job's run directory,
    so a mistake never leaves a half-written run behind, except a `WriteError` (a full disk) once the run has
    a checkpoint: that stays, to be continued. Once `trainer.fit` has begun nothing removes the run: an error
    leaves its folder, its checkpoints and its record (metrics.json "failed" with the error, or "diverged"
    for `Diverged`, a training loss no longer finite), and `resume=<the run's folder>` continues it.
    One process writes a run folder at a time (`nplm.tracking.lock`): a second is refused.
    """
    quiet(bool(cfg.get("verbose")))
    fresh = Path(cfg.paths.output_dir)  # this invocation's folder; a resumed run goes on in its own
    overrides = job_overrides()
    try:
        cfg = validate(cfg)  # every key against nplm.config.schema, before any data is read
        processes = check_trainer(container(cfg.trainer))  # and what Lightning refuses when it makes the Trainer
        check_data_dir(cfg.paths.data_dir)
    except UserError as err:
        _fail_fresh_job(fresh, overrides, err)
        raise
    # a finished run in this folder is skipped (a re-run sweep), unless resume names a run or checkpoint:
    # then it goes on (a raised trainer.max_epochs, or a run a time limit stopped, trains on)
    named = names_a_run(cfg.get("resume")) and not is_multirun()
    done = finished_named_run(cfg.get("resume"), container(cfg))
    if done is not None:  # a finished run is never rewritten
        if Path(done["dir"]).resolve() != fresh.resolve():
            discard_fresh(fresh)
        log.info("resume=%s: that run has finished and has nothing left to train; it stays as it is", cfg.resume)
        return {**done["metrics"], "best_checkpoint": done.get("best_checkpoint"), "status": "finished"}
    done = None if named else finished_job(fresh, overrides)
    if done is None:
        try:
            out_dir, ckpt = resolve_resume(cfg.get("resume"), fresh, overrides, bool(cfg.get("resume_allow_changes")))
        except UserError:
            discard_fresh(fresh)  # nothing written; an old job folder stays as it was
            raise
        if cfg.get("resume") in RESUME_NEWEST:  # the newest run with these overrides had finished
            done = finished_job(out_dir, overrides)
    if done is not None:
        log.info("skipping %s: already finished", done["dir"])
        return {**done["metrics"], "best_checkpoint": done.get("best_checkpoint")}
    lock = RunLock(out_dir) if rank_zero_only.rank == 0 else None  # a second writer is refused: nothing touched
    try:
        if ckpt is None and rank_zero_only.rank == 0:  # (another rank, started later, would clear rank 0's logs)
            clear_outputs(out_dir)  # a failed job's earlier attempt
            mark_started(out_dir, cfg, overrides)
        return _train(cfg, out_dir, ckpt, overrides, processes, callbacks)
    except UserError as err:
        finish_wandb(failed=True)
        if isinstance(err, Diverged):  # the run stays as it stopped: its record says so, its checkpoints are kept
            record = read_record(out_dir)
            if rank_zero_only.rank == 0 and record is not None and record.get("status") == "running":
                # tree=learned's first phase diverged (bootstrap/metrics.json says where), before this run's record
                write_json(out_dir / "metrics.json", {**record, "status": "diverged", "error": str(err)})
            raise
        if getattr(err, "run_kept", False):  # raised once training had begun: the run stays, its record says why
            log.error("the run stays in %s: resume=%s continues it", out_dir, out_dir)
            raise
        # a full disk after a checkpoint: the run stays, to be continued (its record says why it stopped)
        kept = isinstance(err, WriteError) and any((out_dir / "checkpoints").glob("*.ckpt"))
        _fail_fresh_job(fresh, overrides, err, remove=not kept and (ckpt is None or not ckpt.is_relative_to(fresh)))
        raise
    finally:
        if lock is not None:
            lock.release()


def ended_anyway(trainer: pl.Trainer) -> bool:
    """Whether the run had ended where a stop fell on an epoch's end: its last epoch, its last step, or early stopping."""
    from pytorch_lightning.callbacks import EarlyStopping

    max_epochs, max_steps = trainer.max_epochs or -1, trainer.max_steps
    return (0 < max_epochs <= trainer.current_epoch or 0 < max_steps <= trainer.global_step
            or any(isinstance(c, EarlyStopping) and c.stopped_epoch for c in trainer.callbacks))


def describe_stop(where: dict) -> str:
    """Where a run stopped, in words."""
    if where.get("inside_epoch"):
        return f"in epoch {where['epoch']} after batch {where['batch']}"
    return f"at the end of epoch {where['epoch']}"


def check_data_dir(folder: str) -> None:
    """`paths.data_dir` (downloads, the id cache, the device's measured peak) must be writable: refused before
    any data is read, not when a run first writes there."""
    problem = folder_problem(folder)
    if problem is not None:
        raise UserError(f"paths.data_dir={folder}: {problem}" + ("" if ";" in problem else "; give paths.data_dir "
                        "a folder you can write"))


def batch_size_chosen(cfg: DictConfig, overrides: list[str]) -> bool:
    """Whether data.batch_size was chosen (typed, or set by an experiment file) rather than the schema's default."""
    typed = any(override_key(o) == "data.batch_size" for o in overrides)
    return typed or cfg.data.batch_size != yaml_default("data", "batch_size")


def _fail_fresh_job(fresh: Path, overrides: list[str], err: UserError, remove: bool = True) -> None:
    """Remove this invocation's folder (`remove`: not when a multirun job resumed in it); in a multirun,
    leave a metrics.json saying why the job failed."""
    if remove:  # never an older run's folder
        shutil.rmtree(fresh, ignore_errors=True)
        cwd = Path.cwd().resolve()
        for parent in fresh.resolve().parents:  # empty outputs/<experiment>/runs below the working folder
            if parent == cwd or not parent.is_relative_to(cwd) or any(parent.iterdir()):
                break
            parent.rmdir()
    if is_multirun():  # the sweep goes on; the job's folder says why it failed
        fresh.mkdir(parents=True, exist_ok=True)
        write_json(fresh / "metrics.json", {"status": "failed", "error": str(err), "overrides": overrides})


def _train(cfg: DictConfig, out_dir: Path, ckpt: Path | None = None, overrides: list[str] | None = None,
           processes: int = 1, callbacks: Sequence[pl.Callback] = ()) -> dict:
    """One run in `out_dir` (from checkpoint `ckpt`, or fresh), trained by `processes` processes (DDP's
    ranks), `callbacks` added to its Trainer: the steps, in order."""
    set_up_process(cfg)
    resumed = None if ckpt is None else check_resumable_settings(ckpt, container(cfg.model), container(cfg.head),
                                                                  container(cfg.corpus))
    if resumed is not None:  # trainer.max_time counts every piece of the run: refused once it is spent
        check_budget_left(resumed["callbacks"].get(StopRequests.__qualname__), seconds_of(cfg.trainer.get("max_time")),
                          cfg.trainer.get("max_time"))
    context_size, block_size, carries_state = data_layout(container(cfg.model), cfg.data.get("block_size"))
    dm = LMDataModule(container(cfg.corpus), context_size, cfg.data.batch_size,
                      cfg.data.eval_batch_size, seed=cfg.seed, data_dir=cfg.paths.data_dir,
                      overfit_batches=cfg.data.get("overfit_batches", 0), block_size=block_size,
                      carries_state=carries_state, batch_size_chosen=batch_size_chosen(cfg, overrides or []))
    dm.setup()
    cfg.data.batch_size = dm.batch_size  # (a default cut to the parallel streams a short corpus holds)
    check_same_data(out_dir, dm.files, resuming=ckpt is not None, sweep=is_multirun())
    dm.require_batches(cfg.trainer, processes)
    plan = ExecutionPlan.build(container(cfg.trainer), dm.train_batches(), cfg.get("steps_per_execution", 1))
    dm.group_training(plan.batches_per_step, plan.train_batches)
    if resumed is not None:
        check_resumable_position(resumed, plan.batches_per_step)
    tree = tree_of_run(cfg, dm, out_dir, train_first=_train)
    check_memory(cfg, dm.vocab, tree)  # before allocating
    module = LanguageModel(container(cfg.model), container(cfg.head), container(cfg.optimizer),
                           dm.vocab, data={"corpus": container(cfg.corpus), **container(cfg.data)}, tree=tree)
    module.step_options = plan.step_options
    module.train_batches = plan.train_batches
    if resumed is not None:
        check_resumable_data(resumed, ckpt, module)
    if cfg.get("compile"):
        module.compile_training_step(cfg.get("compile_backend") or "inductor", cfg.get("compile_mode"))
    module.cuda_graphs = cfg.get("cuda_graphs") is not False  # (null: captured on a CUDA device)
    module.capture_dry, module.sync_debug = bool(cfg.get("capture_dry")), bool(cfg.get("sync_debug"))
    run_name, group = _hydra_job()
    loggers = build_loggers(cfg, out_dir, run_name, group or cfg.get("experiment_name"), resume_from=ckpt)
    history = EpochHistory(out_dir / "metrics.csv", resume_from=ckpt)
    record = RunRecord(out_dir, cfg, dm.summary(), dm.files, overrides or [], resumed_s=history.resumed_s,
                       earlier=read_record(out_dir) if ckpt is not None else None,
                       resumed_from=None if resumed is None else resumed["position"])
    record.data["tied_embeddings"] = module.tied_embeddings  # model.tie_embeddings (auto) as resolved
    if dm.vocab.subword is not None and record.enabled:  # the ids' text: nplm.data.subwords
        atomic_write(out_dir / "tokenizer.json", json.dumps(dm.vocab.subword.to_dict()))
    if tree is not None and record.enabled:
        tree.save(out_dir / "tree.json")
        record.data["tree"] = tree.stats(dm.vocab.counts)
        record.save()
    for logger in loggers:
        logger.log_hyperparams({"corpus_stats": record.data["corpus"], "data_files": dm.files,
                                "tree_stats": record.data.get("tree")})

    def save_count(report: FlopReport) -> None:  # the step's FLOPs and the peak, when training starts
        record.data["flops"] = report.as_dict()
        record.save()

    flop_count = FlopCount(dm.source("train"), cfg.data.batch_size, cfg.paths.data_dir, on_count=save_count)
    failed, began = True, False
    try:
        extra = [flop_count, DataFilesInCheckpoint(dm.files), *callbacks]
        trainer = build_trainer(cfg, out_dir, loggers, history, plan, extra_callbacks=extra)
        began = True  # from here on the run is never removed: it may hold checkpoints
        stopper = next(c for c in trainer.callbacks if isinstance(c, StopRequests))
        try:
            trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
        except TrainingStopped:  # inside an epoch, after last.ckpt there: the best checkpoint so far is tested
            pass
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        best_path = trainer.checkpoint_callback.best_model_path
        if dm.has_split("test") and (best_path or stopper.reason is None):
            # (no best checkpoint when max_steps stopped the run before any validation: the last weights)
            metrics.update(trainer.test(module, datamodule=dm, ckpt_path=best_path or None, verbose=False)[0])
            if not math.isfinite(metrics["test/ppl"]):  # (the last weights, where no validation ran to catch it)
                raise Diverged(f"test perplexity became {metrics['test/ppl']} with the {'best' if best_path else 'last'} "
                               f"weights, after optimizer step {trainer.global_step}; {module.divergence_fix()}")
        validated = math.isfinite(module.best_val_ppl)  # not when max_steps ended the run before any validation
        metrics["val/ppl_best"] = module.best_val_ppl if validated else None  # null in metrics.json, not Infinity
        metrics.update(module.best_val_figures())
        if module.flops is not None:
            metrics.update(module.flops.metrics())
        stopped = stopper.reason is not None and not ended_anyway(trainer)
        where = {"epoch": trainer.current_epoch, "batch": None} if not stopped else stopper.where
        record.end_piece("stopped" if stopped else "finished", stopper.reason if stopped else None, where)
        if stopped:
            record.stop(metrics, stopper.reason, stopper.where, epochs=trainer.current_epoch, best_checkpoint=best_path,
                        history=history.rows)
        else:
            record.finish(metrics, epochs=trainer.current_epoch, best_checkpoint=best_path, history=history.rows)
        metrics["best_checkpoint"] = best_path
        metrics["status"] = record.data["status"]
        for logger in loggers if record.enabled else []:  # (another rank's W&B experiment is a stand-in)
            if hasattr(logger, "experiment") and hasattr(logger.experiment, "summary"):
                logger.experiment.summary.update({k: v for k, v in metrics.items()
                                                  if k.startswith(("val/", "test/", "train/", "device/"))})
        if record.enabled:  # (one line for the run, not one per DDP process)
            log.info("val/ppl_best %s  test/ppl %s  (%s)",
                     f"{module.best_val_ppl:.3f}" if validated else "- (no validation ran)",
                     f"{metrics['test/ppl']:.3f}" if "test/ppl" in metrics else "-", out_dir)
            if stopped:
                log.warning("stopped by %s %s; resume=%s continues it exactly", stopper.reason,
                            describe_stop(stopper.where), out_dir)
        failed = False
        return metrics
    except Diverged as err:
        record.diverge(err, epochs=trainer.current_epoch, history=history.rows,
                       best_checkpoint=trainer.checkpoint_callback.best_model_path or None)
        raise
    except UserError as err:
        if began or isinstance(err, WriteError):  # the run stays: its record says why it stopped, if it can
            try:
                record.fail(err)
            except WriteError:
                pass
        err.run_kept = began  # (train() removes the folder of a mistake found before training began)
        raise
    except BaseException as err:
        record.fail(err)
        raise
    finally:
        finish_wandb(failed)
