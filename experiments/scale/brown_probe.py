"""tree=brown at 267,735 words: what its steps cost, and the whole tree at vocabularies where it finishes.

    python brown_probe.py OUT.json DATA_DIR [--classes 1000] [--sample 400] [--tops 10000,30000]

On the WikiText-103-shaped corpus (its cached token ids; run.py's id_cache stage first), with
`nplm.trees.brown`'s own functions:

1. the bigram table of the 103 million training tokens (`Bigrams`), timed;
2. one exchange sweep, estimated: the per-word move of `exchange` (remove the word from its class,
   `_insertion_gain` over the C classes, put it in the best) timed on samples of words from four
   frequency strata (ranks 0-999 all of them; 1,000-9,999, 10,000-99,999 and 100,000-267,734 `--sample`
   each, spread evenly), each stratum's mean times its size: the estimate of one sweep over all words;
3. Brown's merging of the C classes (`merge_classes` on the class bigrams of the initial assignment) and
   the class bigram table (`class_bigrams`), timed;
4. the whole `tree=brown` build (10 sweeps at most, the default) on the corpus restricted to its `--tops`
   most frequent words (the others <unk>), with C = `--top-classes` (256: an exchange move costs about
   C x the classes of a word's neighbours, so C = 1000 makes a sweep over 10,000 words ~7 minutes), timed:
   what does finish.

The results file is rewritten after each part, so a stopped probe keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from nplm.data.datamodule import LMDataModule
from nplm.data.vocabulary import Vocabulary
from nplm.trees import TreeContext, build_tree
from nplm.trees.brown import Bigrams, _insertion_gain, class_bigrams, merge_classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("data_dir")
    parser.add_argument("--corpus", default=None)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--tops", default="10000,30000")
    parser.add_argument("--top-classes", type=int, default=256, help="C of the whole builds on the top-N words")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="check the corpus against WikiText-103's published counts (default: yes)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from run import CORPUS  # the corpus the other stages use

    cfg = {"name": "wikitext103", "path": args.corpus or str(CORPUS), "download": False, "url": "-",
           "sha256": None, "verify": args.verify, "eos": True, "vocab_from": "train", "min_count": 1, "max_vocab": None,
           "unk": "<unk>", "order": "frequency"}
    dm = LMDataModule(cfg, 4, 1024, 1024, data_dir=args.data_dir)
    dm.setup()
    V, C = len(dm.vocab), args.classes
    ids = np.asarray(dm.ids["train"])
    counts = np.asarray(dm.vocab.counts, dtype=np.float64)
    result: dict = {"vocab_size": V, "train_tokens": len(ids), "classes": C}

    start = time.perf_counter()
    bg = Bigrams(ids, V)
    result["bigrams_s"] = time.perf_counter() - start
    result["distinct_bigrams"] = int(len(bg.a))
    print(f"bigrams: {result['distinct_bigrams']:,} in {result['bigrams_s']:.0f} s", flush=True)

    order = np.argsort(-counts, kind="stable")  # exchange's visiting order: most frequent first
    assign = np.full(V, C - 1)
    assign[order[: C - 1]] = np.arange(C - 1)
    start = time.perf_counter()
    M = class_bigrams(bg, assign, C)
    result["class_bigrams_s"] = time.perf_counter() - start
    NL = np.bincount(assign, weights=bg.left_total, minlength=C)
    NR = np.bincount(assign, weights=bg.right_total, minlength=C)

    def move(w: int) -> None:  # exchange's loop body (nplm.trees.brown.exchange)
        c0, nl, nr, s = assign[w], bg.left_total[w], bg.right_total[w], bg.self_count[w]
        lo, hi = bg.succ_ptr[w], bg.succ_ptr[w + 1]
        r = np.bincount(assign[bg.succ[lo:hi]], weights=bg.succ_cnt[lo:hi], minlength=C)
        lo, hi = bg.pred_ptr[w], bg.pred_ptr[w + 1]
        left = np.bincount(assign[bg.pred[lo:hi]], weights=bg.pred_cnt[lo:hi], minlength=C)
        M[c0] -= r
        M[:, c0] -= left
        M[c0, c0] -= s
        NL[c0] -= nl
        NR[c0] -= nr
        gain = _insertion_gain(M, NL, NR, r, left, s, nl, nr)
        best = int(np.argmax(gain))
        if gain[best] <= gain[c0] + 1e-7:
            best = c0
        M[best] += r
        M[:, best] += left
        M[best, best] += s
        NL[best] += nl
        NR[best] += nr
        assign[w] = best

    strata = [(lo, min(hi, V)) for lo, hi in ((0, 1000), (1000, 10_000), (10_000, 100_000), (100_000, V)) if lo < V]
    sweep = []
    for lo, hi in strata:
        ranks = np.arange(lo, hi) if hi - lo <= 1000 else np.linspace(lo, hi - 1, args.sample).astype(int)
        start = time.perf_counter()
        for rank in ranks:
            move(int(order[rank]))
        per_word = (time.perf_counter() - start) / len(ranks)
        sweep.append({"ranks": [lo, hi], "timed_words": len(ranks), "ms_per_word": per_word * 1e3,
                      "stratum_s": per_word * (hi - lo)})
        print(f"ranks {lo:,}-{hi:,}: {per_word * 1e3:.2f} ms per word -> {per_word * (hi - lo):.0f} s", flush=True)
    result["sweep_strata"] = sweep
    save(args.out, result)
    result["sweep_s_estimated"] = sum(s["stratum_s"] for s in sweep)

    start = time.perf_counter()
    merge_classes(M.copy(), list(range(C)), V)
    result["merge_classes_s"] = time.perf_counter() - start
    print(f"merge {C} classes: {result['merge_classes_s']:.0f} s", flush=True)
    save(args.out, result)
    result["full_build_s_estimated_10_sweeps"] = (result["bigrams_s"] + 10 * result["sweep_s_estimated"]
                                                  + result["class_bigrams_s"] + result["merge_classes_s"])
    result["full_build_s_estimated_1_sweep"] = (result["bigrams_s"] + result["sweep_s_estimated"]
                                                + result["class_bigrams_s"] + result["merge_classes_s"])

    # the whole build on the top-N words (ids are in frequency order; the rest and <unk> become <unk>)
    unk = dm.vocab.unk_id
    result["top"] = []
    for top in (int(t) for t in args.tops.split(",") if t):
        keep = [t for i, t in enumerate(dm.vocab.tokens[: top]) if i != unk][: top - 1]
        vocab = Vocabulary(keep + ["<unk>"], [0] * top)
        remap = np.full(V, top - 1, dtype=np.int64)
        remap[[dm.vocab.index[t] for t in keep]] = np.arange(top - 1)
        top_ids = torch.from_numpy(remap[ids])
        top_counts = np.bincount(remap[ids], minlength=top).tolist()
        start = time.perf_counter()
        tree = build_tree({"name": "brown", "num_classes": args.top_classes, "sweeps": 10},
                          TreeContext(vocab, top_ids, top_counts, 0, args.data_dir))
        seconds = time.perf_counter() - start
        result["top"].append({"words": top, "classes": args.top_classes, "build_s": seconds,
                              "stats": tree.stats(top_counts)})
        save(args.out, result)
        print(f"top {top:,} words: brown tree in {seconds:.0f} s", flush=True)
    save(args.out, result)


def save(path: str, result: dict) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
