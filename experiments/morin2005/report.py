"""Morin & Bengio (2005)'s Tables 1-3 and the trees and fixes beside them: what experiments/morin2005 compares
(run.py trains, counts and times its rows), and the README's tables at INTRO.md's marker, from the result files
only."""

from __future__ import annotations

from pathlib import Path

from replication import finished, load_result, pct, provenance_footnote, provenance_mark, row_marks, valid_test

TIMED = {  # row: (head, row-sparse updates of C)
    "softmax": ("softmax", False), "importance_sampling": ("importance_sampling", False),
    "hierarchical": ("hierarchical", False), "hierarchical, sparse C": ("hierarchical", True)}
PUBLISHED_SPEEDUP = {"softmax": (1.0, 1.0), "importance_sampling": (68.7, 1.22), "hierarchical": (258.0, 193.0)}
TREES = ("wordnet", "balanced", "random", "huffman", "brown", "learned")
LOGISTIC = ["head.node_form=logistic"]
# Mnih & Hinton (2009)'s learned trees, logistic nodes: (row suffix, tree options); "" is ADAPTIVE
LEARNED = {"": [], "-balanced": ["tree.split=balanced"], "-eps0.25": ["tree.eps=0.25"], "-eps0.4": ["tree.eps=0.4"],
           "-eps0.4-x2": ["tree.eps=0.4", "tree.runs=2"], "-eps0.4-x4": ["tree.eps=0.4", "tree.runs=4"]}
NETWORKS = {  # row: (overrides, published test perplexity)
    "nplm": (["experiment=morin2005/nplm"], 195.3),
    "importance_sampling": (["experiment=morin2005/importance_sampling"], 192.6),
    **{f"hierarchical-{tree}": (["experiment=morin2005/hierarchical", f"tree={tree}"], 220.7 if tree == "wordnet" else None)
       for tree in TREES},
    # the same trees with word2vec's / Mnih & Hinton's node, sigmoid(b_n + q_n . f): one F-vector per node
    **{f"hierarchical-{tree}-logistic": (["experiment=morin2005/hierarchical", f"tree={tree}", *LOGISTIC], None)
       for tree in TREES},
    **{f"hierarchical-learned{suffix}-logistic": (["experiment=morin2005/hierarchical", "tree=learned", *LOGISTIC,
                                                   *options], None) for suffix, options in LEARNED.items() if suffix},
    # candidate fixes from probes.py: less dropout on the features the nodes read, a larger learning rate
    # (each with the full softmax beside it, so that a fix of the recipe is not counted as one of the tree)
    "hierarchical-brown-logistic-dropout0.25": (["experiment=morin2005/hierarchical", "tree=brown", *LOGISTIC,
                                                 "model.dropout=0.25"], None),
    "hierarchical-brown-logistic-lr3e-3": (["experiment=morin2005/hierarchical", "tree=brown", *LOGISTIC,
                                            "optimizer.lr=0.003"], None),
    "nplm-lr3e-3": (["experiment=morin2005/nplm", "optimizer.lr=0.003"], None),
    "hierarchical-learned-eps0.4-x4-logistic-dropout0.25": (["experiment=morin2005/hierarchical", "tree=learned",
                                                             *LOGISTIC, "tree.eps=0.4", "tree.runs=4",
                                                             "model.dropout=0.25"], None),
    "nplm-dropout0.25": (["experiment=morin2005/nplm", "model.dropout=0.25"], None),
    # node vectors at zero and node biases at the unigram log-odds (probes.py: logistic-unigram-init)
    **{f"hierarchical-learned{suffix}-logistic-unigram-init": (
        ["experiment=morin2005/hierarchical", "tree=learned", *LOGISTIC, *LEARNED[suffix], "head.node_init=unigram"],
        None) for suffix in ("", "-eps0.4-x2", "-eps0.4-x4")},
    # depth-2 trees, not in the paper: frequency-bin classes, and the top 100 subtrees of the Brown tree
    "two-level-classes": (["experiment=morin2005/class_based"], None),
    "two-level-brown": (["experiment=morin2005/class_based", "head.classes=tree", "tree=brown"], None),
}
NGRAMS = {"interpolated-trigram": 268.7, "class500": 249.1}


