"""Mnih & Hinton (2009)'s rows and the figures quoted from the paper: what experiments/mnih2009 compares (run.py
trains and times its rows), and the README's tables at INTRO.md's marker, from the result files only (ours and
experiments/morin2005's)."""

from __future__ import annotations

from pathlib import Path

from replication import finished, load_result, pct, provenance_footnote, provenance_mark, row_marks, valid_test

LBL, HLBL = ["experiment=mnih2009/lbl"], ["experiment=mnih2009/hlbl"]
LEARNED = ["tree=learned", "tree.bootstrap=random"]
SINGLE_CODE = "123-131"  # quoted as "learned single-code trees about 131 to 123", not tree by tree
# row: (overrides, Mnih & Hinton's APNews test perplexity as usually quoted, the experiments/morin2005 NPLM row
# with the same output layer or tree)
NETWORKS = {
    "lbl": (LBL, "117", "nplm"),
    "lbl-nce": ([*LBL, "head=nce"], "", None),
    "lbl-nce-k100": ([*LBL, "head=nce", "head.num_samples=100"], "", None),  # 4x the paper's noise words
    "lbl-importance_sampling": ([*LBL, "head=importance_sampling"], "", "importance_sampling"),
    "hlbl-random": (HLBL, "151", "hierarchical-random-logistic"),
    "hlbl-balanced": ([*HLBL, *LEARNED, "tree.split=balanced"], SINGLE_CODE,
                      "hierarchical-learned-balanced-logistic"),
    "hlbl-adaptive": ([*HLBL, *LEARNED], SINGLE_CODE, "hierarchical-learned-logistic"),
    "hlbl-adaptive0.4": ([*HLBL, *LEARNED, "tree.eps=0.4"], SINGLE_CODE,
                         "hierarchical-learned-eps0.4-logistic"),
    "hlbl-adaptive0.4-x2": ([*HLBL, *LEARNED, "tree.eps=0.4", "tree.runs=2"], "",
                            "hierarchical-learned-eps0.4-x2-logistic"),
    "hlbl-adaptive0.4-x4": ([*HLBL, *LEARNED, "tree.eps=0.4", "tree.runs=4"], "112",
                            "hierarchical-learned-eps0.4-x4-logistic-unigram-init"),
}
SAMPLED = {"lbl": "softmax", "lbl-nce": "nce", "lbl-nce-k100": "nce (k = 100)",  # the softmax and its
           "lbl-importance_sampling": "importance_sampling"}  # sampled trainings: row -> name in `timing`


