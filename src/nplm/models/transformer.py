"""A decoder-only Transformer language model (Vaswani et al. 2017, "Attention Is All You Need"), with layer
normalisation before each sub-layer (pre-LN: GPT-2, Radford et al. 2019; Xiong et al. 2020, "On Layer
Normalization in the Transformer Architecture"), and the two variants of Sun & Iyyer (2021), "Revisiting
Simple Neural Probabilistic Language Models" (NAACL; Transformer-N and Transformer-C, the section on
improving the Transformer with the NPLM's local layer), as a feature extractor.

For a sequence of n tokens w_1..w_n (oldest first), E the [V, d] table and L layers of h heads:

    x_0 = Dropout(sqrt(d) E[w_i] + P_i)                                        # [B, n, d]
    P_{i, 2j} = sin(i / 10000^{2j/d}),  P_{i, 2j+1} = cos(i / 10000^{2j/d})    # Vaswani et al., section 3.5
    a_l = x_{l-1} + Dropout(MHA(LN(x_{l-1})))                                   # [B, n, d]
    x_l = a_l + Dropout(FF(LN(a_l))),   FF(y) = W_2 ReLU(W_1 y + b_1) + b_2      # hidden width `hidden_dim`
    MHA(y) = [head_1; ...; head_h] W_O                                          # [B, n, d]
    head_i = softmax(Q_i K_i^T / sqrt(d / h) + M) V_i,   Q_i, K_i, V_i = y W_i^{Q,K,V}   # [B, n, d / h]

and the features are LN(x_L) [B, n, d]: position i's predict w_{i+1}. M is 0 where query i may read key
p and -inf elsewhere: causal, p <= i (through `torch.nn.functional.scaled_dot_product_attention`). The
projections have no biases, as in Vaswani et al.'s equations: a bias of K_i adds q . b to every score of a
query and has no gradient but rounding noise, which Adam's normalised steps would turn into steps of lr.

Positions are sinusoidal, not learned: a sequence's length here varies (a block's T + k - 1 tokens, the
evaluation's shorter last block, `nplm-eval --block-size`, a window of k), and sinusoids are defined at
every length with no table to size or outgrow and no parameters; each token gets the same P_i wherever
it is read from the sequence's start, which is what makes window and block features equal (below).

`first_layer` picks the first layer (Sun & Iyyer 2021's two hybrids):
- attention: the layer above (the standard Transformer).
- local (Transformer-C): its attention reads only the last c = `local_window` positions, M = 0 where
  i - c < p <= i (the paper: c = 5, `--context-mask 5` in their scripts/transformer-c.sh).
- nplm (Transformer-N): its attention and feed-forward are replaced by the modern NPLM's concatenation
  layer (`nplm.models.concat`) over x_0: position i concatenates its window x_{i-w+1..i} and g learned
  weighted averages of the k - w vectors before it (zeros before the sequence's start),

      x_1(i) = LN(sum of the w + g vectors + Dropout(FF_1([x_{i-w+1}; ...; x_i; s_1(i); ...; s_g(i)])))
      s_j(i) = sum_{p=1}^{k-w} A_{jp} x_{i-k+p}                                  # [B, n, g, d]

  (k = `context_size`, w = `window`, g = `summaries`; FF_1 [(w + g) d -> hidden_dim -> d]), then L - 1
  attention layers. (The paper: w = 5 and one average of the 506 tokens before; their code keeps a full
  attention layer after the concatenation, which num_layers = L + 1 reproduces.)

Whole blocks (`data.block_size` = T, `block_features`): the ids of T consecutive targets and the k tokens
before them `[B, T + k]`; the model runs causal attention over the block's first T + k - 1 tokens (the last
is a target only), and target t = 0..T-1 is predicted from position k + t - 1, which reads the k + t tokens
before it: every scored token has at least k = `context_size` tokens of context, at most T + k - 1. The
blocks tile the predicted tokens (`nplm.data.blocks`), so evaluation scores every token once, each with a
sliding context of at least k tokens (T = 1: exactly k, the costliest). Window mode (`forward`, context
`[B, k]`, no data.block_size) runs the whole stack over the k tokens and returns the last position's
features: a block's row t equals `forward(ids[:, : t + k])` in evaluation (tests/test_transformer.py), row 0
the window `ids[:, :k]`. Training dropout is drawn once per block, as for model=modern.

`tie_embeddings` as for model=modern: auto ties the head's output vectors to E where the head has one per
word. The paper's WikiText-103 Transformer (conf/experiment/sun2021/transformer.yaml): d = 410, 16 layers of
10 heads, hidden 2100, the adaptive softmax tied to E.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from nplm.config.registry import option, setting_of
from nplm.config.rules import Check, Choice, Float, Int
from nplm.fast import aligned, plain
from nplm.fast.dropout import Dropout
from nplm.models import Model, register_model
from nplm.models.base import TIE_EMBEDDINGS, lookup
from nplm.models.concat import (Block, concatenation, sliding_parts, summaries_problem, summary_weights,
                                window_problem)

FIRST_LAYERS = ("attention", "local", "nplm")


@dataclass
class TransformerConfig:
    """Hyperparameters of the Transformer (config group `model`, option `transformer`); each field is a config key."""

    context_size: int = option(32, Int(1), "k, the fewest previous tokens a scored token reads (a block's "
                                           "first target reads k, its later ones more; first_layer=nplm's reach)")
    embed_dim: int = option(128, Int(1), "d, the word vectors, every layer's width and the features")
    num_layers: int = option(4, Int(1), "L, the decoder layers (the first as first_layer says)")
    num_heads: int = option(4, Int(1), "h, the attention heads of each layer (a divisor of embed_dim)")
    hidden_dim: int = option(512, Int(1), "the inner width of each layer's feed-forward network")
    dropout: float = option(0.1, Float(ge=0, lt=1), "dropout on the input vectors and each sub-layer's output")
    first_layer: str = option("attention", Choice(options=FIRST_LAYERS),
                              "attention (a Transformer), local (Transformer-C: the first attention reads the "
                              "last local_window tokens), nplm (Transformer-N: the modern NPLM's concatenation)")
    window: int = option(5, Int(1), "first_layer=nplm: w, the last tokens whose vectors are concatenated",
                         when={"first_layer": ("nplm",)})
    summaries: int = option(1, Int(0), "first_layer=nplm: g, learned weighted averages of the k - w tokens "
                                       "before the window", when={"first_layer": ("nplm",)})
    local_window: int = option(5, Int(1), "first_layer=local: c, the positions (its own included) each "
                                          "position's first attention reads", when={"first_layer": ("local",)})
    tie_embeddings: bool | str = option("auto", TIE_EMBEDDINGS, "the head's output word vectors are the input table E "
                                        "(auto: where the head has one vector per word)")


_get = setting_of(TransformerConfig)  # a key's value or its default


def _heads_divide(m: dict) -> str | None:
    if _get(m, "embed_dim") % _get(m, "num_heads"):
        return f"a divisor of model.embed_dim={_get(m, 'embed_dim')} (each head reads embed_dim / num_heads of it)"
    return None


def _nplm_only(problem):
    """A check of the concatenation layer's keys, which apply with first_layer=nplm only."""
    return lambda m: problem(m) if _get(m, "first_layer") == "nplm" else None


