"""Importance-sampled softmax for training (Bengio & Senecal 2003, "Quick training of probabilistic
neural nets by importance sampling"; 2008, IEEE TNN 19(4), "Adaptive importance sampling to accelerate
training of a neural probabilistic language model"), with the full softmax for evaluation.

The model is the full softmax's, y = W f + b [V] and P(w | ctx) = exp(y_w) / Z. The NLL's gradient
-dy_t + sum_w P(w | ctx) dy_w needs all V scores; the second term is estimated instead from k words
S = (s_1..s_k) drawn with replacement from a proposal Q (shared by the batch), with the biased
(self-normalised) importance weights of the papers. With corrected scores z_w = y_w - log(k Q(w)):

    loss(t) = logsumexp({z_t} u {z_s : s in S}) - y_t

i.e. the sampled-softmax cross-entropy over {target} u samples with corrected logits, minus the
constant log(k Q(t)) so that its value estimates the NLL: sum_s exp(z_s) = (1/k) sum_s exp(y_s) / Q(s)
is an unbiased estimate of Z, and the target's own term exp(y_t) / (k Q(t)) vanishes as k grows, so the
loss tends to -y_t + log Z. Its gradient is -dy_t + sum_{j in {t} u S} softmax(z)_j dy_j. Samples
equal to the target are kept (they are part of the estimate of Z).

The proposal, the drawing and the cost: `nplm.heads.sampled`.
"""

from __future__ import annotations

import torch

from nplm.heads import register_head
from nplm.heads.sampled import SampledSoftmaxHead, sampled_keys


@register_head("importance_sampling", keys=sampled_keys("k, proposal samples per batch",
                                                        "proposal Q(w) ~ count(w)^power: 1 unigram, 0 uniform"))
class ImportanceSamplingHead(SampledSoftmaxHead):
    """Importance sampling (Bengio & Senecal 2003): a sampled estimate of the NLL for training, the
    exact softmax for evaluation."""

    def sampled_loss(self, features: torch.Tensor, target: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        """logsumexp({z_t} u {z_s}) - y_t per example [B] (module docstring)."""
        y_t, y_s, log_kq = self.scores(features, target, samples)  # [B], [B, k], [B + k]
        B = target.shape[0]
        z = torch.cat([(y_t - log_kq[:B])[:, None], y_s - log_kq[B:]], dim=1)  # [B, 1 + k] corrected scores
        return torch.logsumexp(z, dim=1) - y_t  # [B]
