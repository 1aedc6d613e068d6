"""Whether the WikiText-103 recipe's widths cost the GPU its fast matmuls: bf16 matmuls of one training
step's shapes (20 x 512 = 10,240 rows) at the recipe's widths (d 410, hidden 2,100, first block 8,200 ->
1,500) and the same widths rounded up to a multiple of 8 or 64, forward and the two backward products
(x W^T, g W, g^T x), best of 20 on one CUDA device.

    python3 experiments/bench/gpu_alignment.py
"""

from __future__ import annotations

import torch

ROWS = 10_240  # tokens of one step: 20 blocks of 512
LAYERS = {"block in (410 -> 2,100)": (410, 2100), "block out (2,100 -> 410)": (2100, 410),
          "first block in (8,200 -> 1,500)": (8200, 1500), "first block out (1,500 -> 410)": (1500, 410),
          "shortlist (410 -> 20,003)": (410, 20003)}


def up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def step_seconds(k: int, n: int, repeats: int = 20) -> float:
    """The best time of forward y = x W^T and backward (g W, g^T x) for x [ROWS, k], W [n, k]."""
    x = torch.randn(ROWS, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(ROWS, n, device="cuda", dtype=torch.bfloat16)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x @ w.t()
        g @ w
        g.t() @ x
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def main() -> None:
    print(f"bf16 matmuls of {ROWS:,} rows, forward + backward, best of 20, on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    print("ms of the three products; TFLOP/s of the recipe's own widths' work in that time")
    print("| layer | widths | ms | TFLOP/s | rounded to 8 | ms | TFLOP/s | to 64 | ms | TFLOP/s |")
    print("|---|---|---:|---:|---|---:|---:|---|---:|---:|")
    for name, (k, n) in LAYERS.items():
        cells = []
        for multiple in (1, 8, 64):
            kk, nn = up(k, multiple), up(n, multiple)
            seconds = step_seconds(kk, nn)
            cells += [f"{kk:,} x {nn:,}", f"{seconds * 1e3:.3f}", f"{3 * 2 * ROWS * k * n / seconds / 1e12:.0f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
