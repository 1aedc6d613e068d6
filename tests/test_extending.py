"""docs/extending.md: its worked example (a model's module, its yaml and its test) works as written,
in a copy of the package with nothing else changed; and a new head, its module and its yaml alone, is put
through the registry-driven conformance tests of the repository's own test files, none of them edited."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import warm_python

REPO = Path(__file__).resolve().parents[1]


def readme_files() -> dict[str, str]:
    """{path: text} of docs/extending.md's code blocks whose first line is a comment naming a file."""
    page = (REPO / "docs" / "extending.md").read_text()
    blocks = re.findall(r"```(?:python|yaml)\n# ((?:src|tests)/\S+)\n(.*?)```", page, re.S)
    return {path: text for path, text in blocks}


def test_the_readme_shows_a_module_its_yaml_and_its_test():
    files = readme_files()
    assert sorted(files) == ["src/nplm/conf/model/cbow.yaml", "src/nplm/models/cbow.py", "tests/test_cbow.py"]


def package_copy(tmp_path: Path, files: dict[str, str], tests: tuple[str, ...] = ("conftest.py",)):
    """A copy of src/ with `files` ({path: text}) written into it and the repository's `tests` files beside
    them, unchanged; returns the copy's root and the environment that imports nplm from it (forked from the
    warm interpreter, `warm_python`, which puts this PYTHONPATH on its `sys.path`)."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests").mkdir()
    for name in tests:
        shutil.copy(REPO / "tests" / name, copy / "tests" / name)
    for path, text in files.items():
        (copy / path).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    where = subprocess.run([sys.executable, "-c", "import nplm; print(nplm.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(copy)), where  # the copy, not the checkout, is what runs
    return copy, env


@pytest.mark.slow
def test_the_worked_example_trains_from_its_three_files_alone(tmp_path):
    copy, env = package_copy(tmp_path, readme_files())
    result = warm_python.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cbow.py"],
                             env=env, cwd=copy, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    # the new option is checked by the rule its field declares, in one line, before anything runs
    bad = warm_python.run([sys.executable, "-m", "nplm.cli.train", "model=cbow", "model.embed_dim=0", "corpus=toy"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == "nplm: error: model.embed_dim=0: must be an integer >= 1"


# A head added as docs/extending.md's table says: its module and its yaml, nothing else.
HEAD_FILES = {
    "src/nplm/heads/scaled_softmax.py": '''"""`head=scaled_softmax`: the full softmax of scores divided by a
temperature, P(w | f) = softmax((W f + b) / tau)_w."""

import torch
from torch import nn

from nplm.config.rules import Float
from nplm.heads import Head, register_head
from nplm.heads.base import tie_checked, wide


@register_head("scaled_softmax", keys={"temperature": Float(gt=0, doc="tau, the scores' divisor")})
class ScaledSoftmaxHead(Head):
    """The full softmax of (W f + b) / tau."""

    can_tie = True  # the rows of self.out.weight: one output vector per word
    variants = ({}, {"temperature": 0.5})

    def __init__(self, feature_dim: int, vocab_size: int, temperature: float = 1.0):
        super().__init__()
        self.out = nn.Linear(feature_dim, vocab_size)  # W [V, F], b [V]
        self.temperature = temperature

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        self.out.weight = tie_checked(weight, self.out.weight)

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(wide(self.out(features)) / self.temperature, dim=-1)  # [B, V]

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -self.log_probs(features).gather(1, target[:, None]).squeeze(1)  # [B]

    @classmethod
    def from_config(cls, options, *, feature_dim, vocab_size, counts, tree=None):
        return cls(feature_dim, vocab_size, float(options.get("temperature", 1.0)))
''',
    "src/nplm/conf/head/scaled_softmax.yaml": "# The full softmax of scores divided by a temperature.\n"
                                              "name: scaled_softmax\ntemperature: 1.0\n",
}
# the repository's test files whose checks take every registered head (and each of its `variants`) from
# the registry, by test: what each asks of any head
CONFORMANCE = {
    "test_heads_more.py": ["test_log_probs_normalised_and_nll_is_its_entry", "test_gradients_reach_every_parameter",
                           "test_adam_fits_a_tiny_batch", "test_missing_counts_are_refused_where_the_head_needs_them"],
    "test_nplm_family.py": ["test_tied_heads_score_every_word_with_the_models_table"],
    "test_large_vocab.py": ["test_a_batch_by_vocabulary_tensor_in_training_only_where_the_head_says"],
    "test_fast_paths.py": ["test_bf16_autocast_nll_is_finite_and_close_to_float32"],
    "test_failures.py": ["test_the_memory_estimate_builds_every_head_on_the_meta_device"],
}


@pytest.mark.slow
def test_a_new_head_is_put_through_the_conformance_tests_without_editing_them(tmp_path):
    copy, env = package_copy(tmp_path, HEAD_FILES, ("conftest.py", "warm_python.py", *CONFORMANCE))
    names = " or ".join(test for tests in CONFORMANCE.values() for test in tests)
    result = warm_python.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                              "-k", f"scaled_softmax and ({names})", *(f"tests/{name}" for name in CONFORMANCE)],
                             env=env, cwd=copy, capture_output=True, text=True, timeout=600)
    log = result.stdout[-4000:] + result.stderr[-2000:]
    assert result.returncode == 0, log
    for name, tests in CONFORMANCE.items():
        for test in tests:
            for variant in ("scaled_softmax", "scaled_softmax-temperature=0.5"):
                assert f"tests/{name}::{test}[{variant}] PASSED" in result.stdout, (test, variant, log)
