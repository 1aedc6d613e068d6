"""Training speed-up of the hierarchical softmax over the full softmax as the vocabulary grows.

For |V| from 1k to 256k words (synthetic Zipfian targets), one full training step of the NPLM with
MLP1's shape (n=5, m=60, h=50, direct; F = 290 features) and either head: forward, backward and a
fused Adam step over all parameters, batch 256, both measured side by side in one run. Writes
results/<machine>/hsm_scaling.json (harness.write_result) and a PNG plot beside it.

    python experiments/bench/hsm_scaling.py [--sizes 1000,4000,16000,64000,256000] [--threads 2] [--rounds 3]
                                            [--out experiments/bench/results]

Morin & Bengio (2005) expect the speed-up to grow like |V| / log2 |V| in the output layer; the
embedding table C and its optimizer update (O(|V| m) per step with dense Adam) and the hidden layer
are the same for both heads, so the whole step's speed-up grows more slowly.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from nplm.fast import backprop
from nplm.heads import build_head
from nplm.fast.malloc import keep_freed_memory
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import build_optimizer
from nplm.optimizers.lazy import step_without_profiler
from nplm.trees.tree import Tree, balanced_nested

MLP1 = NPLMConfig(context_size=4, embed_dim=60, hidden_dim=50, direct=True)
B = 256


def step_rate(V: int, head_cfg: dict, steps: int, warmup: int, sparse: bool) -> float:
    """Training examples/s of NPLM + head at vocabulary size V; `sparse`: lazy updates of C."""
    torch.manual_seed(0)
    model = NPLM(V, replace(MLP1, sparse_embeddings=sparse))
    tree = Tree.from_nested(balanced_nested(list(range(V))), V) if head_cfg["name"] == "hierarchical" else None
    head = build_head(head_cfg, model.feature_dim, V, [1] * V, tree)
    optimizer = build_optimizer(nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-3})  # as nplm trains
    ranks = torch.arange(1, V + 1, dtype=torch.float)
    targets = torch.multinomial(1 / ranks, B * (steps + warmup), replacement=True).view(-1, B)  # Zipf
    contexts = torch.randint(0, V, (steps + warmup, B, MLP1.context_size))
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        backprop.mean_loss_backward(model, head, contexts[i], targets[i])  # as nplm-train: softmax by hand
        step_without_profiler(optimizer)
    return B * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,4000,16000,17905,64000,256000", help="vocabulary sizes")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per measurement (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions, best kept (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as nplm-train with malloc_keep_freed=true (nplm.fast.malloc)
    sizes = [int(s) for s in args.sizes.split(",")]
    heads = {"softmax": {"name": "softmax"},
             "hierarchical": {"name": "hierarchical"},  # morin_bengio nodes, balanced tree
             "hierarchical_logistic": {"name": "hierarchical", "node_form": "logistic"}}
    rows = []
    for V in sizes:
        rates = {}
        for _ in range(args.rounds):  # interleaved rounds, best of each: robust to other load on the machine
            for sparse in (False, True):
                for name, cfg in heads.items():
                    rate = step_rate(V, cfg, args.steps, args.warmup, sparse)
                    rates[name, sparse] = max(rate, rates.get((name, sparse), 0.0))
        rows.append((V, rates))
        print(V, {f"{k[0]}{' sparse C' if k[1] else ''}": round(v) for k, v in rates.items()}, flush=True)

    lines = [f"Batch {B}, MLP1 shape, fused Adam, {args.steps} timed steps after {args.warmup}, best of {args.rounds} interleaved rounds.",
             "Dense C: Adam updates the whole embedding table every step (`model.sparse_embeddings=false`, the "
             "default); sparse C: only the batch's rows (`model.sparse_embeddings=true`, lazy Adam).", "",
             "| words | C | softmax ex/s | hierarchical (Morin-Bengio nodes) ex/s | speed-up | "
             "hierarchical (logistic nodes) ex/s | speed-up |", "|---:|---|---:|---:|---:|---:|---:|"]
    for V, r in rows:
        for sparse in (False, True):
            soft, mb, lg = (r[name, sparse] for name in heads)
            lines.append(f"| {V:,} | {'sparse' if sparse else 'dense'} | {soft:,.0f} | {mb:,.0f} | {mb / soft:.1f}x | "
                         f"{lg:,.0f} | {lg / soft:.1f}x |")
    lines += ["", f"![speed-up](results/{harness.machine_name()}/hsm_scaling.png)"]  # (from the README)
    data = [{"words": V, **{f"{name}{', sparse C' if sparse else ''}": rate for (name, sparse), rate in r.items()}}
            for V, r in rows]
    path = harness.write_result("hsm_scaling", lines, data, args.out)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, label in (("hierarchical", "Morin-Bengio nodes"), ("hierarchical_logistic", "logistic nodes")):
        for sparse, style in ((True, "o-"), (False, "o--")):
            ax.plot([V for V, _ in rows], [r[name, sparse] / r["softmax", sparse] for _, r in rows], style,
                    label=f"{label}, {'sparse' if sparse else 'dense'} C")
    ax.set_xscale("log")
    ax.set_xlabel("vocabulary size |V|")
    ax.set_ylabel("training speed-up over full softmax")
    ax.set_title("Hierarchical softmax, NPLM training step (batch 256)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
    main()
