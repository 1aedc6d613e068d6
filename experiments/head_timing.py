"""Training and test examples per second of output layers on the same network and the same Brown windows, side by
side: interleaved rounds, the best of each kept (robust to other load on the machine). The `timing` rows of the
morin2005 and mnih2009 drivers."""

from __future__ import annotations

import time
from typing import Callable


def timing_batches(dm, steps: int, warmup: int) -> tuple[list, list]:
    """`warmup + steps` training batches of 256 windows in a fixed random order, and as many test batches of 1024
    in corpus order: (context [B, n-1], target [B]) each."""
    import torch

    order = torch.randperm(len(dm.windows["train"]), generator=torch.Generator().manual_seed(0))
    return ([dm.windows["train"][i] for i in order[: 256 * (steps + warmup)].split(256)],
            [dm.windows["test"][i] for i in torch.arange(1024 * (steps + warmup)).split(1024)])


def examples_per_s(model, head, train_step: Callable, train_batches: list, test_batches: list,
                   warmup: int) -> tuple[float, float]:
    """Training examples per second of `train_step(context, target)` (forward, backward, optimizer step) and test
    examples per second of the exact NLL of the next word, over the batches after the first `warmup`."""
    import torch

    def rate(batches: list, step: Callable) -> float:
        for i, (context, target) in enumerate(batches):
            if i == warmup:
                start = time.perf_counter()
            step(context, target)
        return sum(len(target) for _, target in batches[warmup:]) / (time.perf_counter() - start)

    model.train(), head.train()
    train_rate = rate(train_batches, train_step)
    model.eval(), head.eval()
    with torch.no_grad():
        return train_rate, rate(test_batches, lambda context, target: head.nll(model(context), target))


def best_of_rounds(rates: Callable[[object], tuple[float, float]], configs: dict, rounds: int) -> dict[str, list]:
    """name -> [training, test] examples per second, the best of `rounds` interleaved rounds of `rates(config)`."""
    best: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, config in configs.items():
            train_rate, test_rate = rates(config)
            old = best.get(name, [0.0, 0.0])
            best[name] = [max(old[0], train_rate), max(old[1], test_rate)]
    return best
