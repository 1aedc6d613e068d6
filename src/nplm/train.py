"""Training entry point: `train(cfg) -> metrics`; `main()` is the thin `@hydra.main` wrapper.

    nplm-train                                   # config/train.yaml defaults
    nplm-train experiment=quickstart             # the README's default experiment
    nplm-train -m model.context_size=2,4 model.embed_dim=16,32 corpus=toy
"""

from __future__ import annotations

import logging
import secrets
import shutil
import sys
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from nplm.data.datamodule import LMDataModule
from nplm.errors import EXIT_USER_ERROR, UserError
from nplm.lit import LanguageModel
from nplm.tracking import EpochHistory, RunRecord, build_loggers, finish_wandb

log = logging.getLogger(__name__)

# conf/ at the top of the repository (nplm is installed in editable mode, `pip install -e .`).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# Hydra's second-resolution timestamps collide when jobs start together: add a random suffix.
OmegaConf.register_new_resolver("nplm_uid", lambda: secrets.token_hex(3), use_cache=True, replace=True)


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


def build_trainer(cfg: DictConfig, out_dir: Path, loggers: list, history: EpochHistory) -> pl.Trainer:
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    best = ModelCheckpoint(dirpath=str(out_dir / "checkpoints"), filename="best-epoch{epoch:03d}",
                           monitor="val/ppl", mode="min", save_top_k=1, save_last=True,
                           auto_insert_metric_name=False)
    callbacks = [best, history]
    patience = cfg.callbacks.get("early_stopping_patience")
    if patience:
        callbacks.append(EarlyStopping(monitor="val/ppl", mode="min", patience=patience))
    trainer_cfg = _container(cfg.trainer)
    if trainer_cfg.get("enable_progress_bar") is None:
        # A live bar in a terminal; plain per-epoch log lines in batch jobs and CI logs.
        trainer_cfg["enable_progress_bar"] = sys.stdout.isatty()
    try:
        return pl.Trainer(**trainer_cfg, logger=loggers or False, callbacks=callbacks,
                          default_root_dir=str(out_dir), enable_model_summary=False)
    except TypeError as err:
        raise UserError(f"bad trainer option ({err}); see pytorch_lightning.Trainer's arguments") from None


def train(cfg: DictConfig) -> dict:
    """Train, validate each epoch, test the best checkpoint; return the final metrics.

    A `UserError` (bad config value, bad data, a NaN loss) removes the job's run directory, so a
    mistake never leaves a half-written run behind; any other failure marks metrics.json "failed".
    """
    out_dir = Path(cfg.paths.output_dir)
    try:
        return _train(cfg, out_dir)
    except UserError:
        finish_wandb(failed=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _train(cfg: DictConfig, out_dir: Path) -> dict:
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    dm = LMDataModule(_container(cfg.corpus), cfg.model.context_size, cfg.data.batch_size,
                      cfg.data.eval_batch_size, seed=cfg.seed, data_dir=cfg.paths.data_dir,
                      overfit_batches=cfg.data.get("overfit_batches", 0))
    dm.setup()
    module = LanguageModel(_container(cfg.model), _container(cfg.head), _container(cfg.optimizer),
                           dm.vocab.to_dict(), data={"corpus": _container(cfg.corpus), **_container(cfg.data)})
    run_name, group = _hydra_job()
    loggers = build_loggers(cfg, out_dir, run_name, group or cfg.get("experiment_name"))
    record = RunRecord(out_dir, cfg, dm.summary(), dm.files)
    for logger in loggers:
        logger.log_hyperparams({"corpus_stats": dm.summary(), "data_files": dm.files})
    history = EpochHistory(out_dir / "metrics.csv")
    failed = True
    try:
        trainer = build_trainer(cfg, out_dir, loggers, history)
        trainer.fit(module, datamodule=dm, ckpt_path=cfg.get("resume"))
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        best_path = trainer.checkpoint_callback.best_model_path
        if dm.has_split("test"):
            metrics.update(trainer.test(module, datamodule=dm, ckpt_path=best_path, verbose=False)[0])
        metrics["val/ppl_best"] = module.best_val_ppl
        record.finish(metrics, epochs=trainer.current_epoch, best_checkpoint=best_path, history=history.rows)
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


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> float:
    try:
        metrics = train(cfg)
    except UserError as err:
        print(f"nplm: error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    return metrics["val/ppl_best"]  # the objective for hyperparameter-search sweepers


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
