"""nplm-compare: seeds of one setting become one row (mean ± std, n), failed jobs keep their overrides
and error, plots have titles and integer epoch ticks counted from 0, and --html writes one
self-contained page that a real headless browser renders."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from nplm.cli.compare import Stat, find_jobs, group_seeds, main, plots, table

HISTORY = ["epoch", "step", "train/ppl", "val/ppl", "val/ppl_best"]


def fake_job(root: Path, name: str, overrides: list[str], val: list[float] | None, test: float | None,
             status: str = "finished", error: str = "", hydra: bool = True) -> Path:
    """A job folder as nplm-train leaves it: .hydra/overrides.yaml, metrics.json, metrics.csv."""
    job = root / name
    job.mkdir(parents=True)
    if hydra:
        (job / ".hydra").mkdir()
        (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    record = {"status": status, "overrides": overrides, "metrics": {}}
    if error:
        record["error"] = error
    if val:
        with open(job / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, HISTORY)
            w.writeheader()
            for epoch, ppl in enumerate(val):  # epoch 0 is the first, as EpochHistory writes it
                w.writerow({"epoch": epoch, "step": 10 * (epoch + 1), "train/ppl": ppl + 5, "val/ppl": ppl,
                            "val/ppl_best": min(val[:epoch + 1])})
        if status == "finished":
            record.update(epochs=len(val), wall_time_s=12.0,
                          metrics={"val/ppl_best": min(val), "test/ppl": test})
    (job / "metrics.json").write_text(json.dumps(record))
    return job


@pytest.fixture
def sweep(tmp_path) -> Path:
    """lr 0.1 x seeds 0,1,2 and lr 0.01 x seeds 0,1 finished; one running; one failed before Hydra's folder."""
    root = tmp_path / "sweep"
    curves = {("0.1", "0"): [30.0, 20.0, 10.0], ("0.1", "1"): [32.0, 22.0, 12.0], ("0.1", "2"): [34.0, 24.0, 14.0],
              ("0.01", "0"): [40.0, 35.0, 30.0], ("0.01", "1"): [42.0, 37.0, 34.0]}
    for i, ((lr, seed), curve) in enumerate(curves.items()):
        fake_job(root, str(i), [f"optimizer.lr={lr}", f"seed={seed}"], curve, min(curve) + 1)
    running = fake_job(root, "6", ["optimizer.lr=0.5", "seed=0"], [50.0, 45.0], None, status="running")
    with open(running / "metrics.csv", "a") as f:
        f.write("2,30,4")  # a row cut off while being written
    fake_job(root, "5", ["optimizer.lr=-1", "seed=0"], None, None, status="failed",
             error="optimizer.lr=-1: must be a finite number > 0", hydra=False)
    return root


def test_seeds_become_one_row_with_mean_std_and_n(sweep):
    rows = group_seeds(find_jobs([sweep]))
    assert [len(r.jobs) for r in rows] == [3, 2, 1, 1]
    best, second, running, failed = rows
    assert best.overrides == {"optimizer.lr": "0.1"}
    assert best.val.mean == pytest.approx(12.0) and best.val.std == pytest.approx(2.0) and best.val.n == 3
    assert best.test.mean == pytest.approx(13.0) and best.test.std == pytest.approx(2.0)
    assert second.val.mean == pytest.approx(32.0) and second.val.std == pytest.approx(8 ** 0.5)
    assert best.curve == [(0, 32.0, 2.0), (1, 22.0, 2.0), (2, 12.0, 2.0)]  # epochs from 0, as metrics.csv
    header, body = table(rows, sweep)
    assert header == ["job", "optimizer.lr", "seed", "n", "val ppl (best)", "test ppl", "epochs", "time (s)", "status"]
    assert body[0] == ["0, 1, 2", "0.1", "", "3", "12.00 ± 2.00", "13.00 ± 2.00", "3", "12", "finished"]
    assert body[1][4] == "32.00 ± 2.83"
    # a running job is its own row, its best so far from metrics.csv (the half-written row skipped)
    assert body[2] == ["6", "0.5", "0", "1", "45.00", "", "2", "", "running"]
    # the failed job has no .hydra folder: its overrides come from metrics.json, its error is shown
    assert body[3] == ["5", "-1", "0", "1", "", "", "", "", "failed: optimizer.lr=-1: must be a finite number > 0"]


