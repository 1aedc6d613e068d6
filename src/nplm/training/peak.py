"""A device's peak FLOP/s: what model FLOP utilisation (`nplm.training.flops`) divides by.

A CUDA GPU whose name is in `DEVICES` takes its vendor's dense (no sparsity) tensor-core figure for the
run's precision: bf16 or fp16 for `trainer.precision` bf16-* / 16-*, TF32 for float32 with `tf32=true`
(where the GPU has TF32; else float32), float32 otherwise. Any other device, the CPU included, is
measured once: the best rate of a square `torch.matmul` in the precision's dtype over a fraction of a
second, cached in `<paths.data_dir>/peak_flops.json` under the device's name, thread count and dtype,
so every later run on that machine reads the same number. A measurement taken while another job used
the CPU comes out low (a fraction of what the quiet machine gives): a run's MFU is then above 100%,
shown as it is with a warning (`nplm.training.throughput`); removing the entry from the cache measures
the peak again at the next run.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nplm.tracking.records import write_json

log = logging.getLogger(__name__)

CACHE_FILE = "peak_flops.json"
MEASURE_S = 0.2  # seconds of matmuls per measurement

# (pattern in torch.cuda.get_device_name, name, {precision: dense TFLOP/s}); the first match wins, so a
# variant comes before its family. Sources: NVIDIA's datasheet of each GPU below, and for the RTX entry
# the Ada Lovelace architecture whitepaper (bf16/fp16 with float32 accumulation);
# where a datasheet gives the figure with sparsity (marked *) it is halved here. No entry: the GPU has
# no tensor cores for that precision (then float32 for tf32; measured for bf16/fp16).
DEVICES: list[tuple[str, str, dict[str, float]]] = [
    (r"H100.*PCIe", "H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0}),
    (r"H100.*NVL", "H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H100", "H100 SXM", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    (r"H200.*NVL", "H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H200", "H200 SXM", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    (r"A100", "A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", "L40S", {"bf16": 366.5, "fp16": 366.5, "tf32": 183.0, "fp32": 91.6}),
    (r"\bL4\b", "L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"\bA10\b", "A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"RTX 4090", "RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"\bV100\b.*PCI", "V100 PCIe", {"fp16": 112.0, "fp32": 14.0}),
    (r"\bV100\b", "V100 SXM2", {"fp16": 125.0, "fp32": 15.7}),
    (r"\bT4\b", "T4", {"fp16": 65.0, "fp32": 8.1}),
]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32,
          "fp64": torch.float64}


@dataclass(frozen=True)
class Peak:
    """The peak FLOP/s of one device in one precision, and where the number comes from."""

    flops: float
    source: str  # "table: <its name in DEVICES>" or "measured"
    precision: str  # a key of DTYPES


def precision_of(trainer_precision: str, tf32: bool) -> str:
    """`trainer.precision` (Lightning's: "32-true", "bf16-mixed", "16-mixed", "64-true", ...) -> a key of
    DTYPES; float32 matmuls are "tf32" where `tf32` (CUDA's allow_tf32) is on."""
    value = str(trainer_precision)
    if value.startswith("bf16"):
        return "bf16"
    if value.startswith("16"):
        return "fp16"
    if value.startswith("64"):
        return "fp64"
    return "tf32" if tf32 else "fp32"


def table_peak(name: str, precision: str) -> Peak | None:
    """The datasheet peak of the GPU called `name` in `precision` (TF32 falls back to float32 on a GPU
    without it); None for a device not in `DEVICES` or a precision it has no figure for."""
    for pattern, label, tflops in DEVICES:
        if re.search(pattern, name):
            key = precision if precision in tflops or precision != "tf32" else "fp32"
            return Peak(tflops[key] * 1e12, f"table: {label}", key) if key in tflops else None
    return None


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name (from /proc/cpuinfo where there is one)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def measure_peak(device: torch.device, dtype: torch.dtype, seconds: float = MEASURE_S) -> float:
    """The best FLOP/s of `a @ b` (n x n, 2 n^3 FLOPs) in `dtype` on `device` over about `seconds`.
    The operands come from a generator of their own: the run's random numbers are not touched."""
    n = 8192 if device.type == "cuda" else 512
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=generator).to(device, dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    torch.matmul(a, b, out=out)  # warm up
    sync(device)
    best, start = math.inf, time.perf_counter()
    while time.perf_counter() - start < seconds or best == math.inf:
        began = time.perf_counter()
        torch.matmul(a, b, out=out)
        sync(device)
        best = min(best, time.perf_counter() - began)
    return 2 * n ** 3 / best


_measured: dict[str, float] = {}  # this process's measurements, by cache key


def device_peak(device: torch.device, precision: str, data_dir: str | Path) -> Peak:
    """The peak of `device` in `precision`: from `DEVICES` for a known GPU, else measured once and cached
    in `<data_dir>/peak_flops.json`."""
    name = device_name(device)
    if device.type == "cuda" and (known := table_peak(name, precision)) is not None:
        return known
    key, path = _cache_key(name, device, precision), _cache_path(data_dir)
    if key not in _measured:
        cached = _read_cache(path)
        if not isinstance(cached.get(key), (int, float)):
            cached[key] = measure_peak(device, DTYPES[precision])
            log.info("peak of %s: %.3g FLOP/s (a %s matmul, measured once; %s)", key, cached[key], precision, path)
            _write_cache(path, cached)
        _measured[key] = float(cached[key])
    return Peak(_measured[key], "measured", precision)


def _cache_key(name: str, device: torch.device, precision: str) -> str:
    """`name` (`device_name(device)`), the precision's dtype and, on a CPU, the thread count."""
    threads = f"|threads={torch.get_num_threads()}" if device.type == "cpu" else ""
    return f"{name}|{DTYPES[precision]}{threads}"


def _cache_path(data_dir: str | Path) -> Path:
    return Path(data_dir).expanduser() / CACHE_FILE


def _read_cache(path: Path) -> dict:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _write_cache(path: Path, cached: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, cached)
