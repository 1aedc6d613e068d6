"""README.md's replication table, written from the committed result files alone.

    python experiments/replication_table.py            # rewrite the table in README.md
    python experiments/replication_table.py --check    # exit 1 when README.md's table differs

One line a row: the experiment and what is measured, the command that makes the figure, our figure (a link to
its result file, experiments/<experiment>/results/<row>.json) and the published one. Each figure carries the
marks of every result file it is computed from (`replication.row_marks`): † where a file's commit is
uncommitted code or unrecorded, * where a time limit stopped the row before it finished.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # experiments/: the drivers' shared helpers
from replication import load_result, pct, row_marks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
README = ROOT / "README.md"
BEGIN = "<!-- replication table: python experiments/replication_table.py writes it from experiments/*/results/ -->"
END = "<!-- end of the replication table -->"


@dataclass(frozen=True)
class Row:
    """A line of the table. `results`: "<experiment>/<row>" names of the result files the figure comes from;
    `ours`: the figure, from those files' contents in that order; `awaited`: a row whose result files may be
    missing (its recipe has changed since they were written): then its figure reads "not run yet"."""

    experiment: str
    command: str
    results: tuple[str, ...]
    ours: Callable[[list[dict]], str]
    published: str
    awaited: bool = False


def test_ppl(r: list[dict]) -> str:
    return f"{r[0]['test']:.1f}"


def valid_ppl(r: list[dict]) -> str:
    return f"{r[0]['valid']:.3f}"


def test_gap(r: list[dict]) -> str:
    """The first result's test perplexity against the second's."""
    return pct(r[0]["test"], r[1]["test"])


def test_and_valid_gap(r: list[dict]) -> str:
    """The first result's test perplexity against the second's, and the same on the validation split."""
    return f"{test_gap(r)} (valid {pct(r[0]['valid'], r[1]['valid'])})"


def speed_up(faster: str, slower: str, key: str = "examples_per_s") -> Callable[[list[dict]], str]:
    """Training examples/s of one output layer over another's (a timing file's first entry: training)."""
    return lambda r: f"{r[0][key][faster][0] / r[0][key][slower][0]:.1f}x"


BENGIO = "[Bengio et al. 2003](experiments/bengio2003/README.md)"
MORIN = "[Morin & Bengio 2005](experiments/morin2005/README.md)"
MNIH = "[Mnih & Hinton 2009](experiments/mnih2009/README.md)"
SHAKESPEARE = "[Tiny Shakespeare](experiments/tinyshakespeare_char/README.md)"
HELDOUT = "heldout-d256-l6-w3-dropout2-wd3-cosine12-ema"  # the best recipe, chosen on the validation split, tested

# The published figures: Bengio et al. (2003) Table 1 (Brown, test); Morin & Bengio (2005) Tables 1 and 3;
# Mnih & Hinton (2009) on APNews as quoted in experiments/mnih2009; Mnih & Teh (2012); the reference
# notebook's validation perplexity (conf/experiment/tinyshakespeare_char.yaml); Sun & Iyyer (2021), WikiText-103
# validation 24.1 (Transformer-N) and 25.0 (the Transformer); nanoGPT's README (best
# validation loss 1.4697 nats per character, 2.120 bits per byte); Zaremba et al. (2014) Table 1.
ROWS = (
    Row(f"{BENGIO}, MLP1, `modern` recipe: test ppl", "nplm-train 'experiment=[bengio2003/mlp1,bengio2003/modern]'",
        ("bengio2003/modern-mlp1",), test_ppl, "268"),
    Row(f"{BENGIO}, MLP9, the paper's recipe, 20 epochs: test ppl", "nplm-train experiment=bengio2003/mlp9",
        ("bengio2003/paper-mlp9",), test_ppl, "276"),
    Row(f"{BENGIO}, Kneser-Ney back-off trigram: test ppl",
        "python experiments/bengio2003/run.py --rows kn3-backoff-srilm", ("bengio2003/ngram-kn3-backoff-srilm",),
        test_ppl, "323"),
    Row("[Sun & Iyyer 2021](experiments/sun2021/README.md), modern NPLM, Bengio et al.'s Brown: test ppl",
        "nplm-train experiment=sun2021/brown", ("bengio2003/sun2021-ema",), test_ppl, "not in the paper"),
    Row("[Sun & Iyyer 2021](experiments/successors/README.md), Transformer-N against the Transformer of its size, "
        "Bengio et al.'s Brown: test ppl against the Transformer's", "python experiments/successors/run.py --rows "
        "brown-transformer-n,brown-transformer", ("successors/brown-transformer-n", "successors/brown-transformer"),
        test_and_valid_gap, "valid -3.6% (WikiText-103)"),
    Row("[Sun & Iyyer 2021](experiments/successors/README.md), Transformer-N against the Transformer of its size, "
        "Tiny Shakespeare characters: test ppl against the Transformer's", "python experiments/successors/run.py --rows "
        "ts-transformer-n,ts-transformer", ("successors/ts-transformer-n", "successors/ts-transformer"),
        test_and_valid_gap, "valid -3.6% (WikiText-103)"),
    Row("[Zaremba et al. 2014](experiments/successors/README.md), the small LSTM, its 13 epochs on Bengio et al.'s "
        "Brown: test ppl", "nplm-train experiment=zaremba2014/small corpus=brown_bengio2003",
        ("successors/brown-zaremba-small",), test_ppl, "114.5 (the Penn Treebank)", awaited=True),
    Row(f"{MORIN}, hierarchical softmax: training speed over the softmax's",
        "python experiments/morin2005/run.py --rows timing", ("morin2005/timing",),
        speed_up("hierarchical", "softmax"), "258x (1.2 GHz Athlon)"),
    Row(f"{MORIN}, their WordNet tree: test ppl against the softmax's",
        "nplm-train experiment=morin2005/hierarchical tree=wordnet", ("morin2005/hierarchical-wordnet", "morin2005/nplm"),
        test_gap, "+13.0%"),
    Row(f"{MNIH}, HLBL, a learned tree against a random one: test ppl", "make replicate-mnih2009",
        ("mnih2009/hlbl-balanced", "mnih2009/hlbl-random"), test_gap, "-13% (APNews)"),
    Row("[Mnih & Teh 2012](experiments/mnih2009/README.md), NCE (k = 100): test ppl against the softmax's",
        "nplm-train experiment=mnih2009/lbl head=nce head.num_samples=100", ("mnih2009/lbl-nce-k100", "mnih2009/lbl"),
        test_gap, "within about 1%"),
    Row(f"{SHAKESPEARE}, the reference notebook's network: valid ppl", "nplm-train experiment=tinyshakespeare_char",
        ("tinyshakespeare_char/notebook",), valid_ppl, "5.80 (the notebook)"),
    Row(f"{SHAKESPEARE}, modern NPLM, 6 blocks, trained on the first 80%: test ppl on the held-out last 10% "
        "(the 5-gram's beside it)", "python experiments/tinyshakespeare_char/run.py --rows " + HELDOUT,
        (f"tinyshakespeare_char/{HELDOUT}",), lambda r: f"{r[0]['test']:.3f} (KN5 {r[0]['kn5_test']:.3f})",
        "none on this split"),
    Row("[Tiny Shakespeare, byte-level BPE-512](experiments/tokenizations/README.md): valid bits per byte",
        "python experiments/tokenizations/run.py", ("tokenizations/ts-bpe512",), lambda r: f"{r[0]['valid_bpb']:.3f}",
        "2.120 (nanoGPT)"),
    Row("[A synthetic corpus of WikiText-103's shape, 267,735 words](experiments/scale/README.md), hierarchical: "
        "training speed over the softmax's",
        "make scale", ("scale/side_by_side",), lambda r: f"{r[0]['ratio_of_best']:.0f}x", "not in a paper"),
)


def results_of(row: Row) -> list[dict]:
    """The row's result files, loaded; a missing one stops with its path."""
    loaded = []
    for name in row.results:
        experiment, result = name.split("/")
        folder = EXPERIMENTS / experiment / "results"
        if (data := load_result(folder, result)) is None:
            raise SystemExit(f"{folder / result}.json: no such result file (a row of {Path(__file__).name})")
        loaded.append(data)
    return loaded


