"""Subprocesses forked from a process that has already imported torch, Lightning and the rest, so a CLI run or a
script in the suite does not spend its first seconds (the longest part of a short one on a busy 2-core machine)
importing them again.

The server (`serve`, one per pytest process, started on first use) imports WARM_MODULES and
nothing of xla_train, then forks a child per request. The child takes the request's argv, environment, working
folder and sys.path, writes to the caller's pipes, runs the script as `python` would (`-c`, `-m` or a file) and
ends as the interpreter does: non-daemon threads joined, atexit handlers run, streams flushed. The `python ...`
processes that the child itself starts with subprocess.run (a benchmark's cells, a device count, each of which
would import torch, Lightning and torch_xla afresh) are forked from the server as well. A test of what a fresh process imports, or of how a process
starts or ends, runs a real one instead (`run_paced(..., warm=False)`), and so do its own children.
XLA_TRAIN_TESTS_WARM=0 turns the server off for the whole suite.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

WARM_MODULES = (
    "numpy",
    "torch",
    "torchvision",
    "lightning.pytorch",
    "jsonargparse",
    "sklearn.model_selection",
    "torch._inductor.fx_passes.post_grad",  # torch's, most of what importing torch_xla takes (its dynamo bridge)
    "jax",  # where installed: every XLA run imports it (runtime/jax/compat.py, import_jax_keeping_numpy_rng)
)
ENABLED = os.environ.get("XLA_TRAIN_TESTS_WARM", "1") != "0"


def request_child(path: str, command: list[str], cwd, env, out_fd: int, err_fd: int):
    """Asks the server at `path` to run `command` (python ...) with these descriptors as its stdout and stderr:
    (the connection, its reply stream, which gives the exit status once the child ends, and the child's pid)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"argv": command[1:], "cwd": str(cwd or os.getcwd()), "env": dict(os.environ if env is None else env)}
    request["env"][SOCKET_ENV] = path  # the child's own `python ...` children come from this server too (_run)
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [out_fd, err_fd])
    reply = conn.makefile("r")
    return conn, reply, json.loads(reply.readline())["pid"]


class WarmProcess:
    """The part of subprocess.Popen that run_paced uses, for a child of the warm server."""

    def __init__(self, command: list[str], cwd=None, env=None):
        self.args, self.returncode = command, None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self._conn, self._reply, self.pid = request_child(_server_path(), command, cwd, env, out_w, err_w)
        os.close(out_w), os.close(err_w)
        self._out, self._err = [], []
        self._readers = [
            threading.Thread(target=_drain, args=p, daemon=True) for p in ((out_r, self._out), (err_r, self._err))
        ]
        for t in self._readers:
            t.start()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        if self.returncode is None:
            self.returncode = json.loads(self._reply.readline())["returncode"]
        return b"".join(self._out).decode(errors="replace"), b"".join(self._err).decode(errors="replace")

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._reply.close(), self._conn.close()


def _drain(fd: int, into: list[bytes]) -> None:
    with open(fd, "rb", buffering=0) as stream:
        while chunk := stream.read(65536):
            into.append(chunk)


_server: subprocess.Popen | None = None
_lock = threading.Lock()


def kernel_spec(folder: Path) -> str:
    """A Jupyter kernelspec under `folder` (for JUPYTER_PATH) whose kernels the server forks (tests/warm_kernel.py),
    or, with the server off, the ordinary python3 kernel; the kernel name to give the notebook client."""
    if not ENABLED:
        return "python3"
    spec = folder / "kernels" / "xla_train_warm"
    spec.mkdir(parents=True, exist_ok=True)
    launcher = str(Path(__file__).resolve().parents[1] / "warm_kernel.py")
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, launcher, "-f", "{connection_file}"],
                "display_name": "Python 3 (forked warm)",
                "language": "python",
                "interrupt_mode": "signal",
                "env": {SOCKET_ENV: _server_path()},
            }
        )
    )
    return "xla_train_warm"


SOCKET_ENV = "XLA_TRAIN_TESTS_WARM_SOCKET"  # where tests/warm_kernel.py finds the server


def _server_path() -> str:
    """The server's socket, started on first use in this process (and again after a fork of it)."""
    global _server
    with _lock:
        path = f"/tmp/xla_train_tests_warm_{os.getpid()}.sock"
        if _server is None or _server.poll() is not None:
            if os.path.exists(path):  # left by a killed run whose process had this pid
                os.unlink(path)
            tests = str(Path(__file__).resolve().parents[1])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)}
            _server = subprocess.Popen(
                [sys.executable, "-c", f"from helpers.warm_start import serve; serve({path!r})"],
                stdin=subprocess.PIPE,
                env=env,
            )
            while not os.path.exists(path):
                if _server.poll() is not None:
                    raise RuntimeError(f"the warm-start server exited ({_server.returncode})")
                time.sleep(0.05)
        return path


