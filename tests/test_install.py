"""`pip install .` next to a torch the user already has keeps that torch (pyproject.toml states ranges;
the exact versions tested here are in constraints.txt, which `make install` and `make wheel-check` apply).

Offline and without downloading a real torch: a fresh venv holds a stand-in torch (a dist-info and a
module with `__version__`) at the oldest version pyproject.toml allows, which is not the version in
constraints.txt; the project's other dependencies are this test environment's own, seen through a .pth
(a folder of links to this environment's site-packages, less torch and nplm). pip then installs the
project from a copy of its sources with no index: if any requirement, the project's or a dependency's,
refuses that torch, pip has no other torch to take and fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

REPO = Path(__file__).resolve().parents[1]
# What a torch installation leaves in site-packages; hidden from the new venv so the stand-in is the only torch.
TORCH_ENTRIES = re.compile(r"^(torch|torchgen|functorch)$|^torch-.*\.dist-info$")
# (the distribution nplm-lab installs as nplm_lab-<version>.dist-info; the package itself is nplm/)
NPLM_ENTRIES = re.compile(r"^nplm[-_.]|^nplm$|^__editable__.*nplm")


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def package_version() -> str:
    """nplm.__version__ as src/nplm/__init__.py writes it (pyproject.toml reads it from there)."""
    return re.search(r'^__version__ = "(.+)"', (REPO / "src/nplm/__init__.py").read_text(), flags=re.M).group(1)


def torch_requirement() -> Requirement:
    return next(r for r in map(Requirement, project()["dependencies"]) if r.name == "torch")


def torch_in_constraints() -> Version:
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if re.match(r"torch\s*==", line):
            return Version(line.split("==", 1)[1].split("#")[0].strip())
    raise AssertionError("constraints.txt names no torch==X")


def oldest_allowed_torch(req: Requirement) -> Version:
    """The lower bound of `torch>=X,...`; a requirement without one (an exact pin, say) gets 2.6.0."""
    lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return max(lower) if lower else Version("2.6.0")


def write_stand_in_torch(site: Path, version: Version) -> None:
    """An installed distribution `torch` as pip sees one: a dist-info with METADATA and RECORD."""
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f'__version__ = "{version}"  # a stand-in, not torch\n')
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("test_install\n")
    (info / "RECORD").write_text(f"torch/__init__.py,,\ntorch-{version}.dist-info/METADATA,,\n"
                                 f"torch-{version}.dist-info/INSTALLER,,\ntorch-{version}.dist-info/RECORD,,\n")


def dependencies_view(target: Path) -> Path:
    """Links to every entry of this environment's site-packages except torch's and nplm's own."""
    here = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in here.iterdir():
        if not (TORCH_ENTRIES.search(entry.name) or NPLM_ENTRIES.search(entry.name)):
            (target / entry.name).symlink_to(entry)
    return target


def project_copy(target: Path) -> Path:
    """The files `pip install .` builds from, copied so the build leaves nothing in the checkout."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    shutil.copytree(REPO / "src", target / "src", ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "*.pyc"))
    return target


@pytest.mark.slow
def test_pip_install_keeps_the_torch_already_installed(tmp_path):
    req = torch_requirement()
    other = oldest_allowed_torch(req)
    assert other != torch_in_constraints(), (
        f"pyproject.toml allows no torch but the tested {torch_in_constraints()} ({req}): installing it would "
        "replace any torch the user has")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    write_stand_in_torch(site, other)
    # pip, Lightning, Hydra, ... from this environment (listed after the venv's own site-packages)
    (site / "deps.pth").write_text(f"{dependencies_view(tmp_path / 'deps')}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONNOUSERSITE="1")
    pip = [str(python), "-m", "pip"]
    result = subprocess.run([*pip, "install", "--no-index", "--no-build-isolation", str(project_copy(tmp_path / "src"))],
                            env=env, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, (
        f"pip install . beside torch {other} failed ({req} in pyproject.toml):\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")

    shown = subprocess.run([*pip, "show", "torch", project()["name"]], env=env, capture_output=True, text=True,
                           check=True).stdout
    versions = dict(re.findall(r"^Name: (\S+)\nVersion: (\S+)", shown, flags=re.M))
    assert versions == {"torch": str(other), project()["name"]: package_version()}, shown
    locations = re.findall(r"^Location: (.+)$", shown, flags=re.M)
    assert locations == [str(site), str(site)], shown  # both in the new venv: the stand-in, the project
