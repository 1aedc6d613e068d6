"""Morin & Bengio (2005), Tables 1-3 (Brown, 10,000 words): speed and perplexity of the hierarchical model.

    make replicate-morin2005                     # = python experiments/morin2005/run.py
    python experiments/morin2005/run.py --rows timing,hierarchical-huffman --threads 2
    python experiments/morin2005/run.py --report-only
    python experiments/morin2005/run.py --rows nplm --rerun      # after raising max_epochs

Tables 1 and 2 (timing): training and test time per example of the NPLM with the full softmax, with
importance sampling and with the hierarchical output layer (balanced tree; also with row-sparse
updates of C, as the paper's per-example updates touch only the context's rows), measured side by
side in one run on real Brown windows: interleaved rounds, the best of each kept. Table 3 (perplexity): the
interpolated trigram and a class-based trigram counted here, and the networks trained by
conf/experiment/morin2005/*.yaml: full softmax, importance sampling, and the hierarchical model with
each tree (wordnet when NLTK's WordNet is installed; balanced, huffman, brown, learned always), with
the paper's node form and with the logistic node form of word2vec and Mnih & Hinton (2009).
Runs what is missing, resumes killed runs, and writes experiments/morin2005/README.md from the
result files in results/ only. Runs live in outputs/morin2005/.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from dataclasses import replace
from pathlib import Path

from nplm.replication import (DATA_DIR, class_ngram, corpus_datamodule, load_result, machine, run_summary, train_row,
                              valid_test, write_result)
from nplm.trees.wordnet import wordnet_installed

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OUT = HERE.parents[1] / "outputs" / "morin2005"

EXPERIMENT = ["experiment=morin2005/nplm"]  # its corpus: Brown, 10k words, 900k / 100k / rest
TIMED = {  # row: (head, row-sparse updates of C)
    "softmax": ("softmax", False), "importance_sampling": ("importance_sampling", False),
    "hierarchical": ("hierarchical", False), "hierarchical, sparse C": ("hierarchical", True)}
PUBLISHED_SPEEDUP = {"softmax": (1.0, 1.0), "importance_sampling": (68.7, 1.22), "hierarchical": (258.0, 193.0)}
NETWORKS = {  # row: (overrides, published test perplexity)
    "nplm": (["experiment=morin2005/nplm"], 195.3),
    "importance_sampling": (["experiment=morin2005/importance_sampling"], 192.6),
    **{f"hierarchical-{tree}": (["experiment=morin2005/hierarchical", f"tree={tree}"], 220.7 if tree == "wordnet" else None)
       for tree in ("wordnet", "balanced", "huffman", "brown", "learned")},
    # the same trees with word2vec's / Mnih & Hinton's node, sigmoid(b_n + q_n . f): one F-vector per node
    **{f"hierarchical-{tree}-logistic": (["experiment=morin2005/hierarchical", f"tree={tree}", "head.node_form=logistic"], None)
       for tree in ("balanced", "huffman", "brown", "learned")},
    # depth-2 trees, not in the paper: frequency-bin classes, and the top 100 subtrees of the Brown tree
    "two-level-classes": (["experiment=morin2005/class_based"], None),
    "two-level-brown": (["experiment=morin2005/class_based", "head.classes=tree", "tree=brown"], None),
}
NGRAMS = {"interpolated-trigram": 268.7, "class500": 249.1}
ROWS = ("timing", *NGRAMS, *NETWORKS)


@functools.cache
def morin_corpus():
    """The rows' corpus, loaded once per driver run (timing and every n-gram row share it)."""
    return corpus_datamodule(EXPERIMENT)