def tables(results: Path) -> str:
    lines = []
    timing = load_result(results, "timing")
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
            lines.append(f"| {name}{provenance_mark(timing)} | {1000 / train_rate:.4f} | {train_rate / rates['softmax'][0]:.1f} | {pub_train} | "
                         f"{1000 / test_rate:.4f} | {test_rate / rates['softmax'][1]:.2f} | {pub_test} |")
    lines += ["", "Table 3, perplexity (epochs: trained / best; * = stopped by the epoch cap or the time budget, "
                  "not by early stopping):", "",
              "| model | published test | ours valid / test | vs softmax | epochs | train s/epoch |",
              "|---|---:|---:|---:|---:|---:|"]
    softmax = load_result(results, "nplm")
    for key, published in [*NGRAMS.items(), *((k, v[1]) for k, v in NETWORKS.items())]:
        got = load_result(results, key)
        if got is None and key not in NGRAMS and key != "nplm":
            continue
        vs = pct(got['test'], softmax['test']) if got and softmax else ""
        epochs = ""
        if got and got.get("epochs"):
            epochs = f"{got['epochs']} / {got.get('best_epoch', '')}{'' if finished(got) else '*'}"
        lines.append(f"| {key}{provenance_mark(got)} | {published or ''} | {valid_test(got['valid'], got['test'], 1) if got else ''} | "
                     f"{vs} | {epochs} | {got.get('train_s_per_epoch', '') if got else ''} |")
    tree_rows = [(k + provenance_mark(r), r["tree"]) for k in NETWORKS
                 if (r := load_result(results, k)) and r.get("tree")]
    if tree_rows:
        lines += ["", "Trees (depth: mean / max path length; code: expected path length under the unigram, "
                      "bits; a multi-code word's depth is the mean over its codes):", "",
                  "| row | tree | mean depth | max depth | code bits | entropy bits | codes per word |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for key, tree in tree_rows:
            lines.append(f"| {key} | {tree['kind']} | {tree['mean_depth']:.1f} | {tree['max_depth']} | "
                         f"{tree['expected_code_length_bits']:.2f} | {tree['unigram_entropy_bits']:.2f} | "
                         f"{tree.get('codes_per_word', 1.0):.2f} |")
    shapes = load_result(results, "tree-shapes")
    if shapes:
        lines += ["", f"Tree shapes before training (`--rows tree-shapes`, |V| = {shapes['vocab_size']:,}):", "",
                  "| tree | mean depth | max depth | code bits | entropy bits |", "|---|---:|---:|---:|---:|"]
        for name, tree in shapes["trees"].items():
            lines.append(f"| {name}{provenance_mark(shapes)} | {tree['mean_depth']:.1f} | {tree['max_depth']} | "
                         f"{tree['expected_code_length_bits']:.2f} | {tree['unigram_entropy_bits']:.2f} |")
    probes = load_result(results, "probes")
    if probes:
        lines += ["", "Probes (`probes.py`, 1 thread; validation perplexity after each epoch, a quarter of the "
                      "training set per epoch unless the name says @N full epochs; balanced tree, Morin-Bengio "
                      "nodes, dropout 0.5, Adam 1e-3 unless the overrides say otherwise):", "",
                  "| probe | overrides | valid per epoch | codes per word | wall s |", "|---|---|---|---:|---:|"]
        for name, probe in probes.items():
            changed = [o for o in probe["overrides"] if not o.startswith(("logger=", "trainer.", "callbacks."))]
            lines.append(f"| {name}{provenance_mark(probe)} | {' '.join(changed)} | {' → '.join(f'{v:.1f}' for v in probe['valid'])} | "
                         f"{probe.get('codes_per_word', '')} | {probe['s']} |")
    lines += targets(results, softmax)
    for key, classes in (("two-level-classes", "frequency bins"), ("two-level-brown", "Brown-tree classes")):
        if softmax and (two := load_result(results, key)):
            lines += ["", f"Two-level tree (class-based output layer, {classes}): "
                          f"test {two['test']:.1f}{row_marks(two)}, "
                          f"{pct(two['test'], softmax['test'])} vs the full softmax."]
    shown = [load_result(results, key) for key in [*NGRAMS, *NETWORKS, "timing", "tree-shapes"]]
    shown += list((probes or {}).values())
    lines += ["", *provenance_footnote(r for r in shown if r)]
    return "\n".join(lines) + "\n"


def reference(row: str) -> str:
    """The full-softmax row with the same recipe as `row` (rows named -dropout0.25 / -lr3e-3 change it)."""
    for fix in ("-dropout0.25", "-lr3e-3"):
        if row.endswith(fix):
            return "nplm" + fix
    return "nplm"


def targets(results: Path, softmax: dict | None) -> list[str]:
    """The targets, each from the result files: the best single-code tree within 5% of the full
    softmax, a learned tree better than the balanced, random and Huffman ones, a multi-code tree at or
    below the softmax, hierarchical training >= 10x faster per example."""
    trees = {k: r for k in NETWORKS if k.startswith("hierarchical") and (r := load_result(results, k)) and finished(r)}
    if not softmax or not finished(softmax) or not trees:
        return []

    def vs(row: str) -> str:
        name = reference(row)
        ref, missing = load_result(results, name), ""
        if ref is None or not finished(ref):  # a fix row whose softmax partner has not run (or finished): say so,
            # and compare with the base one
            name, ref, missing = "nplm", softmax, f" ({name}, the same recipe's softmax, not run yet)"
        change = 100 * (trees[row]["test"] / ref["test"] - 1)
        return f"{row} {trees[row]['test']:.1f}, {change:+.1f}% vs {name} {ref['test']:.1f}{missing}"

    def codes(row: str) -> float:
        return trees[row].get("tree", {}).get("codes_per_word", 1.0)

    out = ["", "Targets (test perplexity against the full softmax with the same recipe):", ""]
    single = [k for k in trees if codes(k) == 1.0]
    if single:
        out.append(f"- best single-code tree (target: within +5%): {vs(min(single, key=lambda k: trees[k]['test']))}")
    fixed = {k: trees[k]["test"] for k in single if any(t in k for t in ("-balanced", "-random", "-huffman"))
             and "-learned" not in k}
    learned = {k: trees[k]["test"] for k in single if "-learned" in k}
    if fixed and learned:
        best_learned, best_fixed = min(learned, key=learned.get), min(fixed, key=fixed.get)
        out.append(f"- best single-code learned tree {best_learned} {learned[best_learned]:.1f} against the best "
                   f"balanced/random/Huffman tree {best_fixed} {fixed[best_fixed]:.1f} (target: lower)")
    multi = [k for k in trees if codes(k) > 1.0]
    if multi:
        best = min(multi, key=lambda k: trees[k]["test"])
        out.append(f"- best multi-code tree ({codes(best):.2f} codes per word; target: at or below): {vs(best)}")
    timing = load_result(results, "timing")
    if timing:
        rates = timing["examples_per_s"]
        out.append(f"- hierarchical training {rates['hierarchical'][0] / rates['softmax'][0]:.1f}x faster per "
                   "example than the softmax (Table 1; target: at least 10x)")
    return out