def tables(results: Path, morin: Path) -> str:
    """The README's tables at INTRO.md's marker: our rows from `results`, the NPLM's (experiments/morin2005) from
    `morin`."""
    lbl, nplm = load_result(results, "lbl"), load_result(morin, "nplm")
    lines = ["Perplexity on Brown (Morin & Bengio's protocol; valid / test, test against the same model's full "
             "softmax; epochs trained / best, * = stopped before early stopping; empty = not run yet):", "",
             "| row | tree | codes per word | ours valid / test | vs LBL softmax | epochs | stopped by | "
             "paper, APNews test (as quoted) | NPLM row (morin2005) | NPLM test | NPLM vs its softmax |",
             "|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for row, (_, paper, nplm_row) in NETWORKS.items():
        got = load_result(results, row)
        theirs = load_result(morin, nplm_row) if nplm_row else None
        tree = (got or {}).get("tree") or {}
        cells = [row + provenance_mark(got), tree.get("kind", ""), f"{tree['codes_per_word']:.2f}" if tree else "",
                 valid_test(got["valid"], got["test"], 1) if got else "",
                 pct(got["test"], lbl["test"]) if got and lbl else "",
                 f"{got['epochs']} / {got['best_epoch']}{'' if finished(got) else '*'}" if got else "",
                 got.get("stopped_by", "") if got else "", paper, nplm_row or "",
                 f"{theirs['test']:.1f}{provenance_mark(theirs)}" if theirs else "",
                 pct(theirs["test"], nplm["test"]) if theirs and nplm else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += sampled_table(results) + targets(results, morin) + same_trees(results, morin)
    shown = [load_result(results, name) for name in [*NETWORKS, "timing"]]
    shown += [load_result(morin, name) for name in ["nplm", *(r for _, _, r in NETWORKS.values() if r),
                                                    *(row for _, _, theirs in TREE_GAPS for row in theirs)]]
    lines += ["", *provenance_footnote(r for r in shown if r)]
    return "\n".join(lines) + "\n"


TREE_GAPS = (  # (what, the LBL's rows, the NPLM's rows (morin2005)): (row, reference row) each
    ("a learned single-code tree (ADAPTIVE) against the random tree",
     ("hlbl-adaptive", "hlbl-random"), ("hierarchical-learned-logistic", "hierarchical-random-logistic")),
    ("the ADAPTIVE(0.4) x4 tree against the random tree",
     ("hlbl-adaptive0.4-x4", "hlbl-random"),
     ("hierarchical-learned-eps0.4-x4-logistic-unigram-init", "hierarchical-random-logistic")),
    ("the ADAPTIVE(0.4) x4 tree against the model's own full softmax",
     ("hlbl-adaptive0.4-x4", "lbl"), ("hierarchical-learned-eps0.4-x4-logistic-unigram-init", "nplm")),
)


def same_trees(results: Path, morin: Path) -> list[str]:
    """The same tree code under the two models: test perplexity of each tree against its reference."""
    out = ["", "The same trees under each model (test perplexity, change against the reference row):", "",
           "| comparison | LBL / HLBL | NPLM (morin2005) |", "|---|---:|---:|"]
    for what, ours, theirs in TREE_GAPS:
        cells = []
        for folder, (row, reference) in ((results, ours), (morin, theirs)):
            a, b = load_result(folder, row), load_result(folder, reference)
            cells.append(f"{pct(a['test'], b['test'])} ({a['test']:.1f} / {b['test']:.1f})"
                         f"{provenance_mark(a) or provenance_mark(b)}" if a and b else "")
        out.append(f"| {what} | {cells[0]} | {cells[1]} |")
    return out


def sampled_table(results: Path) -> list[str]:
    """Item 5: NCE and importance sampling against the softmax, perplexity and time per example."""
    lbl, timing = load_result(results, "lbl"), load_result(results, "timing")
    rows = {r: load_result(results, r) for r in SAMPLED}
    if not timing and not any(rows.values()):
        return []
    out = ["", "The LBL's softmax against its sampled trainings (train s/epoch and µs/example: the whole runs, "
               "data and validation excluded; examples/s: `--rows timing`, the training step alone"
           + (f", {timing['machine']}, best of {timing['rounds']} rounds" if timing else "") + "):", "",
           "| training | ours valid / test | vs softmax | µs / training example (run) | training examples/s "
           "(timing) | speed-up | test examples/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    rates = (timing or {}).get("examples_per_s", {})
    for row, name in SAMPLED.items():
        got, rate = rows[row], rates.get(name)
        out.append("| " + " | ".join([
            name + (row_marks(got) if got else ""), valid_test(got["valid"], got["test"], 1) if got else "",
            pct(got["test"], lbl["test"]) if got and lbl else "",
            f"{got['train_us_per_example']:.1f}" if got and "train_us_per_example" in got else "",
            f"{rate[0]:,.0f}{provenance_mark(timing)}" if rate else "",
            f"{rate[0] / rates['softmax'][0]:.1f}x" if rate and "softmax" in rates else "",
            f"{rate[1]:,.0f}" if rate else ""]) + " |")
    if "hierarchical (random tree)" in rates and "softmax" in rates:
        rate = rates["hierarchical (random tree)"]
        out.append(f"| hierarchical (random tree) | | | | {rate[0]:,.0f}{provenance_mark(timing)} | {rate[0] / rates['softmax'][0]:.1f}x | "
                   f"{rate[1]:,.0f} |")
    return out


def targets(results: Path, morin: Path) -> list[str]:
    """The targets, each from the result files (a target whose rows have not run is listed as such)."""
    got = {r: g if (g := load_result(results, r)) and finished(g) else None for r in NETWORKS}  # finished rows only
    lbl, random = got["lbl"], got["hlbl-random"]
    out = ["", "Targets:", ""]
    single = {r: g for r, g in got.items() if g and g.get("tree", {}).get("kind") == "learned"
              and g["tree"]["codes_per_word"] == 1.0}
    multi = {r: g for r, g in got.items() if g and g.get("tree", {}).get("codes_per_word", 1.0) > 1.0}
    if random and single:
        best = min(single, key=lambda r: single[r]["test"])
        gain = 100 * (1 - single[best]["test"] / random["test"])
        nplm_random, nplm_learned = load_result(morin, "hierarchical-random-logistic"), load_result(
            morin, "hierarchical-learned-logistic")
        nplm = (f"; under the NPLM (experiments/morin2005) the learned tree gains "
                f"{100 * (1 - nplm_learned['test'] / nplm_random['test']):.1f}%") if nplm_random and nplm_learned else ""
        out.append(f"- a learned tree at least 10% better than the random tree: {best} {single[best]['test']:.1f} "
                   f"against {random['test']:.1f}, {gain:.1f}% better ({'met' if gain >= 10 else 'missed'}){nplm}")
    else:
        out.append("- a learned tree at least 10% better than the random tree: not measured (rows not run)")
    if lbl and multi:
        best = min(multi, key=lambda r: multi[r]["test"])
        ok = multi[best]["test"] <= lbl["test"]
        out.append(f"- the best multi-code tree at or below the LBL's softmax: {best} "
                   f"({multi[best]['tree']['codes_per_word']:.2f} codes per word) {multi[best]['test']:.1f} against "
                   f"{lbl['test']:.1f}, {pct(multi[best]['test'], lbl['test'])} ({'met' if ok else 'missed'})")
    else:
        out.append("- the best multi-code tree at or below the LBL's softmax: not measured (rows not run)")
    nces = {r: got[r] for r in ("lbl-nce", "lbl-nce-k100") if got[r]}
    timing = load_result(results, "timing")
    if lbl and nces:
        parts = []
        for row, nce in nces.items():
            gap = 100 * (nce["test"] / lbl["test"] - 1)
            parts.append(f"{SAMPLED[row]} {nce['test']:.1f}, {gap:+.1f}% ({'met' if gap <= 3 else 'missed'})")
        out.append(f"- NCE within 3% of the softmax's perplexity ({lbl['test']:.1f}): " + "; ".join(parts))
    else:
        out.append("- NCE within 3% of the softmax's perplexity: not measured (rows not run)")
    if timing:
        rates = timing["examples_per_s"]
        speed = rates["nce"][0] / rates["softmax"][0]
        runs = "".join(f"; {SAMPLED[row]}, whole runs: {lbl['train_us_per_example'] / nce['train_us_per_example']:.1f}x"
                       for row, nce in nces.items() if lbl and "train_us_per_example" in nce
                       and "train_us_per_example" in lbl)
        out.append(f"- NCE at least 5x faster per training example at 10,000 words: {speed:.1f}x "
                   f"({'met' if speed >= 5 else 'missed'}; the training step alone, `--rows timing`){runs}")
    else:
        out.append("- NCE at least 5x faster per training example: not measured (`--rows timing` not run)")
    return out