# -- Tables 1 and 2: time per example ----------------------------------------------------------------
def measure_timing(threads: int, rounds: int = 3, steps: int = 20, warmup: int = 3) -> None:
    """Training (forward, backward, Adam step; batch 256) and test (exact NLL of the next word; batch
    1024) examples/s of each output layer on the same network and the same Brown windows."""
    import torch

    from nplm.heads import build_head
    from nplm.models import NPLM, NPLMConfig
    from nplm.optim import OptimizerConfig, build_optimizer
    from nplm.trees import TreeContext, build_tree

    torch.set_num_threads(threads)
    dm = morin_corpus()
    V, counts = len(dm.vocab), dm.vocab.counts
    tree = build_tree({"name": "balanced"}, TreeContext(dm.vocab, dm.ids["train"], counts, 0, DATA_DIR))
    shape = NPLMConfig(context_size=4, embed_dim=60, hidden_dim=50, direct=True)
    order = torch.randperm(len(dm.windows["train"]), generator=torch.Generator().manual_seed(0))
    train_batches = [dm.windows["train"][i] for i in order[: 256 * (steps + warmup)].split(256)]
    test_batches = [dm.windows["test"][i] for i in torch.arange(1024 * (steps + warmup)).split(1024)]

    def rates(head_name: str, sparse: bool) -> tuple[float, float]:
        torch.manual_seed(0)
        model = NPLM(V, replace(shape, sparse_embeddings=sparse))
        head = build_head({"name": head_name}, model.feature_dim, V, counts, tree if head_name == "hierarchical" else None)
        optimizer = build_optimizer(torch.nn.ModuleList([model, head]), OptimizerConfig(name="adam"))
        model.train(), head.train()
        for i, (context, target) in enumerate(train_batches):
            if i == warmup:
                start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            head.loss(model(context), target).mean().backward()
            optimizer.step()
        train_rate = 256 * steps / (time.perf_counter() - start)
        model.eval(), head.eval()
        with torch.no_grad():
            for i, (context, target) in enumerate(test_batches):
                if i == warmup:
                    start = time.perf_counter()
                head.nll(model(context), target)
        return train_rate, 1024 * steps / (time.perf_counter() - start)

    best: dict[str, list[float]] = {}
    for _ in range(rounds):  # interleaved, best of each: robust to other load on the machine
        for name, (head_name, sparse) in TIMED.items():
            train_rate, test_rate = rates(head_name, sparse)
            old = best.get(name, [0.0, 0.0])
            best[name] = [max(old[0], train_rate), max(old[1], test_rate)]
    write_result(RESULTS, "timing", {"vocab_size": V, "train_tokens": len(dm.ids["train"]), "machine": machine(),
                                     "rounds": rounds, "steps": steps, "examples_per_s": best,
                                     "command": "python experiments/morin2005/run.py --rows timing"})


# -- Table 3: perplexity -----------------------------------------------------------------------------
def count_ngram(key: str) -> None:
    from nplm.mixture import build_ngram, ngram_log_probs, perplexity

    dm = morin_corpus()
    start = time.perf_counter()
    model = class_ngram(int(key[5:]), dm) if key.startswith("class") else build_ngram(key, dm)
    write_result(RESULTS, key, {"row": key, "model": model.name, "fit_s": round(time.perf_counter() - start, 1),
                                "machine": machine(), "command": f"python experiments/morin2005/run.py --rows {key}",
                                **{s: perplexity(ngram_log_probs(model, dm, s)) for s in ("valid", "test")}})


def train_network(row: str, threads: int, rerun: bool) -> None:
    overrides = NETWORKS[row][0]
    record = train_row(row, overrides, OUT / row, threads, rerun)
    if record is not None:
        result = {"row": row, **run_summary(record, "nplm-train " + " ".join(overrides))}
        if record.get("tree"):
            result["tree"] = record["tree"]
        write_result(RESULTS, row, result)
        print(f"{row}: valid {result['valid']:.1f} test {result['test']:.1f}", flush=True)


