"""The documents a user reads can be trusted: they describe the project, not how it was developed; they name
no commit except as the provenance a generator writes beside a figure; every experiment README is read in a
few minutes; and every figure an experiment's hand-typed text quotes comes from a committed result file.

User documents: README.md, docs/*.md, every experiment's README.md and INTRO.md, the READMEs of the data
shipped in the package, CONTRIBUTING.md and CHANGELOG.md where they exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


def user_documents() -> list[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(EXPERIMENTS.glob("*/README.md")),
             *sorted(EXPERIMENTS.glob("*/INTRO.md")), *sorted((REPO / "src/nplm/data/shipped").glob("*/README.md")),
             *(REPO / name for name in ("CONTRIBUTING.md", "CHANGELOG.md") if (REPO / name).exists())]
    return found


DOCUMENTS = user_documents()
# Documents another change is rewriting, with what is left in them; strict: the test fails once they pass, so
# that the entry goes.
PENDING: dict[str, str] = {}  # document -> why it is expected to fail, until it is fixed


def name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def pending(paths: list[Path], key=name) -> list:
    """`paths` as parameters, those named in PENDING marked as expected to fail (strictly)."""
    return [pytest.param(p, marks=pytest.mark.xfail(reason=PENDING[key(p)], strict=True)) if key(p) in PENDING
            else p for p in paths]


# -- the development process ------------------------------------------------------------------------------
# Words that describe how the project was made (its work tracking, the machines it was made on, what git
# keeps of it) rather than what it is: a user can act on none of them.
PROCESS = {
    "an issue number": r"\bissues?\s*#?\d+",
    "a session": r"\bsessions?\b",
    "figures typed in by hand": r"\btyped\s+in\b",
    "a machine lent or borrowed": r"\b(?:lent|borrowed)\b",
    "the development machine": r"\bdevelopment\s+machine\b",
    "the 2-core machine it was made on": r"\b2-core\b",
    "this project's machine": r"\bthis\s+project's\s+[^.\n]*\bmachine\b",
    "waiting for a GPU": r"\bwhen\s+a\s+GPU\s+is\b",
    "a deleted script": r"\bdeleted\s+scripts?\b",
    "what git keeps": r"\bgit\s+keeps\b|\bgit(?:'s)?\s+history\b|\bgit\s+(?:show|log)\b",
    "the brief": r"\bthe\s+brief\b",
}


@pytest.mark.parametrize("path", pending(DOCUMENTS), ids=name)
def test_no_user_document_describes_the_development_process(path):
    text = path.read_text()
    found = [(what, m.group(0)) for what, pattern in PROCESS.items() for m in re.finditer(pattern, text, re.I)]
    assert not found, f"{name(path)}: {found}"


def test_the_process_patterns_catch_what_they_name():
    caught = ["see issue #12", "issue 7", "in this session", "typed in at", "no GPU was lent", "a borrowed H100",
              "the shared 2-core development machine", "this project's development machine",
              "to be measured when a GPU is lent again", "the deleted scripts", "git keeps it", "in git history"]
    for text in caught:
        assert any(re.search(p, text, re.I) for p in PROCESS.values()), text
    for text in ("an H100 (the machine column)", "two CPU cores", "2 cores", "excellent", "the git commit", "issues"):
        assert not any(re.search(p, text, re.I) for p in PROCESS.values()), text


# -- commits ------------------------------------------------------------------------------------------------
COMMIT = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w])")
# Provenance a generator writes beside a figure, the only places a commit may appear (each result file holds
# it too): a table column of commits or checksums; a measurement's stamp "<date> UTC, commit <sha>" (the bench
# harness, experiments/scale/readme.py); the footnote of the † mark (replication.provenance_footnote); a row's
# "`<command>` at `<sha>`" (experiments/tokenizations); and the commit of an upstream source ("`owner/repo`,
# commit <sha>": the shipped data's origin).
PROVENANCE_COLUMNS = ("commit", "code", "sha256")
PROVENANCE = [
    re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC, commit [0-9a-f]{7,40}(?:[-+]dirty)?"),
    re.compile(r"^\u2020 trained or measured from uncommitted code \([^)]*\)", re.M),
    re.compile(r"` at `[0-9a-f]{7,40}(?:[-+]dirty)?`"),
    re.compile(r"`[\w.-]+/[\w.-]+`, commit [0-9a-f]{40}\b"),
]


def without_provenance_columns(text: str) -> str:
    """`text` with the cells of every table column headed commit, code or sha256 emptied."""
    out, hidden = [], set()
    for line in text.splitlines():
        if not line.startswith("|"):
            hidden = set()
            out.append(line)
            continue
        cells = line.strip().strip("|").split("|")
        if not hidden and not re.fullmatch(r"[|:\- ]+", line):  # a header row
            hidden = {i for i, cell in enumerate(cells) if cell.strip().strip("`").lower() in PROVENANCE_COLUMNS}
            hidden = hidden or {-1}
        out.append("|".join("" if i in hidden else cell for i, cell in enumerate(cells)))
    return "\n".join(out)


def stray_commits(text: str) -> list[str]:
    text = without_provenance_columns(text)
    for pattern in PROVENANCE:
        text = pattern.sub("", text)
    return COMMIT.findall(text)


@pytest.mark.parametrize("path", DOCUMENTS, ids=name)
def test_no_user_document_names_a_commit_outside_provenance(path):
    found = stray_commits(path.read_text())
    assert not found, f"{name(path)}: {found} (a figure's commit belongs in its result file)"


def test_the_commit_rule_tells_provenance_from_prose():
    assert stray_commits("Results before the marks are in git history (commit 1df42ac).") == ["1df42ac"]
    assert stray_commits("trained at 3378c62 on this machine") == ["3378c62"]
    assert stray_commits("| row | commit |\n|---|---|\n| a | 2599cde |\n\nafter 2599cde") == ["2599cde"]
    assert stray_commits("2026-11-25 03:00 UTC, commit e5a9e4e, AMD EPYC") == []
    assert stray_commits("| file | sha256 |\n|---|---|\n| a | `f622d02d82175556...` |") == []
    assert stray_commits("\u2020 trained or measured from uncommitted code (`021d5c9-dirty`): no commit") == []
    assert stray_commits("sha256 `86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed`") == []
    assert stray_commits("MLP1 335.1 / 308.5, 1,161,192 tokens, 2.05e9 tokens, cafe, 1e-5") == []


# -- length ------------------------------------------------------------------------------------------------
README_LINES = 250
EXPERIMENT_READMES = sorted(EXPERIMENTS.glob("*/README.md"))


@pytest.mark.parametrize("path", EXPERIMENT_READMES, ids=lambda p: p.parent.name)
def test_every_experiment_readme_is_read_in_a_few_minutes(path):
    lines = len(path.read_text().splitlines())
    assert lines <= README_LINES, f"{name(path)} has {lines} lines: tables and verdict first, method after, stories out"


# -- figures -------------------------------------------------------------------------------------------------
# A decimal figure as a document prints it: 168.52, 1.5264, 1,003.5, +9.7 (of +9.7%), 13.1 (of 13.1x);
# not a version (2.13.0), a date, an exponent's mantissa (2.05e9) or part of a name (mlp1.5).
FIGURE = re.compile(r"(?<![\w.,/^])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)\.\d+(?!\d|\.\d|e-?\d|[A-LN-Za-wyz_])")
# Figures an experiment's text quotes from a paper or another source, not from a result file: the pattern
# the figure appears in, and where it comes from.
QUOTED = {
    "bengio2003": [],
    "morin2005": [
        (r"\+13\.0%", "Morin & Bengio's WordNet tree against their softmax, 220.7 against 195.3 (their Table 3)"),
        (r"1\.4% below its softmax", "Morin & Bengio's importance sampling against their softmax (their Table 3)"),
        (r"1\.2 GHz", "the paper's machine"),
        (r"268\.7", "the paper's interpolated trigram (their Table 3)"),
    ],
    "tinyshakespeare_char": [
        (r"1\.4697", "nanoGPT's README: its best validation loss"),
        (r"10\.7M parameters", "nanoGPT's README: its model's size"),
    ],
    "successors": [
        (r"31\.7 test", "Sun & Iyyer's README: their WikiText-103 test perplexity"),
        (r"114\.5", "Zaremba et al.'s Table 1: the small LSTM on the Penn Treebank"),
        (r"82\.7|78\.4", "Zaremba et al.'s Table 1: the medium and large LSTMs on the Penn Treebank"),
    ],
    "sun2021": [(r"31\.7 test", "Sun & Iyyer's README: their WikiText-103 test perplexity")],
}


def numbers(value, out: set[float]) -> set[float]:
    """Every number a result file holds: its values, and the numbers inside its strings (commands, notes)."""
    if isinstance(value, dict):
        for v in value.values():
            numbers(v, out)
    elif isinstance(value, list):
        for v in value:
            numbers(v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.add(float(value))
    elif isinstance(value, str):
        out.update(float(m.replace(",", "")) for m in re.findall(r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?", value)
                   if m.replace(",", "").replace(".", "", 1).replace("e", "", 1).replace("-", "", 1).isdigit())
    return out


def result_numbers(experiment: str) -> set[float]:
    out: set[float] = set()
    for path in (EXPERIMENTS / experiment).rglob("*.json"):
        numbers(json.loads(path.read_text()), out)
    return out


def prose(text: str) -> str:
    """What a reader reads as figures: code blocks, code spans (commands, settings) and link targets left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"^    .*$", "", text, flags=re.M)  # an indented code block
    text = re.sub(r"`[^`]+`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def figures(text: str) -> list[str]:
    return [m.group(0) for m in FIGURE.finditer(prose(text))]


def shown(figure: str, values: set[float]) -> bool:
    """Whether some value prints as `figure` (at its decimals): as itself, as a per cent of a fraction, or in
    thousands or millions (12.2M)."""
    digits = figure.lstrip("+-").replace(",", "")
    places, target = len(digits.split(".")[1]), float(digits)
    return any(round(scaled, places) == target
               for v in values for scaled in (abs(v), abs(100 * v), abs(v) / 1e3, abs(v) / 1e6))


def typed_text(experiment: Path) -> tuple[str, str]:
    """(the text a person typed, the text a generator wrote from the result files) of an experiment's README:
    a driver's README is its INTRO.md with generated tables; the bench README's tables sit between markers."""
    readme = (experiment / "README.md").read_text()
    if (experiment / "INTRO.md").exists():
        intro = (experiment / "INTRO.md").read_text()
        generated = readme
        for part in intro.split("<!-- tables -->\n"):
            generated = generated.replace(part, "")
        return intro, generated
    begin = re.search(r"<!-- tables: .*?-->", readme)
    if begin and "<!-- end of tables -->" in readme:
        start, end = begin.start(), readme.index("<!-- end of tables -->")
        return readme[:start] + readme[end:], readme[start:end]
    return readme, ""


def cited(experiment: Path, text: str) -> set[str]:
    """The experiment and every experiment its text links to or names."""
    named = set(re.findall(r"\.\./(\w+)/", text)) | set(re.findall(r"experiments/(\w+)", text))
    return {experiment.name} | {n for n in named if (EXPERIMENTS / n).is_dir()}


EXPERIMENT_DIRS = sorted(p.parent for p in EXPERIMENTS.glob("*/README.md"))


@pytest.mark.parametrize("experiment", pending(EXPERIMENT_DIRS, key=lambda p: name(p / "INTRO.md")),
                         ids=lambda p: p.name)
def test_every_figure_an_experiment_quotes_comes_from_a_result_file(experiment):
    """Each decimal figure of the typed text (INTRO.md, or the README outside its generated tables) is a value
    of a result file of the experiment or of one it cites, as rounded where it is printed, or a figure the
    generated tables show; a figure quoted from a paper is listed in QUOTED with its source."""
    typed, generated = typed_text(experiment)
    for pattern, _ in QUOTED.get(experiment.name, []):
        typed = re.sub(pattern, "", typed)
    values = set().union(*(result_numbers(e) for e in cited(experiment, typed)))
    values |= {float(f.lstrip("+-").replace(",", "")) for f in FIGURE.findall(generated)}
    missing = [f for f in figures(typed) if not shown(f, values)]
    assert not missing, (f"experiments/{experiment.name}: figures with no result file behind them: {missing}; "
                         "quote a result file's value, or list a paper's figure in QUOTED with its source")


def test_the_figure_rule_finds_what_a_reader_reads():
    assert figures("MLP1 335.1 / 308.5 (+9.7%), 13.1x, 1,003.5 ms, 12.2M parameters") == [
        "335.1", "308.5", "+9.7", "13.1", "1,003.5", "12.2"]
    assert figures("torch 2.13.0, `optimizer.lr=0.384`, 2.05e9 tokens, [a](results/x-lr0.384.json)") == []
    assert shown("244.8", {244.75}) and shown("12.2", {12_225_345.0}) and shown("4.4", {0.0442})
    assert not shown("244.7", {244.75})
