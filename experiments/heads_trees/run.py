"""Every head, and for `head=hierarchical` every tree, on Brown with the same model and budget.

    python experiments/heads_trees/run.py [--epochs 2] [--threads 2] [--rows softmax,hierarchical-huffman]
    python experiments/heads_trees/run.py --report-only      # only rewrite README.md from results/

Runs `nplm-train` for each variant that has no result yet (a killed run resumes from its last
checkpoint; `--rerun` trains the chosen ones again), writes each finished variant's figures to a small
JSON file in experiments/heads_trees/results/ (committed), and writes
`experiments/heads_trees/README.md` from those files only: validation and test perplexity, training
time per epoch, and tree statistics. Runs live in outputs/heads_trees/<variant>/.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from driver import Driver, Row, Wait
from replication import load_result, provenance_footnote, provenance_mark, run_summary
from nplm.trees.wordnet import wordnet_installed

HERE = Path(__file__).resolve().parent

# MLP1's shape (Bengio et al. 2003): n=5, m=60, h=50, direct connections, dropout 0.5; Adam, batch 256
# (the recipe of experiment=brown_mlp1).
COMMON = ["corpus=brown", "model.context_size=4", "model.embed_dim=60", "model.hidden_dim=50",
          "model.direct=true", "model.dropout=0.5", "optimizer=adam", "optimizer.lr=0.001", "data.batch_size=256", "logger=csv"]
VARIANTS = {
    "softmax": ["head=softmax"],
    "class_based": ["head=class_based"],
    "adaptive": ["head=adaptive"],
    "importance_sampling": ["head=importance_sampling"],
    **{f"hierarchical-{tree}": ["head=hierarchical", f"tree={tree}"]
       for tree in ("balanced", "random", "huffman", "brown", "learned", "wordnet")},
}


def wordnet() -> list[str]:
    if not wordnet_installed():
        raise Wait("NLTK's WordNet is not installed (python -m nltk.downloader wordnet)")
    return []


def rows(epochs: int) -> dict[str, Row]:
    """Every variant trained once for `epochs` epochs."""
    return {name: Row([*COMMON, *head, f"trainer.max_epochs={epochs}", "experiment_name=heads_trees"],
                      max_epochs=epochs, first=wordnet if "tree=wordnet" in head else None)
            for name, head in VARIANTS.items()}


def variant_result(name: str, row: Row, record: dict) -> dict:
    result = {"row": name, "max_epochs": row.max_epochs, **run_summary(record, "nplm-train " + " ".join(row.overrides)),
              "driver_command": f"python experiments/heads_trees/run.py --epochs {row.max_epochs} --rows {name}"}
    if record.get("tree"):  # the tree's statistics (tree.stats)
        result["tree"] = record["tree"]
    return result


def tables() -> str:
    rows, machines, shown = [], [], []
    for name in VARIANTS:
        got = load_result(DRIVER.results, name)
        if got is None:
            continue
        shown.append(got)
        if got["machine"] not in machines:
            machines.append(got["machine"])
        tree = got.get("tree") or {}
        tree_cell = (f"depth {tree['mean_depth']:.1f} (max {tree['max_depth']}), code {tree['expected_code_length_bits']:.2f} "
                     f"bits / entropy {tree['unigram_entropy_bits']:.2f}" if tree else "")
        rows.append(f"| {name}{provenance_mark(got)} | {got['valid']:.1f} | {got['test']:.1f} | "
                    f"{got['epochs']} | {got['train_s_per_epoch']:.0f} | {tree_cell} |")
    header = ["| variant | best valid ppl | test ppl | epochs | train s/epoch | tree |", "|---|---:|---:|---:|---:|---|"]
    where = f"Machine{'s' if len(machines) > 1 else ''}: {'; '.join(machines)}." if machines else ""
    footnote = "".join(f"\n{line}\n" for line in provenance_footnote(shown))
    return "\n".join(header + rows) + "\n\n" + where + "\n" + footnote


DRIVER = Driver(HERE, rows(2), variant_result, tables,
                said=lambda r: f"valid {r['valid']:.1f} test {r['test']:.1f}")


def choose(args) -> list[str]:
    DRIVER.rows = rows(args.epochs)
    return DRIVER.chosen(args)


if __name__ == "__main__":
    parser = DRIVER.arguments(__doc__)
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per variant (default 2)")
    DRIVER.main(__doc__, parser, choose)
