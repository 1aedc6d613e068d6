"""One line for the top of every benchmark table: date, commit, machine, load and the command."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from nplm.tracking.records import checkout_state
from nplm.training.peak import device_name


def commit() -> str:
    """The checkout's short commit, `+dirty` when its code differs from it (`nplm.tracking.records.
    checkout_state`: the package, configs and scripts, untracked ones too; not the result files and
    tables that benchmarks write, often several in one session)."""
    state = checkout_state(Path(__file__).parent)
    if state is None:  # a copy without its .git (the device machine): the commit it was sent from, if named
        return os.environ.get("NPLM_GIT_COMMIT", "unknown")[:7]
    sha, dirty = state
    return sha[:7] + ("+dirty" if dirty else "")


def machine() -> str:
    cpu = device_name(torch.device("cpu"))  # the CPU's model name
    load = f", load average {os.getloadavg()[0]:.2f} at the start" if hasattr(os, "getloadavg") else ""
    return (f"{cpu}, {os.cpu_count()} CPUs{load}; torch {torch.__version__}, {torch.get_num_threads()} torch threads")


def stamp() -> str:
    """`Measured <date> UTC at commit <sha> on <machine>: python <script> <args>`."""
    script = os.path.relpath(sys.argv[0], Path(__file__).parents[2]) if sys.argv[0] else "?"
    return (f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at commit {commit()} on {machine()}: "
            f"`python {script} {' '.join(sys.argv[1:])}`".rstrip())


def write_result(out: Path | None, name: str, result: dict, lines: list[str]) -> None:
    """Print a benchmark's table `lines`; with `out`, write `<name>.json` (every figure, `result`) and `<name>.md`
    (the table) there."""
    print("\n".join(lines))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
