"""nplm-compare: a sweep (or any runs) as one table and a few plots.

    nplm-compare outputs/default/multiruns/2026-11-21_10-00-00_ab12cd
    nplm-compare outputs/brown_mlp1 --markdown table.md --csv table.csv --plots plots/

Every folder below the given paths that holds a `metrics.json` is a job. The table has each job's
overrides, best validation perplexity, test perplexity, epochs, wall time and status (finished,
failed with its error, or running), sorted by validation perplexity; jobs without one come last.
Plots: validation perplexity against each swept parameter, and every job's learning curve.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from nplm.errors import UserError, report_user_errors


@dataclass
class Job:
    path: Path
    overrides: dict[str, str]
    status: str
    val_ppl: float | None
    test_ppl: float | None
    epochs: int | None
    wall_time_s: float | None
    error: str = ""
    curve: list[tuple[int, float]] = field(default_factory=list)  # (epoch, val/ppl)


def _overrides(job_dir: Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    items = [line[2:].strip() for line in path.read_text().splitlines() if line.startswith("- ")]
    pairs = (item.split("=", 1) for item in items if "=" in item)
    return {k.lstrip("+~"): v.strip("'\"") for k, v in pairs if not k.startswith("hydra.")}


def _curve(job_dir: Path) -> list[tuple[int, float]]:
    path = job_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [(int(r["epoch"]) + 1, float(r["val/ppl"])) for r in csv.DictReader(f) if r.get("val/ppl")]


def load_job(job_dir: Path) -> Job:
    try:
        record = json.loads((job_dir / "metrics.json").read_text())
    except (OSError, ValueError) as err:
        return Job(job_dir, _overrides(job_dir), "unreadable", None, None, None, None, error=str(err))
    curve = _curve(job_dir)
    metrics = record.get("metrics") or {}
    val = metrics.get("val/ppl_best")
    if val is None and curve:  # running or failed: the best so far
        val = min(p for _, p in curve)
    return Job(job_dir, _overrides(job_dir), record.get("status", "unknown"), val, metrics.get("test/ppl"),
               record.get("epochs", len(curve) or None), record.get("wall_time_s"), record.get("error", ""), curve)


def find_jobs(paths: list[Path]) -> list[Job]:
    dirs = []
    for path in paths:
        if not path.exists():
            raise UserError(f"{str(path)!r} does not exist; pass run or sweep folders (e.g. outputs/<experiment>)")
        dirs += [p.parent for p in sorted(path.rglob("metrics.json")) if "bootstrap" not in p.parts]
    if not dirs:
        raise UserError(f"no metrics.json below {', '.join(map(str, paths))}; is this an nplm output folder?")
    jobs = [load_job(d) for d in dirs]
    return sorted(jobs, key=lambda j: (j.val_ppl is None, j.val_ppl if j.val_ppl is not None else 0.0))


def swept_keys(jobs: list[Job]) -> list[str]:
    keys = sorted({k for j in jobs for k in j.overrides})
    return [k for k in keys if len({j.overrides.get(k) for j in jobs}) > 1]


def rows(jobs: list[Job], root: Path | None = None) -> tuple[list[str], list[list[str]]]:
    keys = swept_keys(jobs) or sorted({k for j in jobs for k in j.overrides})
    header = ["job", *keys, "val ppl (best)", "test ppl", "epochs", "time (s)", "status"]

    def fmt(x, spec=".2f"):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    body = []
    for j in jobs:
        name = str(j.path.relative_to(root)) if root and j.path.is_relative_to(root) else str(j.path)
        status = j.status if not j.error else f"{j.status}: {j.error[:80]}"
        body.append([name, *(j.overrides.get(k, "") for k in keys), fmt(j.val_ppl), fmt(j.test_ppl),
                     fmt(j.epochs, "d"), fmt(j.wall_time_s, ".0f"), status])
    return header, body


def as_text(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def as_markdown(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]) + "\n"


def as_csv(header: list[str], body: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows([header, *body])
    return buf.getvalue()


def plot(jobs: list[Job], out_dir: Path) -> list[Path]:
    """PNG plots: best validation perplexity against each swept parameter; all learning curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    scored = [j for j in jobs if j.val_ppl is not None]
    for key in swept_keys(jobs):
        points = [(j.overrides.get(key, ""), j.val_ppl) for j in scored]
        fig, ax = plt.subplots(figsize=(6, 4))
        try:
            xs = [float(x) for x, _ in points]
            order = sorted(range(len(points)), key=lambda i: xs[i])
            ax.plot([xs[i] for i in order], [points[i][1] for i in order], "o")
        except ValueError:  # categorical values
            labels = sorted({x for x, _ in points})
            ax.plot([labels.index(x) for x, _ in points], [y for _, y in points], "o")
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_xlabel(key)
        ax.set_ylabel("best validation perplexity")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"val_ppl_vs_{key.replace('/', '_')}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = swept_keys(jobs)
    for j in jobs:
        if j.curve:
            label = ", ".join(f"{k}={j.overrides.get(k, '')}" for k in keys) or j.path.name
            ax.plot(*zip(*j.curve), marker=".", label=f"{label} ({j.status})" if j.status != "finished" else label)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("validation perplexity")
    ax.grid(alpha=0.3)
    if len(jobs) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "learning_curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return written + [path]


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nplm-compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep folders (searched recursively)")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    parser.add_argument("--csv", type=Path, help="also write the table as CSV to this file")
    parser.add_argument("--plots", type=Path, help="write PNG plots into this folder")
    args = parser.parse_args(argv)
    jobs = find_jobs(args.paths)
    root = args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else None
    header, body = rows(jobs, root)
    print(as_text(header, body))
    if args.markdown:
        args.markdown.write_text(as_markdown(header, body))
    if args.csv:
        args.csv.write_text(as_csv(header, body))
    if args.plots:
        for path in plot(jobs, args.plots):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