# -- the README --------------------------------------------------------------------------------------
def tables() -> str:
    lines = []
    timing = load_result(RESULTS, "timing")
    if timing:
        rates = timing["examples_per_s"]
        lines += [f"Tables 1 and 2, time per example (|V| = {timing['vocab_size']:,}; {timing['machine']}; "
                  f"best of {timing['rounds']} interleaved rounds of {timing['steps']} batches):", "",
                  "| output layer | train ms/example | train speed-up | published | test ms/example | test speed-up | published |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name in TIMED:
            if name not in rates:
                continue
            train_rate, test_rate = rates[name]
            pub_train, pub_test = PUBLISHED_SPEEDUP.get(name, ("", ""))
            lines.append(f"| {name} | {1000 / train_rate:.4f} | {train_rate / rates['softmax'][0]:.1f} | {pub_train} | "
                         f"{1000 / test_rate:.4f} | {test_rate / rates['softmax'][1]:.2f} | {pub_test} |")
    lines += ["", "Table 3, perplexity:", "",
              "| model | published test | ours valid / test | epochs | train s/epoch | tree |",
              "|---|---:|---:|---:|---:|---|"]
    for key, published in [*NGRAMS.items(), *((k, v[1]) for k, v in NETWORKS.items())]:
        got = load_result(RESULTS, key)
        tree = (got or {}).get("tree")
        tree_cell = (f"depth {tree['mean_depth']:.1f}, code {tree['expected_code_length_bits']:.2f} bits "
                     f"(entropy {tree['unigram_entropy_bits']:.2f})" if tree else "")
        lines.append(f"| {key} | {published or ''} | {valid_test(got['valid'], got['test'], 1) if got else ''} | "
                     f"{got.get('epochs', '') if got else ''} | {got.get('train_s_per_epoch', '') if got else ''} | {tree_cell} |")
    softmax = load_result(RESULTS, "nplm")
    trees = {k: r for k in NETWORKS if k.startswith("hierarchical") and (r := load_result(RESULTS, k))}
    if softmax and trees:
        best = min(trees, key=lambda k: trees[k]["test"])
        lines += ["", f"Best tree: {best}, test {trees[best]['test']:.1f}, "
                      f"{100 * (trees[best]['test'] / softmax['test'] - 1):+.1f}% vs the full softmax "
                      f"{softmax['test']:.1f} (the paper's WordNet tree: +13%)."]
    for key, classes in (("two-level-classes", "frequency bins"), ("two-level-brown", "Brown-tree classes")):
        if softmax and (two := load_result(RESULTS, key)):
            lines += ["", f"Two-level tree (class-based output layer, {classes}): test {two['test']:.1f}, "
                          f"{100 * (two['test'] / softmax['test'] - 1):+.1f}% vs the full softmax."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="", help=f"comma-separated, of: {', '.join(ROWS)} (default all)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run (default 2)")
    parser.add_argument("--report-only", action="store_true", help="only rewrite README.md from results/")
    parser.add_argument("--rerun", action="store_true",
                        help="redo the chosen rows though they have results (networks go on from their last "
                             "checkpoint; delete outputs/morin2005/<row> to train one from scratch)")
    args = parser.parse_args()
    chosen = args.rows.split(",") if args.rows else list(ROWS)
    if unknown := sorted(set(chosen) - set(ROWS)):
        raise SystemExit(f"unknown rows {unknown}; rows are {', '.join(ROWS)}")
    if not args.report_only:
        for row in chosen:
            if not args.rerun and load_result(RESULTS, row):
                print(f"{row}: done, skipping")
            elif row == "timing":
                measure_timing(args.threads)
            elif row in NGRAMS:
                count_ngram(row)
            elif row == "hierarchical-wordnet" and not wordnet_installed():
                print("hierarchical-wordnet: skipped, NLTK's WordNet is not installed (python -m nltk.downloader wordnet)")
            else:
                train_network(row, args.threads, args.rerun)
    (HERE / "README.md").write_text((HERE / "INTRO.md").read_text() + "\n" + tables())
    print(tables())


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
