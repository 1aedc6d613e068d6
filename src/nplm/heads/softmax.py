"""Full softmax output layer: P(w_t = i | context) = exp(y_i) / sum_j exp(y_j) (Bengio et al. 2003).

With the NPLM's features f = [x, tanh(d + Hx)] and `self.out` = (weight [W | U], bias b),
y = b + W x + U tanh(d + H x): eq. (1) of the paper. Cost O(|V| F) per example.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nplm.heads.base import Head


class SoftmaxHead(Head):
    def __init__(self, feature_dim: int, vocab_size: int):
        super().__init__()
        self.out = nn.Linear(feature_dim, vocab_size)  # weight [V, F] = [W | U], bias b [V]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features)  # [B, V]

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(features), target, reduction="none")  # [B]

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits(features), dim=-1)  # [B, V]
