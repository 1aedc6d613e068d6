"""The one interface every output layer implements."""

from __future__ import annotations

import torch
from torch import nn

from nplm.errors import UserError


class Head(nn.Module):
    """An output layer over features `[B, F]`.

    - `nll(features, target)`: the exact per-token negative log-likelihood `[B]` (natural log); summed
      over a split it is the numerator of the split's perplexity;
    - `log_probs(features)`: the full normalised log-distribution `[B, V]` (prediction, sampling,
      mixing). For every head, `nll(f, t) == -log_probs(f)[t]`;
    - `loss(features, target)`: the per-token training objective `[B]`; the exact NLL unless the head
      trains on an approximation (sampling), which then sets `exact_training_loss = False`.

    `uses_tree`: the head needs an `nplm.trees.Tree` (config group `tree`).
    """

    uses_tree = False
    exact_training_loss = True

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.nll(features, target)

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts: list[int] | None,
                    tree=None) -> "Head":
        """Build from the `head` config group's options (everything but `name`); unknown options are
        refused with the list of valid ones."""
        if options:
            raise UserError(f"unknown option head.{sorted(options)[0]} for head '{cls.__name__}'")
        return cls(feature_dim, vocab_size)
