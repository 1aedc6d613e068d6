"""Tree builders (config group `tree`): validity, persistence, and what each builder promises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.trees import TREES, Tree, TreeContext, build_tree
from nplm.trees.assemble import from_merges
from nplm.trees.brown import build as brown
from nplm.trees.clustering import cluster_tree
from nplm.trees.huffman import build as huffman
from nplm.trees.learned import build as learned
from nplm.trees.random_tree import build as random_tree
from nplm.trees.wordnet import hypernym_paths, open_wordnet, tree_from_hypernyms

CONF_TREE = Path(__file__).resolve().parents[1] / "src" / "nplm" / "conf" / "tree"


def trees_built_from_their_yaml() -> list[str]:
    """The registered trees whose yaml file sets every key (tree=file leaves `path` to the user): each is
    built from its yaml alone by the tests over every builder."""
    yaml = {name: OmegaConf.to_yaml(OmegaConf.load(CONF_TREE / f"{name}.yaml")) for name in TREES.names()}
    return [name for name, text in yaml.items() if "???" not in text]
A, B = list(range(6)), list(range(6, 12))  # two word families that never share a sentence
UNSEEN = 12  # a vocabulary word with training count 0


def two_languages(sentences: int = 120, length: int = 20, seed: int = 0) -> torch.Tensor:
    """[N] ids: sentences drawn uniformly from family A or family B, so bigrams stay within a family."""
    rng = np.random.default_rng(seed)
    out = [rng.choice(A if rng.random() < 0.5 else B, size=length) for _ in range(sentences)]
    return torch.from_numpy(np.concatenate(out)).long()


def make_ctx(ids: torch.Tensor, V: int, embeddings=None, seed: int = 0) -> TreeContext:
    counts = torch.bincount(ids, minlength=V).tolist()
    vocab = Vocabulary([f"w{i}" for i in range(V)], counts, unk=None)
    return TreeContext(vocab, ids, counts, seed=seed, embeddings=embeddings)


def family_vectors(V: int = 13, seed: int = 0) -> torch.Tensor:
    """[V, 8]: family A near +10, family B near -10 (well separated), the rest near 0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, 8, generator=g, dtype=torch.float64)
    x[A] += 10.0
    x[B] -= 10.0
    return x


def leaves(tree: Tree, node: int) -> set[int]:
    """The words under `node` (of its leaves, in a multi-code tree)."""
    word = tree.word_of_leaf().tolist()
    out, stack = set(), [node]
    while stack:
        for c in tree.children[stack.pop()]:
            if c >= 0:
                stack.append(c)
            else:
                out.add(word[-1 - c])
    return out


def distance(tree: Tree, u: int, v: int) -> int:
    """Edges between the leaves u and v."""
    nodes, _, lengths = tree.paths()
    pu, pv = nodes[u, : lengths[u]].tolist(), nodes[v, : lengths[v]].tolist()
    shared = next((i for i, (x, y) in enumerate(zip(pu, pv)) if x != y), min(len(pu), len(pv)))
    return len(pu) + len(pv) - 2 * shared + 2


def root_split(tree: Tree, words: set[int]) -> list[set[int]]:
    """The words of `words` under the root's left and right child."""
    return [({tree.word_of_leaf().tolist()[-1 - c]} if c < 0 else leaves(tree, c)) & words for c in tree.children[0]]


# -- a miniature WordNet database, read by NLTK's real reader -----------------------------------------
def make_wordnet(root: Path) -> Path:
    """corpora/wordnet in WordNet 3.0's own file format (wndb(5WN)), 7 noun synsets; returns the
    nltk_data dir. Synset ids are byte offsets into data.noun."""
    wn = root / "nltk_data" / "corpora" / "wordnet"
    wn.mkdir(parents=True)
    header = "  1 This software and database is being provided. WordNet 3.0 Copyright 2006 by Princeton University.\n"
    synsets = [("entity", None), ("organism", "entity"), ("animal", "organism"), ("plant", "organism"),
               ("dog", "animal"), ("cat", "animal"), ("oak", "plant")]
    offsets, offset = {}, len(header)
    for word, up in synsets:
        offsets[word] = offset
        offset += len(f"{0:08d} 03 n 01 {word} 0 000 | x\n") + (len(f" @ {0:08d} n 0000") if up else 0)
    (wn / "data.noun").write_text(header + "".join(
        f"{offsets[w]:08d} 03 n 01 {w} 0 {f'001 @ {offsets[up]:08d} n 0000' if up else '000'} | x\n"
        for w, up in synsets))
    (wn / "index.noun").write_text(header + "".join(
        f"{w} n 1 {1 if up else 0} {'@ ' if up else ''}1 0 {offsets[w]:08d}\n" for w, up in sorted(synsets)))
    for pos in ("adj", "adv", "verb"):
        (wn / f"data.{pos}").write_text(header)
        (wn / f"index.{pos}").write_text(header)
    for name in ("adj.exc", "adv.exc", "noun.exc", "verb.exc", "index.sense", "cntlist.rev"):
        (wn / name).write_text("")
    (wn / "lexnames").write_text("00\tadj.all\t3\n01\tadj.pert\t3\n02\tadv.all\t4\n03\tnoun.Tops\t1\n")
    return root / "nltk_data"


