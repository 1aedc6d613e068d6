"""The training loss summed over a window of batches (since the last log line, or over the epoch): a device
tensor, so that no step waits for the device, with the window's batch and token counts on the host."""

from __future__ import annotations

import torch


class LossWindow:
    """Per-token training losses summed over some batches (float64, on `device`), their batches and tokens."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.batches = self.tokens = 0

    def add(self, loss_sum: torch.Tensor, batches: int, tokens: int) -> None:
        """A group of `batches` batches, `tokens` tokens, whose per-token losses sum to `loss_sum`."""
        self.loss += loss_sum
        self.batches += batches
        self.tokens += tokens

    def state(self) -> dict:
        """The sums for a checkpoint (on the CPU)."""
        return {"loss": self.loss.detach().cpu(), "batches": self.batches, "tokens": self.tokens}

    def restore(self, state: dict) -> None:
        """The sums of a checkpoint's `state`."""
        self.loss = state["loss"].to(self.loss.device, self.loss.dtype)
        self.batches, self.tokens = int(state["batches"]), int(state["tokens"])

    def mean(self) -> torch.Tensor:
        """The mean per-token loss (float32, on the device; no sync)."""
        return (self.loss / self.tokens).float()
