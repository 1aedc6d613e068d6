"""`tree=balanced`: recursive halves of the lexicographically sorted vocabulary (the notebook's tree)."""

from __future__ import annotations

from nplm.trees import register_tree
from nplm.trees.tree import Tree, balanced_nested


@register_tree("balanced", cached=True)
def build(ctx) -> Tree:
    """A balanced binary tree over the words in sorted order."""
    tokens = ctx.vocab.tokens
    order = sorted(range(len(tokens)), key=lambda i: tokens[i])
    return Tree.from_nested(balanced_nested(order), len(tokens))
