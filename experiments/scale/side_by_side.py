"""The full softmax and the hierarchical head at 267,735 words, timed side by side in one process.

    python side_by_side.py OUT.json CORPUS_DIR DATA_DIR [--rounds 3] [--batch 1024]

MLP1's shape (n=5, m=60, h=50, direct), sparse C, batch 1024, Adam (the lazy optimizer nplm-train
builds), one thread; the training step is nplm-train's own (`nplm.fast.backprop.mean_loss_backward`:
the softmax's gradients by hand, the hierarchical head's through autograd) followed by the optimizer
step. Batches are real windows of the WikiText-103-shaped corpus (its cached token ids). Rounds
alternate the heads: softmax (`--softmax-steps` timed steps after one untimed), then hierarchical
(Huffman tree, `head.sparse=true`; `--hsm-steps` after one untimed); the ratio of each round is taken
between adjacent measurements, and the best rate of each head over the rounds is reported too.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch
from torch import nn

from nplm.data.datamodule import LMDataModule
from nplm.fast import backprop
from nplm.heads import build_head
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import build_optimizer
from nplm.optimizers.lazy import step_without_profiler
from nplm.trees import TreeContext, build_tree

MLP1 = NPLMConfig(context_size=4, embed_dim=60, hidden_dim=50, direct=True, sparse_embeddings=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("corpus")
    parser.add_argument("data_dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--softmax-steps", type=int, default=3)
    parser.add_argument("--hsm-steps", type=int, default=60)
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="check the corpus against WikiText-103's published counts (default: yes)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = {"name": "wikitext103", "path": args.corpus, "download": False, "url": "-", "sha256": None,
           "verify": args.verify, "eos": True, "vocab_from": "train", "min_count": 1, "max_vocab": None,
           "unk": "<unk>", "order": "frequency"}
    dm = LMDataModule(cfg, MLP1.context_size, args.batch, args.batch, data_dir=args.data_dir)
    dm.setup()
    V = len(dm.vocab)
    start = time.perf_counter()
    tree = build_tree({"name": "huffman"}, TreeContext(dm.vocab, dm.ids["train"], dm.vocab.counts))
    tree_s = time.perf_counter() - start
    windows = dm.windows["train"]
    generator = torch.Generator().manual_seed(0)

    def batches(n: int):
        for _ in range(n):
            idx = torch.randint(0, len(windows), (args.batch,), generator=generator)
            yield windows[idx]

    heads = {"softmax": ({"name": "softmax"}, args.softmax_steps),
             "hierarchical": ({"name": "hierarchical", "sparse": True}, args.hsm_steps)}
    parts = {}
    for name, (head_cfg, _) in heads.items():
        torch.manual_seed(0)
        model = NPLM(V, replace(MLP1))
        head = build_head(head_cfg, model.feature_dim, V, dm.vocab.counts, tree)
        parts[name] = (model, head, build_optimizer(nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-3}))

    def rate(name: str, steps: int) -> float:
        model, head, optimizer = parts[name]
        data = list(batches(steps + 1))
        for i, (context, target) in enumerate(data):
            if i == 1:
                t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            backprop.mean_loss_backward(model, head, context, target)
            step_without_profiler(optimizer)
        return args.batch * steps / (time.perf_counter() - t0)

    rounds = []
    for r in range(args.rounds):
        row = {name: rate(name, steps) for name, (_, steps) in heads.items()}
        row["ratio"] = row["hierarchical"] / row["softmax"]
        rounds.append(row)
        print(f"round {r + 1}: softmax {row['softmax']:,.1f} ex/s, hierarchical {row['hierarchical']:,.0f} ex/s, "
              f"{row['ratio']:.1f}x", flush=True)
    best = {name: max(r[name] for r in rounds) for name in heads}
    result = {"vocab_size": V, "batch": args.batch, "threads": 1, "tree": tree.stats(dm.vocab.counts),
              "tree_build_s": tree_s, "steps": {n: s for n, (_, s) in heads.items()}, "rounds": rounds,
              "best": best, "ratio_of_best": best["hierarchical"] / best["softmax"],
              "ratio_per_round": sorted(r["ratio"] for r in rounds),
              "command": f"python experiments/scale/side_by_side.py OUT {args.corpus} {args.data_dir} "
                         f"--rounds {args.rounds} --batch {args.batch}"}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
