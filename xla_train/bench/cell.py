"""One subprocess per cell: a cell launched in its own process, or N of them, and the entry they run.

A cell runs in a fresh process (`python -m xla_train.bench.cell SPEC`): XLA's compile cache, device count and peak
memory last as long as a process. A cell of several processes runs them together on this machine's CPU, each with
its own log and result; every benchmark's child processes start at run_logged (docs/results.md, "How the
benchmarks time").
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path

from xla_train.bench.loops import LOOPS
from xla_train.errors import UserError
from xla_train.runtime.registry import run_backend, runtime_started


def run_logged(args: list[str], log: Path, timeout: float, env: dict | None = None) -> int | None:
    """`python ARGS` in a child process, its output into `log`: its exit code, or None when it ran past `timeout`
    (and was killed). Every benchmark's child processes start here."""
    with open(log, "w") as f:
        try:
            proc = subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return proc.returncode


def run_together(args: list[list[str]], logs: list[Path], timeout: float, envs: list[dict | None]) -> list:
    """run_logged for several children at once (the processes of one program), each with its own log: their exit
    codes, None for each that ran past `timeout`."""
    from concurrent.futures import ThreadPoolExecutor

    if len(args) == 1:  # in this thread, as every other benchmark's child
        return [run_logged(args[0], logs[0], timeout, envs[0])]
    with ThreadPoolExecutor(len(args)) as pool:
        return list(pool.map(run_logged, args, logs, [timeout] * len(args), envs))


def free_port() -> int:
    """A TCP port free on this machine whose next one is free too (runtime/jax/multihost.py serves its roll call at
    the coordinator's port + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535 and _free(port + 1):
            return port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_cell(spec: dict, stem: Path, timeout: float) -> dict:
    """One cell in a fresh process; its output goes to STEM.log, its result to STEM.json. A cell of several
    processes (bench replicas processes=N) runs them together on this machine's CPU, each told who is who as a launch
    without a cluster tells them: process 0's result is the cell's, the others' lie beside it (STEM-processI)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    n = spec.get("processes", 1)
    results = [
        s.with_suffix(".json") for s in [stem] + [stem.with_name(f"{stem.name}-process{i}") for i in range(1, n)]
    ]
    for path in results:
        path.unlink(missing_ok=True)
    backend = run_backend(spec["accelerator"], spec.get("runtime") or "auto")
    if backend.exclusive_runtime and runtime_started():
        # This process holds the XLA runtime (on a TPU its chips, which no cell process could then get), so the
        # cell runs here: after this process's own graphs and at its memory high-water mark (runtime/tpu_lock.py).
        main([json.dumps({**spec, "result_path": str(results[0])})])
        return json.loads(results[0].read_text())
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env = backend.child_env(env)  # JAX's passes PJRT_DEVICE on as set: unset, JAX takes its own GPU or TPU
    args = [["-m", "xla_train.bench.cell", json.dumps({**spec, "result_path": str(path)})] for path in results]
    codes = run_together(args, [p.with_suffix(".log") for p in results], timeout, process_envs(env, n))
    if None in codes:
        return {"error": f"did not finish in {timeout:g} s (timeout=)"}
    found = [json.loads(p.read_text()) for p in results if p.is_file()]
    if any("error" in r for r in found) or len(found) == n:  # a process's own error says more than the others' end
        return next((r for r in found if "error" in r), found[0])
    code = next(c for c, p in zip(codes, results) if not p.is_file())
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return {"error": f"the cell process died ({how}; out of memory?)"}


def process_envs(env: dict, n: int) -> list[dict]:
    """The environments of a cell's n processes: one as given; several on this machine's CPU, JAX's three variables
    telling each who it is."""
    if n == 1:
        return [env]
    port = free_port()
    who = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": str(n), "PJRT_DEVICE": "CPU"}
    return [{**env, **who, "JAX_PROCESS_ID": str(i)} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    try:
        result, code = LOOPS[spec.get("loop", "lightning")](spec).run(), 0
    except UserError as e:
        result, code = {"error": str(e)}, e.exit_code
    except Exception as e:  # recorded in the table; the traceback goes to the cell's log
        traceback.print_exc()
        result, code = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}, 1
    import resource

    import torch

    result.update(
        host_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, threads=torch.get_num_threads()
    )
    Path(spec["result_path"]).write_text(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main())
