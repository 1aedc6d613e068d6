"""Checked argument types for every command except nplm-train (whose settings Hydra checks).

Each type is an argparse `type=` callable that refuses a bad value before the command loads anything,
and `Parser` turns the refusal into the project's one line on stderr, exit status 2:

    nplm: error: --temperature=nan: must be a finite number >= 0 (0 = always the most likely token)

Files are checked where they are named: an input must be an existing, non-empty file (or folder);
an output must not be a folder (or a file, for an output folder), and missing parent folders are
created only when the command writes (`write_text`), atomically, so nothing is left half-written.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable

from nplm import __version__
from nplm.errors import EXIT_USER_ERROR, UserError
from nplm.files import atomic_write, folder_problem


def version_line(prog: str) -> str:
    """What `<command> --version` prints: the command's name and the package's version (`nplm-eval 0.2.0`)."""
    return f"{prog} {__version__}"


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line, `nplm: error: <flag>=<value>: <what>`, and
    which answers `--version` (the command's name and version, exit 0) as every nplm command does."""

    def __init__(self, prog: str, doc: str | None, **kwargs):
        super().__init__(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                         **kwargs)
        self.add_argument("--version", action="version", version=version_line(prog),
                          help="print the command's name and version, then exit")

    def _get_value(self, action: argparse.Action, arg_string: str):  # argparse calls type= here (3.2-3.13)
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as err:  # a checked type refused the value: name flag and value
            name = max(action.option_strings, key=len) if action.option_strings else action.dest
            raise argparse.ArgumentError(None, f"{name}={arg_string}: {err.message}") from None

    def error(self, message: str):
        """One line, exit 2. A refused value already says what is allowed; argparse's own messages
        (a missing argument, an unknown flag) point to --help."""
        names_a_value = "=" in message.split(":")[0]
        print(f"nplm: error: {message}" + ("" if names_a_value else f" (see {self.prog} --help)"), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def refuse(message: str):
    raise argparse.ArgumentTypeError(message)


def _number(text: str, kind: type) -> float | int:
    try:
        return kind(text)
    except ValueError:
        refuse(f"must be {'an integer' if kind is int else 'a number'}")


def integer(minimum: int, maximum: int | None = None, meaning: str = "") -> Callable[[str], int]:
    """An integer in [minimum, maximum]; `meaning` is appended to the message (e.g. "(0 = all)")."""

    def check(text: str) -> int:
        value = _number(text, int)
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            refuse(f"must be an integer {bound}{' ' + meaning if meaning else ''}")
        return value

    check.__name__ = "integer"
    return check


def real(minimum: float, maximum: float | None = None, open_minimum: bool = False,
         meaning: str = "") -> Callable[[str], float]:
    """A finite float >= minimum (> minimum if `open_minimum`), <= maximum; NaN and inf are refused."""

    def check(text: str) -> float:
        value = _number(text, float)
        low_ok = value > minimum if open_minimum else value >= minimum
        if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
            bound = f"{'>' if open_minimum else '>='} {minimum:g}"
            if maximum is not None:
                bound = f"in [{minimum:g}, {maximum:g}]"
            refuse(f"must be a finite number {bound}{' ' + meaning if meaning else ''}")
        return value

    check.__name__ = "number"
    return check


def choice(*options: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in options:
            refuse(f"must be one of: {', '.join(options)}")
        return text

    check.__name__ = "choice"
    return check


def check(flag: str, value, type_fn: Callable[[str], object]) -> None:
    """Apply a command-line check to a value given in Python (e.g. `generate(temperature=...)`)."""
    try:
        type_fn(str(value))
    except argparse.ArgumentTypeError as err:
        raise UserError(f"{flag}={value}: {err}") from None


def input_file(text: str) -> Path:
    """An existing, non-empty file (its content is checked by whoever reads it)."""
    path = Path(text).expanduser()
    if path.is_dir():
        refuse("is a folder; pass a file")
    if not path.exists():
        refuse("does not exist")
    if not os.access(path, os.R_OK):
        refuse("cannot be read (permission denied)")
    if path.stat().st_size == 0:
        refuse("is empty")
    return path


def checkpoint_file(text: str) -> Path:
    """An existing .ckpt file; a run folder gets a hint to its checkpoints."""
    path = Path(text).expanduser()
    if path.is_dir():
        found = sorted((path / "checkpoints").glob("*.ckpt")) if (path / "checkpoints").is_dir() else []
        refuse(f"is a folder; pass a checkpoint file{', e.g. ' + str(found[-1]) if found else ' (<run>/checkpoints/*.ckpt)'}")
    if not path.exists():
        refuse("does not exist; pass a <run>/checkpoints/*.ckpt file written by nplm-train")
    if path.stat().st_size == 0:
        refuse("is empty; not a checkpoint")
    return path


def input_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.exists():
        refuse("does not exist; pass a run or sweep folder (e.g. outputs/<experiment>)")
    if not path.is_dir():
        refuse("is a file; pass a run or sweep folder (e.g. outputs/<experiment>)")
    return path


def _creatable(path: Path) -> None:
    """Refuse a path whose folder could never be written: its nearest existing ancestor is a file, or
    a file cannot be made there (tried for real: a read-only or full file system, no permission)."""
    problem = folder_problem(path.parent)
    if problem is not None:
        refuse(problem)


def output_file(text: str) -> Path:
    """A file to write: not an existing folder; missing parent folders are created on writing."""
    path = Path(text).expanduser()
    if path.is_dir():
        refuse("is a folder; pass a file name")
    _creatable(path)
    return path


def output_dir(text: str) -> Path:
    """A folder to write into: not an existing file; created on writing if missing."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        refuse("is a file; pass a folder (it is created if missing)")
    problem = folder_problem(path)
    if problem is not None:
        refuse(problem)
    return path


def write_text(path: Path, data: str | bytes, flag: str) -> None:
    """Write `data` to `path` atomically (a temporary file, then a rename: `nplm.files`), making missing
    folders; a failure (a full disk, a read-only folder) is one line naming `flag` and the file."""
    atomic_write(path, data, what=flag)
