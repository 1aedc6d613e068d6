"""Writing files so that a kill or a full disk never leaves half a file: the one helper every writer of
nplm uses (checkpoints, metrics.json / metrics.csv, trees, caches, nplm-compare's tables, plots and
HTML report, nplm-eval's and nplm-mix's JSON).

`atomic_open(path)` yields a temporary file in the same folder (`.<name>.<pid>.<random>.tmp`); when
the writer is done it is flushed to disk and renamed over `path` (`os.replace`, atomic on POSIX), so a
reader, or the next run after a SIGKILL, sees the previous version or the new one, never a torn file.
A write that fails (no space left, read-only file system, no permission, a folder that cannot be made)
removes its temporary file, leaves `path` as it was, and raises `WriteError`: one line naming the
file, the reason and the fix. Temporary files of killed writers are removed by the next write of the
same file.

No torch, no Hydra: importing this is cheap.
"""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from nplm.errors import WriteError

# The fix for each reason a write fails, as the user would act on it.
FIXES = {
    errno.ENOSPC: "the disk is full: free space on it or write to another disk",
    errno.EDQUOT: "the disk quota is used up: free space or write to another disk",
    errno.EROFS: "a read-only file system: write to a folder elsewhere",
    errno.EACCES: "permission denied: write to a folder you can write",
    errno.EPERM: "permission denied: write to a folder you can write",
    errno.ENOENT: "its folder cannot be made there: pick a folder that exists or can be made",
    errno.ENOTDIR: "a part of the path is a file, not a folder: pick another folder",
    errno.EISDIR: "is a folder: pick a file name",
    errno.ENAMETOOLONG: "the name is too long: pick a shorter path",
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()  # temporary files get the mode a plain open() would give (mkstemp's is 0600)


def reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def cannot_write(path: str | Path, err: OSError, what: str = "", fix: str = "") -> WriteError:
    """The one-line error for a failed write of `path` (`what`: the setting that named it, e.g.
    "--json" or "hydra.run.dir"; `fix`: what to do, else the usual fix for the reason)."""
    named = f"{what}={path}" if what else str(path)
    hint = fix or FIXES.get(err.errno, "pick another folder")
    return WriteError(f"{named}: cannot be written ({reason(err)}); {hint}")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove_stale_temps(path: Path) -> None:
    """Temporary files of `path` left by writers that were killed (their process is gone)."""
    try:
        temps = list(path.parent.glob(f".{path.name}.*.tmp"))
    except OSError:
        return
    for tmp in temps:
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", what: str = "", fix: str = "", **kwargs) -> Iterator[IO]:
    """`with atomic_open(path, "w") as f: ...`: `f` is a temporary file beside `path`, renamed over it
    when the block ends without an error; on any error it is removed and `path` keeps its old content.
    An `OSError` (of the folder, the temporary file or the writer inside the block) becomes a
    `WriteError` naming `path` (see `cannot_write`). `kwargs` go to `open` (newline=, encoding=)."""
    path = Path(path)
    if "w" not in mode:
        raise ValueError(f"atomic_open writes a whole file; mode {mode!r} has no 'w'")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    except OSError as err:
        raise cannot_write(path, err, what, fix) from None
    try:
        try:
            os.fchmod(fd, 0o666 & ~UMASK)
            f = os.fdopen(fd, mode, **kwargs)
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and not isinstance(err, WriteError):
            raise cannot_write(path, err, what, fix) from None
        raise


def atomic_write(path: str | Path, data: str | bytes | memoryview, what: str = "", fix: str = "") -> None:
    """Write `data` (text as UTF-8) to `path` atomically; see `atomic_open`."""
    with atomic_open(path, "wb", what, fix) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def folder_problem(path: str | Path) -> str | None:
    """Why files could not be written in folder `path` (made if missing), or None: the nearest folder
    that exists is tried with a real temporary file (permission bits alone mislead root, and a full or
    read-only file system shows only when written). Nothing is left behind."""
    path = Path(path).expanduser()
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return f"{probe} is a file, not a folder"
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".nplm-probe.")
        os.close(fd)
        os.unlink(tmp)
        if probe != path:  # the missing folders: can the first one be made?
            first = path.relative_to(probe).parts[0]
            made = tempfile.mkdtemp(dir=probe, prefix=f".{first}.")
            os.rmdir(made)
    except OSError as err:
        where = f" in {probe}" if probe != path else ""
        return f"cannot be written{where} ({reason(err)}); {FIXES.get(err.errno, 'pick another folder')}"
    return None


__all__ = ["atomic_open", "atomic_write", "cannot_write", "folder_problem", "pid_alive"]