def sinusoids(n: int, d: int, device: torch.device) -> torch.Tensor:
    """P [n, d]: P_{i, 2j} = sin(i / 10000^{2j/d}), P_{i, 2j+1} = cos(i / 10000^{2j/d}) (module docstring)."""
    i = torch.arange(n, device=device, dtype=torch.float32)[:, None]  # [n, 1]
    angles = i * 10000.0 ** (-torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)  # [n, ceil(d / 2)]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)[:, :d]  # [n, d]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, reach: int | None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_h) + M) V for q, k, v `[B, h, n, d_h]` -> `[B, h, n, d_h]`; M lets query i read
    key p for i - reach < p <= i (reach None: every p <= i). Inside `nplm.fast.plain.model_arithmetic` as two
    matmuls (the products FLOP counting sees; the fused kernel's recomputation in its backward is not the
    model's), elsewhere torch's fused `scaled_dot_product_attention`."""
    n, mask = q.shape[-2], None
    if reach is not None or plain.counting():
        i = torch.arange(n, device=q.device)
        back = i[:, None] - i[None, :]  # [n, n]: how far key p is behind query i
        mask = (back >= 0) & (back < (reach or n))  # [n, n] True where i reads p
    if plain.counting():
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # [B, h, n, n]
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v  # [B, h, n, d_h]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)


def _init(*layers: nn.Linear) -> None:
    for layer in layers:  # GPT-2's and the paper's code's initialisation
        nn.init.normal_(layer.weight, std=0.02)


class DecoderLayer(nn.Module):
    """x_l from x_{l-1} `[B, n, d]` (module docstring): pre-LN causal self-attention, then the feed-forward
    network; `reach`: how many positions back its attention reads (None: all)."""

    def __init__(self, d: int, heads: int, hidden: int, dropout: float, reach: int | None = None):
        super().__init__()
        self.heads, self.reach = heads, reach
        self.attention_norm, self.ff_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)  # W^{Q,K,V} of every head
        self.out = nn.Linear(d, d, bias=False)  # W_O
        _init(self.qkv, self.out)
        self.dropout = Dropout(dropout)
        self.ff = Block(d, hidden, d, dropout, layer_norm=False)  # residual + Dropout(FF(.))

    def attend(self, y: torch.Tensor) -> torch.Tensor:
        """MHA(y): `[B, n, d]` -> `[B, n, d]`."""
        B, n, d = y.shape
        qkv = aligned.linear(y, self.qkv.weight).unflatten(-1, (3, self.heads, d // self.heads))
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, h, n, d / h]
        heads = causal_attention(q, k, v, self.reach)  # [B, h, n, d / h]
        return aligned.linear(heads.transpose(1, 2).reshape(B, n, d), self.out.weight)  # [B, n, d]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x + self.dropout(self.attend(self.attention_norm(x)))  # [B, n, d]
        return self.ff(self.ff_norm(a), a)  # [B, n, d]


class ConcatLayer(nn.Module):
    """Transformer-N's first layer (module docstring): x_1 `[B, n, d]` from x_0 `[B, n, d]`, position i reading
    its k vectors x_{i-k+1..i}, zeros before the sequence's start (`nplm.models.concat`)."""

    def __init__(self, context_size: int, window: int, summaries: int, d: int, hidden: int, dropout: float):
        super().__init__()
        self.context_size, self.window = context_size, window
        self.A = summary_weights(context_size, window, summaries)  # [g, k - w]
        self.block = Block((window + summaries) * d, hidden, d, dropout, layer_norm=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, (0, 0, self.context_size - 1, 0))  # [B, k - 1 + n, d]
        return concatenation(self.block, *sliding_parts(padded, self.A, self.window), residual=True)  # [B, n, d]


@register_model("transformer", keys=TransformerConfig, checks=(
    Check("num_heads", _heads_divide),
    Check("window", _nplm_only(lambda m: window_problem(_get(m, "context_size"), _get(m, "window")))),
    Check("summaries", _nplm_only(lambda m: summaries_problem(_get(m, "context_size"), _get(m, "window"),
                                                              _get(m, "summaries"))))))
class Transformer(Model):
    """A pre-LN decoder-only Transformer: context ids `[B, n]` -> the last position's features `[B, d]`; a
    block's ids `[B, T + k]` -> features `[B, T, d]` (module docstring)."""

    config_class = TransformerConfig
    trains_on_blocks = True

    def __init__(self, vocab_size: int, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        k, d, L = cfg.context_size, cfg.embed_dim, cfg.num_layers
        self.context_size, self.feature_dim = k, d
        self.E = nn.Embedding(vocab_size, d)  # [V, d]
        nn.init.normal_(self.E.weight, std=0.02)  # times sqrt(d) on the way in (Vaswani et al., section 3.4)
        self.scale = d ** 0.5
        self.dropout = Dropout(cfg.dropout)

        def decoder(reach: int | None = None) -> DecoderLayer:
            return DecoderLayer(d, cfg.num_heads, cfg.hidden_dim, cfg.dropout, reach)

        first = {"attention": decoder, "local": lambda: decoder(cfg.local_window),
                 "nplm": lambda: ConcatLayer(k, cfg.window, cfg.summaries, d, cfg.hidden_dim, cfg.dropout)}
        self.layers = nn.ModuleList([first[cfg.first_layer]()] + [decoder() for _ in range(L - 1)])
        self.norm = nn.LayerNorm(d)  # the final LN of a pre-LN stack

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """E[w] for the context ids: `[B, n]` -> `[B, n, d]`."""
        return lookup(self.E, context)

    def inputs(self, emb: torch.Tensor) -> torch.Tensor:
        """x_0 = Dropout(sqrt(d) E[w_i] + P_i): `[B, n, d]` -> `[B, n, d]`."""
        n, d = emb.shape[1], emb.shape[2]
        return self.dropout(emb * self.scale + sinusoids(n, d, emb.device).to(emb.dtype))

    def sequence_features(self, emb: torch.Tensor) -> torch.Tensor:
        """LN(x_L) `[B, n, d]` of every position of a sequence's word vectors `[B, n, d]` (oldest first)."""
        x = self.inputs(emb)  # [B, n, d]
        for layer in self.layers:
            x = layer(x)  # [B, n, d]
        return self.norm(x)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """The last position's features `[B, d]` from the context's word vectors `[B, n, d]`."""
        return self.sequence_features(emb)[:, -1]

    def block_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Features `[B, T, d]` of the T targets of blocks `[B, T + k]` (module docstring: whole blocks)."""
        k = self.context_size
        return self.sequence_features(self.embed(ids[:, :-1]))[:, k - 1:]  # positions k - 1 .. T + k - 2

    def input_embeddings(self) -> torch.Tensor:
        return self.E.weight  # [V, d]

    def output_embeddings(self) -> nn.Parameter | None:
        return self.E.weight if self.cfg.tie_embeddings else None  # [V, d] = [V, F]
