"""Subprocesses: XLA's device count and SPMD mode are fixed for a process's life, so CLI runs and XLA
scripts run in their own, with limits that follow how busy the machine is. `python ...` children are forked from a
warm-start server (helpers/warm_start.py) unless warm=False."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import warm_start

TESTS = Path(__file__).resolve().parents[1]
SCRIPTS = TESTS / "scripts"  # what tests run in a fresh Python process, as files that ruff checks


# The suite's XLA:CPU programs are compiled with LLVM at -O0: XLA's own passes (fusion, layout, the SPMD
# partitioner, the While loop) run as they do for users; only the machine code is optimised less. The tests assert
# behaviour, not speed, and a short test run's compile outweighs its steps. The tests of what a new user runs
# (new_user_env) keep XLA's defaults.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=0"


def cli_env(devices: int = 1, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_"))}
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices), "PYTHONUNBUFFERED": "1"})
    env["XLA_FLAGS"] = SUITE_XLA_FLAGS
    env.update(extra)
    return env


# A known small job (start Python, import torch, 400 small matmuls) and how long it took on a quiet machine: 2.0 s
# on the 2-core AMD EPYC VM, 2026-11-28. A subprocess's time limit stretches by how much slower the job runs now.
PACE_JOB = "import torch\nx = torch.randn(256, 256)\nfor _ in range(400):\n    x = torch.tanh(x @ x)\n"


PACE_QUIET_S = 2.0


PACE_MOST = 20.0  # never wait more than 20 times a limit: a hang still ends


def machine_pace() -> float:
    """How many times slower than on a quiet machine this one runs the known job now (at least 1)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PACE_JOB], capture_output=True, timeout=PACE_QUIET_S * PACE_MOST)
    return max(1.0, (time.perf_counter() - start) / PACE_QUIET_S)


def run_paced(command: list[str], timeout: float, pace=machine_pace, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True) whose time limit follows the machine: when
    `timeout` seconds have passed, the known job is timed, and the limit becomes timeout times how much slower it
    ran than on a quiet machine (measured again at each new limit, at most PACE_MOST times `timeout`). On a
    machine shared with other test runs a slow child is waited for; on a quiet one a hung child fails as before."""
    with warm_start.popen(command, **kwargs) as proc:
        start = time.perf_counter()  # once the child runs: the warm-start server's own start is not its time
        limit = timeout
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.0, limit - (time.perf_counter() - start)))
                return subprocess.CompletedProcess(command, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                stretched = min(timeout * pace(), timeout * PACE_MOST)
                if stretched <= time.perf_counter() - start:
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(command, time.perf_counter() - start, out, err) from None
                print(
                    f"run_paced: {command[1:3]} past {limit:.0f} s; the machine runs slow: waiting to {stretched:.0f} s"
                )
                limit = stretched


def script_json(script: Path | str, env: dict | None = None, cwd=None, timeout: int = 300, warm: bool = True, args=()):
    """Runs the script (a file of tests/scripts/, or a line of code) with `args` on one XLA:CPU device unless `env`
    says otherwise, and returns its last line of output read as JSON; a script that fails fails the test, with the
    end of its stderr. warm=False: in a fresh interpreter, not a warm-started one (helpers/warm_start.py)."""
    command = [sys.executable, str(script)] if isinstance(script, Path) else [sys.executable, "-c", script]
    command += [str(a) for a in args]
    proc = run_paced(command, timeout, cwd=cwd, env=env or cli_env(1), warm=warm)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FRESH_TEST = "XLA_TRAIN_FRESH_TEST"  # set in the child: the node id it runs in place of its parent


def run_in_fresh_process(item: pytest.Item, devices: int = 1, timeout: float = 300) -> None:
    """Run the test `item` in a new Python process on `devices` XLA:CPU devices (XLA's device count and SPMD mode
    are fixed for a process's life, so a test of them cannot share the suite's): the child is pytest on this one
    node id, whose own fixtures it sets up; its failure is this test's, with the child's report."""
    env = cli_env(devices, **{FRESH_TEST: item.nodeid, "PYTHONPATH": path_with_tests()})
    command = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    proc = run_paced(command, timeout, cwd=item.config.rootpath, env=env)
    if proc.returncode == 0 and " skipped" in proc.stdout and " passed" not in proc.stdout:
        pytest.skip(f"in a fresh process: {proc.stdout.strip().splitlines()[-1]}")
    if proc.returncode != 0 or " passed" not in proc.stdout:
        pytest.fail(f"in a fresh process on {devices} XLA device(s):\n{proc.stdout[-6000:]}{proc.stderr[-3000:]}")


def in_fresh_process(item: pytest.Item) -> bool:
    """Whether `item` is the test this process was started to run (run_in_fresh_process's child)."""
    return os.environ.get(FRESH_TEST) == item.nodeid


def path_with_tests() -> str:
    """PYTHONPATH for a subprocess that imports from tests/ (user_nets, probes): tests/ before the caller's own
    PYTHONPATH, which may name the checkout under test (an editable install elsewhere would otherwise win)."""
    return os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)


