"""Stopping a run before its end so that `resume` continues it exactly where it stopped.

Four things ask a run to stop early: a wall-clock deadline (`stop_at`, a Unix time: the drivers' budgets),
a training-time budget (`trainer.max_time`, counted over every piece of the run, as Lightning's own
`max_time` counts it), SIGTERM (a batch system's notice) and SIGINT (Ctrl-C; a second Ctrl-C quits at once).
`StopRequests` notices them at the end of a Lightning step, where every batch of the step has taken its
optimizer step (with gradient accumulation: at the next batch that steps), and then:

- on an epoch's last step, or while the epoch-end validation runs, lets the epoch end as usual (its
  validation, its row, last.ckpt) and stops after it;
- inside an epoch, writes last.ckpt at that batch and raises `TrainingStopped`. That checkpoint holds
  what the rest of the epoch needs: the batches already trained (the training loader's state), the
  random generators, the epoch's loss sums and, for a model that carries its state, the streams' state
  (`LanguageModel.on_save_checkpoint`); `resume` trains the rest of the epoch, the same batches in the
  same order.

Either way the run's record says "stopped" (never "finished") and where: `nplm.training.train`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl

from nplm.errors import UserError

log = logging.getLogger(__name__)

clock = time.time  # the wall clock of `stop_at` and `trainer.max_time` (tests move it)


class TrainingStopped(Exception):
    """Training stopped inside an epoch, after writing last.ckpt there; not an error."""

    def __init__(self, reason: str, epoch: int, batch: int):
        super().__init__(f"stopped by {reason} in epoch {epoch} after batch {batch}")
        self.reason, self.epoch, self.batch = reason, epoch, batch


def seconds_of(max_time: str | None) -> float | None:
    """`trainer.max_time` ("DD:HH:MM:SS", checked by the schema) in seconds."""
    if max_time is None:
        return None
    days, hours, minutes, seconds = (int(part) for part in str(max_time).split(":"))
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()


class StopRequests(pl.Callback):
    """Stops training when `deadline` (Unix time) passes, when `budget_s` seconds of training (over every piece
    of the run) are spent, or on SIGTERM or SIGINT (module docstring). `checkpoint`: the run's last.ckpt."""

    def __init__(self, checkpoint: Path, deadline: float | None = None, budget_s: float | None = None):
        self.checkpoint, self.deadline, self.budget_s = Path(checkpoint), deadline, budget_s
        self.spent_s = 0.0  # training time of the earlier pieces (restored from the checkpoint)
        self._since: float | None = None
        self.signalled: str | None = None  # "SIGTERM" or "SIGINT", once received
        self.reason: str | None = None  # what stopped the run, once it stopped
        self.where: dict | None = None  # {"epoch", "batch", "inside_epoch"} of the stop
        self._previous: dict = {}

    # -- what is saved with each checkpoint ------------------------------------------------------
    def state_dict(self) -> dict:
        return {"spent_s": self.spent()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.spent_s = float(state_dict.get("spent_s", 0.0))

    def spent(self) -> float:
        """Seconds of training over every piece of the run so far."""
        return self.spent_s + (clock() - self._since if self._since is not None else 0.0)

    # -- signals -----------------------------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if name == "SIGINT" and self.signalled == "SIGINT":  # a second Ctrl-C: quit now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if self.signalled is None:
            log.warning("%s: stopping after this step, with a checkpoint to resume from%s", name,
                        " (Ctrl-C again to quit at once)" if name == "SIGINT" else "")
        self.signalled = name

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # (signals reach the main thread only)
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    # -- Lightning's hooks -----------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._since = clock()
        self._install()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._uninstall()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._uninstall()

    def due(self) -> str | None:
        """What asks the run to stop now, if anything."""
        if self.signalled is not None:
            return self.signalled
        if self.deadline is not None and clock() >= self.deadline:
            return "stop_at"
        if self.budget_s is not None and self.spent() >= self.budget_s:
            return "trainer.max_time"
        return None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args) -> None:
        reason = self.agreed(trainer)
        now = pl_module.training_epoch()
        if reason is None or now is None or now.batches % pl_module.step_options.accumulate_grad_batches:
            return  # (with gradient accumulation: at the next batch that steps)
        epoch, batch = trainer.current_epoch, now.batches
        if trainer.is_last_batch or batch >= pl_module.train_batches:  # the epoch ends as usual, then training
            self._stop_after_epoch(trainer, reason)
            return
        pl_module.check_finite()  # (a diverged model is not saved)
        self.reason, self.where = reason, {"epoch": epoch, "batch": batch, "inside_epoch": True}
        trainer.save_checkpoint(self.checkpoint)
        log.warning("%s: stopped in epoch %d after batch %d; %s has the position, resume=<this run> trains the rest",
                    reason, epoch, batch, self.checkpoint.name)
        raise TrainingStopped(reason, epoch, batch)

    def agreed(self, trainer: pl.Trainer) -> str | None:
        """`due()`, agreed by every training process (DDP): all stop at the same step (a signal may reach one,
        their clocks differ), one collective a step."""
        reason = self.due()
        if trainer.world_size > 1 and trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
            reason = reason or "another training process's stop"
        return reason

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        reason = self.agreed(trainer)  # (asked for during the epoch's last step or its validation)
        if reason is not None:
            self._stop_after_epoch(trainer, reason)

    def _stop_after_epoch(self, trainer: pl.Trainer, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.where = {"epoch": trainer.current_epoch, "batch": None, "inside_epoch": False}
        trainer.should_stop = True


def check_budget_left(state: dict | None, budget_s: float | None, max_time) -> None:
    """Before a resumed run reads its data: refuse to continue when `trainer.max_time` (`budget_s` seconds) is
    already spent by the run's earlier pieces (`state`: `StopRequests.state_dict` from its checkpoint)."""
    if budget_s is None or not state:
        return
    spent = float(state.get("spent_s", 0.0))
    if spent >= budget_s:
        raise UserError(f"trainer.max_time={max_time}: this run has already trained for {spent:.0f} s of it; give "
                        f"a longer trainer.max_time (or null) to train on")