@pytest.fixture
def nltk_path(monkeypatch):
    """Restore nltk.data.path after the test (the corpus lookup prepends the places it searched)."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))
    return nltk.data


PATHS = {0: ["entity", "organism", "animal", "dog"], 1: ["entity", "organism", "animal", "cat"],
         2: ["entity", "organism", "animal", "horse"], 3: ["entity", "organism", "plant", "oak"],
         4: ["entity", "organism", "plant", "pine"], 5: ["entity", "artifact", "vehicle", "car"],
         6: ["entity", "artifact", "vehicle", "truck"]}  # zorp (7) and the (8) have no synset


# -- every builder -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", trees_built_from_their_yaml())
def test_every_builder_from_its_config_gives_a_valid_tree_that_survives_json(name, tmp_path, nltk_path):
    cfg = OmegaConf.to_container(OmegaConf.load(CONF_TREE / f"{name}.yaml"))
    assert cfg["name"] == name
    ctx = make_ctx(two_languages(), 13, embeddings=family_vectors())
    if name == "wordnet":  # the real NLTK reader on a miniature WordNet, co-occurrence vectors
        cfg["nltk_data"] = str(make_wordnet(tmp_path))
        ctx.vocab.tokens[:4], ctx.embeddings = ["dog", "cat", "oak", "dogs"], None
    tree = build_tree(cfg, ctx)
    assert ctx.counts[UNSEEN] == 0 and tree.kind == name and len(tree.children) == 12
    assert sorted(-1 - c for pair in tree.children for c in pair if c < 0) == list(range(13))
    again = Tree.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again.children == tree.children and again.fingerprint == tree.fingerprint and again.kind == name


def test_deep_trees_are_assembled_without_recursion():
    V = 2000  # a caterpillar: depth V - 1, far past Python's recursion limit
    merges = [(0, 1)] + [(V + k, k + 2) for k in range(V - 2)]
    tree = from_merges(merges, V)
    assert tree.stats()["max_depth"] == V - 1
    assert tree.paths()[2][0] == V - 1


# -- huffman -----------------------------------------------------------------------------------------
def test_huffman_code_lengths_are_optimal_and_within_one_bit_of_the_entropy():
    ctx = make_ctx(torch.tensor([0] + [1] + [2] * 2 + [3] * 4), 4)
    assert huffman(ctx).paths()[2].tolist() == [3, 3, 2, 1]
    counts = (1000 / np.arange(1, 301) ** 1.3).astype(int)  # Zipf-like, with count-0 words at the tail
    ids = torch.from_numpy(np.repeat(np.arange(300), counts))
    ctx = make_ctx(ids, 300)
    stats = huffman(ctx).stats(ctx.counts)
    H, L = stats["unigram_entropy_bits"], stats["expected_code_length_bits"]
    assert (counts == 0).sum() > 0 and H <= L < H + 1
    assert huffman(ctx).children == huffman(ctx).children


# -- random ------------------------------------------------------------------------------------------
def test_random_tree_is_balanced_reproducible_by_seed_and_differs_across_seeds():
    ctx = make_ctx(torch.arange(100), 100, seed=3)
    t3 = random_tree(ctx)
    assert t3.children == random_tree(ctx, seed=3).children
    assert t3.children != random_tree(ctx, seed=4).children
    assert t3.stats()["max_depth"] == math.ceil(math.log2(100))


# -- brown -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_classes", [2, 4, 1000])  # exchange + merging; exact Brown merging (C >= V)
def test_brown_puts_word_families_with_disjoint_contexts_under_different_root_children(num_classes):
    ctx = make_ctx(two_languages(), 13)
    tree = brown(ctx, num_classes=num_classes)
    assert sorted(root_split(tree, set(A + B)), key=min) == [set(A), set(B)]


@pytest.mark.parametrize("options,message", [
    ({"name": "brown", "num_classes": 1}, "tree.num_classes=1: must be an integer >= 2"),
    ({"name": "brown", "within": "alphabetical"}, "tree.within=alphabetical: must be one of: huffman, balanced"),
    ({"name": "wordnet", "binarise": "median"}, "tree.binarise=median: must be one of: balanced, kmeans"),
    ({"name": "wordnet", "unplaced": "closest"}, "tree.unplaced=closest: must be one of: nearest, subtree"),
])
def test_tree_options_are_checked_once_by_the_rules_they_registered(options, message):
    """The builders do not check again what the schema checked (issue 40: one validation per key)."""
    from nplm.config.schema import check_group, groups

    with pytest.raises(UserError) as err:
        check_group("tree", groups()["tree"], options)
    assert str(err.value) == message


def test_every_registered_default_is_the_one_its_yaml_sets():
    """One default per key: where the code states a default for a key (its builder's or __init__'s signature,
    its config dataclass, its rule), it is the value the option's yaml gives, for every option of every group."""
    import dataclasses
    import importlib
    import inspect

    import yaml
    from nplm.config import CONF_DIR
    from nplm.config.schema import REGISTRIES

    checked = 0
    for group, where in REGISTRIES.items():
        module, attr = where.split(":")
        registry = getattr(importlib.import_module(module), attr)
        for name, option in registry.options().items():
            target = option.target
            code = {p.name: p.default for p in inspect.signature(target.__init__ if isinstance(target, type) else target)
                    .parameters.values() if p.default is not inspect.Parameter.empty}
            if getattr(target, "config_class", None):
                code.update({f.name: f.default for f in dataclasses.fields(target.config_class)})
            rules = {**registry.common, **option.keys}
            for key, value in (yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text()) or {}).items():
                value = tuple(value) if isinstance(value, list) else value
                for default in (code.get(key), getattr(rules.get(key), "default", None)):
                    if default is not None:
                        assert (tuple(default) if isinstance(default, list) else default) == value, \
                            f"{group}={name} {key}: the yaml says {value!r}, the code {default!r}"
                        checked += 1
    assert checked > 50


