"""`tree=wordnet`: the WordNet IS-A hierarchy, binarised by 2-means (Morin & Bengio 2005, section 4).

Morin & Bengio, "Hierarchical Probabilistic Neural Network Language Model" (AISTATS 2005), build
their tree from prior knowledge: each word takes one sense (here WordNet's first synset, its most
frequent sense) and hangs under that synset's hypernym path from the root of the IS-A taxonomy;
a node with more than two children is made binary by recursive 2-means on word vectors, a synset
with one child is skipped. Specifics of this implementation:

- A synset with several hypernyms uses the first (NLTK's order), so every synset has one path;
  instance hypernyms count (proper nouns); the noun, verb, adjective and adverb roots meet under
  one virtual root.
- A child of a synset is represented by the mean vector of the words under it.
- `binarise=balanced` (default): each binary cut of a synset's children is along the 2-means
  direction but at the median of the *words* under them (children weighted by their word counts),
  and a child synset holding more than OPEN_SHARE of its parent's words is opened up in place (its
  children join its siblings), so no IS-A level costs a binary decision that barely splits the
  words; `binarise=kmeans`: plain 2-means cuts of the children, which split a few outlying children
  off at a time. On Morin & Bengio's Brown protocol (10,000 words; first-synset hypernym paths of
  mean length 6.3, max 18), experiments/morin2005/results/tree-shapes.json: kmeans mean depth 35.2
  (max 68), balanced 17.1 (max 26), against 13.4 (max 14) for the balanced tree of the sorted
  vocabulary. (Opening children above 1/2 instead of 1/4 gave 19.1, balanced cuts without opening
  22.1.) Unary chains (a synset with one child) add no node in either mode. The paper says it binarised the children by a
  data-driven clustering (K-means-like) without giving the resulting depth; the balanced cut is our
  choice, to keep paths short (each node on a path is one more binary decision to learn).
- Words without a synset (function words, punctuation, names WordNet lacks, `<unk>`) are placed by
  `unplaced=nearest`: next to the placed word with the most similar vector (cosine), i.e. as one
  more child of that word's synset; or `unplaced=subtree`: a 2-means subtree of their own, one
  child of the root.
- Word vectors: `ctx.embeddings` when given (a trained model's), else a truncated SVD of PPMI
  left/right co-occurrence counts of the training split (`cooccurrence.context_vectors`), so the
  tree needs no first training run.

`tree_from_hypernyms` is the whole construction given the paths; `hypernym_paths` is the NLTK lookup.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from nplm.errors import UserError
from nplm.trees.assemble import from_splits
from nplm.trees.clustering import TwoMeansSplit
from nplm.trees.cooccurrence import context_vectors
from nplm.config.rules import Bool, Choice, Int, SearchDir
from nplm.trees import register_tree
from nplm.trees.tree import Tree

UNPLACED = ("nearest", "subtree")
BINARISE = ("balanced", "kmeans")
OPEN_SHARE = 0.25  # binarise=balanced: a child synset with more than this share of its parent's words is opened up


def tree_from_hypernyms(paths: dict[int, Sequence[str]], vectors: np.ndarray, unplaced: str = "nearest",
                        seed: int = 0, iterations: int = 20, binarise: str = "balanced") -> Tree:
    """The tree over words 0..V-1 (V = len(vectors) [V, m]) where word w hangs under the synset path
    `paths[w]` (root first, its own synset last); words missing from `paths` are placed per `unplaced`."""
    if unplaced not in UNPLACED or binarise not in BINARISE:  # (nplm-train's values: checked by the schema)
        raise ValueError(f"unplaced={unplaced!r} must be one of {UNPLACED}, binarise={binarise!r} one of {BINARISE}")
    vectors = np.asarray(vectors, dtype=np.float64)
    V = len(vectors)
    # the IS-A trie: node 0 is the virtual root, every other node a synset
    parent, kids, words = [-1], [dict()], [[]]  # per node: parent, {synset: child node}, words here
    node_of = {}
    for w in sorted(paths):
        node = 0
        for synset in paths[w]:
            if synset not in kids[node]:
                kids[node][synset] = len(parent)
                parent.append(node)
                kids.append({})
                words.append([])
            node = kids[node][synset]
        words[node].append(w)
        node_of[w] = node
    missing = [w for w in range(V) if w not in node_of]
    top = 0
    if missing and not node_of:  # no word has a synset: plain 2-means
        words[0] = missing
    elif missing and unplaced == "subtree":
        group, top = len(parent), len(parent) + 1  # a new root over (WordNet trie, words without synset)
        parent += [top, -1]
        kids += [{}, {"<wordnet>": 0, "<unplaced>": group}]
        words += [missing, []]
        parent[0] = top
    elif missing:
        placed = np.array(sorted(node_of))
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)  # [V, m]
        for lo in range(0, len(missing), 1024):
            chunk = missing[lo: lo + 1024]
            nearest = placed[np.argmax(unit[chunk] @ unit[placed].T, axis=1)]  # [chunk] most similar placed
            for w, p in zip(chunk, nearest):
                words[node_of[int(p)]].append(w)
    # item codes: words 0..V-1, trie node g is V + g; a node's vector is the mean of its words'
    G = len(parent)
    sums, sizes = np.zeros((G, vectors.shape[1])), np.zeros(G)
    for g in range(G):
        sums[g] = vectors[words[g]].sum(0)
        sizes[g] = len(words[g])
    for g in sorted(range(G), key=lambda g: -_depth(parent, g)):  # children before their parents
        if parent[g] >= 0:
            sums[parent[g]] += sums[g]
            sizes[parent[g]] += sizes[g]
    items = np.concatenate([vectors, sums / np.maximum(sizes, 1)[:, None]])  # [V + G, m]

    def expand(item: int) -> list[int]:
        g = item - V
        members = [V + c for c in kids[g].values()] + words[g]
        if binarise == "balanced":  # a child synset holding most of the words is opened up in place
            total = sizes[g]
            while big := [i for i in members if i >= V and sizes[i - V] > total * OPEN_SHARE]:
                members.remove(big[0])
                members += [V + c for c in kids[big[0] - V].values()] + words[big[0] - V]
        return members

    weights = np.concatenate([np.ones(V), sizes])  # [V + G] words under each item
    split = TwoMeansSplit(items, seed, iterations, balanced=binarise == "balanced", weights=weights)
    return from_splits(expand(V + top), V, split, expand)


def _depth(parent: list[int], g: int) -> int:
    d = 0
    while parent[g] >= 0:
        g, d = parent[g], d + 1
    return d


def wordnet_installed() -> bool:
    """Whether NLTK finds corpora/wordnet.zip on its search path (the drivers skip tree=wordnet rows otherwise)."""
    import nltk

    try:
        nltk.data.find("corpora/wordnet.zip/wordnet/")
        return True
    except LookupError:
        return False


def open_wordnet(nltk_data: str | None, download_dir: str, download: bool):
    """NLTK's WordNet reader, or a one-line UserError saying how to install WordNet."""
    from nplm.data.sources import nltk_corpus_root

    try:
        pointer, _ = nltk_corpus_root("wordnet", nltk_data, download_dir, download)
    except UserError:
        raise UserError("tree=wordnet needs NLTK's WordNet, which is not installed: set NLTK_DATA=/dir/with/"
                        "corpora/wordnet.zip (or tree.nltk_data=...), run `python -m nltk.downloader wordnet`, "
                        "or set tree.download=true") from None
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": not needed
        return WordNetCorpusReader(pointer, None)