def new_user_env(**extra) -> dict:
    """The environment a new user has: none of the suite's XLA, thread or pip settings (README command 1 as
    written)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_", "PIP_"))}
    env.pop("PYTHONPATH", None)
    env.pop("OMP_NUM_THREADS", None)  # conftest.py's share of the cores for each test worker
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def free_port() -> int:
    """A free port whose next one is free too: a JAX pod's roll call listens at the coordinator's port + 1."""
    from xla_train.bench.cell import free_port as pair

    return pair()


POD_FIT = (  # a short quickstart fit of a tiny net, as every emulated pod test runs it
    "recipe=quickstart",
    "model.net.class_path=probes.TinyNet",
    "predict_samples=0",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
)


def run_pod(work_of, args_of, timeout: int = 150, runtime: str = "torch_xla", devices: int = 1, fit=POD_FIT):
    """Two pod hosts started together, host h in the folder work_of(h) with `fit` plus args_of(h). On torch_xla
    emulated (tests/pod_host.py, 1 XLA:CPU device each); on jax two real processes of JAX's multi-controller runtime
    with `devices` CPU devices each, told who is who as a launch without a cluster tells them."""
    port = str(free_port())

    def host(h: int):
        work = work_of(h)
        work.mkdir(parents=True, exist_ok=True)
        if runtime == "jax":
            who = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(h)}
            env = cli_env(devices, **who)
            keys = ("runtime=jax", f"devices={devices}", "num_nodes=2")
            command = [sys.executable, str(TESTS / "fixture_cli.py"), *fit, *keys, *args_of(h)]
        else:
            env = cli_env(
                2, FAKE_HOST=str(h), FAKE_HOSTS="2", FAKE_LOCAL="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
            )
            command = [sys.executable, str(TESTS / "pod_host.py"), *fit, *args_of(h)]
        return run_paced(command, timeout, cwd=work, env=env)

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(host, (0, 1)))


POD_STEPS = 5  # a pod fit's training steps: the digits' training split holds 5 global batches of 8 devices x 32


def pod_fit(work: Path, *extra: str, host1: tuple[str, ...] = (), runtime: str = "torch_xla", timeout: int = 150):
    """Two pod hosts run one fit of POD_STEPS steps, host h in work/host{h} with its own runs_dir there (host 0's
    fills, host 1's must stay empty), each writing the step it stopped at (if an exception stopped it) to its
    stop.json; `host1` are arguments for host 1 alone. On jax each host is a process of 4 CPU devices."""

    def args(h: int) -> tuple[str, ...]:
        stop = work / f"host{h}" / "stop.json"
        fit = (
            "epochs=1",
            "test_after_fit=false",
            f"runs_dir={work / f'host{h}' / 'runs'}",
            f"--trainer.limit_train_batches={POD_STEPS}",
        )
        record = ("--trainer.callbacks+=probes.StopRecord", f"--trainer.callbacks.init_args.out={stop}")
        # one step an execution: the hosts agree whether to stop after every step
        return (*fit, "steps_per_execution=1", *record, *extra, *(host1 if h == 1 else ()))

    return run_pod(lambda h: work / f"host{h}", args, timeout, runtime, 4 if runtime == "jax" else 1)


def run_cli(
    *args: str, cwd: Path, devices: int = 1, timeout: int = 600, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    proc = run_paced(
        [sys.executable, str(TESTS / "fixture_cli.py"), *args], timeout, cwd=cwd, env=env or cli_env(devices)
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"CLI failed ({proc.returncode}):\nSTDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-4000:]}"
        )
    return proc


def require(module: str):
    """A package of the test extra: a test that needs it is skipped where it is missing, except under CI=true
    (.ci/run installs the extra), where a broken install fails instead of passing with tests skipped."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return importlib.import_module(module)
    return pytest.importorskip(module)
