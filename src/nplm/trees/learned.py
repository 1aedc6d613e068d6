"""`tree=learned`: a tree of recursive Gaussian mixtures on predicted representations (Mnih & Hinton 2009).

Mnih & Hinton, "A Scalable Hierarchical Distributed Language Model" (NIPS 2009), section 4: train a
model on a random tree first; represent each word by the model's *predicted* representation averaged
over the training contexts that precede the word; build the tree by recursive two-component Gaussian
mixtures of those vectors (`mixture_tree`); train a second model from scratch on it. The first and
last steps are `nplm.training.train`'s (phases `tree.bootstrap`, then the run itself); the middle one is
`predicted_word_vectors` (here) and `build` (the tree). The vectors arrive as `ctx.embeddings` [V, d].
"""

from __future__ import annotations

import numpy as np
import torch

from nplm.errors import UserError
from nplm.trees.mixture_tree import SPLITS, mixture_tree
from nplm.config.rules import Check, Choice, ExistingFile, Float, Int
from nplm.trees import register_tree
from nplm.trees.tree import Tree


@torch.no_grad()
def predicted_word_vectors(module, windows: torch.Tensor, vocab_size: int, batch_size: int = 4096) -> torch.Tensor:
    """[V, d]: for each word w, the mean over the training windows whose target is w of the first
    model's predicted representation `head.predicted_representation(model(context))` (the vector the
    tree's nodes score: f for logistic nodes, c + W f for Morin-Bengio nodes; see that method), in
    eval mode (no dropout). Words that are never a target get the mean over all windows.
    `module`: a trained `nplm.training.module.LanguageModel`; `windows`: [N, n] (context..., target) ids."""
    was_training = module.training
    module.eval()
    device = next(module.parameters()).device
    sums, counts = None, torch.zeros(vocab_size, dtype=torch.float64, device=device)
    for batch in windows.split(batch_size):
        batch = batch.to(device)
        rep = module.head.predicted_representation(module.model(batch[:, :-1])).double()  # [B, d]
        if sums is None:
            sums = torch.zeros(vocab_size, rep.shape[1], dtype=torch.float64, device=device)
        sums.index_add_(0, batch[:, -1], rep)
        counts.index_add_(0, batch[:, -1], torch.ones_like(batch[:, -1], dtype=torch.float64))
    module.train(was_training)
    mean = sums.sum(0) / counts.sum()
    seen = counts > 0
    out = mean.expand_as(sums).clone()
    out[seen] = sums[seen] / counts[seen, None]
    return out.float().cpu()


def _eps_needs_adaptive(tree: dict) -> str | None:
    if tree.get("eps", 0.0) > 0 and tree.get("split", "adaptive") != "adaptive":
        return "0 with tree.split=balanced (BALANCED splits give one code per word); or set tree.split=adaptive"
    return None


@register_tree("learned", from_first_model=predicted_word_vectors, checks=(Check("eps", _eps_needs_adaptive),), keys={
    "iterations": Int(1, doc="EM iterations of each 2-component mixture"), "seed": Int(0, 2**32 - 1, nullable=True, doc="the builder's seed (null: the run's seed)"),
    "bootstrap": Choice(options=("balanced", "random", "huffman", "brown", "wordnet"), default="random",
                        doc="the first model's tree"),
    "bootstrap_epochs": Int(1, nullable=True, hint="null: as long as the run", doc="epochs of the first model"),
    "split": Choice(options=SPLITS, default="adaptive", doc="Mnih & Hinton's ADAPTIVE or BALANCED"),
    "eps": Float(ge=0, lt=0.5, default=0.0, doc="ADAPTIVE(eps): words this close to 0.5 get codes in both subtrees"),
    "runs": Int(1, default=1, doc="trees whose codes every word gets (several codes per word)"),
    "bootstrap_checkpoint": ExistingFile(nullable=True, doc="a first model trained elsewhere (skips phase 1)")})
def build(ctx, split: str = "adaptive", eps: float = 0.0, runs: int = 1, iterations: int = 30,
          seed: int | None = None) -> Tree:
    """`split`: balanced | adaptive (Mnih & Hinton's BALANCED, ADAPTIVE); `eps` >= 0 with adaptive:
    their ADAPTIVE(eps), words within eps of responsibility 0.5 get a code in both subtrees; `runs`:
    independent mixture recursions joined under one root (their x2, x4); `iterations`: EM steps per
    split; `seed`: run r's EM starts from seed + r (null: the run's seed). The values were checked
    against the keys and the rule registered here (`nplm.config.schema`), before any data was read."""
    if ctx.embeddings is None:
        raise UserError("tree=learned needs word vectors from a first training phase (ctx.embeddings is None); "
                        "nplm-train runs that phase itself (tree.bootstrap)")
    V = len(ctx.vocab.tokens)
    vectors = ctx.embeddings.detach().double().cpu().numpy()  # [V, d]
    if vectors.ndim != 2 or len(vectors) != V:
        raise UserError(f"tree=learned got word vectors of shape {tuple(vectors.shape)}; it needs [{V}, d], "
                        "one row per vocabulary word, from a model trained on this corpus")
    return mixture_tree(np.asarray(vectors), ctx.seed if seed is None else seed, split, eps, int(runs), iterations)
