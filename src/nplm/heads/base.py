"""The one interface every output layer implements."""

from __future__ import annotations

import torch
from torch import nn

from nplm.errors import UserError


class Head(nn.Module):
    """An output layer over features `[B, F]`.

    - `nll(features, target)`: per-token negative log-likelihood `[B]` (natural log), the training
      loss and, summed over a split, the numerator of its perplexity;
    - `log_probs(features)`: the full normalised log-distribution `[B, V]` (prediction, sampling,
      mixing). For every head, `nll(f, t) == -log_probs(f)[t]`.
    """

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts: list[int] | None) -> "Head":
        if options:
            raise UserError(f"unknown option head.{sorted(options)[0]} for head '{cls.__name__}'")
        return cls(feature_dim, vocab_size)
