"""Where a training step's GPU time goes: torch.profiler over eager steps of nplm's model and head at one of
gpu_step.py's shapes (bf16 autocast, fused AdamW), the top kernels by CUDA time and the number of kernels
a step launches. `--compile`: the loss through torch.compile (inductor, fullgraph) first, as `compile=true`
compiles it, so the table shows the fused kernels a captured compiled step replays.

    python3 experiments/bench/gpu_profile.py [--shape wikitext103] [--batch 20] [--steps 5] [--rows 30] [--compile]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import gpu_step  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="wikitext103", choices=sorted(gpu_step.SHAPES))
    parser.add_argument("--batch", type=int, default=None, help="default: the shape's first batch size")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--device", default="cuda", help="cpu: a check of the script (bf16 autocast on the CPU)")
    parser.add_argument("--compile", action="store_true", help="the loss compiled by inductor before the warm-up")
    args = parser.parse_args()
    spec = gpu_step.SHAPES[args.shape]
    batch = args.batch or spec["batches"][0]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = gpu_step.compose(args.shape, batch, False, False, {"train": "x", "valid": "y"}, tmp, args.steps)
    vocab = spec["vocab"]
    dev = args.device
    lm = gpu_step.reference_model(cfg, vocab, dev)
    k, block = cfg.model.context_size, cfg.data.get("block_size")
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-4, fused=dev == "cuda")
    p = 1.0 / torch.arange(1, vocab + 1, device=dev, dtype=torch.float32)
    shape = (batch, block + k) if block else (batch, k)
    ids = torch.multinomial(p, shape[0] * shape[1], replacement=True).view(shape)
    target = (ids[:, k:] if block else torch.multinomial(p, batch, replacement=True)).contiguous()
    if block:  # the capacities a run calibrates on its blocks
        lm.head.calibrate(target)

    loss_of = torch.compile(lm._train_loss, fullgraph=True) if args.compile else lm._train_loss

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16, cache_enabled=False):
            loss = loss_of(ids, target).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])) as prof:
        for _ in range(args.steps):
            step()
        sync()
    sort = "self_cuda_time_total" if dev == "cuda" else "self_cpu_time_total"  # the kernels themselves
    averages = prof.key_averages()
    table = averages.table(sort_by=sort, row_limit=args.rows, max_name_column_width=60)
    what = "steps with the loss compiled by inductor" if args.compile else "eager steps"
    print(f"{args.shape} batch {batch}, {args.steps} {what} on {torch.cuda.get_device_name() if dev == 'cuda' else 'the CPU'}")
    kernels = sum(e.count for e in averages if e.device_type == DeviceType.CUDA)
    print(f"{kernels / args.steps:.0f} CUDA kernels a step")
    print(table)
    modules = prof.key_averages(group_by_input_shape=True).table(sort_by=sort, row_limit=12,
                                                                 max_name_column_width=40)
    print(modules)


if __name__ == "__main__":
    main()
