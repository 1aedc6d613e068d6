"""The n-gram baselines by name (nplm-mix's `--ngram`, the drivers' KN5 rows): `interpolated-trigram`, `kn<n>`,
`kn<n>-backoff`, `kn<n>-backoff-srilm` for orders 1 to `MAX_ORDER`. Without torch, so that a bad name is refused
before anything heavy loads."""

from __future__ import annotations

import re

from nplm.errors import UserError
from nplm.ngram.counts import MAX_ORDER

NGRAM_SPECS = ("interpolated-trigram", *(f"kn{n}" for n in range(1, MAX_ORDER + 1)),
               *(f"kn{n}-backoff" for n in range(1, MAX_ORDER + 1)),
               *(f"kn{n}-backoff-srilm" for n in range(1, MAX_ORDER + 1)))


def parse_ngram_spec(spec: str) -> tuple[str, int, bool]:
    """(kind, order, interpolate) of a spec, kind "interpolated-trigram", "kn" (every n-gram kept) or
    "kn-srilm" (SRILM's default count cutoffs), or a `UserError` listing the valid ones."""
    s = spec.strip().lower() if isinstance(spec, str) else spec
    if s == "interpolated-trigram":
        return "interpolated-trigram", 3, True
    m = re.fullmatch(r"kn([1-9])(-backoff(-srilm)?)?", s) if isinstance(s, str) else None
    if m is None or not 1 <= int(m.group(1)) <= MAX_ORDER:
        raise UserError(f"n-gram spec {spec!r} is not one of: {', '.join(NGRAM_SPECS)}")
    return "kn-srilm" if m.group(3) else "kn", int(m.group(1)), m.group(2) is None
