"""Shared fixtures: a tiny CIFAR-10 in torchvision's real on-disk format, one short CPU run, and `runtime`, over
which every guarantee the XLA runtimes share is one test; and the `fresh_xla` and `runtime_marks` markers' hooks.
The helpers the tests share live in tests/helpers/."""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

import pytest

# Under pytest-xdist each worker's processes get their share of the cores as OpenMP threads, so the workers' torch
# threads do not spin against each other on the same cores. Set before torch is imported, in the worker and so in
# its subprocesses, unless already set; new_user_env drops it.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

from helpers import (  # noqa: E402
    RUNTIME_PACKAGES,
    RUNTIMES,
    SUITE_XLA_FLAGS,
    in_fresh_process,
    require,
    run_cli,
    run_in_fresh_process,
    write_cifar10,
)

os.environ.setdefault("XLA_FLAGS", SUITE_XLA_FLAGS)  # for the tests that run XLA in this process, as cli_env's


@pytest.fixture(scope="session")
def cifar_root(tmp_path_factory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar10"))


@pytest.fixture
def relaxed_cifar_checks(monkeypatch):
    """In-process equivalent of fixture_cli.py's patch."""
    import torchvision.datasets.cifar as cifar
    import torchvision.datasets.utils as utils

    for module in (cifar, utils):  # CIFAR10's own check, and data/cifar10.py's (the same function)
        monkeypatch.setattr(module, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


@pytest.fixture(scope="session")
def cpu_run(cifar_root, tmp_path_factory) -> Path:
    """One short CPU fit of the CNN on the fixture; its run folder."""
    work = tmp_path_factory.mktemp("cpu_run")
    run_cli(
        *"fit recipe=cifar10 accelerator=cpu devices=1 epochs=1 batch_size=32 download=false".split(),
        "test_after_fit=false",
        f"data_dir={cifar_root}",
        cwd=work,
    )
    return work / "runs" / "cifar10" / "version_0"


@pytest.fixture(params=RUNTIMES)
def runtime(request) -> str:
    """The XLA runtime a shared guarantee runs on, in the test's id (`test_x[jax]`); its CLI key is `runtime_key`.
    One runtime's case is marked slow or xfail with `@pytest.mark.runtime_marks(jax=pytest.mark.slow)`. A runtime
    not installed is skipped (failed under CI), found without importing it."""
    if find_spec(RUNTIME_PACKAGES[request.param]) is None:
        require(RUNTIME_PACKAGES[request.param])
    return request.param


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """`@pytest.mark.fresh_xla(devices=N)`: the test function runs in a new process on N XLA:CPU devices, not here."""
    mark = pyfuncitem.get_closest_marker("fresh_xla")
    if mark is None or in_fresh_process(pyfuncitem):
        return None  # run here, as any test
    run_in_fresh_process(pyfuncitem, **mark.kwargs)
    return True


# The modules that take longest, longest first (by their default-suite time). Under `-n 2 --dist loadscope` each
# worker takes whole modules from the front of a queue; xdist orders that queue by the number of tests, which left
# long one-test modules (the quickstart, the package install) for the end while the other worker sat idle. In this
# order the short modules fill the end instead. A module missing from the list
# keeps its place after them; a stale list costs balance, never a test.
LONGEST_FIRST = (
    "test_jax_runtime",
    "test_steps_per_execution",
    "test_notebooks",
    "test_export",
    "test_quickstart",
    "test_packaging",
    "test_scan_rnn",
    "test_resume",
    "test_fit",
    "test_bench",
    "test_own_model",
    "test_imdb",
    "test_builders",
    "test_fast_path",
    "test_cli",
    "test_serve",
)


def pytest_configure(config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below, not by test count
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: a case marked slow here leaves the default suite
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:  # `runtime_marks(NAME=mark or [marks])`: marks for that runtime's case alone
        spec, mark = getattr(item, "callspec", None), item.get_closest_marker("runtime_marks")
        if mark is not None and spec is not None and "runtime" in spec.params:
            added = mark.kwargs.get(spec.params["runtime"], [])
            for m in added if isinstance(added, (list, tuple)) else [added]:
                item.add_marker(m)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each module's own order kept
