"""Processes of their own without an interpreter's start, for the tests where the process boundary is the point
(kill -9 and resume, a command's exit status and output, the launchers and DDP's first rank).

A fresh interpreter spends about 9 s of the 2-core machine importing torch, Lightning, W&B and Hydra. A warm
server imports them once per test process and forks a child for each command, as Python's `multiprocessing`
forkserver does: the child runs the command as `python ARGS` would (`-m module`, `-c code` or a script, with the
environment, working folder and standard streams given), exits as the interpreter does (atexit handlers, exit
status, a traceback and status 1 for an uncaught exception) and is a real process: a SIGKILL kills it alone.

`popen(args, ...)` and `run(args, ...)` take `subprocess.Popen`'s and `subprocess.run`'s arguments (`args`
starting with `sys.executable`). The child's PYTHONPATH is put in the server's place on `sys.path` (the server
never imports nplm, so a copy of the package on another PYTHONPATH is what the child imports), and its torch
threads are those OMP_NUM_THREADS gives a fresh one (all cores without it). A command whose point is what the
imports print or load starts a fresh interpreter instead (`subprocess`, or `fresh=True`)."""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PRELOADED = ("torch", "pytorch_lightning", "wandb", "hydra", "omegaconf")  # about 9 s a fresh interpreter
SAME_FOR_IMPORTS = ("PYTHONHOME", "PYTHONSAFEPATH")  # else a fresh interpreter
MESSAGE = 1 << 20


# -- the server (a process of its own: `python tests/warm_python.py SOCKET`) --------------------------------------
def serve(path: str) -> dict:
    """Import `PRELOADED`, listen on `path`; in the parent, forever: fork a child per request, send it its pid and
    then its exit status. Returns (in the child only) the request it is to run."""
    for name in PRELOADED:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".part")
    os.rename(path + ".part", path)  # (the client waits for the name: ready once it exists)
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}  # pid -> the client's connection
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02)
        if ready:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, MESSAGE, 3)
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                return {**json.loads(message), "fds": fds}
            for fd in fds:
                os.close(fd)
            conn.send(json.dumps({"pid": pid}).encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:  # the client has gone
                    pass
                conn.close()


def _python_path(env) -> list[str]:
    """The absolute folders of an environment's PYTHONPATH, as the interpreter puts them on `sys.path`."""
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _text_stream(fd: int, errors: str, unbuffered: bool, line_buffering: bool) -> io.TextIOWrapper:
    """The standard stream on `fd` as the interpreter opens it (PYTHONUNBUFFERED: written through)."""
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), errors=errors,
                            line_buffering=line_buffering, write_through=unbuffered)


def run_in_child(request: dict) -> None:
    """Become `python ARGS` in `cwd` with `env`: its standard streams, its `sys.argv` and `sys.path[0]`, its
    threads; then run the module, code or script (a `SystemExit` or exception ends the interpreter as usual)."""
    import runpy
    import types

    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    server_path = _python_path(os.environ)
    os.environ.clear()
    os.environ.update(request["env"])
    child_path = _python_path(os.environ)
    if child_path != server_path:  # (entry 0, the script's folder, is set below)
        sys.path[1:] = [*child_path, *(p for p in sys.path[1:] if p not in server_path)]
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = _text_stream(1, "strict", unbuffered, line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = _text_stream(2, "backslashreplace", unbuffered, line_buffering=True)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))  # a fresh start's
    args = request["args"]
    code = 0
    try:
        if args[0] == "-m":
            sys.argv, sys.path[0] = [args[1], *args[2:]], os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *args[2:]], ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv, sys.path[0] = list(args), os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        if not isinstance(exit_.code, (int, type(None))):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    _exit(code)


