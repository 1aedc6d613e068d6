"""`train(cfg) -> metrics`: one training run from a composed config (tests and sweeps call it directly;
`nplm.cli.train` is the console command around it)."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from nplm.training.checkpoint import check_resumable
from nplm.config.schema import validate
from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.training.execution import ExecutionPlan
from nplm.heads import head_class
from nplm.training.module import LanguageModel, use_tf32
from nplm.fast.malloc import keep_freed_memory
from nplm.tracking.progress import Progress
from nplm.tracking.quiet import quiet
from nplm.tracking.runs import (clear_outputs, discard_fresh, finished_job, is_multirun, job_overrides, read_record,
                       resolve_resume)
from nplm.tracking.records import EpochHistory, RunRecord, build_loggers, finish_wandb, write_json
from nplm.trees import Tree, TreeContext, build_tree

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


def _container(node) -> dict:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)


class StopAt(pl.Callback):
    """Stops training after the batch during which the wall clock passes `deadline` (Unix time). Not
    Lightning's max_time, whose elapsed time is restored with a checkpoint: a resumed run would stop
    at once. Holds no state, so a run stopped here goes on from its last checkpoint like any other."""

    def __init__(self, deadline: float):
        self.deadline = deadline

    def on_train_batch_end(self, trainer: pl.Trainer, *args) -> None:
        if time.time() >= self.deadline:
            trainer.should_stop = True


def build_trainer(cfg: DictConfig, out_dir: Path, loggers: list, history: EpochHistory,
                  plan: ExecutionPlan) -> pl.Trainer:
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    best = ModelCheckpoint(dirpath=str(out_dir / "checkpoints"), filename="best-epoch{epoch:03d}",
                           monitor="val/ppl", mode="min", save_top_k=1, auto_insert_metric_name=False,
                           save_on_train_epoch_end=False)  # after validation only: none in a max_steps stop
    # last.ckpt, what resume= continues from, after every epoch. Not best's save_last=True: Lightning 2.6
    # writes that file only when a new best is saved, so a run killed (or continued) after epochs with
    # no better val/ppl went back to the best epoch and trained those epochs again.
    latest = ModelCheckpoint(dirpath=str(out_dir / "checkpoints"), filename="last", monitor=None, save_top_k=1,
                             enable_version_counter=False)
    # best first: trainer.checkpoint_callback is the best checkpoint; the epoch's rows before last.ckpt
    callbacks = [best, history, latest]
    patience = cfg.callbacks.get("early_stopping_patience")
    if patience:
        callbacks.append(EarlyStopping(monitor="val/ppl", mode="min", patience=patience))
    trainer_cfg = dict(plan.trainer_options)  # trainer, in Lightning's steps of plan.batches_per_step batches
    if cfg.get("stop_at"):  # a wall-clock deadline (Unix time): train until then, then test the best checkpoint
        if float(cfg.stop_at) <= time.time():
            raise UserError(f"stop_at={cfg.stop_at}: that time has passed; give a later Unix time")
        callbacks.append(StopAt(float(cfg.stop_at)))
    if trainer_cfg.get("enable_progress_bar") is not False:
        # A live bar in a terminal; a plain line every progress.interval seconds in batch jobs and CI logs.
        callbacks.append(Progress(cfg.get("progress", {}).get("interval", 30)))
        trainer_cfg["enable_progress_bar"] = True
    try:
        return pl.Trainer(**trainer_cfg, logger=loggers or False, callbacks=callbacks,
                          default_root_dir=str(out_dir), enable_model_summary=False)
    except TypeError as err:
        raise UserError(f"bad trainer option ({err}); see pytorch_lightning.Trainer's arguments") from None


def tree_for_head(cfg: DictConfig, dm: LMDataModule, embeddings: torch.Tensor | None = None) -> Tree | None:
    """The tree the head needs (built from the training split, or read from `tree.path`), or None.
    A tree given to a head that uses none is reported once and ignored."""
    tree_cfg = _container(cfg.tree) if cfg.get("tree") else None
    if not head_class(cfg.head.name).uses_tree(cfg.head):
        if tree_cfg:
            log.warning("tree=%s has no effect with head=%s, which uses no tree", tree_cfg["name"], cfg.head.name)
        return None
    if tree_cfg is None:
        log.info("head=%s needs a tree and none was given: using tree=balanced", cfg.head.name)
        tree_cfg = {"name": "balanced"}
    start = time.perf_counter()
    ctx = TreeContext(dm.vocab, dm.ids["train"], dm.vocab.counts, cfg.seed, cfg.paths.data_dir, embeddings)
    tree = build_tree(tree_cfg, ctx)
    log.info("tree=%s built in %.1f s: %s", tree.kind, time.perf_counter() - start, tree.stats(dm.vocab.counts))
    return tree


def learned_tree(cfg: DictConfig, dm: LMDataModule, out_dir: Path) -> Tree:
    """`tree=learned` (Mnih & Hinton 2009), phases 1-2 in `out_dir` (<run>/bootstrap), each resumable:

    1. train a first model with `tree.bootstrap` (default random) for `tree.bootstrap_epochs` epochs
       (null: as the run itself, trainer.max_epochs with its early stopping); a killed phase goes on
       from bootstrap/checkpoints/last.ckpt, a finished one (bootstrap/metrics.json) is not redone;
       `tree.bootstrap_checkpoint` (a .ckpt of a model trained on a random tree, e.g. another run's
       best) skips this phase, so several learned trees can share one first model;
    2. average its predicted representations per word (`trees.learned.predicted_word_vectors`) ->
       bootstrap/word_vectors.pt, and cluster them into the tree -> bootstrap/learned_tree.json.

    Each artifact is written whole (a temporary file renamed), so a kill leaves it complete or absent."""
    from nplm.training.checkpoint import load_model
    from nplm.trees.learned import predicted_word_vectors

    tree_path, vectors_path = out_dir / "learned_tree.json", out_dir / "word_vectors.pt"
    given = cfg.tree.get("bootstrap_checkpoint")  # phase 1 done elsewhere: a finished run on a random tree
    if tree_path.exists():
        tree = Tree.load(tree_path)
        tree.check_vocabulary(dm.vocab.tokens)
        log.info("tree=learned: phases 1-2 done, tree read from %s", tree_path)
        return tree
    if not vectors_path.exists():
        record = read_record(out_dir)
        if given:
            best = given
        elif record and record.get("status") == "finished":
            best = record["best_checkpoint"]
        else:
            sub = OmegaConf.to_container(cfg, resolve=True)
            sub["tree"] = {"name": cfg.tree.get("bootstrap", "random")}
            if cfg.tree.get("bootstrap_epochs") is not None:
                sub["trainer"]["max_epochs"] = int(cfg.tree.bootstrap_epochs)
            sub["paths"]["output_dir"] = str(out_dir)
            sub["logger"] = {"csv": False, "wandb": None}
            ckpt = out_dir / "checkpoints" / "last.ckpt"
            log.info("tree=learned, phase 1: up to %d epochs with tree=%s in %s%s", sub["trainer"]["max_epochs"],
                     sub["tree"]["name"], out_dir, f" (resumed from {ckpt})" if ckpt.exists() else "")
            best = _train(OmegaConf.create(sub), out_dir, ckpt if ckpt.exists() else None)["best_checkpoint"]
        first = load_model(best)
        if first.vocab.tokens != dm.vocab.tokens:
            raise UserError(f"tree.bootstrap_checkpoint={best}: that model was trained on another vocabulary "
                            f"({len(first.vocab)} words) than this corpus' ({len(dm.vocab)}); train it on this corpus")
        vectors = predicted_word_vectors(first, dm.windows["train"].windows, len(dm.vocab))
        out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(vectors, vectors_path.with_suffix(".tmp"))
        vectors_path.with_suffix(".tmp").replace(vectors_path)
    vectors = torch.load(vectors_path, map_location="cpu", weights_only=True)
    tree = tree_for_head(cfg, dm, vectors)
    tree.save(tree_path.with_suffix(".tmp"))
    tree_path.with_suffix(".tmp").replace(tree_path)
    return tree


def train(cfg: DictConfig) -> dict:
    """Train, validate each epoch, test the best checkpoint; return the final metrics.

    A `UserError` (bad config value, bad data, a NaN loss) removes the job's run directory, so a
    mistake never leaves a half-written run behind; any other failure marks metrics.json "failed".
    """
    quiet(bool(cfg.get("verbose")))
    fresh = Path(cfg.paths.output_dir)  # this invocation's folder; a resumed run goes on in its own
    overrides = job_overrides()
    try:
        cfg = validate(cfg)  # every key against nplm.config.schema, before any data is read
    except UserError as err:
        _fail_fresh_job(fresh, overrides, err)
        raise
    done = finished_job(fresh, overrides)
    if done is None:
        try:
            out_dir, ckpt = resolve_resume(cfg.get("resume"), fresh, overrides, bool(cfg.get("resume_allow_changes")))
        except UserError:
            discard_fresh(fresh)  # nothing written; an old job folder stays as it was
            raise
        if cfg.get("resume") in (True, "true"):  # the newest run with these overrides had finished
            done = finished_job(out_dir, overrides)
    if done is not None:
        log.info("skipping %s: already finished", done["dir"])
        return {**done["metrics"], "best_checkpoint": done.get("best_checkpoint")}
    if ckpt is None:
        clear_outputs(out_dir)  # a failed job's earlier attempt
    try:
        return _train(cfg, out_dir, ckpt, overrides)
    except UserError as err:
        finish_wandb(failed=True)
        _fail_fresh_job(fresh, overrides, err, remove=ckpt is None or not ckpt.is_relative_to(fresh))
        raise


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


def _threads(cfg: DictConfig) -> int | None:
    """`threads`, or under the parallel (joblib) launcher each job's share of the cores."""
    if cfg.get("threads"):
        return int(cfg.threads)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        launcher = HydraConfig.get().launcher
        if "joblib" in str(launcher.get("_target_", "")):
            return max(1, (os.cpu_count() or 1) // max(1, int(launcher.get("n_jobs") or 1)))
    return None


def _train(cfg: DictConfig, out_dir: Path, ckpt: Path | None = None, overrides: list[str] | None = None) -> dict:
    threads = _threads(cfg)
    if threads:
        torch.set_num_threads(threads)
    use_tf32(bool(cfg.get("tf32", True)))
    if cfg.get("malloc_keep_freed", False):  # asked for: it changes malloc for the whole process (nplm.fast.malloc)
        keep_freed_memory()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    dm = LMDataModule(_container(cfg.corpus), cfg.model.context_size, cfg.data.batch_size,
                      cfg.data.eval_batch_size, seed=cfg.seed, data_dir=cfg.paths.data_dir,
                      overfit_batches=cfg.data.get("overfit_batches", 0))
    dm.setup()
    dm.require_batches(cfg.trainer)
    plan = ExecutionPlan.build(_container(cfg.trainer), dm.train_batches(), cfg.get("steps_per_execution", 1))
    dm.group_training(plan.batches_per_step, plan.train_batches)
    if cfg.get("tree") and cfg.tree.name == "learned" and head_class(cfg.head.name).uses_tree(cfg.head):
        tree = learned_tree(cfg, dm, out_dir / "bootstrap")
    else:
        tree = tree_for_head(cfg, dm)
    module = LanguageModel(_container(cfg.model), _container(cfg.head), _container(cfg.optimizer),
                           dm.vocab.to_dict(), data={"corpus": _container(cfg.corpus), **_container(cfg.data)},
                           tree=tree.to_dict() if tree is not None else None)
    module.step_options = plan.step_options
    module.train_batches = plan.train_batches
    if ckpt is not None:
        check_resumable(ckpt, module)
    if cfg.get("compile"):
        module.compile_training_step()
    run_name, group = _hydra_job()
    loggers = build_loggers(cfg, out_dir, run_name, group or cfg.get("experiment_name"), resume_from=ckpt)
    history = EpochHistory(out_dir / "metrics.csv", resume_from=ckpt)
    record = RunRecord(out_dir, cfg, dm.summary(), dm.files, overrides or [], resumed_s=history.resumed_s)
    if tree is not None and record.enabled:
        tree.save(out_dir / "tree.json")
        record.data["tree"] = tree.stats(dm.vocab.counts)
        record.save()
    for logger in loggers:
        logger.log_hyperparams({"corpus_stats": record.data["corpus"], "data_files": dm.files,
                                "tree_stats": record.data.get("tree")})
    failed = True
    try:
        trainer = build_trainer(cfg, out_dir, loggers, history, plan)
        trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        best_path = trainer.checkpoint_callback.best_model_path
        if dm.has_split("test"):
            # (no best checkpoint when max_steps stopped the run before any validation: the last weights)
            metrics.update(trainer.test(module, datamodule=dm, ckpt_path=best_path or None, verbose=False)[0])
        metrics["val/ppl_best"] = module.best_val_ppl
        record.finish(metrics, epochs=trainer.current_epoch, best_checkpoint=best_path, history=history.rows)
        metrics["best_checkpoint"] = best_path
        for logger in loggers:
            if hasattr(logger, "experiment") and hasattr(logger.experiment, "summary"):
                logger.experiment.summary.update({k: v for k, v in metrics.items()
                                                  if k.startswith(("val/", "test/", "train/"))})
        log.info("val/ppl_best %.3f  test/ppl %s  (%s)", module.best_val_ppl,
                 f"{metrics['test/ppl']:.3f}" if "test/ppl" in metrics else "-", out_dir)
        failed = False
        return metrics
    except UserError:
        raise
    except BaseException as err:
        record.fail(err)
        raise
    finally:
        finish_wandb(failed)
