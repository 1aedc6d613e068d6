"""A training loss that is no longer finite stops the run (`Diverged`), found without a host-device sync
per step: `DivergenceWatch` keeps, on the device, where the first non-finite per-token loss is, and the
host reads it only where the loss is read anyway (a log line, a validation, the end of an epoch)."""

from __future__ import annotations

import bisect
from typing import Callable

import torch

from nplm.errors import UserError


class Diverged(UserError):
    """The training loss, or the validation perplexity, is no longer finite: the run stops at once. Its record
    says "diverged" and its folder stays, with the checkpoints written before (each after a validation with a
    finite perplexity, or after an epoch whose training loss was finite)."""


def divergence_fix(lr: float, clip: float | None) -> str:
    """What to change when the training diverged: `lr`, `optimizer.lr`; `clip`, `trainer.gradient_clip_val`."""
    return (f"lower optimizer.lr (e.g. optimizer.lr={lr / 10:g}) or "
            + (f"trainer.gradient_clip_val (now {clip:g})" if clip else "set trainer.gradient_clip_val=1.0"))


class DivergenceWatch:
    """Where the first non-finite per-token training loss since the last check is: its place among the tokens
    trained since then (-1: none) and its value, device tensors written without a sync; and, on the host, each
    batch's last token's place, optimizer step and number in the epoch."""

    def __init__(self, device: torch.device):
        self.bad_at = torch.full((), -1, dtype=torch.int64, device=device)
        self.bad_value = torch.zeros((), dtype=torch.float32, device=device)
        self.batches: list[tuple[int, int, int]] = []  # (tokens up to the batch's end, its optimizer step, batch)
        self.tokens = 0  # trained since the last check

    def add_batch(self, tokens: int, step: int, batch: int) -> None:
        """A batch of `tokens` tokens trained in optimizer step `step`, the epoch's `batch`-th."""
        self.tokens += tokens
        self.batches.append((self.tokens, step, batch))

    def watch(self, losses: torch.Tensor, total: torch.Tensor, tokens: int) -> None:
        """Keep the place and value of the first non-finite loss of a group's per-token `losses` [N] (the
        group's last `tokens` tokens), unless an earlier one is kept; `total`: their sum (non-finite if one is:
        a loss is >= 0 or NaN). A few small kernels per group and no host-device sync."""
        offset = self.tokens - tokens
        bad = ~torch.isfinite(total) & (self.bad_at < 0)
        first = (~torch.isfinite(losses)).to(torch.uint8).argmax()  # [] the first non-finite one, if any
        self.bad_at = torch.where(bad, first + offset, self.bad_at)
        self.bad_value = torch.where(bad, losses.index_select(0, first.view(1))[0].float(), self.bad_value)

    def check(self, epoch: int, fix: Callable[[], str]) -> None:
        """Raise `Diverged` naming the optimizer step (in `epoch`) and what to change (`fix()`) if a loss since
        the last check was not finite; one read of the device."""
        if not self.batches:
            return
        at, value = torch.stack([self.bad_at.double(), self.bad_value.double()]).tolist()
        if at >= 0:
            ends = [end for end, _, _ in self.batches]
            _, step, batch = self.batches[bisect.bisect_right(ends, int(at))]
            raise Diverged(f"training loss became {value} at optimizer step {step} (epoch {epoch}, batch {batch}); "
                           f"{fix()}")
        self.batches, self.tokens = [], 0
