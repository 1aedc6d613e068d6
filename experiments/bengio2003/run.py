"""Bengio et al. (2003), Table 1 (Brown): every row, trained or counted here, beside the published numbers.

    make replicate-bengio2003                    # = python experiments/bengio2003/run.py
    python experiments/bengio2003/run.py --recipes modern --rows mlp1,mlp3 --threads 2
    python experiments/bengio2003/run.py --report-only
    python experiments/bengio2003/run.py --recipes paper --rows mlp1 --rerun   # after raising max_epochs

Runs what is missing and skips what is done, row by row: the n-gram baselines (deleted-interpolation
trigram, modified Kneser-Ney back-off n = 3/4/5, class-based back-off n = 3 with 150-2000 Brown
classes) and the networks MLP1/3/5/7/9 under two recipes, `paper` (conf/experiment/bengio2003/paper.yaml)
and `modern` (modern.yaml), and WIDE, a larger MLP9 not in the paper, under `modern` only. A killed network run resumes from its last checkpoint. Each finished
network is mixed 0.5/0.5 with the interpolated trigram (the even MLP rows) and with an EM-fitted
weight (`nplm.inference.mixture`). Each row's result is a small JSON file in experiments/bengio2003/results/
(committed); the README's tables are written from those files only. Runs live in outputs/bengio2003/.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
import replication
from driver import Driver, Row, bad_input, sibling
from replication import DATA_DIR, class_ngram, corpus_datamodule, machine, parameters, run_summary, stopped_by

HERE = Path(__file__).resolve().parent

report = sibling(__file__, "report")  # the papers' tables, and the README's from the result files
NETWORKS, NGRAMS, RECIPES, SUN2021 = report.NETWORKS, report.NGRAMS, report.RECIPES, report.SUN2021
NO_EMA, SUN2021_RECIPE = report.NO_EMA, report.SUN2021_RECIPE
# `converged`: the paper recipe with no epoch cap (conf/experiment/bengio2003/converged.yaml), one run per
# step size in --lrs (eps_0 per batch of 128; r stays the paper's 1e-8 per example), the row's result the
# step size with the best validation perplexity.
DEFAULT_LRS = "0.128"
SUN2021_PATIENCE, SUN2021_MAX_EPOCHS = 2, 40  # as conf/experiment/sun2021/brown.yaml
CORPUS = ["experiment=bengio2003/mlp1"]  # the n-grams count the networks' corpus (corpus=brown_bengio2003, picked by paper.yaml)


@functools.cache
def corpus():
    """The networks' corpus, loaded once per driver run (every n-gram row counts it)."""
    return corpus_datamodule(CORPUS)


def count_ngram(key: str, threads: int = 1) -> dict:
    """Fit the n-gram row `key` on train; its valid/test perplexity."""
    from nplm.inference.mixture import build_ngram, ngram_log_probs, perplexity
    from nplm.tracking.records import git_commit

    dm, start = corpus(), time.perf_counter()
    model = class_ngram(int(key[5:]), dm) if key.startswith("class") else build_ngram(key, dm)
    return {"row": key, "label": NGRAMS[key][0], "fit_s": round(time.perf_counter() - start, 1), "machine": machine(),
            "git_commit": git_commit(), "model": model.name, "word_smoothing": getattr(model, "word_smoothing", None),
            "min_count": getattr(model, "min_count", None),
            "command": f"python experiments/bengio2003/run.py --rows {key}",
            **{split: perplexity(ngram_log_probs(model, dm, split)) for split in ("valid", "test")}}


def network_rows(lrs: list[float]) -> dict[str, tuple[str, str, float | None]]:
    """Every network row under every recipe: name -> (recipe, row of Table 1, step size). `paper` has no row
    WIDE; `converged` one run per step size in `lrs` (eps_0 per batch of 128)."""
    return {f"{recipe}-{row}" + (f"-lr{lr:g}" if lr is not None else ""): (recipe, row, lr)
            for recipe in RECIPES for row in NETWORKS if not (recipe == "paper" and NETWORKS[row][4] is None)
            for lr in (lrs if recipe == "converged" else [None])}


