"""Large CPU buffers kept by the process between training steps instead of handed back to the OS.

glibc's malloc serves every request above 32 MiB with a fresh `mmap` and unmaps it on `free`, so a
[B, V] buffer of that size (MLP1's logits at B = 1024, |V| = 17,905: 73 MB, and its log-softmax)
comes back as new pages every step, each one zero-filled by a page fault. `keep_freed_memory` tells
malloc (`mallopt`, man 3 mallopt) to take such buffers from its heap and keep freed memory there, as
PyTorch's CUDA allocator does on a GPU and as jemalloc/tcmalloc preloads do on a CPU (its effect on
MLP1's step: the ablation of experiments/bench/bench.py). The process keeps its peak heap until it exits.
Only where the C library is glibc (Linux); elsewhere nothing changes.

A setting of the whole process, which nplm cannot undo: nplm-train makes it only when asked
(`malloc_keep_freed=true`), and so do the benchmarks that measure it.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
KEEP_BYTES = 2**31 - 1  # free memory at the top of the heap kept up to this size (mallopt takes an int)


def keep_freed_memory() -> bool:
    """Serve large allocations from the heap and keep freed memory; True where this took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: musl's mallopt ignores these options
    except (OSError, AttributeError):
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))
