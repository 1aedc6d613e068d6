"""The one interface every output layer implements."""

from __future__ import annotations

import torch
from torch import nn

from nplm.errors import UserError


def require_counts(head: str, counts, vocab_size: int) -> None:
    """Heads built from unigram statistics need a training count for every word."""
    if counts is None or len(counts) != vocab_size:
        raise UserError(f"head={head} needs training unigram counts for all {vocab_size} words, "
                        f"got {None if counts is None else len(counts)}")


def require_tree(head: str, tree, vocab_size: int) -> None:
    """Tree-structured heads need a tree over exactly this vocabulary."""
    if tree is None:  # (a head built without the run's tree: nplm-train gives every tree-using head one)
        from nplm.trees import TREES

        raise UserError(f"{head} needs a tree: add tree=<one of {', '.join(TREES.names())}>")
    if tree.vocab_size != vocab_size:
        raise UserError(f"the tree has {tree.vocab_size} leaves but the vocabulary {vocab_size} words; "
                        "rebuild the tree from this corpus")


def tie_checked(weight: nn.Parameter, own: torch.Tensor) -> nn.Parameter:
    """`weight`, the model's output word vectors, when it has the shape [V, F] of the head's own `own`."""
    if tuple(weight.shape) != tuple(own.shape):
        raise UserError(f"model.tie_embeddings=true: the model's output word vectors are {tuple(weight.shape)} but "
                        f"the head needs {tuple(own.shape)} (|V| x the feature size)")
    return weight


def wide(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32 when it is narrower (bf16/fp16 scores under autocast), else as it is: log-softmax
    and the NLL sums of every head run in float32 or wider."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


class _SparseRows(torch.autograd.Function):
    """weight[index] whose gradient is row-sparse (sparse COO, one row per index, uncoalesced), as
    nn.Embedding(sparse=True)'s, for 1-D weights (biases) too."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.shape = weight.shape
        ctx.save_for_backward(index)
        return weight.index_select(0, index.reshape(-1)).view(*index.shape, *weight.shape[1:])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        values = grad.reshape(-1, *ctx.shape[1:]).contiguous()
        return torch.sparse_coo_tensor(index.reshape(1, -1), values, ctx.shape, check_invariants=False), None


def rows(weight: torch.Tensor, index: torch.Tensor, sparse: bool) -> torch.Tensor:
    """`weight[index]`; with `sparse` (and autograd recording) its gradient is row-sparse: the lazy
    optimizers (`nplm.optimizers.lazy`) then update only the rows a batch used, as for
    `model.sparse_embeddings=true`, instead of every row of a |V|-sized table each step."""
    if sparse and torch.is_grad_enabled() and weight.requires_grad:
        return _SparseRows.apply(weight, index)
    return weight[index]


class Head(nn.Module):
    """An output layer over features `[B, F]`.

    - `nll(features, target)`: the exact per-token negative log-likelihood `[B]` (natural log); summed
      over a split it is the numerator of the split's perplexity;
    - `log_probs(features)`: the full normalised log-distribution `[B, V]` (prediction, sampling,
      mixing). For every head, `nll(f, t) == -log_probs(f)[t]`;
    - `loss(features, target)`: the per-token training objective `[B]`; the exact NLL unless the head
      trains on an approximation (sampling), which then sets `exact_training_loss = False`.

    `uses_tree(options)`: whether the head, with these `head` options, needs an `nplm.trees.Tree`
    (config group `tree`); `needs_counts(options)`: whether it needs the training split's unigram
    counts (`nplm.heads.build_head` refuses it none). The schema's rules across groups
    (`nplm.config.schema`) read `uses_tree`, `can_tie` and `has_predicted_representation` of the head a
    config names.
    """

    exact_training_loss = True
    # Whether the head has one output vector per word that it can take from the model
    # (`tie_output_embeddings`; model.tie_embeddings=true)
    can_tie = False
    # keys of the head's own output vectors -> the values they may take (their default aside) where the model ties
    # the head's output vectors to its input vectors: any other is refused (`nplm.config.schema`)
    tied_values: dict[str, tuple] = {}
    # Whether the head scores a "predicted representation" of the context (`predicted_representation`):
    # the vectors tree=learned clusters (Mnih & Hinton 2009)
    has_predicted_representation = False
    # Option sets that take different code paths, for the conformance tests over every head
    # (tests/conftest.py's `head_variants`): each is put through every generic check
    variants: tuple[dict, ...] = ({},)
    # Whether training forms no [B, |V|] tensor (tests/test_large_vocab.py checks it, both ways)
    avoids_full_scores = False

    @classmethod
    def uses_tree(cls, options) -> bool:
        return False

    @classmethod
    def needs_counts(cls, options) -> bool:
        return False

    @classmethod
    def features_problem(cls, options: dict, feature_dim: int) -> str | None:
        """What the `head` options cannot do with a model of `feature_dim` features (a line naming the
        key and the fix), or None; the schema asks before any data is read."""
        return None

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.nll(features, target)

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        """Use the model's output word vectors `weight` [V, F] (`Model.output_embeddings`, a parameter of
        the model) as this head's: row w scores word w, so input and output word vectors are one
        table (Mnih & Hinton 2007's LBL, Press & Wolf 2017). Heads with `can_tie = True` implement it."""
        raise NotImplementedError

    def check_training(self, epoch_end: bool) -> None:
        """Called where the training loop reads the device anyway (each log line, and `epoch_end`): a head
        with device-side counters reads them here, raises a UserError when they show that its training
        loss went wrong, and may adapt at an epoch's end. Default: nothing to check."""

    def graph_sizes(self) -> tuple:
        """The host-side sizes (Python numbers) the training loss bakes into a captured CUDA graph besides
        the batch's shape (`nplm.training.capture`); the graph is captured again when they change at an
        epoch's end (`check_training`). Default: none."""
        return ()

    def restore_sizes(self, sizes: tuple) -> None:
        """Take back `graph_sizes` as a checkpoint saved them, so a resumed run goes on with the sizes its
        head had adapted to. Default: nothing to restore."""

    def calibrate(self, targets: torch.Tensor) -> None:
        """`targets` [U, T]: a sample of the training split's targets in the units its batches are drawn in
        (U whole blocks of T consecutive tokens, `data.block_size`), before training starts. A head that sizes
        static per-batch shapes from the training counts (the adaptive softmax's capacities) sizes them for
        how a batch of such units actually mixes words. Default: nothing to calibrate."""

    def can_backprop_by_hand(self) -> bool:
        """Whether the head has `nll_and_backprop` for its parameters' device and dtype (nplm.fast.backprop)."""
        return False

    def nll_and_backprop(self, features: torch.Tensor, target: torch.Tensor,
                         grad_nll: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Training without autograd (nplm.fast.backprop): `loss(features, target)` [B] and dL/df [B, F] for
        L = sum_rows grad_nll * loss, adding the head's parameter gradients to their `.grad`."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts: list[int] | None,
                    tree=None) -> "Head":
        """Build from the `head` config group's options (everything but `name`; checked against the
        keys the head registered). `counts`: training unigram counts per word id; `tree`: an
        `nplm.trees.Tree` for heads that use one."""
        return cls(feature_dim, vocab_size)