def _exit(code: int) -> None:
    """End as the interpreter does (its threads joined, its atexit handlers run, its streams flushed), without
    tearing down every module (about 2 s with torch loaded: nothing a test reads is written then)."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# -- the client (in the test process) --------------------------------------------------------------------------
_server: dict = {}


def _server_path() -> str:
    """The socket of this test process's server, started (and waited for) on first use."""
    if "path" in _server:
        return _server["path"]
    folder = tempfile.mkdtemp(prefix="warm_python_")
    path = os.path.join(folder, "socket")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen([sys.executable, __file__, path], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    atexit.register(proc.kill)
    deadline = time.time() + 300
    while not os.path.exists(path):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the warm interpreter did not start (exit {proc.poll()})")
        time.sleep(0.05)
    _server.update(path=path, env=env, proc=proc)
    return path


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the server ends with its test process


def _warm(env: dict) -> bool:
    _server_path()
    return all(env.get(key) == _server["env"].get(key) for key in SAME_FOR_IMPORTS)


def _fd(stream, default: int, stdout_fd: int | None = None) -> tuple[int, bool]:
    """(a file descriptor for a child's stream, whether it is ours to close)."""
    if stream is None:
        return default, False
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), True
    if stream == subprocess.STDOUT:
        return stdout_fd, False
    if isinstance(stream, int):
        return stream, False
    return stream.fileno(), False


class WarmProcess:
    """A child of the warm server, as much of `subprocess.Popen` as the tests use: `pid`, `poll`, `wait`,
    `send_signal`, `kill`, `returncode`, `stdout` (with `stdout=subprocess.PIPE`), `communicate`."""

    def __init__(self, args, cwd=None, env=None, stdin=None, stdout=None, stderr=None, text=False):
        self.args, self.returncode, self.stdout, self.stderr = list(args), None, None, None
        env = dict(os.environ if env is None else env)
        opened, fds = [], []
        reading = {}
        for name, stream, default in (("stdin", stdin, 0), ("stdout", stdout, 1), ("stderr", stderr, 2)):
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                keep, give = (write, read) if name == "stdin" else (read, write)
                reading[name] = os.fdopen(keep, ("w" if name == "stdin" else "r") + ("" if text else "b"))
                fds.append(give)
                opened.append(give)
                continue
            fd, ours = _fd(stream, default, fds[1] if len(fds) > 1 else None)
            fds.append(fd)
            if ours:
                opened.append(fd)
        self.stdin, self.stdout, self.stderr = reading.get("stdin"), reading.get("stdout"), reading.get("stderr")
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._conn.connect(_server_path())
        request = {"args": self.args[1:], "cwd": os.path.abspath(cwd or os.getcwd()), "env": env}
        socket.send_fds(self._conn, [json.dumps(request).encode()], fds)
        for fd in opened:
            os.close(fd)
        self.pid = json.loads(self._conn.recv(MESSAGE))["pid"]

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                self._read_status()
            except BlockingIOError:
                pass
            finally:
                if self.returncode is None:
                    self._conn.setblocking(True)
        return self.returncode

    def _read_status(self) -> None:
        self.returncode = json.loads(self._conn.recv(MESSAGE))["returncode"]
        self._conn.close()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._read_status()
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # ended since (as Popen)
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, timeout: float | None = None):
        out = self.stdout.read() if self.stdout else None
        err = self.stderr.read() if self.stderr else None
        self.wait(timeout)
        return out, err


def popen(args, cwd=None, env=None, fresh: bool = False, **streams):
    """`subprocess.Popen(args, ...)`, forked from the warm server where the imports allow (`WarmProcess`)."""
    full_env = dict(os.environ if env is None else env)
    if fresh or args[0] != sys.executable or not _warm(full_env):
        return subprocess.Popen(args, cwd=cwd, env=env, **streams)
    return WarmProcess(args, cwd=cwd, env=full_env, **streams)


def run(args, cwd=None, env=None, capture_output: bool = False, text: bool = False, timeout: float | None = None,
        fresh: bool = False, stdout=None, stderr=None) -> subprocess.CompletedProcess:
    """`subprocess.run(args, ...)`, forked from the warm server where the imports allow. Output asked for
    (`capture_output`, `subprocess.PIPE`, `stderr=subprocess.STDOUT`) goes through temporary files: no pipe to fill
    while the child waits."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        to_out = out if stdout == subprocess.PIPE else stdout
        to_err = err if stderr == subprocess.PIPE else to_out if stderr == subprocess.STDOUT else stderr
        proc = popen(args, cwd=cwd, env=env, fresh=fresh, stdout=to_out, stderr=to_err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise

        def read(f, wanted: bool):
            if not wanted:
                return None
            f.seek(0)
            data = f.read()
            return data.decode(errors="replace") if text else data

        return subprocess.CompletedProcess(args, code, read(out, stdout == subprocess.PIPE),
                                           read(err, stderr == subprocess.PIPE))


if __name__ == "__main__":
    run_in_child(serve(sys.argv[1]))
