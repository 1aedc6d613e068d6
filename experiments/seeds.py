"""Verdicts from several seeds: a row trained again with other seeds, its figure as mean ± standard deviation, and
the rule that decides whether one row beats another.

A row `name` trains with the recipe's seed; `<name>-seed<s>` is the same command with `seed=<s>` (`seed_rows`).
A comparison A < B *holds* only when every row has at least `NEEDED` finished seeds and the means differ by more
than the sum of the two rows' standard deviations (`beyond_noise`); with as many seeds and a smaller difference it
is *within noise*; with fewer seeds a verdict says how many it rests on (`seed_note`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from replication import finished, load_result

SEEDS = (1, 2)  # the seeds trained beside each compared row's own (its recipe's, 1234 by default)
NEEDED = 1 + len(SEEDS)  # seeds a verdict needs before it may say "holds"
RULE = (f"A verdict compares the rows' mean test perplexity over {NEEDED} seeds (the recipe's and "
        f"{', '.join(f'seed={s}' for s in SEEDS)}); it holds only where the means differ by more than the sum of "
        "the two rows' standard deviations, and is within noise otherwise. A verdict from fewer seeds says how "
        "many it rests on.")


def seed_name(name: str, seed: int) -> str:
    return f"{name}-seed{seed}"


def seed_rows(name: str, overrides: list[str]) -> dict[str, list[str]]:
    """{`<name>-seed<s>`: the overrides with seed=s} for each of SEEDS."""
    return {seed_name(name, s): [*overrides, f"seed={s}"] for s in SEEDS}


@dataclass(frozen=True)
class Spread:
    """A row's figure over its finished seeds: mean, sample standard deviation (0 for one seed), how many."""

    mean: float
    std: float
    seeds: int

    def __str__(self) -> str:  # (how many seeds: `seed_note`, or the table's column)
        return f"{self.mean:.2f}" if self.seeds == 1 else f"{self.mean:.2f} ± {self.std:.2f}"


def spread(results: Path, name: str, key: str = "test") -> Spread | None:
    """`key` of row `name` over its finished seeds (the row itself first); None until the row has finished."""
    first = load_result(results, name)
    if not (first and finished(first)):
        return None
    values = [first[key]] + [r[key] for s in SEEDS
                             if (r := load_result(results, seed_name(name, s))) and finished(r)]
    return Spread(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


def beyond_noise(lower: Spread, higher: Spread) -> bool:
    """Whether `lower` is below `higher` by more than the sum of their standard deviations, on enough seeds."""
    enough = min(lower.seeds, higher.seeds) >= NEEDED
    return enough and higher.mean - lower.mean > lower.std + higher.std


def seed_note(*rows: Spread) -> str:
    """"" when every row has NEEDED seeds, else " (from 1 seed per row; 3 needed to tell it from noise)"."""
    fewest = min(r.seeds for r in rows)
    if fewest >= NEEDED:
        return ""
    per = f"{fewest} seed{'s' * (fewest > 1)}"
    return f" (from {per} per row; {NEEDED} needed to tell it from noise)"


def verdict(*pairs: tuple[Spread, Spread]) -> str:
    """The claim that each pair (lower, higher) is ordered: "holds" where every gap is beyond noise, "does not
    hold" where one is reversed beyond noise, "within noise" otherwise; with fewer than NEEDED seeds the means
    alone decide between "holds" and "does not hold" (and `seed_note` says how many seeds they rest on)."""
    if min(r.seeds for pair in pairs for r in pair) < NEEDED:
        return "holds" if all(lower.mean < higher.mean for lower, higher in pairs) else "does not hold"
    if all(beyond_noise(lower, higher) for lower, higher in pairs):
        return "holds"
    if any(beyond_noise(higher, lower) for lower, higher in pairs):
        return "does not hold"
    return "within noise"
