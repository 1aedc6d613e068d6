"""`tree=file`: a tree saved by an earlier run (`<run>/tree.json`), over this run's vocabulary."""

from __future__ import annotations

from nplm.config.rules import ExistingFile
from nplm.errors import UserError
from nplm.trees import register_tree
from nplm.trees.tree import Tree


@register_tree("file", keys={"path": ExistingFile(required=True, hint="e.g. tree.path=<run>/tree.json",
                                              doc="a tree.json written by an earlier run")})
def build(ctx, path: str) -> Tree:
    """A saved tree (`tree.json` of an earlier run) over the same vocabulary; a refusal names `tree.path`."""
    try:
        tree = Tree.load(path)
        tree.check_vocabulary(ctx.vocab.tokens)
    except UserError as err:
        raise UserError(f"tree.path={path}: {err}") from None
    return tree
