"""The NPLM beside the models that replaced it: on Brown (Bengio et al.'s split, its test set) and on Tiny
Shakespeare's characters (a held-out test set), the modern NPLM, LSTMs, the Transformer, Sun & Iyyer's (2021)
Transformer-N and Transformer-C, each to early stopping, beside the Kneser-Ney 5-gram; then the output layers
side by side on Brown's LSTM and Transformer.

    python experiments/successors/run.py                        # every row, in order (days on a 2-core CPU)
    python experiments/successors/run.py --rows brown-zaremba-small --threads 2
    python experiments/successors/run.py --budget-s 3600        # every row stops by then; call again to go on
    python experiments/successors/run.py --report-only

Rows (report.py): the models at the parameter count of each corpus's modern NPLM recipe (within 5%), the
same head, optimizer and weights' moving average where the model allows; `brown-zaremba-small` is Zaremba et al.'s
small LSTM as published (its schedule: 13 epochs); `<base>-<head>` the output layers on the LSTM and the
Transformer of Brown, `brown-heads-speed` their training speed side by side (speed.py); `<row>-seed<s>` the rows
the verdicts compare, trained again with another seed (experiments/seeds.py: the verdicts' rule). Resumable: a finished
row is skipped, a killed or budget-stopped one goes on from its last checkpoint on the next call. Runs live in
outputs/successors/<row>, results in results/<row>.json; README.md is INTRO.md with the tables written from the
result files only.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
import replication
from driver import Driver, Row, Wait, first_model, sibling
from replication import corpus_datamodule, machine, parameters, run_summary, stopped_by

HERE = Path(__file__).resolve().parent
report = sibling(__file__, "report")
speed = sibling(__file__, "speed")
MAX_EPOCHS, PATIENCE = 40, 2


def model_result(row: str, spec: Row, record: dict) -> dict:
    """What results/<row>.json keeps: valid and test perplexity, test bits per byte, parameters, epochs, best
    epoch, what stopped the run, seconds per epoch, training tokens per second."""
    history = record["history"]
    return {"row": row, **run_summary(record, "nplm-train " + " ".join(spec.overrides)),
            "test_bpb": record["metrics"].get("test/bpb"), "parameters": parameters(record["best_checkpoint"]),
            "tokens_per_s": sum(h["train/tokens_per_s"] for h in history) / len(history),
            "stopped_by": stopped_by(history, PATIENCE) if spec.patience else "its schedule's end",
            "converged": replication.converged(record, PATIENCE, MAX_EPOCHS) if spec.patience else True}


def kn5(row: str, corpus: list[str]):
    """The row `row` that counts the modified Kneser-Ney 5-gram on the corpus's training split and scores its valid and
    test splits (perplexity, test bits per byte)."""
    def measure(threads: int) -> dict:
        from nplm.data.text_units import figures
        from nplm.inference.mixture import build_ngram, ngram_log_probs, perplexity
        from nplm.tracking.provenance import git_commit

        dm = corpus_datamodule(corpus)
        model = build_ngram("kn5", dm)
        log_p = {split: ngram_log_probs(model, dm, split) for split in ("valid", "test")}
        # over the bytes of the scored tokens' words as written, as a run's own test/bpb counts them
        bpb = figures(-float(log_p["test"].sum()), dm.units["test"])["bpb"]
        return {"valid": perplexity(log_p["valid"]), "test": perplexity(log_p["test"]), "test_bpb": bpb,
                "machine": machine(), "git_commit": git_commit(),
                "command": f"python experiments/successors/run.py --rows {row}"}
    return measure


def same_run(row: str, path: Path, corpus: list[str]):
    """The row `row` that another experiment has trained with the same command and the same stopping rule (its result
    file `path`, on `corpus`): that result, with the test split's bits per byte from its test perplexity (the
    summed NLL is the scored tokens times the log of the perplexity; the bytes those tokens' words have as
    written, as a run's own `test/bpb` counts them, not those of the `<unk>` they became)."""
    def measure(threads: int) -> dict:
        from nplm.data.text_units import figures

        if not path.exists():
            raise SystemExit(f"{path}: not there; run its experiment's row first")
        result = json.loads(path.read_text())
        units = corpus_datamodule(corpus).units["test"]
        where = path.relative_to(replication.ROOT) if path.is_relative_to(replication.ROOT) else path
        return {**result, "row": row, "test_bpb": figures(units.tokens * math.log(result["test"]), units)["bpb"],
                "tokens_per_s": None, "same_run_as": str(where)}
    return measure


ROWS = {**{name: Row(measure=kn5(name, corpus)) for name, corpus in report.KN5.values()},
        **{name: Row(overrides, what, max_epochs=MAX_EPOCHS,
                     patience=None if name == "brown-zaremba-small" else PATIENCE)
           for name, (overrides, what, _) in report.MODELS.items()},
        # experiment=sun2021/brown as shipped, trained to early stopping (patience 2, at most 40 epochs) there
        "brown-modern": Row(measure=same_run("brown-modern", HERE.parent / "bengio2003/results/sun2021-ema.json",
                                             report.BROWN)),
        **{name: Row(overrides, what, max_epochs=MAX_EPOCHS, patience=PATIENCE,
                     first=first_model(f"{base}-{report.LEARNED_FROM}", lambda: DRIVER.runs) if "tree=learned" in overrides
                     else None)
           for name, (overrides, what, base) in report.HEAD_ROWS.items()},
        # the rows the verdicts compare, again with other seeds (experiments/seeds.py)
        **{name: Row(overrides, f"{row}, seed {overrides[-1].split('=')[1]}", max_epochs=MAX_EPOCHS, patience=PATIENCE)
           for name, (overrides, row) in report.SEED_ROWS.items()},
        report.SPEED: Row(measure=lambda threads: {
            **speed.measure(*timed_rows(), threads),
            "command": f"python experiments/successors/run.py --rows {report.SPEED} --threads {threads}"})}


def timed_rows() -> tuple[dict[str, list[str]], dict[str, str]]:
    """What the speed row times: report.SPEED_CONFIGS and SPEED_BASE, with each learned-tree row whose first model
    has finished (its tree is built from that checkpoint before the timed batches)."""
    configs, base = dict(report.SPEED_CONFIGS), dict(report.SPEED_BASE)
    for name, (overrides, head, row_base) in report.HEAD_ROWS.items():
        if name not in configs and ROWS[name].first:
            try:
                configs[name], base[name] = [*overrides, *ROWS[name].first()], row_base
            except Wait:
                print(f"{report.SPEED}: {name} not timed (its first model has not finished)", flush=True)
    return configs, base


DRIVER = Driver(HERE, ROWS, model_result, lambda: report.tables(DRIVER.results), margin_s=180,
                headline=lambda: report.headline(DRIVER.results),
                said=lambda r: f"valid {r['valid']:.2f} test {r['test']:.2f}" if "test" in r else "result written")

if __name__ == "__main__":
    DRIVER.main(__doc__)
