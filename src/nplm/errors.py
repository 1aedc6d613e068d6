"""User-facing errors: one line that names the bad value and the fix, and a non-zero exit."""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

T = TypeVar("T")

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in the user's input (config, data, arguments), not a bug in nplm."""


class WriteError(UserError):
    """A file or folder could not be written (a full disk, a read-only or missing folder): what was
    written before stays as it was (every write is atomic: `nplm.files`), so a run that stops here
    keeps its last checkpoint and record, and `resume=true` continues it once the cause is fixed."""


def require(condition: bool, message: str) -> None:
    """Raise `UserError(message)` unless `condition` holds."""
    if not condition:
        raise UserError(message)


def report_user_errors(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap a command-line entry point: a `UserError` becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            print(f"nplm: error: {err}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)

    return wrapper
