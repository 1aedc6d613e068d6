"""One writer per run folder: a second nplm-train writing the same folder at once is refused.

`RunLock(folder)` holds `<folder>/.nplm-lock`, a file naming the process (pid and host) that writes
the run, locked with `fcntl.flock` for as long as that process runs. The kernel drops the lock when
the process ends, however it ends (SIGKILL included), so a lock left by a dead process is stale and
the next run takes it over; the file itself is removed when the run ends normally. A second process
finds the file locked and refuses with one line naming the first one's pid:

    nplm: error: outputs/r: another nplm-train (process 4242 on node7) is writing this run folder; wait
    for it to end, or give this run another folder (hydra.run.dir=...)
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from nplm.errors import UserError
from nplm.files import cannot_write

LOCK_NAME = ".nplm-lock"


def _describe(path: Path) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    pid, host = holder.get("pid", "?"), holder.get("host")
    return f"process {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")


def busy_message(folder: Path, path: Path) -> str:
    return (f"{folder}: another nplm-train ({_describe(path)}) is writing this run folder; wait for it to end, "
            "or give this run another folder (hydra.run.dir=...)")


def holder(folder: str | Path) -> str | None:
    """The one-line refusal if a live process holds `folder`'s lock now, else None (no lock, or a
    stale one). Takes nothing: a shared lock tried and let go at once."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return busy_message(Path(folder), path)
        return None
    finally:
        os.close(fd)
    return None


class RunLock:
    """Held from construction to `release()` (or the end of the process); `with RunLock(folder):`."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.fd: int | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise cannot_write(self.folder, err) from None
        for _ in range(10):  # retried only when the file was replaced between opening and locking it
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise cannot_write(self.path, err) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise UserError(busy_message(self.folder, self.path)) from None
                raise cannot_write(self.path, err) from None
            try:  # locked: is it still the file at that name (not one its holder removed meanwhile)?
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps({"pid": os.getpid(), "host": socket.gethostname()}) + "\n").encode())
            self.fd = fd
            return
        raise UserError(f"{self.folder}: its lock file {self.path} keeps changing; is another nplm-train starting there?")

    def release(self) -> None:
        """Remove the lock file and let go (removed first, while held: no one can take a removed file)."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