# -- wordnet -----------------------------------------------------------------------------------------
def wordnet_vectors() -> np.ndarray:
    """[9, 4]: zorp right next to dog, 'the' far from everything."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(9, 4))
    x[7] = x[0] + 0.01
    return x


def test_wordnet_tree_keeps_is_a_siblings_together_and_places_a_word_without_synset_by_its_vector():
    tree = tree_from_hypernyms(PATHS, wordnet_vectors(), unplaced="nearest", binarise="kmeans")
    dog, cat, oak, car, zorp = 0, 1, 3, 5, 7
    assert distance(tree, dog, cat) < distance(tree, dog, oak) < distance(tree, dog, car)
    assert distance(tree, zorp, cat) < distance(tree, zorp, oak) < distance(tree, zorp, car)
    assert sorted(root_split(tree, set(range(7))), key=min) == [{0, 1, 2, 3, 4}, {5, 6}]


def test_wordnet_balanced_binarisation_keeps_a_deep_is_a_chain_shallow():
    V = 64  # word w hangs under the chain s0 > s1 > ... > s_w: a caterpillar of IS-A levels
    paths = {w: [f"s{k}" for k in range(w + 1)] + [f"w{w}"] for w in range(V)}
    vectors = np.random.default_rng(0).normal(size=(V, 4))
    assert tree_from_hypernyms(paths, vectors, binarise="kmeans").stats()["max_depth"] == V - 1
    balanced = tree_from_hypernyms(paths, vectors, binarise="balanced")
    assert balanced.stats()["max_depth"] <= math.ceil(math.log2(V)) + 4  # 10, against 63
    with pytest.raises(ValueError, match=r"binarise='median' one of"):
        tree_from_hypernyms(paths, vectors, binarise="median")


def test_wordnet_subtree_mode_gives_words_without_synset_their_own_root_child():
    tree = tree_from_hypernyms(PATHS, wordnet_vectors(), unplaced="subtree", binarise="kmeans")
    assert sorted(root_split(tree, set(range(9))), key=min) == [set(range(7)), {7, 8}]
    with pytest.raises(ValueError, match=r"unplaced='closest' must be one of"):
        tree_from_hypernyms(PATHS, wordnet_vectors(), unplaced="closest")


def test_wordnet_lookup_takes_the_first_synset_and_its_hypernym_path_from_the_root(tmp_path, nltk_path):
    wn = open_wordnet(str(make_wordnet(tmp_path)), str(tmp_path / "downloads"), False)
    paths = hypernym_paths(["dog", "Dogs", "cat", "oak", "zorp", "the", "."], wn)
    dog = ["entity.n.01", "organism.n.01", "animal.n.01", "dog.n.01"]
    assert paths == {0: dog, 1: dog, 2: dog[:3] + ["cat.n.01"], 3: dog[:2] + ["plant.n.01", "oak.n.01"]}


def test_missing_wordnet_is_a_one_line_error_saying_how_to_install_it(tmp_path, monkeypatch, nltk_path):
    nltk_path.path[:] = [str(tmp_path)]
    monkeypatch.setenv("NLTK_DATA", str(tmp_path))
    ctx = make_ctx(two_languages(), 13)
    ctx.data_dir = str(tmp_path)
    with pytest.raises(UserError, match=r"python -m nltk.downloader wordnet") as err:
        build_tree({"name": "wordnet"}, ctx)
    assert "NLTK_DATA" in str(err.value) and "\n" not in str(err.value)


# -- learned / clustering ----------------------------------------------------------------------------
def test_learned_tree_splits_two_separated_groups_of_vectors_at_the_root():
    ctx = make_ctx(two_languages(), 13, embeddings=family_vectors())
    for split in ("adaptive", "balanced"):
        left, right = sorted(root_split(learned(ctx, split=split), set(A + B)), key=min)
        assert (left, right) == (set(A), set(B))
    stats = learned(ctx, split="balanced").stats()
    assert stats["max_depth"] == math.ceil(math.log2(13)) and stats["codes_per_word"] == 1.0


def test_adaptive_eps_puts_words_near_responsibility_one_half_on_both_sides():
    from nplm.trees.mixture_tree import split_by_responsibility

    log_odds = np.array([-5.0, -0.5, 0.0, 0.3, 5.0])  # responsibilities 0.007, 0.38, 0.5, 0.57, 0.993
    left, right = split_by_responsibility(log_odds, "adaptive", 0.1)
    assert left.tolist() == [True, True, True, True, False] and right.tolist() == [False, False, True, True, True]
    left, right = split_by_responsibility(log_odds, "adaptive", 0.0)
    assert right.tolist() == [False, False, False, True, True] and (left == ~right).all()
    left, right = split_by_responsibility(log_odds, "balanced", 0.0)
    assert right.tolist() == [False, False, False, True, True]
    left, right = split_by_responsibility(np.zeros(4), "adaptive", 0.3)  # all undecided: no progress, so halves
    assert right.sum() == 2 and (left == ~right).all()
    ctx = make_ctx(two_languages(), 13, embeddings=family_vectors())
    tree = learned(ctx, split="adaptive", eps=0.49)
    assert tree.codes_per_word > 1 and set(tree.leaf_words) == set(range(13))
    assert learned(ctx, split="adaptive", eps=0.0).leaf_words is None  # eps 0: one code per word


def test_runs_join_independent_trees_under_one_root_with_a_code_per_run():
    ctx = make_ctx(two_languages(), 13, embeddings=family_vectors())
    tree = learned(ctx, runs=4)
    assert tree.codes_per_word == 4.0 and len(tree.children) == 4 * 13 - 1
    assert sorted(tree.leaf_words) == sorted(list(range(13)) * 4)
    assert all(c >= 0 for c in tree.children[0] + tree.children[1] + tree.children[2])  # the 3 joining nodes
    again = Tree.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again.leaf_words == tree.leaf_words and again.stats() == tree.stats()


def test_learned_tree_options_are_checked_by_the_schema():
    """The learned tree's keys and its rule across them are registered with it: refused before any data is read."""
    from nplm.config.schema import check_group, groups

    for options, message in [({"split": "median"}, "tree.split=median: must be one of: balanced, adaptive"),
                             ({"eps": 0.5}, r"tree.eps=0.5: must be a number in \[0, 0.5\)"),
                             ({"split": "balanced", "eps": 0.2}, "tree.eps=0.2: must be 0 with tree.split=balanced"),
                             ({"runs": 0}, "tree.runs=0: must be an integer >= 1")]:
        with pytest.raises(UserError, match=message):
            check_group("tree", groups()["tree"], {"name": "learned", **options})
    check_group("tree", groups()["tree"], {"name": "learned", "split": "adaptive", "eps": 0.2})  # ADAPTIVE(eps)


