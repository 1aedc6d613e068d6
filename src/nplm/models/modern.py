"""The modern NPLM of Sun & Iyyer (2021), "Revisiting Simple Neural Probabilistic Language Models"
(NAACL; public code SimengSun/revisit-nplm), as a feature extractor.

Bengio et al.'s (2003) concatenation of a window of word vectors, scaled up with what came since:
residual feed-forward blocks with layer normalisation and dropout, a summary of the distant context,
and (with head=adaptive) a tied adaptive softmax. With the context's k word vectors e_1..e_k
(oldest first, e = sqrt(d) E[w], E the [V, d] table), split into the distant part e_1..e_{k-w} and
the local window of the last w words:

    s_j = sum_{p=1}^{k-w} A_{jp} e_p,   j = 1..g                  # [B, g, d] distant context summaries
    x   = [e_{k-w+1}; ...; e_k; s_1; ...; s_g]                    # [B, (w + g) d] the concatenation
    h_1 = LN(sum(x's w + g vectors) + Dropout(FF_1(x)))           # [B, d] first block
    h_l = LN(h_{l-1} + Dropout(FF_l(h_{l-1}))) + sum_j s_j,   l = 2..L
    FF(x) = W_2 ReLU(W_1 x + b_1) + b_2                           # hidden width `hidden_dim`
                                                                  # (FF_1: `first_hidden_dim`)

and the features are h_L [B, d]. A [g, k-w] (`summaries` = g rows) are learned weighted averages of
the distant vectors, each starting as the plain mean (the paper's "kernel" aggregation, its
num_global_agg = g); the first block's residual is the sum of the concatenated vectors and every
later block adds the summaries' sum back, as in the public code. Dropout is also applied to the
input vectors. `residual=false` drops the residual sums, `layer_norm=false` the LN (ablations of the
paper's section 3); `summaries=0` with `context_size=window` is a deep NPLM over the window alone.

Whole blocks (`data.block_size` = T, `block_features`): the ids of T consecutive targets and the k
tokens before them `[B, T + k]` are looked up, scaled and dropped out once (e_1..e_{T+k}), and position
t = 1..T reads the window e_{t+k-w}..e_{t+k-1} and the summaries s_j(t) = sum_p A_{jp} e_{t+p-1}, all of
them at once with A's banded Toeplitz matrices (`nplm.models.concat`, shared with model=transformer's
first_layer=nplm); the blocks then run on [B, T, ...] rows. In evaluation the features equal
window mode's (tests/test_blocks.py); in training each token's vector is dropped out once per block,
the same way for every position that reads it (as in the paper's code), where window mode draws a
mask per window.

`context_size` is the whole context k (the model reads k previous tokens), `window` its local part w.
`tie_embeddings=true`: the head's output word vectors are E itself (the paper's tied adaptive
softmax with head=adaptive; any head with one vector per word: softmax, importance_sampling, nce);
auto (the default): tied where the head has one vector per word, untied with hierarchical or class_based.
The paper's WikiText-103 model (conf/experiment/sun2021/wikitext103.yaml): d = 410, 16 blocks,
hidden 2100 (the first block's 1500: its --mid-dim), w = 15, k = 511, g = 5, dropout 0.2, the adaptive softmax with
cutoffs 2e4, 4e4, 2e5 and full-width tails (div_val 1) tied to E.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nplm.config.registry import option, setting_of
from nplm.config.rules import Bool, Check, Float, Int
from nplm.fast.dropout import Dropout
from nplm.models import Model, register_model
from nplm.models.base import TIE_EMBEDDINGS, lookup
from nplm.models.concat import (Block, concatenation, sliding_parts, summaries_problem, summary_weights,
                                window_parts, window_problem)


@dataclass
class ModernConfig:
    """Hyperparameters of the modern NPLM (config group `model`, option `modern`); each field is a config key."""

    context_size: int = option(32, Int(1), "k, the previous tokens read: the distant part and the local window")
    window: int = option(8, Int(1), "w, the last tokens whose vectors are concatenated (<= context_size)")
    summaries: int = option(2, Int(0), "g, learned weighted averages of the k - w distant vectors (the paper: 5)")
    embed_dim: int = option(128, Int(1), "d, the word vectors, every block's width and the features")
    hidden_dim: int = option(512, Int(1), "the inner width of each block's feed-forward network")
    first_hidden_dim: int | None = option(None, Int(1, nullable=True),
                                          "the first block's own inner width (null: hidden_dim; the paper: 1500)")
    num_layers: int = option(4, Int(1), "L, the feed-forward blocks (the first reads the concatenation)")
    dropout: float = option(0.2, Float(ge=0, lt=1), "dropout on the input vectors and each block's output")
    residual: bool = option(True, Bool(), "residual sums around every block")
    layer_norm: bool = option(True, Bool(), "layer normalisation after every block")
    tie_embeddings: bool | str = option("auto", TIE_EMBEDDINGS, "the head's output word vectors are the input table E "
                                        "(auto: where the head has one vector per word)")


_get = setting_of(ModernConfig)  # a key's value or its default


def _window_fits(m: dict) -> str | None:
    return window_problem(_get(m, "context_size"), _get(m, "window"))


def _summaries_match(m: dict) -> str | None:
    return summaries_problem(_get(m, "context_size"), _get(m, "window"), _get(m, "summaries"))


@register_model("modern", keys=ModernConfig,
                checks=(Check("window", _window_fits), Check("summaries", _summaries_match)))
class ModernNPLM(Model):
    """Sun & Iyyer (2021): context ids `[B, k]` -> features h_L `[B, d]`; a block's ids `[B, T + k]`
    -> features `[B, T, d]` (module docstring)."""

    config_class = ModernConfig
    trains_on_blocks = True

    def __init__(self, vocab_size: int, cfg: ModernConfig):
        super().__init__()
        self.cfg = cfg
        k, w, g, d = cfg.context_size, cfg.window, cfg.summaries, cfg.embed_dim
        self.context_size, self.feature_dim = k, d
        self.E = nn.Embedding(vocab_size, d)  # [V, d]
        nn.init.normal_(self.E.weight, std=0.02)  # the public code's --emb-std, times sqrt(d) on the way in
        self.scale = d ** 0.5
        self.A = summary_weights(k, w, g)  # [g, k - w]
        self.dropout = Dropout(cfg.dropout)  # nn.Dropout, its CPU mask a quarter of the random draws
        self.blocks = nn.ModuleList(
            [Block((w + g) * d, cfg.first_hidden_dim or cfg.hidden_dim, d, cfg.dropout, cfg.layer_norm)]
            + [Block(d, cfg.hidden_dim, d, cfg.dropout, cfg.layer_norm) for _ in range(cfg.num_layers - 1)])

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """E[w] for the context ids: `[B, k]` -> `[B, k, d]`."""
        return lookup(self.E, context)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """h_L `[B, d]` from the context's word vectors `[B, k, d]` (oldest first)."""
        e = self.dropout(emb * self.scale)  # [B, k, d]
        return self._stack(*window_parts(e, self.A, self.cfg.window))  # [B, w, d], [B, g, d]

    def block_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Features `[B, T, d]` of every position of blocks `[B, T + k]` (module docstring: whole blocks)."""
        e = self.dropout(self.embed(ids) * self.scale)  # [B, T + k, d], each vector dropped out once per block
        # position t reads e[t : t + k] (the last vector is a target only): [B, T, w, d], [B, T, g, d]
        return self._stack(*sliding_parts(e[:, :-1], self.A, self.cfg.window))

    def _stack(self, window: torch.Tensor, summaries: torch.Tensor | None) -> torch.Tensor:
        """h_L `[..., d]` from the local window's vectors `[..., w, d]` and the summaries `[..., g, d]`
        (None where g = 0): the L blocks of the module docstring, on any leading dimensions."""
        residual = self.cfg.residual
        h = concatenation(self.blocks[0], window, summaries, residual)  # [..., d]
        memory = summaries.sum(-2) if summaries is not None else None  # [..., d]
        for block in self.blocks[1:]:
            h = block(h, h if residual else None)  # [..., d]
            if memory is not None:
                h = h + memory
        return h

    def input_embeddings(self) -> torch.Tensor:
        return self.E.weight  # [V, d]

    def output_embeddings(self) -> nn.Parameter | None:
        return self.E.weight if self.cfg.tie_embeddings else None  # [V, d] = [V, F]
