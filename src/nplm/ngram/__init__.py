"""Count-based n-gram baselines over the same vocabulary and id streams as the neural models.

    from nplm.ngram import KneserNey, DeletedInterpolationTrigram, split_context
    kn = KneserNey(order=4, interpolate=True).fit(dm.ids["train"], len(dm.vocab))
    log_p = kn.score(dm.ids["test"], context_prefix=split_context(dm, "test", kn.order))  # [L] nats

This package and its specs (`nplm.ngram.specs`) load numpy only, so that nplm-mix checks its flags before torch
loads; `nplm.ngram.class_based` (Brown clustering: `nplm.trees`) is imported by name.

| model                         | file              | reference                                  |
|-------------------------------|-------------------|--------------------------------------------|
| `KneserNey` (orders 1-5)      | `kneser_ney.py`   | modified KN, Chen & Goodman (1998)         |
| `DeletedInterpolationTrigram` | `interpolated.py` | Jelinek & Mercer (1980), Bengio et al. 2003 |
| `class_based.ClassNgram`      | `class_based.py`  | Brown et al. (1992), Bengio et al. 2003 s. 4 |
| `write_arpa`                  | `arpa.py`         | ARPA back-off format                       |
| `NgramCounts`                 | `counts.py`       | numpy k-gram tables and continuation counts |
"""

from nplm.ngram.arpa import write_arpa
from nplm.ngram.counts import MAX_ORDER, NgramCounts, NgramLanguageModel, counts_of_counts, split_context
from nplm.ngram.interpolated import DeletedInterpolationTrigram
from nplm.ngram.kneser_ney import KneserNey, modified_kn_discounts

__all__ = [
    "MAX_ORDER",
    "DeletedInterpolationTrigram",
    "KneserNey",
    "NgramCounts",
    "NgramLanguageModel",
    "counts_of_counts",
    "modified_kn_discounts",
    "split_context",
    "write_arpa",
]
