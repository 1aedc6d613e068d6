"""Docstrings explain; figures live in benchmark READMEs.

A measured figure in a docstring or a comment (a speed ratio, a timing, the GPU a timing was taken on, a
share of a step's time) goes stale the day the code or the machine changes, and nothing checks it there.
The benchmark READMEs and result files (experiments/bench/README.md, experiments/*/results/) carry the
figures with their date, commit and machine; the sources say why, qualitatively, and point there.

Every .py file under src/nplm is read with `ast` (module, class and function docstrings) and `tokenize`
(comments, consecutive comment lines as one block). What fails, named file:line with the text:

- SPEED_RATIO: a number followed by "x" ("1.22x", "2-3x", "~7x").
- DURATION: a duration in ns/µs/us/ms/s/seconds/minutes within NEAR characters of a measurement word
  (took, takes, costs, ran, measured, median, faster, slower, vs, host time, per step, ...): "takes
  ~17 ms of host time", "about 0.1 s per order".
- GPU: a GPU model name (H100, H200, A100, V100, B200, RTX 4090), anywhere: in a docstring it names
  where a timing was taken (the peak table of `nplm.training.peak` names its GPUs in code, not comments).
- SHARE_OF_TIME: a percentage of a step, an epoch or a time ("60% of a training step").

Figures that are definitions, formula constants, defaults, sizes, thresholds the code uses and paper
citations match none of these and stay. The exclusions, each for a reason:

- a hex literal or format spec ("0x1F", "#04x") and a number inside a word ("bf16x"): not ratios (the
  patterns require a word boundary before the number and after the x);
- "Nx" inside [...] on its line ("[B, 4x]"): a shape annotation, where it is a size (`_in_brackets`);
- "s." followed by a number ("Bengio et al. 2003 s. 4"): a section citation, not seconds;
- a clock reading glued to letters ("2m20s", a progress line's ETA): an example of output format, and
  a duration with no measurement word near it (a constant's unit, "seconds of matmuls") is no result;
- the exact phrases in EXCLUSIONS (one today).

`test_the_patterns_*` pin what each pattern catches and spares.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nplm"

SPEED_RATIO = re.compile(r"(?<![\w.#])~?\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?x\b")
DURATION = re.compile(r"(?<![\w.])~?\d+(?:[.,]\d+)?(?:\s*(?:[-–]|to)\s*\d+(?:\.\d+)?)?\s*"
                      r"(?:ns|µs|μs|us|ms|s|secs?|seconds?|mins?|minutes?)\b(?!\.\s*\d)")
MEASUREMENT_WORD = re.compile(r"\b(?:took|takes?|taking|ran|costs?|costing|spent|spends?|measured|"
                              r"medians?|timed|timings?|faster|slower|vs|versus|wall|"
                              r"(?:host|device|GPU|CPU|CUDA)[- ]time|"
                              r"per (?:step|batch|epoch|round|call|order))\b", re.IGNORECASE)
NEAR = 60  # characters either side of a duration searched for a measurement word
GPU = re.compile(r"\b(?:[ABHV]100|H200|B200|(?:RTX\s*)?4090)\b")
SHARE_OF_TIME = re.compile(r"\d+(?:\.\d+)?\s*%\s+of\s+(?:a|an|the)\b[^.;:\n]{0,40}?\b(?:steps?|epochs?|time)\b")

# Exact phrases the patterns would flag that are no measured figure, ignored wherever they occur, each
# with its reason. Keep this short: a new measured figure is fixed in the source (a qualitative reason and
# a pointer to the README or result file that records it), never added here.
EXCLUSIONS: dict[str, str] = {
    "wandb 0.2x": "a wandb release series (0.20 to 0.29; config/schema.py), not a ratio",
}


def _in_brackets(text: str, start: int) -> bool:
    """Whether `start` lies inside [...] on its line: a shape annotation ("[B, 4x]", "[2, 2 x widest, B]")
    where a number before an x is a size, not a ratio."""
    line = text[text.rfind("\n", 0, start) + 1:start]
    return line.count("[") > line.count("]")


def _excluded(text: str, start: int, end: int) -> bool:
    for phrase in EXCLUSIONS:
        for hit in re.finditer(re.escape(phrase), text):
            if hit.start() <= start and end <= hit.end():
                return True
    return False


def findings(text: str) -> list[tuple[int, str, str]]:
    """(offset, rule, matched text) of every measured figure in `text` (one docstring or comment block)."""
    found = []
    for m in SPEED_RATIO.finditer(text):
        if not _in_brackets(text, m.start()) and not _excluded(text, m.start(), m.end()):
            found.append((m.start(), "speed ratio", m.group()))
    flat = text.replace("\n", " ")
    for m in DURATION.finditer(flat):
        near = flat[max(0, m.start() - NEAR): m.end() + NEAR]
        if MEASUREMENT_WORD.search(near) and not _excluded(flat, m.start(), m.end()):
            found.append((m.start(), "duration of a measurement", m.group()))
    for m in GPU.finditer(text):
        if not _excluded(text, m.start(), m.end()):
            found.append((m.start(), "GPU model name", m.group()))
    for m in SHARE_OF_TIME.finditer(flat):
        if not _excluded(flat, m.start(), m.end()):
            found.append((m.start(), "share of a step's time", m.group()))
    return found


def documentation(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every module, class and function docstring of `path` and of every block of
    comments on consecutive lines."""
    source = path.read_text(encoding="utf-8")
    blocks = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                blocks.append((first.value.lineno, first.value.value))
    comments: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            line, text = token.start[0], token.string.lstrip("#").strip()
            if comments and comments[-1][0] + comments[-1][1].count("\n") == line - 1:
                comments[-1] = (comments[-1][0], comments[-1][1] + "\n" + text)
            else:
                comments.append((line, text))
    return blocks + comments


