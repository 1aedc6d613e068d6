"""The model's own arithmetic, for counting its FLOPs (`nplm.training.flops`).

Inside `model_arithmetic()` every path that computes more than the model's equations ask takes the form
that computes just those: no zero padding of the GPU's aligned products (`nplm.fast.aligned`), the modern
NPLM's distant summaries as sums over each position's own n vectors rather than products with banded
Toeplitz matrices of zeros, the adaptive head's loss with each row scoring the shortlist and its own
cluster (no capacity margins, no every-cluster scoring), the class-based head's within-class softmax over
the row's class only, the hierarchical head's real turns only (no padding to the deepest leaf). So model
FLOP utilisation is the same for every code path of a head and on every device.
"""

from __future__ import annotations

from contextlib import contextmanager

_open = 0  # how many `model_arithmetic()` blocks are open


@contextmanager
def model_arithmetic():
    """Inside: `counting()` is true (the aligned products are unpadded: `nplm.fast.aligned.enabled`)."""
    global _open
    _open += 1
    try:
        yield
    finally:
        _open -= 1


def counting() -> bool:
    """Whether the model's own arithmetic is asked for (`model_arithmetic`)."""
    return _open > 0