def test_multi_code_tree_refuses_a_word_without_a_leaf():
    with pytest.raises(UserError, match="word 2 has no leaf; every word needs at least one code"):
        Tree([(1, -3), (-1, -2)], 3, leaf_words=[0, 1, 0])


def test_learned_tree_needs_vectors_of_the_right_shape():
    ctx = make_ctx(two_languages(), 13)
    with pytest.raises(UserError, match=r"tree=learned needs word vectors from a first training phase"):
        learned(ctx)
    ctx.embeddings = torch.zeros(5, 8)
    with pytest.raises(UserError, match=r"shape \(5, 8\); it needs \[13, d\]"):
        learned(ctx)


def test_identical_vectors_fall_back_to_halves():
    tree = cluster_tree(np.ones((37, 3)))
    assert tree.stats()["max_depth"] == math.ceil(math.log2(37))


def test_a_cached_trees_key_holds_the_builders_format(tmp_path, monkeypatch):
    """A corrected builder raises TREE_CACHE_FORMAT, and no cache serves the trees of the old one."""
    from types import SimpleNamespace

    from nplm.training import tree_phase

    dm = SimpleNamespace(id_cache=SimpleNamespace(cache_dir=tmp_path))
    now = tree_phase._tree_cache({"name": "huffman"}, dm, seed=1)
    assert now.parent == tmp_path / "trees" and now.name.startswith("huffman-")
    assert tree_phase._tree_cache({"name": "huffman"}, dm, seed=1) == now
    monkeypatch.setattr(tree_phase, "TREE_CACHE_FORMAT", tree_phase.TREE_CACHE_FORMAT + 1)
    assert tree_phase._tree_cache({"name": "huffman"}, dm, seed=1) != now


