"""The pytorch_lightning.Trainer of a run: checkpoints (best and last, written atomically), early
stopping, stops that resume exactly (`nplm.training.stopping`), progress lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from nplm.config.rules import show
from nplm.errors import UserError
from nplm.tracking.progress import Progress
from nplm.tracking.records import EpochHistory
from nplm.training.averaging import ema_callback
from nplm.training.checkpoint_io import AtomicCheckpointIO
from nplm.training.execution import ExecutionPlan
from nplm.training.stopping import StopRequests, seconds_of


# The Trainer arguments Lightning checks against each other and the machine when a Trainer is made, each
# with a value it always accepts on a CPU (to tell which one it refused).
START_UP_KEYS = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "precision": "32-true", "num_nodes": 1}


def check_trainer(trainer_cfg: dict) -> int:
    """Make a Trainer of the `trainer` group's settings (nothing is trained or written), before any data is
    read: what Lightning refuses (a strategy that needs a GPU or a missing package, device ids on a CPU)
    is one `UserError` naming the key, found by setting each of `START_UP_KEYS` back to its safe value;
    so is `trainer.num_nodes` > 1 with no other node to join, where Lightning would wait for them forever.
    Returns the number of training processes (Lightning's world size)."""
    from lightning_fabric.plugins.environments import LightningEnvironment
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    def make(options: dict) -> pl.Trainer:
        return pl.Trainer(**options, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False)

    options = {k: v for k, v in trainer_cfg.items() if k in START_UP_KEYS}
    try:
        trainer = make(options)
        # no cluster detected (SLURM, torchrun, LSF, ...) and no address of node 0: nothing to join
        alone = type(getattr(trainer.strategy, "cluster_environment", None)) is LightningEnvironment
        if trainer.num_nodes > 1 and alone and "MASTER_ADDR" not in os.environ:
            raise UserError(f"trainer.num_nodes={trainer.num_nodes}: no cluster here to join (no SLURM or torchrun, "
                            "MASTER_ADDR unset), so the run would wait for the other nodes forever; start it on every "
                            "node with MASTER_ADDR, MASTER_PORT and NODE_RANK set, or drop trainer.num_nodes")
        return trainer.world_size
    except (MisconfigurationException, ValueError, TypeError, RuntimeError, ImportError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0].rstrip(".")
        for key in options:
            try:
                make({**options, key: START_UP_KEYS[key]})
            except Exception:
                continue
            raise UserError(f"trainer.{key}={show(options[key])}: Lightning refuses it here ({first}); "
                            f"change trainer.{key} (e.g. trainer.{key}={show(START_UP_KEYS[key])})") from None
        raise UserError(f"trainer: Lightning refuses these settings ({first}); change trainer.accelerator, "
                        "trainer.devices, trainer.strategy or trainer.precision") from None


def build_trainer(cfg: DictConfig, out_dir: Path, loggers: list, history: EpochHistory,
                  plan: ExecutionPlan, extra_callbacks: list[pl.Callback] = ()) -> pl.Trainer:
    """`extra_callbacks`: the run's own (`nplm.training.flops.FlopCount`, a caller's of `train`), after nplm's."""
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
    if cfg.callbacks.get("ema_decay"):  # validate, checkpoint and test the weights' moving average
        callbacks.append(ema_callback(float(cfg.callbacks.ema_decay)))
    trainer_cfg = dict(plan.trainer_options)  # trainer, in Lightning's steps of plan.batches_per_step batches
    # stop_at (Unix time), trainer.max_time (nplm's, not Lightning's: it stops inside an epoch with a checkpoint
    # there), SIGTERM and SIGINT: nplm.training.stopping
    callbacks.append(StopRequests(out_dir / "checkpoints" / "last.ckpt", cfg.get("stop_at"),
                                  seconds_of(trainer_cfg.pop("max_time", None))))
    callbacks += extra_callbacks
    if trainer_cfg.get("enable_progress_bar") is not False:
        # A live bar in a terminal; a plain line every progress.interval seconds in batch jobs and CI logs.
        callbacks.append(Progress(cfg.get("progress", {}).get("interval", 30)))
        trainer_cfg["enable_progress_bar"] = True
    try:
        return pl.Trainer(**trainer_cfg, logger=loggers or False, callbacks=callbacks,
                          plugins=[AtomicCheckpointIO()],  # a kill or a full disk never tears a checkpoint
                          default_root_dir=str(out_dir), enable_model_summary=False)
    except TypeError as err:
        raise UserError(f"bad trainer option ({err}); see pytorch_lightning.Trainer's arguments") from None
