"""Every tree, however its file numbers the nodes, gives the hierarchical head one distribution:
`log_probs` sums to 1 and `nll(f, t) == -log_probs(f)[t]` (Morin & Bengio 2005, eq. 3)."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from nplm.errors import UserError
from nplm.heads.hierarchical import NODE_FORMS, HierarchicalHead
from nplm.trees import Tree, build_tree

from test_trees import (CONF_TREE, family_vectors, make_ctx, make_wordnet, nltk_path,  # noqa: F401
                        trees_built_from_their_yaml, two_languages)

# One 4-word tree numbered out of breadth-first order, as a hand-written tree.json may be. In the first,
# children come after their parent but the root's right child is node 1 (Tree.validate accepted it, and
# log_probs disagreed with nll); in the second the root is node 2.
NOT_BFS = [[[2, 1], [-3, -4], [-1, -2]], [[-3, -4], [-1, -2], [1, 0]]]


def assert_one_distribution(tree: Tree) -> None:
    """For both node forms: the full distribution is normalised and agrees with nll at every word."""
    V = tree.vocab_size
    for form in NODE_FORMS:
        torch.manual_seed(0)
        head = HierarchicalHead(6, tree, node_form=form, node_init="random")
        features = torch.randn(V, 6)  # [V, F]: one example per target word
        log_probs = head.log_probs(features)  # [V, V]
        assert torch.allclose(log_probs.exp().sum(1), torch.ones(V), atol=1e-5)
        target = torch.arange(V)
        assert torch.allclose(head.nll(features, target), -log_probs[target, target], atol=1e-5)


@pytest.mark.parametrize("name", trees_built_from_their_yaml())
def test_every_builder_gives_one_distribution(name, tmp_path, nltk_path):  # noqa: F811
    cfg = OmegaConf.to_container(OmegaConf.load(CONF_TREE / f"{name}.yaml"))
    ctx = make_ctx(two_languages(), 13, embeddings=family_vectors())
    if name == "wordnet":
        cfg["nltk_data"] = str(make_wordnet(tmp_path))
        ctx.vocab.tokens[:4], ctx.embeddings = ["dog", "cat", "oak", "dogs"], None
    assert_one_distribution(build_tree(cfg, ctx))


@pytest.mark.parametrize("children", NOT_BFS)
def test_tree_file_with_another_numbering_is_renumbered_breadth_first(tmp_path, children):
    path = tmp_path / "tree.json"
    path.write_text(json.dumps({"vocab_size": 4, "children": children}))
    tree = Tree.load(path)
    assert tree.children == [(1, 2), (-1, -2), (-3, -4)]  # root 0, then its left and right child
    nodes, codes, lengths = tree.paths()
    assert codes.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]] and lengths.tolist() == [2, 2, 2, 2]
    assert_one_distribution(tree)


def test_breadth_first_trees_keep_their_numbering():
    nested = ((0, (1, 2)), ((3, 4), 5))
    tree = Tree.from_nested(nested, 6)
    assert Tree(list(tree.children), 6).children == tree.children


@pytest.mark.parametrize("children,message", [
    ([[1, -1], [0, -2], [-3, -4]], r"tree nodes form a cycle: 2 of 3 are not below the root 2"),
    ([[-1, -2], [-3, -4]], r"a binary tree over 4 words has 3 internal nodes, this one 2"),
    ([[1, 2], [-1, -2], [-3, -3]], r"word 2 is a leaf 2 times; each word must be exactly one leaf"),
    ([[1, -1], [2, -2], [1, -3]], r"word 3 is a leaf 0 times"),
])
def test_broken_tree_files_are_refused(tmp_path, children, message):
    path = tmp_path / "tree.json"
    path.write_text(json.dumps({"vocab_size": 4, "children": children}))
    with pytest.raises(UserError, match=message):
        Tree.load(path)