def rows(lrs: list[float]) -> dict[str, Row]:
    """The n-grams counted, the networks trained once under each recipe (their configured epochs, or early
    stopping), the modern NPLM's rows trained to early stopping across calls."""
    networks = {name: Row([f"experiment=bengio2003/{row}" if recipe == "paper" else
                           f"experiment=[bengio2003/{row},bengio2003/{recipe}]",
                           *([f"optimizer.lr={lr:g}"] if lr is not None else [])])
                for name, (recipe, row, lr) in network_rows(lrs).items()}
    return {**{f"ngram-{key}": Row(measure=functools.partial(count_ngram, key)) for key in NGRAMS}, **networks,
            **{row: Row(["experiment=sun2021/brown", *overrides], max_epochs=SUN2021_MAX_EPOCHS,
                        patience=SUN2021_PATIENCE) for row, (overrides, _) in SUN2021.items()}}


def row_result(name: str, row: Row, record: dict) -> dict:
    """A network's result (mixed with the interpolated trigram, 0.5/0.5 and EM), or a modern NPLM row's."""
    from nplm.inference.mixture import mix
    summary = run_summary(record, "nplm-train " + " ".join(row.overrides))
    if name in SUN2021:
        return {"row": name, **summary, "stopped_by": stopped_by(record["history"], SUN2021_PATIENCE),
                "converged": replication.converged(record, SUN2021_PATIENCE, SUN2021_MAX_EPOCHS),
                "parameters": parameters(record["best_checkpoint"]),
                "valid_by_epoch": [round(r["val/ppl"], 2) for r in record["history"]]}
    recipe, network, lr = NETWORK_OF[name]
    return {"row": network, "recipe": recipe, "lr": lr, **summary,
            "stopped_by": stopped_by(record["history"], patience=3 if recipe == "converged" else 2),
            "mixture": mix(record["best_checkpoint"], "interpolated-trigram", 0.5, data_dir=DATA_DIR)}


def said(result: dict) -> str:
    if "mixture" in result:
        return (f"valid {result['valid']:.1f} test {result['test']:.1f}, mixed test "
                f"{result['mixture']['test']['mix_fixed']:.1f}")
    line = f"valid {result['valid']:.1f} test {result['test']:.1f}"
    return line + (f", {result['epochs']} epochs (best {result['best_epoch']}), stopped by {result['stopped_by']}"
                   if "epochs" in result else f" ({result['fit_s']:.0f} s)")


def tables() -> str:
    return report.tables(DRIVER.results)


def sun2021_table() -> str:
    return report.sun2021_table(DRIVER.results)


NETWORK_OF = network_rows([float(DEFAULT_LRS)])
DRIVER = Driver(HERE, rows([float(DEFAULT_LRS)]), row_result, tables, said=said)


def choose(args) -> list[str]:
    """--rows of Table 1 (mlp1..mlp9, wide) under each of --recipes, n-gram keys and modern NPLM rows."""
    global NETWORK_OF
    lrs = [float(x) for x in args.lrs.split(",")]
    NETWORK_OF, DRIVER.rows = network_rows(lrs), rows(lrs)
    picked, recipes = args.rows.split(",") if args.rows else [*NGRAMS, *NETWORKS, *SUN2021], args.recipes.split(",")
    unknown = sorted(set(picked) - set(NGRAMS) - set(NETWORKS) - set(SUN2021))
    if unknown or set(recipes) - set(RECIPES):
        bad_input(f"--rows, --recipes: unknown rows or recipes {unknown or recipes}; rows are "
                  f"{', '.join([*NGRAMS, *NETWORKS, *SUN2021])}, recipes {', '.join(RECIPES)}")
    return [name for name in DRIVER.rows if name.removeprefix("ngram-") in picked
            or name in NETWORK_OF and NETWORK_OF[name][0] in recipes and NETWORK_OF[name][1] in picked]


if __name__ == "__main__":
    parser = DRIVER.arguments(__doc__, "comma-separated: mlp1..mlp9, wide (under each of --recipes), n-gram keys, "
                                       "sun2021 rows (default all)")
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"of {', '.join(RECIPES)} (default all)")
    parser.add_argument("--lrs", default=DEFAULT_LRS,
                        help=f"the converged recipe's step sizes per batch of 128, one run each (default {DEFAULT_LRS})")
    DRIVER.main(__doc__, parser, choose)
