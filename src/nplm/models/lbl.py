"""The log-bilinear language model, LBL (Mnih & Hinton 2007, "Three new graphical models for statistical
language modelling", ICML; the form of Mnih & Hinton 2009, "A Scalable Hierarchical Distributed
Language Model", NIPS, and Mnih & Teh 2012), as a feature extractor.

Each word w has a real-valued representation r_w [m] (the table R, [V, m]). The model predicts the
representation of the next word as a linear function of the context words' representations,

    r_hat = sum_{i=1}^{n-1} C_i r_{w_{t-i}}                                   # [B, m], F = m

with one m x m matrix C_i per context position (`context_matrices=full`, Mnih & Hinton 2007, 2009), or
a diagonal one, c_i * r (elementwise; `context_matrices=diagonal`, Mnih & Teh 2012). There is no
non-linearity. The features are r_hat, and the output head scores each word by its similarity to
it: with the softmax head, s(w) = r_hat . q_w + b_w and P(w | context) = exp(s(w)) / Z, the LBL; with a
tree (head=hierarchical head.node_form=logistic), P(d_i = 1) = sigma(r_hat . q_i + b_i) at each node
of the word's code, Mnih & Hinton's (2009) HLBL; with head=nce, Mnih & Teh's (2012) training.

`tie_embeddings=true`: the output vectors q_w are the input representations r_w themselves (one table,
as in the 2007 paper's energy -r_hat^T r_w - b_w); false: the head has its own q_w, as in the 2009 and
2012 papers (experiment=mnih2009/* set it); auto (default): tied where the head has one vector per word. A bias in r_hat's
space (the 2007 paper's b_r) adds r_w . b_r to word w's score, a per-word constant that b_w already
holds, so there is none.

Parameters: R [V, m] and C [n-1, m, m] (full) or [n-1, m] (diagonal); the head's q [V, m] and b [V].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nplm.config.registry import option
from nplm.config.rules import Choice, Float, Int
from nplm.models import Model, register_model
from nplm.models.base import TIE_EMBEDDINGS, lookup

CONTEXT_MATRICES = ("full", "diagonal")


@dataclass
class LBLConfig:
    """Hyperparameters of the LBL (config group `model`, option `lbl`); each field is a config key."""

    context_size: int = option(4, Int(1), "n-1, the previous words the model reads")
    embed_dim: int = option(100, Int(1), "m, the size of a word representation r_w (and of r_hat)")
    context_matrices: str = option("full", Choice(options=CONTEXT_MATRICES),
                                   "C_i per context position: full m x m (Mnih & Hinton) or diagonal (Mnih & Teh)")
    tie_embeddings: bool | str = option("auto", TIE_EMBEDDINGS, "the head's output vectors q_w are the input r_w "
                                        "(one table; auto: where the head has one vector per word)")
    dropout: float = option(0.0, Float(ge=0, lt=1), "dropout on r_hat (not in the papers)")


@register_model("lbl", keys=LBLConfig)
class LBL(Model):
    """Mnih & Hinton (2007): context ids `[B, n-1]` -> r_hat = sum_i C_i r_{w_{t-i}} `[B, m]` (module docstring)."""

    config_class = LBLConfig

    def __init__(self, vocab_size: int, cfg: LBLConfig):
        super().__init__()
        self.cfg = cfg
        k, m = cfg.context_size, cfg.embed_dim
        self.context_size, self.feature_dim = k, m
        self.R = nn.Embedding(vocab_size, m)  # [V, m] r_w
        nn.init.normal_(self.R.weight, std=m ** -0.5)  # |r_w| about 1
        if cfg.context_matrices == "full":
            # [C_{n-1} | ... | C_1] side by side, the context's order (oldest word first): [m, (n-1) m], so
            # that r_hat = C [r_{w_{t-n+1}}; ...; r_{w_{t-1}}] is one product (`context_matrices` views it [n-1, m, m])
            self.C = nn.Parameter(torch.empty(m, k * m))
            nn.init.normal_(self.C, std=(k * m) ** -0.5)  # |r_hat| about 1
        else:
            self.C = nn.Parameter(torch.full((k, m), 1.0 / k))  # [n-1, m] c_i, oldest first: r_hat starts as the mean
        self.dropout = nn.Dropout(cfg.dropout)

    @property
    def context_matrices(self) -> torch.Tensor:
        """C_i per context position, oldest word first: full [n-1, m, m] (r_hat = sum_i C_i r_i) or
        diagonal [n-1, m] (r_hat = sum_i c_i * r_i)."""
        if self.cfg.context_matrices == "diagonal":
            return self.C
        m = self.cfg.embed_dim
        return self.C.view(m, self.context_size, m).transpose(0, 1)

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """r_w for the context ids: `[B, n-1]` -> `[B, n-1, m]`."""
        return lookup(self.R, context)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """r_hat `[B, m]` from the context representations `[B, n-1, m]`."""
        if self.cfg.context_matrices == "full":
            r_hat = emb.flatten(1) @ self.C.t()  # [B, (n-1) m] @ [(n-1) m, m] -> [B, m]
        else:
            r_hat = (emb * self.C).sum(1)  # [B, n-1, m] * [n-1, m] -> [B, m]
        return self.dropout(r_hat)

    def input_embeddings(self) -> torch.Tensor:
        return self.R.weight  # [V, m]

    def output_embeddings(self) -> nn.Parameter | None:
        return self.R.weight if self.cfg.tie_embeddings else None  # [V, m] = [V, F]
