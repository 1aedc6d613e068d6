"""Noise-contrastive estimation for training (Mnih & Teh 2012, "A fast and simple algorithm for training
neural probabilistic language models", after Gutmann & Hyvarinen 2010), with the full softmax for
evaluation.

The model is the full softmax's: scores s(w, h) = y_w = q_w . f + b_w [V] and P(w | h) = exp(y_w) / Z.
NCE trains the unnormalised exp(y_w) to be P(w | h) itself (self-normalised: Z is taken as 1, not
learned, as in the paper) by telling the data's word from k noise words drawn from a noise
distribution P_n. With Delta(w) = y_w - log(k P_n(w)), the posterior that w came from the data is
sigma(Delta(w)), and the objective per example, for target t and noise words x_1..x_k, is

    J(t) = log sigma(Delta(t)) + sum_j log(1 - sigma(Delta(x_j)))
    loss(t) = -J(t) = softplus(-Delta(t)) + sum_j softplus(Delta(x_j))          # [B]

Its gradient, -(1 - sigma(Delta(t))) dy_t + sum_j sigma(Delta(x_j)) dy_{x_j}, tends to the NLL's
gradient -dy_t + sum_w P(w | h) dy_w as k grows. The loss is not an estimate of the NLL: a run
logs exp(mean loss) as `train/ppl_sampled`, a number to watch fall, not a perplexity.

P_n(w) is proportional to (count(w) + 1)^proposal_power (power 1: the paper's unigram noise; 0:
uniform), the importance-sampling head's proposal. The k noise words are drawn once per batch,
with replacement, and shared by its examples (one [B, F] x [F, k] product instead of B gathers of
k rows: each example still sees k independent draws from P_n; the paper drew them per example);
a noise word equal to the target counts as noise (the paper's estimator keeps it too). The biases b
start at the log of the add-one unigram distribution, so that sum_w exp(y_w) = 1 at the start: the
scores start self-normalised, with the output vectors q_w small.

Cost: training O((k + 1) F) per example plus O(V) per batch to draw the noise; `nll` and
`log_probs` are the exact full softmax, O(V F), so evaluation perplexity is exact.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nplm.config.rules import Float, Int
from nplm.heads import register_head
from nplm.heads.base import Head, require_counts, tie_checked, wide
from nplm.heads.softmax import SoftmaxNLL


@register_head("nce", keys={
    "num_samples": Int(1, doc="k, noise words per batch (shared by its examples)"),
    "proposal_power": Float(ge=0, doc="noise P_n(w) ~ count(w)^power: 1 unigram (the paper), 0 uniform")})
class NCEHead(Head):
    """Noise-contrastive estimation (Mnih & Teh 2012): a training loss over k noise words, the exact
    softmax of the same scores for evaluation."""

    exact_training_loss = False
    can_tie = True  # the rows of self.out.weight: one output vector q_w per word

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], num_samples: int = 25,
                 proposal_power: float = 1.0):
        super().__init__()
        self.num_samples = num_samples
        smoothed = torch.tensor(counts, dtype=torch.float64) + 1.0  # [V] add-one counts
        q = smoothed ** proposal_power
        q = q / q.sum()
        self.register_buffer("noise", q.float())  # [V] P_n(w)
        self.register_buffer("noise_cdf", torch.cumsum(q, 0), persistent=False)  # [V] float64
        self.out = nn.Linear(feature_dim, vocab_size)  # q_w: weight [V, F], b_w: bias [V] (the softmax's layout)
        with torch.no_grad():
            self.out.bias.copy_((smoothed / smoothed.sum()).log())  # b_w = log unigram(w): sum_w exp(b_w) = 1

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        self.out.weight = tie_checked(weight, self.out.weight)  # [V, F], the model's parameter

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features)  # [B, V]

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return SoftmaxNLL.apply(wide(self.logits(features)), target)  # [B] exact, float32 also under autocast

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(wide(self.logits(features)), dim=-1)  # [B, V] exact

    def loss(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The NCE loss in training mode; the exact NLL in evaluation mode."""
        if not self.training:
            return self.nll(features, target)
        return self.nce_loss(features, target, self.sample())

    def sample(self) -> torch.Tensor:
        """k noise word ids drawn with replacement from P_n: [k] (inverse CDF: no host-device sync)."""
        u = torch.rand(self.num_samples, dtype=torch.float64, device=self.noise_cdf.device)  # [k]
        return torch.searchsorted(self.noise_cdf, u, right=True).clamp_(max=len(self.noise_cdf) - 1)

    def nce_loss(self, features: torch.Tensor, target: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """-J per example [B] (module docstring) for targets [B] and the batch's noise words [k]."""
        B = target.shape[0]
        rows = torch.cat([target, noise])  # [B + k] one gather, so one scatter in backward
        w, b = self.out.weight[rows], self.out.bias[rows]  # [B + k, F], [B + k]
        y_t = wide((features * w[:B]).sum(-1) + b[:B])  # [B] data scores
        y_n = wide(torch.addmm(b[B:], features, w[B:].t()))  # [B, k] noise scores (float32 under autocast)
        log_kq = (self.num_samples * self.noise[rows]).log().to(y_n.dtype)  # [B + k] log(k P_n(w))
        return F.softplus(log_kq[:B] - y_t) + F.softplus(y_n - log_kq[B:]).sum(1)  # [B]

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts, tree=None) -> "NCEHead":
        require_counts("nce", counts, vocab_size)
        return cls(feature_dim, vocab_size, counts, options.get("num_samples", 25),
                   float(options.get("proposal_power", 1.0)))
