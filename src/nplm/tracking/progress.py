"""What a run is doing, wherever its output goes.

- In a terminal: a live bar per pass (training epoch, validation, test) with loss, perplexity,
  tokens/s and ETA.
- Anywhere else (a pipe, `nohup`, CI, a SLURM log): one plain log line every `progress.interval`
  seconds, never a carriage return and never a line per batch:

      epoch 3  batch 1200/6971  loss 4.812  ppl 123.0  41,210 tokens/s  MFU 1.23%  ETA 2m20s (run 31m05s)
      epoch 3  val  batch 40/110  95,112 tokens/s  ETA 3s

  The per-epoch summary line (train/val perplexity, time) comes from `tracking.EpochHistory`. MFU, the
  model FLOP utilisation of the device, is shown once the run has counted its step's FLOPs
  (`nplm.training.flops`: the LightningModule's `flops`).

The clock is read every batch; the loss only when a line or a bar refresh is due. Between those the
batch losses are summed on the device, so the training loop never waits for the accelerator.
"""

from __future__ import annotations

import logging
import math
import sys
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ProgressBar

from nplm.errors import UserError

log = logging.getLogger(__name__)

BAR_REFRESH_S = 0.5  # how often a terminal bar reads the loss


def duration(seconds: float) -> str:
    """45s, 4m12s, 1h02m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _Pass:
    """One pass over a split: batches and tokens done, the loss summed since the last report, and
    its terminal bar in live mode."""

    def __init__(self, name: str, total: float, training: bool, bar=None, flops=None):
        """`flops`: a training pass's `nplm.training.flops.FlopReport`, for its MFU (`flops.mfu(tokens/s)`)."""
        self.name, self.total, self.training, self.bar, self.flops = name, total, training, bar, flops
        self.start = self.last = time.monotonic()
        self.batches = self.tokens = self.losses = 0
        self.loss_sum: torch.Tensor | None = None  # on the device, read only when reported

    def add(self, batches: int, tokens: int, loss: torch.Tensor | None) -> None:
        self.batches += batches
        self.tokens += tokens
        if loss is not None:
            loss = loss.detach()
            self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
            self.losses += 1

    def numbers(self, now: float) -> str:
        """`loss 4.812  ppl 123.0  41,210 tokens/s  MFU 1.23%`: the mean loss since the last call (one
        host-device sync), the pass's token rate and, where the FLOPs were counted, its utilisation."""
        text = ""
        if self.losses:
            loss = self.loss_sum.item() / self.losses
            self.loss_sum, self.losses = None, 0
            text = f"loss {loss:.3f}  ppl {math.exp(min(loss, 700.0)):.1f}  "
        rate = self.tokens / max(now - self.start, 1e-9)
        text += f"{rate:,.0f} tokens/s"
        return text if self.flops is None else f"{text}  MFU {self.flops.mfu(rate):.2%}"

    def eta(self, now: float) -> float | None:
        if not math.isfinite(self.total) or not self.batches:
            return None
        return (self.total - self.batches) * (now - self.start) / self.batches

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Progress(ProgressBar):
    """Lightning's progress callback for nplm: a live bar when stdout is a terminal, plain timed
    lines otherwise (`live=None` decides by `sys.stdout.isatty()`)."""

    def __init__(self, interval: float = 30.0, live: bool | None = None):
        super().__init__()
        if not float(interval) > 0:
            raise UserError(f"progress.interval={interval}: must be > 0 (seconds between progress lines)")
        self.interval = float(interval)
        self.live = sys.stdout.isatty() if live is None else live
        self._enabled = True
        self._train: _Pass | None = None  # the training epoch, kept open under its validation pass
        self._eval: _Pass | None = None

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _open(self, name: str, total: float, training: bool, flops=None) -> _Pass:
        bar = None
        if self.live and self._enabled:
            from tqdm.auto import tqdm

            bar = tqdm(total=total if math.isfinite(total) else None, desc=name, unit="batch", file=sys.stdout,
                       dynamic_ncols=True, leave=training, position=0 if training else 1)
        return _Pass(name, total, training, bar, flops)

    def _step(self, trainer: pl.Trainer, p: _Pass | None, batches: int, tokens: int,
              loss: torch.Tensor | None = None) -> None:
        if p is None or not self._enabled:
            return
        p.add(batches, tokens, loss)
        now = time.monotonic()  # the clock every step; anything else only when due
        if p.bar is not None:
            p.bar.update(batches)
            if now - p.last >= BAR_REFRESH_S:
                p.last = now
                p.bar.set_postfix_str(p.numbers(now), refresh=False)
        elif not self.live and now - p.last >= self.interval:
            p.last = now
            eta, run = self._etas(trainer, p, now)
            log.info("%s  batch %d/%s  %s%s%s", p.name, p.batches, _count(p.total), p.numbers(now),
                     "" if eta is None else f"  ETA {duration(eta)}", "" if run is None else f" (run {duration(run)})")

    @staticmethod
    def _etas(trainer: pl.Trainer, p: _Pass, now: float) -> tuple[float | None, float | None]:
        """(seconds left in this pass, in the whole run) at this pass's pace; the run's only for
        training, up to max_epochs or max_steps, whichever comes first, and only if it ends later."""
        eta = p.eta(now)
        if not p.training or eta is None:
            return eta, None
        left = []
        epochs_left = (trainer.max_epochs or -1) - trainer.current_epoch - 1
        if epochs_left > 0:
            left.append(eta + epochs_left * (eta + now - p.start))
        if (trainer.max_steps or -1) > 0:
            steps = (trainer.max_steps - trainer.global_step) * (now - p.start) / p.batches
            eta = min(eta, steps)
            left.append(steps)
        run = min(left, default=None)
        return eta, run if run is not None and run > eta + 0.5 else None

    # -- Lightning hooks -------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = getattr(pl_module, "train_batches", None) or self.total_train_batches
        self._train = self._open(f"epoch {trainer.current_epoch}", total, training=True,
                                 flops=getattr(pl_module, "flops", None))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """`outputs`: LanguageModel.training_step's {"loss", "batches", "tokens"} for its group of batches."""
        if isinstance(outputs, dict) and "batches" in outputs:
            batches, tokens = outputs["batches"], outputs["tokens"]
        else:  # one (context, target) batch
            batches, tokens = 1, batch[1].numel()
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self._step(trainer, self._train, batches, tokens, loss if isinstance(loss, torch.Tensor) else None)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._train is not None:
            self._train.close()
        self._train = None

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            name = f"epoch {trainer.current_epoch} val" if trainer.state.fn == "fit" else "val"
            self._eval = self._open(name, sum(trainer.num_val_batches), training=False)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._step(trainer, self._eval, 1, batch[1].numel())

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close_eval()

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval = self._open("test", sum(trainer.num_test_batches), training=False)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._step(trainer, self._eval, 1, batch[1].numel())

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close_eval()

    def _close_eval(self) -> None:
        if self._eval is not None:
            self._eval.close()
        self._eval = None


def _count(total: float) -> str:
    return str(int(total)) if math.isfinite(total) else "?"
