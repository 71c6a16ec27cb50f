"""Shared fixtures: a tiny CIFAR-10 in torchvision's real on-disk format, and one short CPU run. The helpers the
tests share live in tests/helpers/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_cli, write_cifar10


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
