"""nplm-compare: a sweep (or any runs) as one table and a few plots.

    nplm-compare outputs/default/multiruns/2026-11-21_10-00-00_ab12cd
    nplm-compare outputs/brown_mlp1 --markdown table.md --csv table.csv --plots plots/ --html report.html

Every folder below the given paths that holds a `metrics.json` is a job. Finished jobs that differ
only in `seed` are one row: the mean, the sample standard deviation (`±`, over n >= 2 seeds) and n
of the best validation and the test perplexity; learning curves show that mean with a ±1 std band.
Failed, running and unreadable jobs keep a row each, with their overrides and error. Rows are
sorted by validation perplexity; rows without one come last.

Epochs are counted as in the training log and the run's metrics.csv: epoch 0 is the first epoch
(Lightning's count). The table's `epochs` column is the number of epochs completed; `MFU`, where the
runs recorded it, the model FLOP utilisation of their last training epoch (`train/mfu`, mean over the row).
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from nplm.cli import args as arg
from nplm.errors import UserError, report_user_errors
from nplm.tracking.runs import observed_status

SEED = "seed"


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
    curve: list[tuple[int, float]] = field(default_factory=list)  # (epoch from 0, val/ppl)
    mfu: float | None = None  # model FLOP utilisation of the last training epoch (metrics' train/mfu)
    figures: dict[str, float] = field(default_factory=dict)  # TEXT_FIGURES the run recorded
    bpb_curve: list[tuple[int, float]] = field(default_factory=list)  # (epoch from 0, val/bpb) where recorded


# The figures that compare across tokenisations (nplm.data.text_units): metrics key -> (column, csv name, format).
TEXT_FIGURES = {"val/bpb_best": ("val bpb (best)", "val_bpb", ".4f"), "test/bpb": ("test bpb", "test_bpb", ".4f"),
                "val/word_ppl_best": ("val word ppl (best)", "val_word_ppl", ".2f"),
                "test/word_ppl": ("test word ppl", "test_word_ppl", ".2f")}


@dataclass
class Stat:
    """mean, sample std (None for n < 2, or when a value is infinite: a diverged run's) and n of the values
    that exist."""

    mean: float | None
    std: float | None
    n: int

    @classmethod
    def of(cls, values) -> Stat:
        xs = [float(v) for v in values if v is not None and not math.isnan(v)]
        if not xs:
            return cls(None, None, 0)
        spread = len(xs) > 1 and all(math.isfinite(x) for x in xs)
        return cls(statistics.fmean(xs), statistics.stdev(xs) if spread else None, len(xs))

    def __str__(self) -> str:
        if self.mean is None:
            return ""
        return f"{self.mean:.2f}" + (f" ± {self.std:.2f}" if self.std is not None else "")


@dataclass
class Row:
    """One table row: the jobs of one setting (several seeds of a finished setting, else one job)."""

    jobs: list[Job]
    overrides: dict[str, str]  # without `seed` when the row averages seeds
    val: Stat
    test: Stat

    @property
    def status(self) -> str:
        j = self.jobs[0]
        return f"{j.status}: {j.error[:120]}" if j.error else j.status

    @property
    def curve(self) -> list[tuple[int, float, float | None]]:
        """(epoch, mean val/ppl, std) over the row's jobs at every epoch they all reached."""
        return self.curve_of("curve")

    def curve_of(self, name: str) -> list[tuple[int, float, float | None]]:
        """(epoch, mean, std) of the jobs' curve `name` ("curve": val/ppl, "bpb_curve": val/bpb) at every
        epoch they all reached."""
        per_epoch: dict[int, list[float]] = {}
        for j in self.jobs:
            for epoch, value in getattr(j, name):
                per_epoch.setdefault(epoch, []).append(value)
        points = [(e, Stat.of(v)) for e, v in sorted(per_epoch.items()) if len(v) == len(self.jobs)]
        return [(e, s.mean, s.std) for e, s in points]


def _overrides(job_dir: Path, record: dict) -> dict[str, str]:
    """The job's overrides: `.hydra/overrides.yaml`, else the `overrides` list in its metrics.json
    (a job refused before Hydra wrote its folder has only that)."""
    path = job_dir / ".hydra" / "overrides.yaml"
    if path.exists():
        items = [line[2:].strip() for line in path.read_text().splitlines() if line.startswith("- ")]
    else:
        items = [str(o) for o in record.get("overrides") or []]
    pairs = (item.split("=", 1) for item in items if "=" in item)
    return {k.lstrip("+~"): v.strip("'\"") for k, v in pairs
            if not k.startswith("hydra.") and not k.startswith("paths.")}


def _curve(job_dir: Path, column: str = "val/ppl") -> list[tuple[int, float]]:
    """(epoch, value) of metrics.csv's `column` at every epoch that has it."""
    path = job_dir / "metrics.csv"
    if not path.exists():
        return []
    points = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                points.append((int(r["epoch"]), float(r[column])))
            except (KeyError, TypeError, ValueError):  # no validation that epoch, or a row being written
                continue
    return points


def load_job(job_dir: Path) -> Job:
    try:
        record = json.loads((job_dir / "metrics.json").read_text())
    except (OSError, ValueError) as err:
        return Job(job_dir, _overrides(job_dir, {}), "unreadable", None, None, None, None, error=str(err))
    curve = _curve(job_dir)
    metrics = record.get("metrics") or {}
    val = metrics.get("val/ppl_best")
    if val is None and curve:  # running or failed: the best so far
        val = min(p for _, p in curve)
    status = observed_status(job_dir, record) or "unknown"  # a dead run's "running" record reads "killed"
    return Job(job_dir, _overrides(job_dir, record), status, val, metrics.get("test/ppl"),
               record.get("epochs", len(curve) or None), record.get("wall_time_s"), record.get("error", ""), curve,
               metrics.get("train/mfu"), {k: metrics[k] for k in TEXT_FIGURES if metrics.get(k) is not None},
               _curve(job_dir, "val/bpb"))


def find_jobs(paths: list[Path]) -> list[Job]:
    dirs = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"{path}: is not a folder; pass run or sweep folders (e.g. outputs/<experiment>)")
        dirs += [p.parent for p in sorted(path.rglob("metrics.json")) if "bootstrap" not in p.parts]
    if not dirs:
        raise UserError(f"no metrics.json below {', '.join(map(str, paths))}; is this an nplm output folder?")
    return [load_job(d) for d in dirs]


