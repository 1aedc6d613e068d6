"""GPU speed table: matmul peak, MLP1 with each output layer, and the hierarchical speed-up up to 1M words.

Run on a CUDA machine; writes `gpu.md` (and `gpu_hsm_scaling.png`) into `--out`:

    python experiments/bench/gpu.py --out experiments/bench [--commit <git sha>]

(1) the GPU's measured matmul peak: fp32 with TF32 allowed and bf16, an 8192^3 product;
(2) MLP1 (n=5, m=60, h=50, direct; F = 290 features) at the Brown vocabulary (|V| = 17,907, the
    bengio2003 experiments') with the softmax, adaptive and hierarchical heads (both node forms), batch
    256 to 8192, one full training step each (forward, backward, fused Adam over every parameter, as
    `nplm-train` takes it): examples/s, matmul FLOP/s as a fraction of the peak of the step's precision
    (FLOPs counted by `torch.utils.flop_counter` on the real step), and seconds per 800,000-word epoch;
(3) hierarchical vs softmax training speed-up from 1k to 1M words, batch `--scaling-batch`, with the
    embedding table C updated lazily (`model.sparse_embeddings=true`) as large vocabularies need.

Inputs are synthetic (Zipfian targets, uniform contexts) and live on the GPU, so the table measures
the model, heads and optimizer, not data loading. Every contender is timed in the same process,
interleaved over `--rounds` rounds, best round kept.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nplm.heads import build_head
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import build_optimizer
from nplm.trees.tree import Tree, balanced_nested

MLP1 = NPLMConfig(context_size=4, embed_dim=60, hidden_dim=50, direct=True)
BROWN_V = 17_907
EPOCH_WORDS = 800_000
HEADS = {
    "softmax": {"name": "softmax"},
    "adaptive": {"name": "adaptive"},
    "hierarchical (logistic nodes)": {"name": "hierarchical", "node_form": "logistic"},
    "hierarchical (Morin-Bengio nodes)": {"name": "hierarchical"},
}


def matmul_peak(dtype: torch.dtype, n: int = 8192, repeats: int = 10) -> float:
    """Best FLOP/s of an n^3 product on the GPU (fp32 runs on TF32 tensor cores when allowed)."""
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


class Step:
    """One NPLM + head + fused Adam training step on synthetic batches resident on the GPU."""

    def __init__(self, V: int, head_cfg: dict, batch: int, sparse: bool = False, bf16: bool = False, n_batches: int = 8,
                 tree: Tree | None = None):
        torch.manual_seed(0)
        self.model = NPLM(V, replace(MLP1, sparse_embeddings=sparse)).cuda()
        if head_cfg["name"] != "hierarchical":
            tree = None
        elif tree is None:
            tree = balanced_tree(V)
        self.head = build_head(head_cfg, self.model.feature_dim, V, [V - i for i in range(V)], tree).cuda()
        self.optimizer = build_optimizer(nn.ModuleList([self.model, self.head]), {"name": "adam", "lr": 1e-3})
        ranks = torch.arange(1, V + 1, dtype=torch.float, device="cuda")
        self.targets = torch.multinomial(1 / ranks, batch * n_batches, replacement=True).view(n_batches, batch)  # Zipf
        self.contexts = torch.randint(0, V, (n_batches, batch, MLP1.context_size), device="cuda")
        self.batch, self.bf16, self.i = batch, bf16, 0

    def __call__(self) -> None:
        i = self.i % len(self.targets)
        self.i += 1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.head.loss(self.model(self.contexts[i]), self.targets[i]).float().mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def flops(self) -> int:
        """Matmul FLOPs of one step's forward and backward (what FlopCounterMode counts)."""
        with FlopCounterMode(display=False) as counter:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.bf16):
                loss = self.head.loss(self.model(self.contexts[0]), self.targets[0]).float().mean()
            loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        return counter.get_total_flops()

    def rate(self, steps: int, warmup: int = 3) -> float:
        """Training examples per second over `steps` steps after `warmup`."""
        for _ in range(warmup):
            self()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            self()
        torch.cuda.synchronize()
        return self.batch * steps / (time.perf_counter() - start)


def balanced_tree(V: int) -> Tree:
    return Tree.from_nested(balanced_nested(list(range(V))), V)


