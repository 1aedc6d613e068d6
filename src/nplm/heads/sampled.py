"""What the heads trained on a sampled objective share (importance sampling, NCE): the full softmax's
scores y = W f + b [V], P(w | h) = exp(y_w) / Z, evaluated exactly, and trained on k words drawn from a
proposal (noise) distribution Q instead of all V.

Q(w) is proportional to (count(w) + 1)^proposal_power: add-one smoothing keeps every Q(w) > 0; power
1 is the unigram distribution, 0 uniform. The k ids are drawn once per batch, with replacement, and
shared by its examples (one [B, F] x [F, k] product instead of B gathers of k rows), from torch's global
RNG by inverse CDF (`searchsorted` of k uniforms): unlike `torch.multinomial`, whose argument check reads
a device tensor on the host, it needs no host-device sync and compiles into one graph.

Cost: training O((k + 1) F) per example plus O(V) per batch to draw the samples; `nll` and `log_probs`
are the exact full softmax, O(V F), so evaluation perplexity is exact. The optimizer's update of W and
b is O(V F) per batch unless `sparse`: their gradients are then row-sparse and the lazy optimizers
update only the rows of the batch's targets and samples (experiments/scale).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from nplm.config.rules import Bool, Float, Int
from nplm.errors import UserError
from nplm.heads.base import Head, rows, tie_checked, wide
from nplm.heads.softmax import SoftmaxNLL


def sampled_keys(samples_doc: str, proposal_doc: str) -> dict:
    """The keys of a sampled head: k, the proposal's power, sparse rows."""
    return {"num_samples": Int(1, doc=samples_doc), "proposal_power": Float(ge=0, doc=proposal_doc),
            "sparse": Bool(doc="row-sparse gradients for the output vectors and biases: only the batch's targets "
                               "and samples are updated (lazy Adam); pays at large |V|")}


class SampledSoftmaxHead(Head):
    """The full softmax's scores, trained by `sampled_loss` over the batch's targets and k samples."""

    exact_training_loss = False
    can_tie = True  # the rows of self.out.weight: one output vector per word
    default_samples = 100
    avoids_full_scores = True  # the target's and the k samples' scores only

    @classmethod
    def needs_counts(cls, options) -> bool:
        return True  # the proposal / noise distribution: the unigram distribution (to a power)

    option_name: str  # set by `register_head`

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], num_samples: int,
                 proposal_power: float = 1.0, sparse: bool = False):
        super().__init__()
        self.num_samples, self.sparse = num_samples, sparse
        # (count + 1)^power normalised in log space: no overflow at any power
        q = torch.softmax(proposal_power * torch.log(torch.tensor(counts, dtype=torch.float64) + 1.0), 0)  # [V]
        zero = 0 if q.is_meta else int((q.float() == 0).sum())  # (a memory estimate builds the head on the meta device)
        if zero:  # a word the noise never draws: its sampled loss is infinite
            raise UserError(f"head.proposal_power={proposal_power:g}: the noise distribution gives {zero} of the "
                            f"{len(q)} words a probability of 0 in float32; lower head.proposal_power (1: the "
                            "unigram distribution, 0.75: word2vec's)")
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
        """The sampled objective in training mode; the exact NLL in evaluation mode."""
        if not self.training:
            return self.nll(features, target)
        return self.sampled_loss(features, target, self.sample())

    def sample(self) -> torch.Tensor:
        """k word ids drawn with replacement from Q: [k]."""
        u = torch.rand(self.num_samples, dtype=torch.float64, device=self.proposal_cdf.device)  # [k]
        return torch.searchsorted(self.proposal_cdf, u, right=True).clamp_(max=len(self.proposal_cdf) - 1)

    def scores(self, features: torch.Tensor, target: torch.Tensor, samples: torch.Tensor):
        """The targets' scores y_t [B], the samples' y_s [B, k] (float32 under autocast) and log(k Q(w))
        of the targets and samples [B + k]: one gather of B + k rows, so one scatter in backward."""
        B = target.shape[0]
        ids = torch.cat([target, samples])  # [B + k]
        w, b = rows(self.out.weight, ids, self.sparse), rows(self.out.bias, ids, self.sparse)  # [B + k, F], [B + k]
        y_t = wide((features * w[:B]).sum(-1) + b[:B])  # [B]
        y_s = wide(torch.addmm(b[B:], features, w[B:].t()))  # [B, k]
        return y_t, y_s, (self.num_samples * self.proposal[ids]).log().to(y_s.dtype)

    def sampled_loss(self, features: torch.Tensor, target: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        """The training loss per example [B] for targets [B] and the batch's samples [k]."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts, tree=None) -> "Head":
        return cls(feature_dim, vocab_size, counts, options.get("num_samples", cls.default_samples),
                   float(options.get("proposal_power", 1.0)), bool(options.get("sparse", False)))
