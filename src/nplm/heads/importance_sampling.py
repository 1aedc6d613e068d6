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

Q(w) is proportional to (count(w) + 1)^proposal_power: add-one smoothing keeps every Q(w) > 0;
power 1 is the unigram proposal of the 2003 paper, 0 is uniform. Samples come from torch's global RNG,
by inverse CDF (`searchsorted` of k uniforms): unlike `torch.multinomial`, whose argument check reads a
device tensor on the host, it needs no host-device sync and compiles into one graph.

Cost: training O((k + 1) F) per example plus O(V) per batch to draw the samples; `nll` and
`log_probs` are the exact full softmax, O(V F), so evaluation perplexity is exact. The optimizer's
update of W and b is O(V F) per batch unless `sparse`: their gradients are then row-sparse and the
lazy optimizers update only the rows of the batch's targets and samples (experiments/scale).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from nplm.errors import UserError
from nplm.config.rules import Bool, Float, Int
from nplm.heads import register_head
from nplm.heads.base import Head, rows, tie_checked, wide, require_counts
from nplm.heads.softmax import SoftmaxNLL



@register_head("importance_sampling", keys={
    "num_samples": Int(1, doc="proposal samples per batch"),
    "proposal_power": Float(ge=0, doc="proposal q(w) ~ count(w)^power: 1 unigram, 0 uniform"),
    "sparse": Bool(doc="row-sparse gradients for the output vectors and biases: only the batch's targets and "
                       "samples are updated (lazy Adam); pays at large |V|")})
class ImportanceSamplingHead(Head):
    exact_training_loss = False
    can_tie = True  # the rows of self.out.weight: one output vector per word

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], num_samples: int = 100,
                 proposal_power: float = 1.0, sparse: bool = False):
        super().__init__()
        self.num_samples, self.sparse = num_samples, sparse
        q = (torch.tensor(counts, dtype=torch.float64) + 1.0) ** proposal_power  # [V]
        q = q / q.sum()
        self.register_buffer("proposal", q.float())  # [V] Q(w)
        self.register_buffer("proposal_cdf", torch.cumsum(q, 0), persistent=False)  # [V] float64
        self.out = nn.Linear(feature_dim, vocab_size)  # W [V, F], b [V]: the same layout as the softmax head

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        self.out.weight = tie_checked(weight, self.out.weight)  # [V, F], the model's parameter

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features)  # [B, V]

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return SoftmaxNLL.apply(wide(self.logits(features)), target)  # [B] exact, float32 also under autocast

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(wide(self.logits(features)), dim=-1)  # [B, V] exact

    def loss(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The sampled estimate of the NLL in training mode; the exact NLL in evaluation mode."""
        if not self.training:
            return self.nll(features, target)
        return self.sampled_loss(features, target, self.sample())

    def sample(self) -> torch.Tensor:
        """k word ids drawn with replacement from Q: [k]."""
        u = torch.rand(self.num_samples, dtype=torch.float64, device=self.proposal_cdf.device)  # [k]
        return torch.searchsorted(self.proposal_cdf, u, right=True).clamp_(max=len(self.proposal_cdf) - 1)

    def sampled_loss(self, features: torch.Tensor, target: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        B = target.shape[0]
        ids = torch.cat([target, samples])  # [B + k] one gather, so one scatter in backward
        w, b = rows(self.out.weight, ids, self.sparse), rows(self.out.bias, ids, self.sparse)  # [B + k, F], [B + k]
        y_t = (features * w[:B]).sum(-1) + b[:B]  # [B] target scores
        y_s = wide(torch.addmm(b[B:], features, w[B:].t()))  # [B, k] sample scores (float32 under autocast)
        log_kq = (self.num_samples * self.proposal[ids]).log().to(y_s.dtype)  # [B + k] log(k Q(w))
        z = torch.cat([(y_t - log_kq[:B])[:, None], y_s - log_kq[B:]], dim=1)  # [B, 1 + k] corrected scores
        return torch.logsumexp(z, dim=1) - y_t  # [B]

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts,
                    tree=None) -> "ImportanceSamplingHead":
        require_counts("importance_sampling", counts, vocab_size)
        return cls(feature_dim, vocab_size, counts, options.get("num_samples", 100),
                   float(options.get("proposal_power", 1.0)), bool(options.get("sparse", False)))
