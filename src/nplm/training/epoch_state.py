"""What a training epoch accumulates as it goes, and what of it a checkpoint written inside the epoch keeps.

`LanguageModel` keeps one `TrainingEpoch` per epoch: its clock (`train/tokens_per_s`), its loss sums (`train/ppl`,
and the window since the last `train/loss` line), the watch for a non-finite loss, the batches trained. A run
stopped inside an epoch (`nplm.training.stopping`) saves `state()` in its checkpoint, with the state a model
carries from batch to batch (`Model.carried_state`); the resumed run `restore`s it, so the epoch's figures and
its remaining batches are those of a run never stopped.
"""

from __future__ import annotations

import torch

from nplm.training.divergence import DivergenceWatch
from nplm.training.log_window import LossWindow
from nplm.training.throughput import EpochClock


class TrainingEpoch:
    """One training epoch's clock, loss sums (`loss`: the epoch's; `window`: since the last log line), divergence
    watch and batches trained, on `device`; `ended` once the epoch's end hooks have begun."""

    def __init__(self, device: torch.device):
        self.device = device
        self.clock = EpochClock()
        self.loss = LossWindow(device)  # the epoch's training loss (train/ppl) and tokens
        self.window = LossWindow(device)  # since the last log line (train/loss)
        self.watch = DivergenceWatch(device)
        self.ended = False

    @property
    def batches(self) -> int:
        """Batches trained so far in the epoch."""
        return self.loss.batches

    def add(self, loss_sum: torch.Tensor, batches: int, tokens: int) -> None:
        """A group of `batches` batches, `tokens` tokens, whose per-token losses sum to `loss_sum` (float64 [])."""
        self.loss.add(loss_sum, batches, tokens)
        self.window.add(loss_sum, batches, tokens)

    def take_window(self) -> LossWindow:
        """The loss sums since the last log line; the next window starts empty."""
        window, self.window = self.window, LossWindow(self.device)
        return window

    def state(self, carried=None) -> dict | None:
        """For a checkpoint written now: the epoch's sums, its clock and `carried` (a model's state, on the CPU);
        None once the epoch has ended (a checkpoint of the whole epoch)."""
        if self.ended:
            return None
        return {"epoch": self.loss.state(), "window": self.window.state(), "seconds": self.clock.elapsed(),
                "carried": carried}

    def restore(self, state: dict) -> None:
        """The sums and clock of a checkpoint's `state` (the model's carried state is the model's to restore)."""
        self.clock.seconds = state["seconds"]
        self.loss.restore(state["epoch"])
        self.window.restore(state["window"])
