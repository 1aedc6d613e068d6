"""What a release is made of agrees with itself: one version (`nplm.__version__`, which the installed
metadata, every command's `--version`, CITATION.cff and CHANGELOG.md all give), the distribution's own name
(PyPI's `nplm` is another project), the MIT LICENSE, and a CITATION.cff that parses with the keys the
Citation File Format 1.2.0 requires."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import nplm
from conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTION = "nplm-lab"
# The console scripts, as pyproject.toml's [project.scripts] names them (test_the_scripts_are_these_six checks it).
SCRIPTS = {"nplm-train": "nplm.cli.train:main", "nplm-eval": "nplm.cli.evaluate:main",
           "nplm-generate": "nplm.cli.generate:main", "nplm-predict": "nplm.cli.predict:main",
           "nplm-compare": "nplm.cli.compare:main", "nplm-mix": "nplm.cli.mix:main"}


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def entry_point(target: str):
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def test_the_version_is_written_once():
    """pyproject.toml reads the version from nplm.__version__ and states none of its own; the installed
    metadata (after `pip install -e .`, `make install`) gives the same."""
    config = pyproject()
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nplm.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", nplm.__version__)
    assert importlib.metadata.version(DISTRIBUTION) == nplm.__version__, (
        "the installed metadata is stale: pip install --no-deps --no-build-isolation -e .")


def test_the_distribution_has_its_own_name():
    assert pyproject()["project"]["name"] == DISTRIBUTION
    assert importlib.metadata.distribution(DISTRIBUTION).read_text("top_level.txt").split() == ["nplm"]


def test_the_scripts_are_these_six():
    assert pyproject()["project"]["scripts"] == SCRIPTS
    installed = {e.name: e.value for e in importlib.metadata.distribution(DISTRIBUTION).entry_points
                 if e.group == "console_scripts"}
    assert installed == SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_command_prints_its_name_and_version(name):
    result = run_cli(entry_point(SCRIPTS[name]), "--version")
    assert (result.code, result.out, result.err) == (0, f"{name} {nplm.__version__}\n", "")
    page = run_cli(entry_point(SCRIPTS[name]), "--help")  # the help page names the flag
    assert page.code == 0 and "--version" in page.out


def test_nplm_train_answers_version_before_torch_loads():
    """As --help does: a fresh interpreter prints the line and has imported neither torch nor Hydra."""
    code = ("import sys; sys.argv = ['nplm-train', '--version']\n"
            "from nplm.cli.train import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "heavy = [m for m in ('torch', 'pytorch_lightning', 'wandb', 'hydra') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nplm-train {nplm.__version__}\n"


def test_the_license_is_mit():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 the nplm authors" in text
    assert "Permission is hereby granted, free of charge" in text
    assert pyproject()["project"]["license"] == {"text": "MIT"}


def changelog_releases() -> list[tuple[str, str]]:
    """(version, date) of each `## [X.Y.Z] - YYYY-MM-DD` heading of CHANGELOG.md, newest first."""
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (REPO / "CHANGELOG.md").read_text(), re.M)


def test_the_changelog_has_a_section_for_this_version():
    text = (REPO / "CHANGELOG.md").read_text()
    releases = changelog_releases()
    assert releases and releases[0][0] == nplm.__version__, releases
    assert text.index("## [Unreleased]") < text.index(f"## [{nplm.__version__}]")
    section = text.split(f"## [{nplm.__version__}]", 1)[1].split("\n## [", 1)[0]
    assert set(re.findall(r"^### (\w+)$", section, re.M)) <= {"Added", "Changed", "Deprecated", "Removed",
                                                               "Fixed", "Security"}


def test_the_citation_file_parses_and_gives_this_version():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors"):  # required by CFF 1.2.0
        assert cff.get(key), key
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert cff["version"] == nplm.__version__
    assert (cff["version"], str(cff["date-released"])) == changelog_releases()[0]
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    titles = {r["title"] for r in cff["references"]}
    assert titles == {"A Neural Probabilistic Language Model",
                      "Hierarchical Probabilistic Neural Network Language Model",
                      "A Scalable Hierarchical Distributed Language Model",
                      "Revisiting Simple Neural Probabilistic Language Models",
                      "Recurrent Neural Network Regularization"}
    for reference in cff["references"]:  # each reference's required keys
        assert reference["type"] and reference["authors"] and reference["year"], reference["title"]
