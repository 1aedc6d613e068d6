"""Output layers ("heads", config group `head`): features [B, F] -> per-token NLL [B] and log-distribution [B, V].

Every head implements `nplm.heads.base.Head` in a module of this package and registers itself by
name with the keys its yaml file may set (`register_head`); `build_head` builds the one a config names.
"""

from __future__ import annotations

from nplm.config.registry import Registry
from nplm.errors import UserError
from nplm.heads.base import Head, require_counts

HEADS = Registry("head", __name__)
register_head = HEADS.register


def head_class(name: str) -> type[Head]:
    return HEADS.get(name)


def tie_refusal(name: str) -> str:
    """Why model.tie_embeddings=true cannot go with head=`name` (a head whose class has no `can_tie`), and the fix."""
    can = "|".join(n for n, o in HEADS.options().items() if o.target.can_tie)
    return (f"model.tie_embeddings=true: head={name} has no output vector per word to tie to the model's input word "
            f"vectors; set model.tie_embeddings=auto (ties where the head can) or false, or use head={can}")


def build_head(cfg: dict, feature_dim: int, vocab_size: int, counts: list[int] | None = None, tree=None,
               tie_to=None) -> Head:
    """The head named by `cfg["name"]`, with the rest of `cfg` as its options. `counts`: unigram
    counts per word id (training split); `tree`: an `nplm.trees.Tree` for tree-structured heads;
    `tie_to`: the model's output word vectors [V, F] (`Model.output_embeddings()`, an `nn.Parameter`
    of the model, or None), which become the head's own (input and output word vectors tied; the
    parameter is shared, not copied). A head without one vector per word refuses them."""
    options = dict(cfg)
    name = options.pop("name", None)
    cls = head_class(name)
    if tie_to is not None and not cls.can_tie:
        raise UserError(tie_refusal(name))
    if cls.needs_counts(options):
        require_counts(name, counts, vocab_size)
    head = cls.from_config(options, feature_dim=feature_dim, vocab_size=vocab_size, counts=counts, tree=tree)
    if tie_to is not None:
        head.tie_output_embeddings(tie_to)
    return head


__all__ = ["HEADS", "Head", "build_head", "head_class", "register_head", "tie_refusal"]