def test_model_flop_utilisation_is_a_column_where_the_runs_have_it(tmp_path, capsys):
    root = tmp_path / "runs"
    for name, mfu in (("a", 0.0125), ("b", 0.0375), ("c", None)):
        job = fake_job(root, name, [f"model.embed_dim={name}"], [20.0 if name == "c" else 10.0], 11.0)
        if mfu is not None:
            record = json.loads((job / "metrics.json").read_text())
            record["metrics"]["train/mfu"] = mfu
            (job / "metrics.json").write_text(json.dumps(record))
    main([str(root), "--csv", str(tmp_path / "t.csv")])
    header, *_, c_row = capsys.readouterr().out.splitlines()
    assert "MFU" in header.split() and c_row.split()[-1] == "finished"
    header, body = table(group_seeds(find_jobs([root])), root)
    assert header[-2:] == ["MFU", "status"]
    assert [(r[0], r[-2]) for r in body] == [("a", "1.25%"), ("b", "3.75%"), ("c", "")]
    assert [r["mfu_mean"] for r in csv.DictReader(open(tmp_path / "t.csv"))] == ["0.0125", "0.0375", ""]
    header, _ = table(group_seeds(find_jobs([root / "c"])), root)
    assert "MFU" not in header  # no run recorded it: no column


def test_cli_writes_markdown_csv_plots_and_creates_missing_folders(sweep, tmp_path, capsys):
    out = tmp_path / "new" / "deeper"
    main([str(sweep), "--markdown", str(out / "t.md"), "--csv", str(out / "t.csv"), "--plots", str(out / "plots")])
    printed = capsys.readouterr().out
    assert "12.00 ± 2.00" in printed and "failed: optimizer.lr=-1" in printed
    assert (out / "t.md").read_text().count("\n") == 6  # header, rule, 4 rows
    lines = list(csv.DictReader(open(out / "t.csv")))
    assert float(lines[0]["val_ppl_mean"]) == pytest.approx(12.0) and float(lines[0]["val_ppl_std"]) == 2.0
    assert lines[0]["n"] == "3" and lines[3]["val_ppl_mean"] == ""
    assert (lines[0]["epochs_mean"], lines[0]["time_s_mean"], lines[3]["epochs_mean"]) == ("3.0", "12.0", "")
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["learning_curves.png", "val_ppl_vs_optimizer.lr.png"]
    assert not list(out.rglob(".*.tmp"))


def test_plots_have_titles_labels_and_integer_epoch_ticks(sweep, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figures to inspect them
    images = plots(group_seeds(find_jobs([sweep])))
    assert [(name, title) for name, title, _ in images] == [
        ("val_ppl_vs_optimizer.lr.png", "Best validation perplexity by optimizer.lr"),
        ("learning_curves.png", "Validation perplexity per epoch (mean ± std over seeds)")]
    assert all(data[:8] == b"\x89PNG\r\n\x1a\n" for _, _, data in images)
    for fig in figures:
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    curves = figures[-1].axes[0]
    assert curves.get_xlabel() == "epoch (0 = the first, as in metrics.csv)"
    ticks = [t for t in curves.get_xticks() if curves.get_xlim()[0] <= t <= curves.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks) and min(ticks) == 0
    assert len(curves.collections) == 2  # a ±std band for each row with several seeds
    assert list(curves.get_lines()[0].get_xdata()) == [0, 1, 2]


def test_html_report_is_self_contained(sweep, tmp_path):
    page = tmp_path / "r" / "report.html"
    main([str(sweep), "--html", str(page)])
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 2
    assert not re.search(r"(src|href)=\"(https?:)?//", text)  # nothing fetched from the network
    assert "<td>12.00 ± 2.00</td>" in text and text.count("<tr>") == 5


CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]


@pytest.mark.slow  # a browser: a process of its own
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)")
def test_html_report_renders_in_headless_chromium(sweep, tmp_path):
    page = tmp_path / "report.html"
    main([str(sweep), "--html", str(page)])
    # After load: record each image's decoded width, then click the "test ppl" header twice (descending).
    probe = ("<script>window.addEventListener('load', () => {"
             "document.body.dataset.widths = Array.from(document.images).map(i => i.naturalWidth).join(',');"
             "const th = Array.from(document.querySelectorAll('#runs th')).find(h => h.textContent == 'test ppl');"
             "th.click(); th.click(); });</script>")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", probe + "</body>"))
    dom = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          probed.as_uri()], capture_output=True, text=True, timeout=120).stdout
    widths = re.search(r'data-widths="([\d,]+)"', dom)
    assert widths and [int(w) > 300 for w in widths.group(1).split(",")] == [True, True]  # both PNGs decoded
    firsts = re.findall(r"<tr><td>([^<]*)</td>", dom)
    assert firsts[:2] == ["3, 4", "0, 1, 2"]  # by test ppl descending (33, 13), the blank ones last
    assert sorted(firsts[2:]) == ["5", "6"]


