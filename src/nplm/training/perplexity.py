"""Perplexity over a whole split: exp(sum of per-token NLL / number of tokens).

Token-weighted, never a mean of batch means; the sums are float64 and add up across processes.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


class Perplexity(Metric):
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("nll_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, nll: torch.Tensor) -> None:
        """`nll`: per-token NLL `[B]` in nats."""
        self.nll_sum += nll.detach().double().sum()
        self.tokens += nll.numel()

    def compute(self) -> torch.Tensor:
        return torch.exp(self.nll_sum / self.tokens.clamp(min=1))
