"""Write a run's learning curve and result as Markdown, from its own metrics.json (nothing typed by hand).

    python experiments/report.py outputs/<experiment>/runs/<run> --target 5.80 > experiments/<name>/README.md
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from replication import machine_line  # experiments/ is on sys.path when this file runs as a script


def _csv_history(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in row.items()} | {"epoch": int(row["epoch"])}
                for row in csv.DictReader(f)]


def command_line(command: str) -> str:
    """The recorded command with its program's folder left out (`/venv/bin/nplm-train a=b` -> `nplm-train a=b`)."""
    program, _, rest = command.partition(" ")
    return " ".join(filter(None, [Path(program).name, rest]))


def report(run_dir: Path, target: float | None, unfinished: bool = False) -> str:
    record = json.loads((run_dir / "metrics.json").read_text())
    if record["status"] != "finished" and not unfinished:
        raise SystemExit(f"{run_dir} has status {record['status']!r}; pass --unfinished to report it anyway")
    history, metrics, corpus = record.get("history") or _csv_history(run_dir), record["metrics"], record["corpus"]
    if not metrics:  # stopped before the end: the best epoch so far
        metrics = {"val/ppl_best": min(row["val/ppl"] for row in history)}
    lines = [
        f"# `experiment={record['experiment']}`" + ("" if record["status"] == "finished"
                                                     else f" (status: {record['status']}, stopped early)"), "",
        f"Command: `{command_line(record['command'])}`  ",
        f"Machine: {machine_line(record['machine'])}; torch {record['versions']['torch']}, "
        f"Lightning {record['versions']['pytorch_lightning']}; commit `{record['git_commit']}`  ",
        f"Corpus: {corpus['name']}, |V| = {corpus['vocab_size']:,}, train {corpus['train_tokens']:,} / "
        f"valid {corpus['valid_tokens']:,} / test {corpus.get('test_tokens', 0):,} tokens", "",
        "| epoch | train ppl | valid ppl | best valid ppl | tokens/s | epoch time (s) | elapsed (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in history:
        train_ppl = row.get("train/ppl") or row.get("train/ppl_sampled")
        lines.append(f"| {row['epoch'] + 1} | {train_ppl:.3f} | {row['val/ppl']:.3f} | {row['val/ppl_best']:.3f} | "
                     f"{row['train/tokens_per_s']:,.0f} | {row['train/epoch_time_s']:.1f} | {row['elapsed_s']:.0f} |")
    lines += ["", f"Best validation perplexity **{metrics['val/ppl_best']:.3f}**"
              + (f", test perplexity of the best checkpoint **{metrics['test/ppl']:.3f}**" if "test/ppl" in metrics else "")
              + (f"; wall time {record['wall_time_s'] / 60:.1f} min." if record["status"] == "finished" else ".")]
    if target is not None:
        reached = next((row for row in history if row["val/ppl"] <= target), None)
        lines.append(
            f"Target validation perplexity <= {target}: " + (
                f"reached after {reached['epoch'] + 1} epochs, {reached['elapsed_s'] / 60:.1f} min of training."
                if reached else "not reached."))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory holding metrics.json")
    parser.add_argument("--target", type=float, help="validation perplexity to reach; says when it was")
    parser.add_argument("--unfinished", action="store_true", help="also report a run that did not finish")
    args = parser.parse_args()
    print(report(args.run_dir, args.target, args.unfinished), end="")


if __name__ == "__main__":
    main()
