"""The LSTM language model of Zaremba, Sutskever & Vinyals (2014), "Recurrent Neural Network
Regularization" (arXiv:1409.2329), as a feature extractor: L stacked LSTM layers over the word vectors,
dropout on the non-recurrent connections only, its state carried from one block of text to the next.

With x_t = E[w_t] (the [V, H] table) and h^0_t = x_t, layer l = 1..L at step t (torch.nn.LSTM's cell;
the paper's sections 3.1 and 3.2, dropout D on the layer's input):

    i = sigmoid(W_i [D(h^{l-1}_t); h^l_{t-1}] + b_i)       # [B, H] input gate
    f = sigmoid(W_f [D(h^{l-1}_t); h^l_{t-1}] + b_f)       # [B, H] forget gate
    o = sigmoid(W_o [D(h^{l-1}_t); h^l_{t-1}] + b_o)       # [B, H] output gate
    g = tanh(W_g [D(h^{l-1}_t); h^l_{t-1}] + b_g)          # [B, H] the candidate cell
    c^l_t = f * c^l_{t-1} + i * g                           # [B, H] the memory cell
    h^l_t = o * tanh(c^l_t)                                 # [B, H]

and the features are D(h^L_t) [B, H], which the head maps to the next word's distribution. D is dropout
(`dropout`, the paper's p): on the word vectors, between layers and before the head, the "non-recurrent
connections"; the recurrent ones (h^l_{t-1} -> h^l_t, c^l_{t-1} -> c^l_t) are never dropped, as the paper
prescribes. Every parameter of the model (E, the W's and b's) starts uniform in [-init_scale, init_scale]
(the paper: 0.1 small, 0.05 medium, 0.04 large); the head keeps its own initialisation (the paper's output
layer was drawn uniformly too). The word vectors are H wide, as in the paper's code, so the features are as
wide as the output word vectors: `tie_embeddings` ties the head's output vectors to E with no projection
(auto: where the head has one vector per word; the paper untied, `experiment=zaremba2014/*`).

How nplm trains, evaluates, checkpoints and checks a model that carries its state, in one place:
`nplm.models.stream` (`StreamModel`, this model's base). Training: the training stream is cut into `data.batch_size` = B parallel streams and
batch i holds block i (T = `data.block_size` tokens) of every stream, in order (`nplm.data.streams`), as the
paper's `ptb.traindataset(batch_size)`. With context size k = 1 a block's ids [B, T + 1] are w_{bT+1} ..
w_{bT+T+1}: the inputs ids[:, :T], the targets ids[:, 1:], and the next block's inputs start with this
block's last target. The state (h, c) after a block starts the next one, detached: gradients flow back
T steps at most (truncated backpropagation through time). The state lives in slots: "train" (read and
written in training mode), reset at every training epoch's start and kept by a checkpoint written inside an
epoch (`carried_state`: a run resumed there goes on with the state it stopped with, `nplm.training.stopping`),
and "eval" (evaluation mode), reset at every validation and test, so a validation inside an epoch leaves the
training state as it was. A batch of another size than the slot's state (or on another device) starts from
zeros.

Evaluation reads each split as one stream in blocks of T, one block per batch, the state carried
(`data.eval_batch_size` is not used): each token's NLL is that of the model reading the whole split
from its first token, the same as feeding it one token at a time (tests/test_lstm.py). Window mode
(`forward`, [B, k] contexts) runs the LSTM over the context it is given from a zero state: nplm-predict and
nplm-generate give it every token of the prompt and of what was generated (`inference.prompting.model_context`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nplm.config.registry import option
from nplm.config.rules import Float, Int
from nplm.models import register_model
from nplm.models.base import TIE_EMBEDDINGS, lookup
from nplm.models.stream import StreamModel



@dataclass
class LSTMConfig:
    """Hyperparameters of the LSTM language model (config group `model`, option `lstm`); each field is a config key."""

    hidden_dim: int = option(200, Int(1), "H, the LSTM's width: its state, the word vectors and the features "
                                          "(the paper: 200 small, 650 medium, 1500 large)")
    num_layers: int = option(2, Int(1), "L, stacked LSTM layers (the paper: 2)")
    dropout: float = option(0.0, Float(ge=0, lt=1), "dropout on the non-recurrent connections: the word vectors, "
                                                    "between layers, before the head (the paper: 0, 0.5, 0.65)")
    init_scale: float = option(0.1, Float(gt=0), "every parameter of the model starts uniform in [-init_scale, "
                                                 "init_scale] (the paper: 0.1, 0.05, 0.04)")
    tie_embeddings: bool | str = option("auto", TIE_EMBEDDINGS, "the head's output word vectors are the input table "
                                        "E (auto: where the head has one vector per word; the paper: false)")


@register_model("lstm", keys=LSTMConfig)
class LSTMLanguageModel(StreamModel):
    """Zaremba et al. (2014): a block's ids `[B, T + 1]` -> features `[B, T, H]`, the state carried between
    blocks (module docstring)."""

    config_class = LSTMConfig
    context_size = 1  # the block's inputs are ids[:, :T] (module docstring)
    default_block_size = 35  # T where data.block_size is null: the paper's unrolling (medium, large)

    def __init__(self, vocab_size: int, cfg: LSTMConfig):
        super().__init__()
        self.cfg = cfg
        H = cfg.hidden_dim
        self.feature_dim = H
        self.E = nn.Embedding(vocab_size, H)  # [V, H]
        # (torch's `dropout` acts between layers only: on each layer's output but the last)
        self.lstm = nn.LSTM(H, H, cfg.num_layers, batch_first=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        self.drop = nn.Dropout(cfg.dropout)  # on the word vectors and the last layer's output
        for p in self.parameters():
            nn.init.uniform_(p, -cfg.init_scale, cfg.init_scale)

    # -- features ----------------------------------------------------------------------------
    def block_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Features `[B, T, H]` of blocks `[B, T + 1]` (inputs ids[:, :T], predicting ids[:, 1:]), from the slot's
        state, which then holds the state after the block, detached (truncated backpropagation through time)."""
        x = self.drop(self.embed(ids[:, :-1]))  # [B, T, H]
        out, state = self.lstm(x, self.initial_state(x.shape[0], x.device))  # [B, T, H]; (h, c) each [L, B, H]
        self.keep_state(state)
        return self.drop(out)  # [B, T, H]

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """E[w] for the ids: `[B, k]` -> `[B, k, H]`."""
        return lookup(self.E, context)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """The last position's features `[B, H]` of the LSTM over the context's vectors `[B, k, H]` from a zero
        state (window mode; the carried state is neither read nor written)."""
        out, _ = self.lstm(self.drop(emb))  # [B, k, H]
        return self.drop(out[:, -1])  # [B, H]

    def input_embeddings(self) -> torch.Tensor:
        return self.E.weight  # [V, H]

    def output_embeddings(self) -> nn.Parameter | None:
        return self.E.weight if self.cfg.tie_embeddings else None  # [V, H] = [V, F]
