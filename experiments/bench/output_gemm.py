"""The full softmax's two large CPU matmuls, torch's default (MKL) against `nplm.fast.cpu_gemm`.

For each shape (batch B, features F, vocabulary V): the forward y = f W^T + b as `torch.addmm` and as
oneDNN's linear, and the weight gradient g^T f as one `torch.mm` and as `cpu_gemm.weight_grad` (in
blocks of 1,024 rows of W above 1,024 words);
median milliseconds of interleaved repetitions, and the ratio. The shapes are MLP1's (F = 290) at the
Brown (17,905) and Morin & Bengio (10,000) vocabularies, and the character model's output layer
(V = 65), which is why oneDNN's forward is used only from `ONEDNN_MIN_OUTPUTS` words.

    python experiments/bench/output_gemm.py [--threads 2] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from provenance import stamp

from nplm.fast.cpu_gemm import weight_grad

SHAPES = [(1024, 290, 17905), (512, 290, 17905), (256, 290, 17905), (256, 290, 10000), (64, 290, 10000),
          (1024, 290, 4000), (128, 448, 65)]


def call_ms(fn) -> float:
    """Milliseconds of one call of `fn`, after an untimed one."""
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls of each, interleaved (default 9)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(stamp())
    print()
    print("| B | F | V | forward: addmm ms | oneDNN ms | ratio | weight gradient: one mm ms | blocks ms | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    onednn = torch.ops.mkldnn._linear_pointwise
    for batch, features, vocab in SHAPES:
        torch.manual_seed(0)
        f, w, b, g = torch.randn(batch, features), torch.randn(vocab, features), torch.randn(vocab), torch.randn(batch, vocab)
        timed = {"addmm": [], "onednn": [], "mm": [], "blocks": []}
        calls = {"addmm": lambda: torch.addmm(b, f, w.t()), "onednn": lambda: onednn(f, w, b, "none", [None], ""),
                 "mm": lambda: g.t() @ f, "blocks": lambda: weight_grad(g, f)}
        for _ in range(args.repeats):
            for name, call in calls.items():
                timed[name].append(call_ms(call))
        ms = {name: statistics.median(v) for name, v in timed.items()}
        print(f"| {batch} | {features} | {vocab:,} | {ms['addmm']:.2f} | {ms['onednn']:.2f} | "
              f"{ms['addmm'] / ms['onednn']:.2f}x | {ms['mm']:.2f} | {ms['blocks']:.2f} | {ms['mm'] / ms['blocks']:.2f}x |")


if __name__ == "__main__":
    main()
