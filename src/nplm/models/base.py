"""The interface every model of the `model` group meets: context ids [B, k] -> features [B, F].

A model whose positions share work (`trains_on_blocks`) also maps a whole block of ids to the
features of each of its positions (`block_features`, `data.block_size`; `nplm.data.blocks`).
Heads read the features; prompting, generation and evaluation of unknown words read the input
embeddings; a head may tie its output word vectors to the model's (`output_embeddings`).
"""

from __future__ import annotations

import torch
from torch import nn

from nplm.config.rules import AnyOf, Bool, Choice

# `model.tie_embeddings` of the models that have output word vectors: auto (tie where the head has one
# output vector per word, its class's `can_tie`), true (refused with a head that cannot), or false.
TIE_EMBEDDINGS = AnyOf(rules=(Bool(), Choice(options=("auto",))), words="auto, true or false")


def resolve_tie(setting, head_can_tie: bool) -> bool:
    """Whether a model ties with `tie_embeddings` = `setting` (auto, true, false) and a head that can tie
    (`head_can_tie`) or not."""
    return head_can_tie if setting == "auto" else bool(setting)


class Model(nn.Module):
    """A feature extractor over a context of `context_size` previous tokens.

    Subclasses set `context_size` and `feature_dim` (F) and implement `embed` and
    `features_from_embeddings`; `config_class` is the dataclass of their hyperparameters (the keys of
    their yaml file, registered with `nplm.models.register_model`)."""

    config_class: type
    context_size: int
    feature_dim: int
    trains_on_blocks: bool = False  # has `block_features` (data.block_size is refused for a model without)
    # carries a state from one block to the next (`reset_state`): trained on consecutive blocks of parallel
    # streams, in order (`nplm.data.streams`), and evaluated on each split as one stream
    carries_state: bool = False
    default_block_size: int | None = None  # T where data.block_size is null (a model that carries its state)

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """Context ids `[B, k]` -> features `[B, F]`."""
        return self.features_from_embeddings(self.embed(context))

    def block_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Ids of a block of T tokens after the k before it `[B, T + k]` -> features `[B, T, F]`, row t
        the features of the window `ids[:, t : t + k]` (predicting `ids[:, t + k]`; a model that attends
        over the whole block reads `ids[:, : t + k]`, at least the window); only where `trains_on_blocks`."""
        raise NotImplementedError(f"{type(self).__name__} has no block_features")

    def reset_state(self, slot: str | None = None) -> None:
        """Forget the carried state of `slot` ("train" or "eval"; None: both); only where `carries_state`."""

    def carried_state(self, slot: str):
        """The state `slot` carries now, on the CPU, for a checkpoint written inside an epoch (None: none)."""
        return None

    def restore_state(self, slot: str, state, device: torch.device) -> None:
        """Carry `state` (`carried_state`'s, from a checkpoint) in `slot` again, on `device`; None: nothing."""

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """The context's input word vectors: ids `[B, k]` -> `[B, k, m]`."""
        raise NotImplementedError

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """Features `[B, F]` from context vectors `[B, k, m]` (for an unknown word, any vector: the
        expected embedding sum_i C(i) P(i | context) of Bengio et al. 2003, section 4)."""
        raise NotImplementedError

    def input_embeddings(self) -> torch.Tensor:
        """The table of input word vectors `[V, m]` (row i: word id i)."""
        raise NotImplementedError

    def output_embeddings(self) -> nn.Parameter | None:
        """Output word vectors `[V, F]` (a parameter of the model) that the head takes as its own
        (`nplm.heads.build_head(..., tie_to=...)`: input and output word vectors tied); None where
        the model has none or does not tie them (its `tie_embeddings` key; `build_model` resolves auto to
        whether the head can take them, a model built directly with auto offers them)."""
        return None

    def can_backprop_by_hand(self) -> bool:
        """Whether the model has `forward_saving` / `backprop` for its device and dtype
        (`nplm.fast.backprop`); a model without them trains through autograd."""
        return False


def lookup(table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """table(ids): ids `[B, k]` -> `[B, k, m]`. On a CPU with a dense gradient, `index_select`, whose
    backward (`index_add_` into zeros) is faster there than nn.Embedding's (the NPLM's `embed`);
    elsewhere nn.Embedding (a row-sparse gradient; CUDA's deterministic backward)."""
    if table.sparse or ids.device.type != "cpu":
        return table(ids)
    return table.weight.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)