def hypernym_paths(tokens: Sequence[str], wn) -> dict[int, list[str]]:
    """{word id: synset names from the root to its first synset} for the tokens WordNet knows."""
    paths = {}
    for w, token in enumerate(tokens):
        try:
            synsets = wn.synsets(token)
        except Exception:  # odd tokens (e.g. bare punctuation) can trip NLTK's morphology
            synsets = []
        if not synsets:
            continue
        s, path = synsets[0], [synsets[0]]
        while True:
            up = s.hypernyms() + s.instance_hypernyms()
            if not up:
                break
            s = up[0]
            path.append(s)
        paths[w] = [x.name() for x in reversed(path)]
    return paths


@register_tree("wordnet", keys={
    "unplaced": Choice(options=UNPLACED, doc="where words without a synset go"),
    "nltk_data": SearchDir(nullable=True, doc="a folder holding corpora/wordnet.zip"),
    "download": Bool(doc="nltk.download WordNet when it is missing"),
    "dim": Int(1, doc="size of the co-occurrence vectors"), "contexts": Int(1, doc="context words counted"),
    "iterations": Int(1, doc="2-means iterations"), "seed": Int(0, 2**32 - 1, nullable=True, doc="the builder's seed (null: the run's seed)"),
    "binarise": Choice(options=BINARISE, default="balanced", doc="how a synset's children are paired")})
def build(ctx, unplaced: str = "nearest", nltk_data: str | None = None, download: bool = False,
          dim: int = 50, contexts: int = 2000, iterations: int = 20, seed: int | None = None,
          binarise: str = "balanced") -> Tree:
    """`unplaced`: nearest | subtree, where words without a synset go; `nltk_data`: a folder holding
    corpora/wordnet(.zip); `download`: fetch WordNet if missing; `dim`, `contexts`: the co-occurrence
    vectors' size and context words (unused with ctx.embeddings); `iterations`: Lloyd iterations per
    split; `seed`: the splits' seed (null: ctx.seed); `binarise`: balanced | kmeans (module docstring)."""
    seed = ctx.seed if seed is None else seed
    wn = open_wordnet(nltk_data, str(Path(ctx.data_dir) / "nltk_data"), download)
    paths = hypernym_paths(ctx.vocab.tokens, wn)
    V = len(ctx.vocab.tokens)
    if ctx.embeddings is not None:
        vectors = ctx.embeddings.detach().double().cpu().numpy()  # [V, m]
    else:
        vectors = context_vectors(ctx.train_ids, V, dim, contexts, seed)  # [V, dim]
    return tree_from_hypernyms(paths, vectors, unplaced, seed, iterations, binarise)