def group_seeds(jobs: list[Job]) -> list[Row]:
    """Finished jobs that differ only in `seed` become one row; every other job is a row of its own."""
    groups: dict[tuple, list[Job]] = {}
    rows = []
    for j in jobs:
        if j.status == "finished":
            setting = {k: v for k, v in j.overrides.items() if k != SEED}
            groups.setdefault(tuple(sorted(setting.items())), []).append(j)
        else:
            rows.append(Row([j], j.overrides, Stat.of([j.val_ppl]), Stat.of([j.test_ppl])))
    for setting, members in groups.items():
        overrides = dict(setting) if len(members) > 1 else members[0].overrides
        rows.append(Row(members, overrides, Stat.of(j.val_ppl for j in members), Stat.of(j.test_ppl for j in members)))
    return sorted(rows, key=lambda r: (r.val.mean is None, r.val.mean or 0.0))


def swept_keys(rows: list[Row]) -> list[str]:
    """Override keys whose value differs between rows (all keys if none differ)."""
    keys = sorted({k for r in rows for k in r.overrides})
    return [k for k in keys if len({r.overrides.get(k) for r in rows}) > 1] or keys


def _name(row: Row, root: Path | None) -> str:
    def one(p: Path) -> str:
        return str(p.relative_to(root)) if root and p.is_relative_to(root) and p != root else str(p)

    return ", ".join(one(j.path) for j in row.jobs)


def with_mfu(rows: list[Row]) -> bool:
    """Whether any job of the rows recorded its model FLOP utilisation (runs from before it did not)."""
    return any(j.mfu is not None for r in rows for j in r.jobs)


def text_figures(rows: list[Row]) -> list[str]:
    """The TEXT_FIGURES any job of the rows recorded (runs from before them did not)."""
    return [k for k in TEXT_FIGURES if any(k in j.figures for r in rows for j in r.jobs)]


