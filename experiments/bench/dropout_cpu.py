"""What `nplm.fast.dropout`'s CPU mask (16 random bits an element, four elements per 64-bit draw) is worth
against torch's dropout (one `bernoulli_` draw an element), in the modern NPLM's training step at Tiny
Shakespeare's shape in window mode: width 256, a window of 4 and 12 averages of the 60 characters before
it, hidden 512, 4 blocks, dropout 0.2, 65 symbols, the tied softmax, AdamW, batch 256 (the rows of
experiments/tinyshakespeare_char), on the same random batches.

The two steps take turns chunk by chunk (`--chunks` a round, the order swapped every chunk: a burst of
load hits both), `--rounds` rounds; per round the shipped step's time over torch's dropout's, in wall
clock and in the process's CPU time. Also the input dropout alone ([256, 64, 256], forward and
backward) each way, and the share of torch's `bernoulli_` in the step (torch.profiler).

    python experiments/bench/dropout_cpu.py [--rounds 5] [--steps 60] [--chunks 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from provenance import stamp
from torch.nn import functional as F
from torch.profiler import profile

from nplm.fast import dropout as fast
from nplm.fast.malloc import keep_freed_memory
from nplm.models.modern import ModernConfig, ModernNPLM

CONFIG = dict(context_size=64, window=4, summaries=12, embed_dim=256, hidden_dim=512, num_layers=4, dropout=0.2)
V, B = 65, 256


def training_step(batches: list, own_mask: bool):
    """A closure timing the modern NPLM's training steps over `batches` with nplm's CPU mask or torch's."""
    torch.manual_seed(0)
    model = ModernNPLM(V, ModernConfig(**CONFIG)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.3, fused=True)
    applies = fast.applies if own_mask else (lambda *_: False)

    def step(context: torch.Tensor, target: torch.Tensor) -> None:
        saved, fast.applies = fast.applies, applies
        try:
            h = model.features_from_embeddings(model.embed(context))  # [B, d]
            loss = F.cross_entropy(h @ model.E.weight.t(), target)  # the tied softmax, [B, V] logits
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        finally:
            fast.applies = saved

    def run(part: list) -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        for context, target in part:
            step(context, target)
        return time.perf_counter() - start, time.process_time() - cpu

    return run, step


def op_ms(own_mask: bool, repeats: int = 20) -> float:
    """Milliseconds for the input dropout of one batch, forward and backward."""
    x = torch.randn(B, CONFIG["context_size"], CONFIG["embed_dim"], requires_grad=True)  # [B, k, d]
    drop = (lambda t: fast.dropout(t, 0.2, True)) if own_mask else (lambda t: F.dropout(t, 0.2, True))
    drop(x).sum().backward()
    start = time.perf_counter()
    for _ in range(repeats):
        drop(x).backward(torch.ones_like(x))
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds (default 5)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per variant and round (default 60)")
    parser.add_argument("--chunks", type=int, default=6, help="the two take turns this many times a round (default 6)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the Tiny Shakespeare rows run (malloc_keep_freed=true): no page faults in either
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, V, (B, CONFIG["context_size"]), generator=gen),
                torch.randint(0, V, (B,), generator=gen)) for _ in range(args.steps)]
    loops = {"nplm's CPU mask (shipped)": training_step(batches, True),
             "torch's dropout": training_step(batches, False)}
    for run, _ in loops.values():
        run(batches[:5])  # warm-up: the optimizer state, the allocator
    print(stamp(), flush=True)
    size = -(-len(batches) // args.chunks)
    parts = [batches[i:i + size] for i in range(0, len(batches), size)]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
    for r in range(args.rounds):
        spent = {name: [0.0, 0.0] for name in loops}
        for c, part in enumerate(parts):
            names = list(loops) if (r * len(parts) + c) % 2 == 0 else list(loops)[::-1]
            for name in names:
                wall, cpu = loops[name][0](part)
                spent[name][0] += wall
                spent[name][1] += cpu
        for name, (wall, cpu) in spent.items():
            times[name].append((wall / len(batches) * 1e3, cpu / len(batches) * 1e3))  # ms per step
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1][0]:.1f} ms ({v[-1][1]:.1f} CPU)" for n, v in times.items()),
              flush=True)
    with profile() as prof:
        for context, target in batches[:10]:
            loops["torch's dropout"][1](context, target)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    bernoulli = sum(e.self_cpu_time_total for e in events if e.key == "aten::bernoulli_")
    print()
    print(f"| modern NPLM step, Tiny Shakespeare shape, batch {B} ({args.steps} steps x {args.rounds} alternated "
          "rounds) | ms per step, median | torch's over nplm's, median (min-max per round) | CPU ms per step, median "
          "| torch's over nplm's, CPU time |")
    print("|---|---:|---:|---:|---:|")
    shipped = times["nplm's CPU mask (shipped)"]
    for name, t in times.items():
        cells = []
        for k in (0, 1):
            ratios = [a[k] / b[k] for a, b in zip(t, shipped)]
            cells += [f"{statistics.median(a[k] for a in t):.1f}",
                      f"{statistics.median(ratios):.3f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    own, torchs = op_ms(True), op_ms(False)
    print(f"The input dropout alone ([{B}, {CONFIG['context_size']}, {CONFIG['embed_dim']}], forward and backward): "
          f"nplm's {own:.1f} ms, torch's {torchs:.1f} ms ({torchs / own:.2f}x). torch's `bernoulli_` in its step: "
          f"{bernoulli / total:.0%} of the profiled CPU time.")


if __name__ == "__main__":
    main()
