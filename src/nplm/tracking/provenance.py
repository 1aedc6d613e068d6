"""Which code ran: a checkout's commit, or a provenance file that a copy of a clean commit carries.

A run's record and a benchmark's result name the commit of the code that made them
(`nplm.tracking.records.git_commit`). In a git checkout git says it. A copy sent to a machine without
its `.git` (a GPU lent for minutes, a cluster) carries `PROVENANCE.json` instead, written from a clean
checkout by

    python -m nplm.tracking.provenance write            # PROVENANCE.json at the checkout's root
    python -m nplm.tracking.provenance pack nplm.tar    # the committed tree + PROVENANCE.json, as a tar

Both refuse a checkout whose code differs from its commit. The file holds the full commit, its tree hash
and git's blob hash of every committed file; on the copy each file is hashed again as git hashes it
(`blob_sha`), so a file edited, removed or added after the copy was made turns the commit into
`<commit>-dirty`: the file's word is checked, not taken.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from nplm.errors import UserError, report_user_errors
from nplm.files import atomic_write

FILE = "PROVENANCE.json"
ROOT = Path(__file__).resolve().parents[3]  # the checkout (or copy) holding src/nplm
CODE_DIRS = ("src", "experiments")  # where an added .py or .sh file changes what runs (see CODE_PATHS)


# What makes a checkout's runs differ from its commit: the package, its configs and the scripts that train
# and report (the result files and tables they write are not code; the scripts live in CODE_DIRS, as for a
# copy). Untracked files count: the registries import every module of their folder, so a new heads/x.py
# changes what runs; a shell script of one's own elsewhere (logs/queue.sh) runs nothing the checkout holds.
CODE_PATHS = [":(top)src", ":(top)pyproject.toml", ":(top,glob)experiments/**/*.py", ":(top,glob)experiments/**/*.sh"]


def checkout_state(where: Path) -> tuple[str, bool] | None:
    """(HEAD's commit, whether the code differs from it: changed, staged or untracked and not ignored) of
    the git checkout holding `where`; None outside one (or without git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS],
                                 cwd=where, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head, bool(changed)


def code_version() -> tuple[str | None, str | None]:
    """(the commit of the code nplm runs from, where that was read): HEAD of its checkout with "-dirty" where
    the code differs from it (`checkout_state`), "checkout"; outside a checkout, or in one whose code differs
    from HEAD (a copy sent with an older `.git`), the commit of a `PROVENANCE.json` that the files verify
    (`verified_commit`; outside a checkout "-dirty" where they differ from it), "PROVENANCE.json"; else
    (None, None): nobody's word is taken for it."""
    state = checkout_state(Path(__file__).resolve().parent)
    if state is None:
        commit = verified_commit()
        return commit, FILE if commit is not None else None
    head, dirty = state
    if dirty and (stated := verified_commit()) and not stated.endswith("-dirty"):
        return stated, FILE  # the files are exactly the stated commit's: the stale .git's HEAD is not
    return head + ("-dirty" if dirty else ""), "checkout"


def git_commit() -> str | None:
    """The commit of `code_version` (what run records, result files and benchmarks name)."""
    return code_version()[0]


def blob_sha(data: bytes) -> str:
    """git's object id of a file's bytes (`git hash-object`): sha1 of "blob <size>\\0" + the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def describe(root: Path = ROOT) -> dict:
    """The provenance of the clean checkout at `root`: commit, tree and every committed file's blob id.
    Refuses a checkout whose code differs from its commit (`checkout_state`)."""
    state = checkout_state(root)
    if state is None:
        raise UserError(f"{root}: not a git checkout; provenance is written from the checkout the code is sent from")
    commit, dirty = state
    if dirty:
        raise UserError(f"{root}: the code differs from commit {commit[:12]} (git status lists it); commit it first, "
                        "so that what runs is a commit anyone can check out")
    files = {}
    for line in _git("ls-tree", "-r", "HEAD", cwd=root).splitlines():
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob":
            files[path] = sha
    return {"commit": commit, "tree": _git("rev-parse", "HEAD^{tree}", cwd=root).strip(), "files": files}


def verified_commit(root: Path | None = None) -> str | None:
    """The commit a copy's `PROVENANCE.json` names, checked against the files beside it: `<commit>-dirty` where
    a committed file is changed or gone or a code file was added; None without the file. `root`: the copy
    (default: the one holding this package)."""
    root = root or ROOT
    try:
        stated = json.loads((root / FILE).read_text())
        commit, files = stated["commit"], stated["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for path, sha in files.items():
        p = root / path
        if p.is_symlink():
            continue  # (git hashes a link's target path; a copy may have resolved it)
        try:
            if blob_sha(p.read_bytes()) != sha:
                return commit + "-dirty"
        except OSError:
            return commit + "-dirty"
    for folder in CODE_DIRS:
        added = [p for p in (root / folder).rglob("*") if p.suffix in (".py", ".sh") and p.is_file()
                 and "__pycache__" not in p.parts and p.relative_to(root).as_posix() not in files]
        if added:
            return commit + "-dirty"
    return commit


def pack(out: Path, root: Path = ROOT) -> dict:
    """`git archive` of HEAD with `PROVENANCE.json` added, as the tar `out`; refuses a dirty checkout."""
    stated = describe(root)
    archive = subprocess.run(["git", "archive", "--format=tar", f"--add-virtual-file={FILE}:"
                              + json.dumps(stated, indent=1) + "\n", "HEAD"], cwd=root, capture_output=True,
                             check=True).stdout
    atomic_write(out, archive, "the packed tree")
    return stated


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nplm.tracking.provenance", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("write", help=f"write {FILE} at the checkout's root (for a copy of the working tree)")
    packing = sub.add_parser("pack", help=f"write the committed tree with {FILE} as a tar file")
    packing.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "write":
        stated = describe()
        atomic_write(ROOT / FILE, json.dumps(stated, indent=1) + "\n")
        print(f"{ROOT / FILE}: commit {stated['commit']}, {len(stated['files'])} files")
    else:
        stated = pack(args.out)
        print(f"{args.out}: commit {stated['commit']}, {len(stated['files'])} files and {FILE}")


if __name__ == "__main__":
    sys.exit(main())
