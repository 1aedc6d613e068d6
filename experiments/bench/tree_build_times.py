"""Build time and shape of every tree builder on the real Brown corpus (the training split, 800k words).

    NLTK_DATA=/work/shared/data/nltk_data OMP_NUM_THREADS=1 python experiments/bench/tree_build_times.py

Each tree uses its config's defaults (conf/tree/<name>.yaml). `learned` needs a trained model's word
vectors; here it clusters the PPMI co-occurrence SVD vectors (m = 60) as a stand-in, built outside
the timed call. `wordnet` is skipped when NLTK's WordNet is not installed. Prints, per tree, the
build time and `Tree.stats(training counts)`: depth, expected code length vs. unigram entropy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.trees import TreeContext, build_tree
from nplm.trees.cooccurrence import context_vectors

CONF_TREE = Path(__file__).resolve().parents[2] / "src" / "nplm" / "conf" / "tree"
TREES = ["balanced", "random", "huffman", "brown", "wordnet", "learned"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nltk-data", default=os.environ.get("NLTK_DATA", "/work/shared/data/nltk_data"))
    parser.add_argument("--trees", nargs="+", default=TREES, choices=TREES)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    dm = LMDataModule({"name": "brown", "nltk_data": args.nltk_data, "download": False, "train_size": 800000,
                       "valid_size": 200000, "test_size": None, "vocab_from": "all", "min_count": 4}, 4, 8, 8)
    dm.setup()
    train = dm.ids["train"]  # [N]
    V = len(dm.vocab)
    counts = torch.bincount(train, minlength=V).tolist()  # [V] training-split counts
    print(f"Brown: |V| = {V}, {len(train)} training tokens, {sum(c == 0 for c in counts)} words unseen in training")
    ctx = TreeContext(dm.vocab, train, counts, seed=1234, data_dir="data_cache")

    for name in args.trees:
        cfg = OmegaConf.to_container(OmegaConf.load(CONF_TREE / f"{name}.yaml"))
        ctx.embeddings = None
        if name == "learned":
            ctx.embeddings = torch.from_numpy(context_vectors(train, V, dim=60, seed=1234))  # [V, 60] stand-in
        start = time.perf_counter()
        try:
            tree = build_tree(cfg, ctx)
        except UserError as err:
            print(f"{name:9s} skipped: {err}")
            continue
        seconds = time.perf_counter() - start
        stats = {k: round(v, 3) if isinstance(v, float) else v for k, v in tree.stats(counts).items()}
        print(f"{name:9s} {seconds:7.1f} s  {json.dumps(stats)}", flush=True)


if __name__ == "__main__":
    main()
