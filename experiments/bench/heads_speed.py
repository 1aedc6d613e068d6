"""Speed of the output layers ("heads") at the Brown vocabulary, measured side by side in one run.

For each head in HEADS, on MLP1-sized features (F = 60 * 4 + 50 = 290: the direct connections' x plus
tanh(d + Hx)), V = 17,905, batch B = 256:

- training examples/s: forward + backward of `head.loss` (down to the features, as in training) and
  an Adam step on the head's parameters; also without the Adam step (the head's own cost);
- the time of `head.log_probs` for the full [B, V] distribution (evaluation mode, no gradient, fastest call);

each also as a ratio to the softmax head's. Targets are drawn from synthetic Zipfian counts
(count(r) ~ 1/r, about 1M tokens, word ids shuffled so they are not in frequency order).

    OMP_NUM_THREADS=1 python experiments/bench/heads_speed.py [--steps 10] [--threads N] [--out experiments/bench/results]

Writes results/<machine>/heads_speed.json (harness.write_result).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from nplm.heads import Head, build_head
from nplm.fast.malloc import keep_freed_memory
from nplm.trees.tree import Tree, balanced_nested

V, F, B = 17_905, 290, 256
BALANCED = Tree.from_nested(balanced_nested(list(range(V))), V)


def zipf_counts(vocab_size: int, tokens: float = 1e6, seed: int = 0) -> list[int]:
    """Counts ~ tokens / (H_V r) for rank r, assigned to shuffled word ids; every count >= 1."""
    harmonic = sum(1 / r for r in range(1, vocab_size + 1))
    by_rank = [max(1, round(tokens / (harmonic * r))) for r in range(1, vocab_size + 1)]
    perm = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed)).tolist()
    return [by_rank[perm[i]] for i in range(vocab_size)]


def head_constructors(counts: list[int]) -> dict[str, Callable[[], Head]]:
    """One line per head; each builds it from its config defaults."""
    return {
        "softmax": lambda: build_head({"name": "softmax"}, F, V, counts),
        "class_based": lambda: build_head({"name": "class_based"}, F, V, counts),
        "adaptive": lambda: build_head({"name": "adaptive"}, F, V, counts),
        "importance_sampling": lambda: build_head({"name": "importance_sampling"}, F, V, counts),
        "hierarchical (morin_bengio, balanced)": lambda: build_head({"name": "hierarchical"}, F, V, counts, BALANCED),
        "hierarchical (logistic, balanced)": lambda: build_head({"name": "hierarchical", "node_form": "logistic"},
                                                                F, V, counts, BALANCED),
    }


def training_rate(head: Head, targets: torch.Tensor, steps: int, warmup: int, adam: bool) -> float:
    """Examples/s of `loss` forward + backward (+ an Adam step), over `steps` timed steps."""
    head.train()
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-3, fused=True)  # as nplm trains
    features = torch.randn(B, F, requires_grad=True)  # [B, F] a leaf: the gradient reaches the features
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        features.grad = None
        head.loss(features, targets[i % len(targets)]).mean().backward()
        if adam:
            optimizer.step()
    return B * steps / (time.perf_counter() - start)


def log_probs_seconds(head: Head, repeats: int) -> float:
    """Fastest of `repeats` `log_probs` calls on a [B, F] batch, in seconds."""
    head.eval()
    features = torch.randn(B, F)
    times = []
    with torch.no_grad():
        head.log_probs(features)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            head.log_probs(features)
            times.append(time.perf_counter() - start)
    return min(times)


def describe(name: str, head: Head) -> str:
    if name == "class_based":
        return f"K={head.num_classes}"
    if name == "adaptive":
        return f"cutoffs={head.adaptive.cutoffs[:-1]}, div={head.adaptive.div_value:g}"
    if name == "importance_sampling":
        return f"k={head.num_samples}"
    if name.startswith("hierarchical"):
        return f"depth {BALANCED.stats()['mean_depth']:.1f}, node dim/hidden {getattr(head, 'N', torch.empty(0, 0)).shape[-1]}"
    return ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per measurement (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every measurement, the best kept (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as nplm-train with malloc_keep_freed=true (nplm.fast.malloc)

    torch.manual_seed(0)
    counts = zipf_counts(V)
    unigram = torch.tensor(counts, dtype=torch.float)
    targets = torch.multinomial(unigram, B * (args.warmup + args.steps), replacement=True).view(-1, B)  # [steps, B]
    heads = {}
    for name, make in head_constructors(counts).items():
        torch.manual_seed(0)
        heads[name] = make()
    best = {name: [0.0, 0.0, float("inf")] for name in heads}  # train ex/s, fwd+bwd ex/s, log_probs s
    for _ in range(args.rounds):  # interleaved rounds, best of each: robust to other load on the machine
        for name, head in heads.items():
            b = best[name]
            b[0] = max(b[0], training_rate(head, targets, args.steps, args.warmup, adam=True))
            b[1] = max(b[1], training_rate(head, targets, args.steps, args.warmup, adam=False))
            b[2] = min(b[2], log_probs_seconds(head, repeats=5))
    rows = {name: (describe(name, head), sum(p.numel() for p in head.parameters()), *best[name])
            for name, head in heads.items()}

    _, _, train0, fb0, lp0 = rows["softmax"]
    table = [f"V={V:,}, F={F}, B={B}, Zipfian targets; {args.steps} timed steps after {args.warmup} warm-up, "
             f"best of {args.rounds} interleaved rounds (log_probs: fastest of 5 calls per round)", "",
             "| head | options | parameters | train ex/s (loss fwd+bwd + Adam) | vs softmax "
             "| loss fwd+bwd ex/s | vs softmax | log_probs [B, V] ms | vs softmax |", "|---|---|---|---|---|---|---|---|---|"]
    for name, (options, params, train, fwd_bwd, lp) in rows.items():
        table.append(f"| {name} | {options} | {params:,} | {train:,.0f} | {train / train0:.2f}x | {fwd_bwd:,.0f} | "
                     f"{fwd_bwd / fb0:.2f}x | {lp * 1e3:.1f} | {lp / lp0:.2f}x |")
    data = {name: {"train_examples_per_s": r[2], "loss_examples_per_s": r[3], "log_probs_s": r[4]}
            for name, r in rows.items()}
    harness.write_result("heads_speed", table, data, args.out)


if __name__ == "__main__":
    main()
