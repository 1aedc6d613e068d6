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
uniform), the importance-sampling head's proposal (`nplm.heads.sampled`). The k noise words are drawn
once per batch and shared by its examples (each example still sees k independent draws from P_n; the
paper drew them per example); a noise word equal to the target counts as noise (the paper's
estimator keeps it too). The biases b
start at the log of the add-one unigram distribution, so that sum_w exp(y_w) = 1 at the start: the
scores start self-normalised, with the output vectors q_w small.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from nplm.heads import register_head
from nplm.heads.sampled import SampledSoftmaxHead, sampled_keys


@register_head("nce", keys=sampled_keys("k, noise words per batch (shared by its examples)",
                                        "noise P_n(w) ~ count(w)^power: 1 unigram (the paper), 0 uniform"))
class NCEHead(SampledSoftmaxHead):
    """Noise-contrastive estimation (Mnih & Teh 2012): a training loss over k noise words, the exact
    softmax of the same scores for evaluation."""

    default_samples = 25

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], num_samples: int = 25,
                 proposal_power: float = 1.0, sparse: bool = False):
        super().__init__(feature_dim, vocab_size, counts, num_samples, proposal_power, sparse)
        smoothed = torch.tensor(counts, dtype=torch.float64) + 1.0  # [V] add-one counts
        with torch.no_grad():
            self.out.bias.copy_((smoothed / smoothed.sum()).log())  # b_w = log unigram(w): sum_w exp(b_w) = 1

    def sampled_loss(self, features: torch.Tensor, target: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """-J per example [B] (module docstring) for targets [B] and the batch's noise words [k]."""
        y_t, y_n, log_kq = self.scores(features, target, noise)  # [B], [B, k], [B + k] log(k P_n(w))
        B = target.shape[0]
        return F.softplus(log_kq[:B] - y_t) + F.softplus(y_n - log_kq[B:]).sum(1)  # [B]
