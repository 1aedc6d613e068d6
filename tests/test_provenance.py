"""Provenance you can check: a clean commit packed with PROVENANCE.json, verified on a copy without .git."""

from __future__ import annotations

import json
import subprocess
import tarfile

import pytest

from nplm.errors import UserError
from nplm.tracking import provenance


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    """A tiny git checkout with a package file, a script and a result file, committed."""
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("A = 1\n")
    (root / "experiments").mkdir()
    (root / "experiments" / "run.sh").write_text("echo run\n")
    (root / "README.md").write_text("hello\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "first")
    return root


def test_a_packed_clean_commit_is_verified_on_a_copy_without_git(checkout, tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    stated = provenance.pack(tmp_path / "code.tar", checkout)
    assert stated["commit"] == head and set(stated["files"]) == {"src/pkg/a.py", "experiments/run.sh", "README.md"}
    copy = tmp_path / "copy"
    with tarfile.open(tmp_path / "code.tar") as tar:
        tar.extractall(copy, filter="data")
    assert not (copy / ".git").exists()
    assert json.loads((copy / provenance.FILE).read_text())["tree"] == stated["tree"]
    assert provenance.verified_commit(copy) == head
    (copy / "src" / "pkg" / "b.py").write_text("B = 2\n")  # a code file added on the copy
    assert provenance.verified_commit(copy) == head + "-dirty"
    (copy / "src" / "pkg" / "b.py").unlink()
    (copy / "README.md").write_text("edited\n")  # a committed file changed
    assert provenance.verified_commit(copy) == head + "-dirty"
    (copy / provenance.FILE).unlink()
    assert provenance.verified_commit(copy) is None  # nobody's word is taken for it


def test_a_dirty_checkout_is_refused(checkout, tmp_path):
    (checkout / "src" / "pkg" / "a.py").write_text("A = 2\n")
    with pytest.raises(UserError, match=r"the code differs from commit [0-9a-f]{12} \(git status lists it\); commit it"):
        provenance.pack(tmp_path / "code.tar", checkout)
    assert not (tmp_path / "code.tar").exists()


def test_records_name_where_the_commit_was_read(monkeypatch, checkout, tmp_path):
    monkeypatch.setenv("NPLM_GIT_COMMIT", "f" * 40)  # an operator's word: never taken
    assert provenance.code_version()[1] == "checkout"  # this test runs in a checkout
    copy = tmp_path / "copy"
    head = provenance.pack(tmp_path / "code.tar", checkout)["commit"]
    with tarfile.open(tmp_path / "code.tar") as tar:
        tar.extractall(copy, filter="data")
    monkeypatch.setattr(provenance, "checkout_state", lambda where: None)
    monkeypatch.setattr(provenance, "ROOT", copy)
    commit, source = provenance.code_version()
    assert (commit, source) == (head, "PROVENANCE.json")
    monkeypatch.setattr(provenance, "checkout_state", lambda where: ("a" * 40, True))  # a copy with an older .git
    assert provenance.code_version() == (head, "PROVENANCE.json")  # its files verify the stated commit
    (copy / "src" / "pkg" / "a.py").write_text("A = 3\n")
    assert provenance.code_version() == ("a" * 40 + "-dirty", "checkout")  # they do not: the checkout's word
    monkeypatch.setattr(provenance, "checkout_state", lambda where: None)
    monkeypatch.setattr(provenance, "ROOT", tmp_path / "nowhere")
    assert provenance.code_version() == (None, None)