@pytest.mark.slow
def test_a_real_seed_sweep_is_one_row(tmp_path, capsys):
    """nplm-train -m ... seed=0,1, then nplm-compare: one row, n=2, the mean of the two runs' numbers."""
    import statistics

    from conftest import run_cli
    from nplm.cli.train import main as train_main

    sweep = tmp_path / "sweep"
    done = run_cli(train_main, "-m", "corpus=toy", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=8",
                   "trainer.max_epochs=3", "seed=0,1", "logger=none", "threads=1", f"hydra.sweep.dir={sweep}",
                   f"paths.data_dir={tmp_path}", cwd=tmp_path)
    assert done.code == 0, done.err[-2000:]
    records = [json.loads((sweep / j / "metrics.json").read_text()) for j in ("0", "1")]
    vals = [r["metrics"]["val/ppl_best"] for r in records]
    assert vals[0] != vals[1]  # the seeds gave different runs
    (row,) = group_seeds(find_jobs([sweep]))
    assert row.val.n == 2 and row.val.mean == pytest.approx(statistics.fmean(vals))
    assert row.val.std == pytest.approx(statistics.stdev(vals))
    with open(sweep / "0" / "metrics.csv") as f:
        epochs = [int(r["epoch"]) for r in csv.DictReader(f)]
    assert epochs == [0, 1, 2] and [e for e, _, _ in row.curve] == epochs  # the plots' epochs are the CSV's
    main([str(sweep)])
    assert f"{statistics.fmean(vals):.2f} ± {statistics.stdev(vals):.2f}" in capsys.readouterr().out


def test_runs_with_bits_per_byte_get_its_plots_too(tmp_path, monkeypatch):
    """A tokenisation sweep: per-token perplexities do not compare, bits per byte do; each run's val/bpb curve
    (metrics.csv) and best (metrics.json) are plotted beside the perplexity's."""
    import matplotlib.pyplot as plt

    root = tmp_path / "sweep"
    for i, (size, bpb) in enumerate((("512", [2.8, 2.5, 2.4]), ("1024", [2.9, 2.6, 2.3]))):
        job = fake_job(root, str(i), [f"corpus.vocab_size={size}"], [40.0 + i, 30.0, 20.0 + i], 21.0)
        rows = list(csv.DictReader(open(job / "metrics.csv")))
        with open(job / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, [*HISTORY, "val/bpb"])
            w.writeheader()
            for row, value in zip(rows, bpb):
                w.writerow({**row, "val/bpb": value})
        record = json.loads((job / "metrics.json").read_text())
        record["metrics"]["val/bpb_best"] = min(bpb)
        (job / "metrics.json").write_text(json.dumps(record))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    images = plots(group_seeds(find_jobs([root])))
    assert [name for name, _, _ in images] == ["val_ppl_vs_corpus.vocab_size.png", "val_bpb_vs_corpus.vocab_size.png",
                                               "learning_curves.png", "learning_curves_bpb.png"]
    by_size = figures[1].axes[0]
    assert by_size.get_ylabel() == "best validation bits per byte (mean ± std)"
    assert sorted(by_size.lines[0].get_ydata()) == [2.3, 2.4]
    assert [list(line.get_ydata()) for line in figures[3].axes[0].get_lines()] == [[2.8, 2.5, 2.4], [2.9, 2.6, 2.3]]


def test_seeds_with_an_infinite_perplexity_have_a_mean_and_no_spread():
    # a seed whose validation never improved on inf (or diverged): statistics.stdev raised AttributeError on it
    stat = Stat.of([12.0, math.inf, None])
    assert (stat.mean, stat.std, stat.n) == (math.inf, None, 2)
    assert str(stat) == "inf"
    assert Stat.of([10.0, 14.0]).std == pytest.approx(8 ** 0.5)