def line(row: Row) -> str:
    if row.awaited and any(load_result(EXPERIMENTS / name.split("/")[0] / "results", name.split("/")[1]) is None
                           for name in row.results):
        return f"| {row.experiment} | `{row.command}` | not run yet | {row.published} |"
    results = results_of(row)
    marks = "".join(sorted({m for r in results for m in row_marks(r)}, key="*\u2020".index))
    first = f"experiments/{row.results[0].split('/')[0]}/results/{row.results[0].split('/')[1]}.json"
    return f"| {row.experiment} | `{row.command}` | [{row.ours(results)}{marks}]({first}) | {row.published} |"


def table() -> str:
    """The table with its markers and legend, as README.md holds it."""
    return "\n".join([
        BEGIN,
        "| experiment: what is measured | command | ours | published |",
        "|---|---|--:|--:|",
        *(line(row) for row in ROWS),
        "",
        "Each figure links to its result file (command, commit, machine). \u2020: from uncommitted code or an "
        "unrecorded commit; run it again from a clean checkout to replace it. *: a time limit stopped the row before "
        "early stopping.",
        END,
    ])


def readme_table(text: str) -> str:
    """The table README.md holds now, markers included."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when README.md's table is not the one written here")
    args = parser.parse_args()
    text, new = README.read_text(), table()
    old = readme_table(text)
    if args.check:
        sys.exit(0 if old == new else "README.md: its replication table differs; python experiments/replication_table.py")
    README.write_text(text.replace(old, new))


if __name__ == "__main__":
    main()