def table(rows: list[Row], root: Path | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells: job(s), swept overrides, n, val and test perplexity (mean ± std), bits per byte and
    per-word perplexity where the runs recorded them (means), epochs, wall time and, where the runs
    recorded it, model FLOP utilisation (means over the row's jobs), status."""
    keys = swept_keys(rows)
    mfu = with_mfu(rows)
    figures = text_figures(rows)
    header = ["job", *keys, "n", "val ppl (best)", "test ppl", *(TEXT_FIGURES[k][0] for k in figures), "epochs",
              "time (s)", *(["MFU"] if mfu else []), "status"]

    def mean(xs, spec):
        s = Stat.of(xs)
        if s.mean is None:
            return ""
        if spec == "percent":
            return f"{s.mean:.2%}"
        if spec not in ("count", "time"):
            return format(s.mean, spec)
        return format(s.mean, ".1f" if spec == "time" and s.mean < 10 else ".0f")

    body = [[_name(r, root), *(r.overrides.get(k, "") for k in keys), str(len(r.jobs)), str(r.val), str(r.test),
             *(mean([j.figures.get(k) for j in r.jobs], TEXT_FIGURES[k][2]) for k in figures),
             mean([j.epochs for j in r.jobs], "count"), mean([j.wall_time_s for j in r.jobs], "time"),
             *([mean([j.mfu for j in r.jobs], "percent")] if mfu else []), r.status]
            for r in rows]
    return header, body


def as_text(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def as_markdown(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]) + "\n"


def as_csv(rows: list[Row], root: Path | None = None) -> str:
    """The table with numbers in their own columns: mean, std and n for val and test perplexity; the
    mean MFU as a fraction (`mfu_mean`, where the runs recorded it); the means of bits per byte and per-word
    perplexity (`val_bpb_mean`, ..., where the runs recorded them)."""
    keys = swept_keys(rows)
    mfu = with_mfu(rows)
    figures = text_figures(rows)
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["job", *keys, "n", "val_ppl_mean", "val_ppl_std", "val_n", "test_ppl_mean", "test_ppl_std",
                  "test_n", *(f"{TEXT_FIGURES[k][1]}_mean" for k in figures), "epochs_mean", "time_s_mean",
                  *(["mfu_mean"] if mfu else []), "status"])
    num = lambda x: "" if x is None else repr(x)  # noqa: E731
    for r in rows:
        epochs, time_s = Stat.of(j.epochs for j in r.jobs), Stat.of(j.wall_time_s for j in r.jobs)
        out.writerow([_name(r, root), *(r.overrides.get(k, "") for k in keys), len(r.jobs),
                      num(r.val.mean), num(r.val.std), r.val.n, num(r.test.mean), num(r.test.std), r.test.n,
                      *(num(Stat.of(j.figures.get(k) for j in r.jobs).mean) for k in figures),
                      num(epochs.mean), num(time_s.mean),
                      *([num(Stat.of(j.mfu for j in r.jobs).mean)] if mfu else []), r.status])
    return buf.getvalue()


def _label(row: Row, keys: list[str]) -> str:
    label = ", ".join(f"{k}={row.overrides.get(k, '')}" for k in keys if k != SEED) or row.jobs[0].path.name
    if len(row.jobs) > 1:
        label += f" (n={len(row.jobs)})"
    return label if row.jobs[0].status == "finished" else f"{label} ({row.jobs[0].status})"


def plots(rows: list[Row]) -> list[tuple[str, str, bytes]]:
    """(file name, title, PNG bytes): best validation perplexity, and bits per byte where the runs
    recorded it, against each swept parameter (mean with ±1 std error bars over seeds), and the learning
    curves of both (mean with a ±1 std band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    def png(fig) -> bytes:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        return buf.getvalue()

    def by_key(key: str, value, name: str, label: str, file: str) -> None:
        """`label` (mean ± std over seeds; `value(row)` -> (mean, std) or None) against the swept `key`."""
        scored = [(r, v) for r in rows if (v := value(r)) is not None]
        if not scored:
            return
        values = [r.overrides.get(key, "") for r, _ in scored]
        fig, ax = plt.subplots(figsize=(6, 4))
        try:
            xs = [float(v) for v in values]
        except ValueError:  # categorical values
            labels = sorted(set(values))
            xs = [labels.index(v) for v in values]
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.errorbar(xs, [m for _, (m, _) in scored], yerr=[sd or 0.0 for _, (_, sd) in scored], fmt="o", capsize=3)
        title = f"{name} by {key}"
        ax.set(title=title, xlabel=key, ylabel=f"{label} (mean ± std)")
        ax.grid(alpha=0.3)
        out.append((f"{file}_vs_{key.replace('/', '_')}.png", title, png(fig)))

    def curves(attr: str, name: str, label: str, file: str) -> None:
        """The rows' learning curves `attr` (mean with a ±1 std band over seeds)."""
        drawn = [(r, curve) for r in rows if (curve := r.curve_of(attr))]
        if attr != "curve" and not drawn:  # no run recorded it: no plot
            return
        fig, ax = plt.subplots(figsize=(6, 4))
        for r, curve in drawn:
            epochs, means, stds = zip(*curve)
            line, = ax.plot(epochs, means, marker=".", label=_label(r, keys))
            if len(r.jobs) > 1:
                lo = [m - (s or 0.0) for m, s in zip(means, stds)]
                hi = [m + (s or 0.0) for m, s in zip(means, stds)]
                ax.fill_between(epochs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        title = name + (" (mean ± std over seeds)" if any(len(r.jobs) > 1 for r in rows) else "")
        ax.set(title=title, xlabel="epoch (0 = the first, as in metrics.csv)", ylabel=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if 0 < len(rows) <= 12 and ax.get_lines():
            ax.legend(fontsize=7)
        out.append((file, title, png(fig)))

    def bpb(row: Row):
        stat = Stat.of(j.figures.get("val/bpb_best") for j in row.jobs)
        return None if stat.mean is None else (stat.mean, stat.std)

    out = []
    keys = [k for k in swept_keys(rows) if k != SEED]
    for key in keys if len(rows) > 1 else []:
        by_key(key, lambda r: None if r.val.mean is None else (r.val.mean, r.val.std), "Best validation perplexity",
               "best validation perplexity", "val_ppl")
        # bits per byte compare across tokenisations (nplm.data.text_units), per-token perplexity does not
        by_key(key, bpb, "Best validation bits per byte", "best validation bits per byte", "val_bpb")
    curves("curve", "Validation perplexity per epoch", "validation perplexity", "learning_curves.png")
    curves("bpb_curve", "Validation bits per byte per epoch", "validation bits per byte", "learning_curves_bpb.png")
    return out


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = arg.Parser("nplm-compare", __doc__)
    parser.add_argument("paths", nargs="+", type=arg.input_dir, help="run or sweep folders (searched recursively)")
    parser.add_argument("--markdown", type=arg.output_file, help="also write the table as Markdown to this file")
    parser.add_argument("--csv", type=arg.output_file, help="also write the table as CSV to this file")
    parser.add_argument("--plots", type=arg.output_dir, help="write PNG plots into this folder (created if missing)")
    parser.add_argument("--html", type=arg.output_file,
                        help="write one self-contained HTML page: the sortable table and the plots")
    args = parser.parse_args(argv)
    rows = group_seeds(find_jobs(args.paths))
    root = args.paths[0] if len(args.paths) == 1 else None
    header, body = table(rows, root)
    print(as_text(header, body))
    if args.markdown:
        arg.write_text(args.markdown, as_markdown(header, body), "--markdown")
    if args.csv:
        arg.write_text(args.csv, as_csv(rows, root), "--csv")
    images = plots(rows) if args.plots or args.html else []
    if args.plots:
        for name, _, data in images:
            arg.write_text(args.plots / name, data, "--plots")
            print(f"wrote {args.plots / name}")
    if args.html:
        from nplm.tracking.html_report import html_page

        title = f"nplm-compare: {', '.join(str(p) for p in args.paths)}"
        arg.write_text(args.html, html_page(title, header, body, images), "--html")
        print(f"wrote {args.html}")


if __name__ == "__main__":
    main()