def test_what_the_training_code_asks_of_a_tree_is_asked_of_its_registration(tmp_path, monkeypatch):
    """Whether a tree is cached, and whether it is learned from a first model (a phase before the run, a head
    that makes predicted representations), are the traits its registration gives; no code names the tree."""
    from types import SimpleNamespace

    from nplm.config.registry import Option
    from nplm.config.schema import _learned_tree_needs_predicted_representations as refusal
    from nplm.trees import CACHED, FROM_FIRST_MODEL, TREES
    from nplm.trees.learned import predicted_word_vectors
    from nplm.training import tree_phase

    assert [n for n in TREES.names() if TREES.trait(n, CACHED)] == ["balanced", "brown", "huffman", "random"]
    assert [n for n in TREES.names() if TREES.trait(n, FROM_FIRST_MODEL)] == ["learned"]
    options = TREES.load()._options
    monkeypatch.setitem(options, "kept", Option("kept", lambda ctx: None, {}, traits={CACHED: True}))
    monkeypatch.setitem(options, "grown", Option("grown", lambda ctx: None, {},
                                                 traits={FROM_FIRST_MODEL: predicted_word_vectors}))
    dm = SimpleNamespace(id_cache=SimpleNamespace(cache_dir=tmp_path))
    assert tree_phase._tree_cache({"name": "kept"}, dm, seed=1).name.startswith("kept-")
    assert tree_phase._tree_cache({"name": "grown"}, dm, seed=1) is None
    cfg = {"tree": {"name": "grown"}, "head": {"name": "class_based", "classes": "tree"}}
    assert refusal(cfg).startswith("tree=grown: head=class_based makes no predicted word representations")
    assert refusal({**cfg, "tree": {"name": "kept"}}) is None
    assert refusal({**cfg, "head": {"name": "hierarchical"}}) is None