def line_of(text: str, offset: int) -> str:
    """The line of `text` that holds `offset`."""
    end = text.find("\n", offset)
    return text[text.rfind("\n", 0, offset) + 1: len(text) if end < 0 else end].strip()


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_the_sources_are_there():
    assert len(sources()) > 50


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_measured_figures_in_docstrings_or_comments(path):
    problems = []
    for first_line, text in documentation(path):
        for offset, rule, match in findings(text):
            # offsets of the flattened text (newline -> space) are those of `text`
            where = f"{path.relative_to(SRC.parent.parent)}:{first_line + text[:offset].count(chr(10))}"
            problems.append(f"{where}: {rule} {match!r}: {line_of(text, offset)}")
    assert not problems, ("measured figures in docstrings or comments (explain the reason qualitatively and "
                          "point to the benchmark README or result file that records the figure):\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("text", [
    "torch's CPU tanh and its backward take ~7x sigmoid's time here",
    "the step 1.22x faster",
    "is 2-3x faster there than nn.Embedding's",
    "the Tiny Shakespeare model's training step 1.05-1.07x faster",
    "torch.randperm of Brown's million windows takes ~17 ms of host time",
    "the build takes about 50 s on one core",
    "nn.Embedding's (24 vs 78 us for the model's batch)",
    "converting 267,735 pairs\ntakes ~0.5 s",
    "a split into all ~4,000 views at once: ~5 ms of host time",
    "counts a stream (L = 800k: about 0.1 s per order)",
    "12 ms of an H200's WikiText-103 step",
    "measured on an A100",
    "the draws were 23% of a 1-thread training step",
    "took 60% of the step's time",
])
def test_the_patterns_catch_measured_figures(text):
    assert findings(text), text


@pytest.mark.parametrize("text", [
    "byte {data[err.start]:#04x} and 0x1F",  # hex
    "a [B, 4x] buffer, ping-pong buffers [2, 2 x widest, B]",  # shapes
    "(256 x 64 x 256 = 4.2 M elements)",  # a product of sizes
    "W&B's own rules (wandb 0.2x, wandb_settings.py)",  # EXCLUSIONS
    "MEASURE_S = 0.2  # seconds of matmuls per measurement",  # a constant's unit
    "| Brown et al. (1992), Bengio et al. 2003 s. 4 |",  # a section citation
    "epoch 3  val  batch 40/110  95,112 tokens/s  ETA 3s",  # a sample progress line
    "45s, 4m12s, 1h02m.",  # a format's examples
    "COMPACT_WASTE = 1.25: padding would add more than 25% (nll)",  # a threshold
    "the head holds the 5% most frequent words",  # a default
    "their Table 1: 114.5",  # a paper citation
    "torch's CPU tanh and its backward are slower than sigmoid (experiments/bench/README.md measures it)",
])
def test_the_patterns_spare_what_is_no_measured_figure(text):
    assert not findings(text), findings(text)
