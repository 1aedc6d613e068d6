"""README.md is short, shows the two commands on its first screen, and its replication table is the one
experiments/replication_table.py writes from the committed result files, every figure from uncommitted code,
an unrecorded commit or an unfinished row marked, every command the one its result file recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import replication_table  # experiments/ (tests/conftest.py puts it on the path)

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_the_readme_is_read_in_ten_minutes():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_two_commands_are_on_the_first_screen():
    first_screen = "\n".join(README.read_text().splitlines()[:25])
    assert re.search(r"^make train +#", first_screen, re.M) and re.search(r"^make test +#", first_screen, re.M)


def test_the_replication_table_is_written_from_the_result_files():
    assert replication_table.readme_table(README.read_text()) == replication_table.table(), (
        "README.md's replication table differs from experiments/*/results/: python experiments/replication_table.py")


def table_rows() -> list[list[str]]:
    """The cells of the replication table's rows, as README.md holds them."""
    table = replication_table.readme_table(README.read_text())
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| experiment")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def unclean(result: dict) -> bool:
    """Uncommitted code or an unrecorded commit: the rule of the † mark, read from the file itself."""
    commit = result.get("git_commit", result.get("commit"))
    return not commit or commit == "unknown" or commit.endswith("dirty")


def unfinished(result: dict) -> bool:
    """Stopped by a time limit, or recorded as not converged: the rule of the * mark."""
    return result.get("converged") is False or str(result.get("stopped_by") or "").startswith("time limit")


def test_every_figure_from_a_dirty_or_unfinished_result_is_marked():
    rows = table_rows()
    assert len(rows) == len(replication_table.ROWS)
    for cells, row in zip(rows, replication_table.ROWS):
        files = [REPO / "experiments" / name.split("/")[0] / "results" / f"{name.split('/')[1]}.json"
                 for name in row.results]
        if row.awaited and not all(f.exists() for f in files):
            assert cells[2] == "not run yet", cells
            continue
        results = [json.loads(f.read_text()) for f in files]
        figure = re.fullmatch(r"\[([^\]]+)\]\((.+)\)", cells[2])
        assert figure and REPO / figure.group(2) == files[0], cells[2]  # the figure links to its first result file
        marks = re.sub(r"^[-+]?[\d.,]+x?%?", "", figure.group(1))
        assert ("\u2020" in marks) == any(unclean(r) for r in results), (cells[0], figure.group(1), files)
        assert ("*" in marks) == any(unfinished(r) for r in results), (cells[0], figure.group(1), files)


@pytest.mark.parametrize("commit, mark", [("3a4b0201583b0c73a09ed6d9bb32429483aa4aa6", ""),
                                          ("3a4b0201583b0c73a09ed6d9bb32429483aa4aa6-dirty", "\u2020"),
                                          ("789f0e2+dirty", "\u2020"), (None, "\u2020")])
def test_a_row_carries_the_marks_of_its_result_files(tmp_path, monkeypatch, commit, mark):
    folder = tmp_path / "experiments" / "bengio2003" / "results"
    folder.mkdir(parents=True)
    cut = {"git_commit": commit, "test": 237.9, "stopped_by": "time limit (3 epochs after the best)"}
    (folder / "a.json").write_text(json.dumps({"git_commit": commit, "test": 244.75}))
    (folder / "b.json").write_text(json.dumps(cut))
    monkeypatch.setattr(replication_table, "EXPERIMENTS", tmp_path / "experiments")
    row = replication_table.Row("MLP1", "nplm-train", ("bengio2003/a",), replication_table.test_ppl, "268")
    link = f"[244.8{mark}](experiments/bengio2003/results/a.json)"
    assert replication_table.line(row) == f"| MLP1 | `nplm-train` | {link} | 268 |"
    both = replication_table.Row("MLP1 / MLP9", "nplm-train", ("bengio2003/a", "bengio2003/b"),
                                 replication_table.test_gap, "-")
    assert f"[+2.9%*{mark}](experiments/bengio2003/results/a.json)" in replication_table.line(both)
    missing = replication_table.Row("x", "nplm-train", ("bengio2003/gone",), replication_table.test_ppl, "-")
    with pytest.raises(SystemExit, match=r"results/gone\.json: no such result file"):
        replication_table.line(missing)


# Overrides a result file's command may carry beyond the command the table shows: where the run's records and
# logs went (they change no figure), and settings its experiment file has made its default since.
UNSHOWN = re.compile(r"^(?:logger|threads)=")
NOW_THE_DEFAULT = {"callbacks.ema_decay=0.9995": ("sun2021/brown.yaml", "ema_decay: 0.9995")}


def test_every_command_shown_is_the_one_its_result_file_recorded():
    """A `nplm-train` command of the table, run as shown, is the run its figure came from: every override it
    shows is in the result file's command, and every override of the result file that changes the run (a time
    limit, say) is shown."""
    import shlex

    from nplm.config import CONF_DIR

    checked = 0
    for row in replication_table.ROWS:
        if not row.command.startswith("nplm-train ") or "not run yet" in replication_table.line(row):
            continue
        recorded = replication_table.results_of(row)[0]["command"]
        shown, ran = set(shlex.split(row.command)), set(shlex.split(recorded))
        assert shown <= ran, (row.command, recorded)
        for override in ran - shown:
            if UNSHOWN.match(override):
                continue
            assert override in NOW_THE_DEFAULT, f"{row.command}: the result ran with {override} ({recorded})"
            file, line = NOW_THE_DEFAULT[override]
            assert line in (CONF_DIR / "experiment" / file).read_text(), (override, file)
        checked += 1
    assert checked >= 6


def test_an_awaited_row_without_its_result_reads_not_run_yet(tmp_path, monkeypatch):
    import replication_table

    monkeypatch.setattr(replication_table, "EXPERIMENTS", tmp_path / "experiments")
    row = replication_table.Row("x", "nplm-train", ("bengio2003/gone",), replication_table.test_ppl, "-", awaited=True)
    assert replication_table.line(row) == "| x | `nplm-train` | not run yet | - |"
