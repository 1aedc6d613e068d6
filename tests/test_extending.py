"""README's "Extending nplm": its worked example (a model's module, its yaml and its test) works as written,
in a copy of the package with nothing else changed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_files() -> dict[str, str]:
    """{path: text} of the README's code blocks whose first line is a comment naming a file."""
    blocks = re.findall(r"```(?:python|yaml)\n# ((?:src|tests)/\S+)\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return {path: text for path, text in blocks}


def test_the_readme_shows_a_module_its_yaml_and_its_test():
    files = readme_files()
    assert sorted(files) == ["src/nplm/conf/model/cbow.yaml", "src/nplm/models/cbow.py", "tests/test_cbow.py"]


@pytest.mark.slow
def test_the_worked_example_trains_from_its_three_files_alone(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "tests" / "conftest.py", (copy / "tests").mkdir(parents=True) or copy / "tests" / "conftest.py")
    for path, text in readme_files().items():
        (copy / path).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    where = subprocess.run([sys.executable, "-c", "import nplm; print(nplm.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(copy)), where  # the copy, not the checkout, is what runs
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cbow.py"],
                            env=env, cwd=copy, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    # the new option is checked by the rule its field declares, in one line, before anything runs
    bad = subprocess.run([sys.executable, "-m", "nplm.cli.train", "model=cbow", "model.embed_dim=0", "corpus=toy"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == "nplm: error: model.embed_dim=0: must be an integer >= 1"