def steps_for(batch: int) -> int:
    return max(10, min(200, 400_000 // batch))


def heads_table(batches: list[int], rounds: int, peaks: dict[str, float]) -> list[str]:
    rows = []
    tree = balanced_tree(BROWN_V)
    for name, cfg in HEADS.items():
        for bf16 in ((False, True) if name == "softmax" else (False,)):
            for batch in batches:
                step = Step(BROWN_V, cfg, batch, bf16=bf16, tree=tree)
                flops = step.flops() / batch
                rate = max(step.rate(steps_for(batch)) for _ in range(rounds))
                precision = "bf16" if bf16 else "tf32"
                fraction = rate * flops / peaks[precision]
                rows.append(f"| {name} | {precision} | {batch:,} | {rate:,.0f} | {flops / 1e6:.1f} | "
                            f"{rate * flops / 1e12:.1f} | {fraction * 100:.1f}% | {EPOCH_WORDS / rate:.2f} |")
                print(rows[-1], flush=True)
                del step
                torch.cuda.empty_cache()
    return ["| head | precision | batch | examples/s | MFLOP/example | TFLOP/s | of peak | s per 800k-word epoch |",
            "|---|---|---:|---:|---:|---:|---:|---:|", *rows]


def scaling(sizes: list[int], batch: int, rounds: int) -> tuple[list[str], list[tuple[int, float, float]]]:
    cfgs = {"softmax": {"name": "softmax"}, "hierarchical": {"name": "hierarchical"},
            "hierarchical_logistic": {"name": "hierarchical", "node_form": "logistic"}}
    lines = ["| words | softmax ex/s | hierarchical (Morin-Bengio) ex/s | speed-up | hierarchical (logistic) ex/s | speed-up |",
             "|---:|---:|---:|---:|---:|---:|"]
    points = []
    for V in sizes:
        rates = {}
        tree = balanced_tree(V)
        steps = {name: Step(V, cfg, batch, sparse=True, tree=tree) for name, cfg in cfgs.items()}
        for _ in range(rounds):  # interleaved, best of each
            for name, step in steps.items():
                rates[name] = max(rates.get(name, 0.0), step.rate(30))
        del steps
        torch.cuda.empty_cache()
        soft, mb, lg = rates["softmax"], rates["hierarchical"], rates["hierarchical_logistic"]
        lines.append(f"| {V:,} | {soft:,.0f} | {mb:,.0f} | {mb / soft:.1f}x | {lg:,.0f} | {lg / soft:.1f}x |")
        points.append((V, mb / soft, lg / soft))
        print(lines[-1], flush=True)
    return lines, points


def plot(points: list[tuple[int, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label="Morin-Bengio nodes")
    ax.plot([p[0] for p in points], [p[2] for p in points], "s--", label="logistic nodes")
    ax.set_xscale("log")
    ax.set_xlabel("vocabulary size |V|")
    ax.set_ylabel("training speed-up over the full softmax")
    ax.set_title(f"Hierarchical softmax on {torch.cuda.get_device_name()}")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def driver_version() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="folder for gpu.md")
    parser.add_argument("--commit", default="unknown", help="the git commit measured (the GPU copy has no .git)")
    parser.add_argument("--batches", default="256,512,1024,2048,4096,8192")
    parser.add_argument("--sizes", default="1000,4000,16000,64000,256000,1000000")
    parser.add_argument("--scaling-batch", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: this benchmark runs on a GPU (see experiments/bench/README.md)")
    torch.backends.cuda.matmul.allow_tf32 = True  # what tf32=true (nplm's default) sets on a GPU
    torch.backends.cudnn.allow_tf32 = True
    started = time.perf_counter()
    peaks = {"tf32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"peak: tf32 {peaks['tf32'] / 1e12:.0f} TFLOP/s, bf16 {peaks['bf16'] / 1e12:.0f} TFLOP/s", flush=True)
    heads = heads_table([int(b) for b in args.batches.split(",")], args.rounds, peaks)
    scale, points = scaling([int(s) for s in args.sizes.split(",")], args.scaling_batch, args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(points, args.out / "gpu_hsm_scaling.png")
    props = torch.cuda.get_device_properties(0)
    lines = [
        "# GPU speed", "",
        f"Written by `python experiments/bench/gpu.py {' '.join(sys.argv[1:])}` on "
        f"{datetime.date.today().isoformat()}, commit {args.commit}, in {time.perf_counter() - started:.0f} s.",
        f"Machine: {props.name} ({props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs), "
        f"driver {driver_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), {platform.platform()}.", "",
        "## Measured matmul peak (8192^3, best of 10)", "",
        "| precision | TFLOP/s |", "|---|---:|",
        f"| fp32 with TF32 tensor cores | {peaks['tf32'] / 1e12:.1f} |",
        f"| bf16 | {peaks['bf16'] / 1e12:.1f} |", "",
        f"## MLP1 at |V| = {BROWN_V:,}: one training step (forward, backward, fused Adam)", "",
        "Fraction of the peak of the step's own precision; `bf16` is `trainer.precision=bf16-mixed`'s autocast. "
        f"Best of {args.rounds} rounds.", "", *heads, "",
        f"## Hierarchical vs softmax training speed-up (batch {args.scaling_batch}, lazy updates of C)", "",
        "![speed-up](gpu_hsm_scaling.png)", "", *scale, "",
    ]
    (args.out / "gpu.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
