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
t = 1..T reads the window e_{t+k-w}..e_{t+k-1} as w shifted views of them and the summaries

    s_j(t) = sum_{p=1}^{k-w} A_{jp} e_{t+p-1},   t = 1..T                 # [B, T, g, d]

a 1-D cross-correlation of each of the d channels of e_1..e_{T+k-w-1} with the kernel A_j, computed as
one matrix product with A's banded Toeplitz matrices M_j[t, t + p - 1] = A_{jp} ([g T, T + k - w - 1] @
[B, T + k - w - 1, d]), instead of T matmuls over k - w vectors each; the blocks then run on [B, T, ...]
rows. (The band's zeros double the multiply-adds, but a dense GEMM runs near the card's peak: the same sums
as a `conv1d` over the B d channels took 60% of an H200's training step at WikiText-103's shape,
experiments/bench/README.md, on an H200.) In evaluation the features equal
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

from dataclasses import dataclass, fields

import torch
from torch import nn

from nplm.config.registry import option
from nplm.config.rules import Bool, Check, Float, Int
from nplm.fast import aligned, plain
from nplm.fast.dropout import Dropout
from nplm.models import Model, register_model
from nplm.models.base import TIE_EMBEDDINGS, lookup


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


DEFAULTS = {f.name: f.default for f in fields(ModernConfig)}


def _get(m: dict, key: str):
    return m.get(key, DEFAULTS[key])


def _window_fits(m: dict) -> str | None:
    if _get(m, "window") > _get(m, "context_size"):
        return f"an integer <= model.context_size={_get(m, 'context_size')} (the window is the context's last tokens)"
    return None


def _summaries_match(m: dict) -> str | None:
    distant = _get(m, "context_size") - _get(m, "window")
    if distant > 0 and _get(m, "summaries") == 0:
        return (f"an integer >= 1 when model.context_size > model.window (the {distant} tokens before the window "
                "are read only through the summaries); or set model.context_size equal to model.window")
    if distant == 0 and _get(m, "summaries") > 0:
        return "0 when model.context_size equals model.window (there is no distant context to summarise)"
    return None


def sliding_summaries(e: torch.Tensor, A: torch.Tensor, T: int) -> torch.Tensor:
    """s_j(t) = sum_{p=1}^{n} A_{jp} e_{t+p-1} for t = 1..T: the distant summaries of every position of a
    block, `e` [B, T + n - 1, d] (the block's distant vectors), `A` [g, n] -> [B, T, g, d], as one matmul with
    A's banded Toeplitz matrices (module docstring: whole blocks)."""
    g, n = A.shape
    if plain.counting():  # the model's own arithmetic: each position's n vectors (nplm.fast.plain)
        return torch.einsum("btdn,gn->btgd", e.unfold(1, n, 1), A)  # [B, T, d, n] x [g, n] -> [B, T, g, d]
    L = e.shape[1]  # T + n - 1
    # M_j[t, t + p - 1] = A_jp: A_j padded with zeros to L + 1, tiled T times and cut into rows of L, so that row
    # t starts t places further back in the tiling (its wrapped part is the padding). Its backward sums the
    # tiles; gathering A at a [T, L] index instead scattered T L entries back onto n of them, 12 ms of an
    # H200's WikiText-103 step (experiments/bench/README.md, on an H200)
    M = nn.functional.pad(A, (0, L + 1 - n)).repeat(1, T)[:, : T * L].view(g, T, L)  # [g, T, L]
    s = torch.matmul(M.reshape(g * T, L), e)  # [B, g T, d]
    return s.view(e.shape[0], g, T, -1).transpose(1, 2)  # [B, T, g, d]


class Block(nn.Module):
    """LN(residual + Dropout(W_2 ReLU(W_1 x + b_1) + b_2)): x [..., d_in] -> [..., d]."""

    def __init__(self, d_in: int, hidden: int, d: int, dropout: float, layer_norm: bool):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.dropout = Dropout(dropout)
        self.norm = nn.LayerNorm(d) if layer_norm else nn.Identity()
        for layer in (self.ff[0], self.ff[2]):  # the public code's initialisation
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        first, second = self.ff[0], self.ff[2]
        # at widths the GPU's tensor cores take whole (nplm.fast.aligned): the hidden keeps its zero padding
        hidden = torch.relu(aligned.linear(x, first.weight, first.bias, keep_padding=True))  # [..., hidden (+ pad)]
        out = self.dropout(aligned.linear(hidden, second.weight, second.bias))  # [..., d]
        return self.norm(out if residual is None else residual + out)


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
        self.A = nn.Parameter(torch.full((g, k - w), 1.0 / max(k - w, 1))) if g else None  # [g, k - w]
        self.dropout = Dropout(cfg.dropout)  # nn.Dropout, its CPU mask a quarter of the random draws
        self.blocks = nn.ModuleList(
            [Block((w + g) * d, cfg.first_hidden_dim or cfg.hidden_dim, d, cfg.dropout, cfg.layer_norm)]
            + [Block(d, cfg.hidden_dim, d, cfg.dropout, cfg.layer_norm) for _ in range(cfg.num_layers - 1)])

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """E[w] for the context ids: `[B, k]` -> `[B, k, d]`."""
        return lookup(self.E, context)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """h_L `[B, d]` from the context's word vectors `[B, k, d]` (oldest first)."""
        k, w = self.context_size, self.cfg.window
        e = self.dropout(emb * self.scale)  # [B, k, d]
        # [g, k - w] @ [B, k - w, d] -> [B, g, d] the distant summaries
        summaries = self.A @ e[:, : k - w] if self.A is not None else None
        return self._stack(e[:, k - w:], summaries)  # the local window [B, w, d]

    def block_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Features `[B, T, d]` of every position of blocks `[B, T + k]` (module docstring: whole blocks)."""
        k, w = self.context_size, self.cfg.window
        T = ids.shape[1] - k
        e = self.dropout(self.embed(ids) * self.scale)  # [B, T + k, d], each vector dropped out once per block
        window = e[:, k - w: -1].unfold(1, w, 1).transpose(2, 3)  # [B, T, w, d]: row t is e[t + k - w : t + k]
        summaries = None
        if self.A is not None:
            summaries = sliding_summaries(e[:, : T + k - w - 1], self.A, T)  # [B, T, g, d]
        return self._stack(window, summaries)

    def _stack(self, window: torch.Tensor, summaries: torch.Tensor | None) -> torch.Tensor:
        """h_L `[..., d]` from the local window's vectors `[..., w, d]` and the summaries `[..., g, d]`
        (None where g = 0): the L blocks of the module docstring, on any leading dimensions."""
        residual = self.cfg.residual
        x = window if summaries is None else torch.cat([window, summaries], dim=-2)  # [..., w + g, d]
        h = self.blocks[0](x.flatten(-2), x.sum(-2) if residual else None)  # [..., d]
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