def serve(path: str) -> None:
    """Accepts requests until the caller's end of stdin closes; reports each child's pid, then its exit status."""
    import importlib.util

    for name in WARM_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    base_path = list(sys.path[1:])  # without this server's own first entry and its PYTHONPATH
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry in base_path:
            base_path.remove(entry)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path + ".new"):  # left by a killed run whose process had this pid
        os.unlink(path + ".new")
    listener.bind(path + ".new")
    os.rename(path + ".new", path)  # the caller waits for the name: it appears once the server listens
    listener.listen(16)
    waiting: dict[int, socket.socket] = {}
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [], 0.05)
            if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
                return
            if listener in ready:
                conn, _ = listener.accept()
                pid = _fork_child(conn, listener, base_path)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                waiting[pid] = conn
            for pid in list(waiting):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    conn = waiting.pop(pid)
                    conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                    conn.close()
    finally:
        os.unlink(path)


def _fork_child(conn: socket.socket, listener: socket.socket, base_path: list[str]) -> int:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
    request = json.loads(message)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    code = 1
    try:
        listener.close(), conn.close(), os.dup2(fds[0], 1), os.dup2(fds[1], 2)
        os.close(fds[0]), os.close(fds[1]), os.close(0)
        os.open(os.devnull, os.O_RDONLY)  # stdin is fd 0 again, as in a child with no input
        code = _run(request, base_path)
    finally:
        os._exit(code)


def _run(request: dict, base_path: list[str]) -> int:
    """Runs argv as `python ARGV` would in this already-started interpreter; the exit code."""
    import atexit
    import io
    import runpy
    import traceback
    import types

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False), line_buffering=fd == 2, write_through=unbuffered or fd == 2
        )
        setattr(sys, name, stream), setattr(sys, f"__{name}__", stream)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    argv = request["argv"]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = "" if argv[0] in ("-c", "-m") else str(Path(argv[0]).resolve().parent)
    sys.path[:] = [first, *extra, *base_path]
    if os.environ.get(SOCKET_ENV):
        subprocess.run = _warm_run  # the product's own children (a benchmark cell, a device count) start warm too
    code = 0
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 1))
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # as the interpreter ends: non-daemon threads first, then atexit, then the streams
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


_cold_run = subprocess.run
_WARM_RUN_KEYS = {"stdout", "stderr", "capture_output", "text", "env", "timeout", "check", "cwd"}


def _warm_run(args, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in a warm child: `python ...` (a benchmark cell, a device count) is forked from the server as
    well, with the same output, exit status, time limit and check; anything else runs as subprocess.run does. A
    test of what such a process imports runs its parent cold (warm=False), so this is never installed."""
    stdout, stderr = kwargs.get("stdout"), kwargs.get("stderr")
    if kwargs.get("capture_output"):
        stdout = stderr = subprocess.PIPE
    if (
        not isinstance(args, list)
        or len(args) < 2
        or args[0] != sys.executable
        or not set(kwargs) <= _WARM_RUN_KEYS
        or any(isinstance(s, int) and s not in (subprocess.PIPE, subprocess.STDOUT) for s in (stdout, stderr))
    ):
        return _cold_run(args, **kwargs)
    pipes, fds, closing = {}, [], []
    for name, target in (("stdout", stdout), ("stderr", stderr)):
        if target is subprocess.PIPE:
            r, w = os.pipe()
            pipes[name] = r
            fds.append(w), closing.append(w)
        elif target == subprocess.STDOUT:
            fds.append(fds[0])
        else:
            fds.append(target.fileno() if target is not None else (1 if name == "stdout" else 2))
    conn, reply, pid = request_child(os.environ[SOCKET_ENV], args, kwargs.get("cwd"), kwargs.get("env"), *fds)
    for fd in closing:
        os.close(fd)
    chunks = {name: [] for name in pipes}
    readers = [threading.Thread(target=_drain, args=(fd, chunks[name]), daemon=True) for name, fd in pipes.items()]
    for t in readers:
        t.start()
    expired = []

    def expire() -> None:
        expired.append(True)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended as the limit came
            expired.clear()

    timer = threading.Timer(kwargs["timeout"], expire) if kwargs.get("timeout") is not None else None
    if timer is not None:
        timer.start()
    with conn, reply:
        code = json.loads(reply.readline())["returncode"]
    if timer is not None:
        timer.cancel()
    for t in readers:
        t.join()
    if expired:
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])
    out = {name: b"".join(c).decode() if kwargs.get("text") else b"".join(c) for name, c in chunks.items()}
    done = subprocess.CompletedProcess(args, code, out.get("stdout"), out.get("stderr"))
    if kwargs.get("check"):
        done.check_returncode()
    return done


def popen(command: list[str], **kwargs):
    """A WarmProcess for `python ...` where the server can run it, else subprocess.Popen (text, piped)."""
    if kwargs.pop("warm", True) and ENABLED and command[0] == sys.executable and len(command) > 1:
        return WarmProcess(command, cwd=kwargs.get("cwd"), env=kwargs.get("env"))
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
