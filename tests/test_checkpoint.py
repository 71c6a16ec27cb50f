"""Checkpoint writes are atomic: a crash, a kill or a full disk never costs the previous file."""
import errno
import os
import subprocess
import sys

import pytest
import torch

from xla_train.checkpoint import atomic_save, safe_load
from xla_train.errors import CheckpointError


def good(path, value=1.0):
    atomic_save({"state_dict": {"w": torch.full((4,), value)}}, path)


def test_atomic_save_writes_plain_cpu_tensors_and_leaves_no_temp_file(tmp_path):
    good(tmp_path / "last.ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert safe_load(tmp_path / "last.ckpt")["state_dict"]["w"].device.type == "cpu"


def test_a_full_disk_fails_clearly_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    good(path, 1.0)

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(CheckpointError, match="No space left on device.*previous checkpoint.*intact"):
        good(path, 2.0)
    monkeypatch.undo()
    assert safe_load(path)["state_dict"]["w"][0] == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_process_killed_while_writing_leaves_the_previous_checkpoint_loadable(tmp_path):
    path = tmp_path / "last.ckpt"
    good(path, 1.0)
    # The child dies by SIGKILL after writing its bytes but before the rename: the worst moment.
    code = f"""
import os, signal, torch
from xla_train import checkpoint
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
checkpoint.atomic_save({{"state_dict": {{"w": torch.full((1_000_000,), 2.0)}}}}, {str(path)!r})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert proc.returncode == -9
    assert safe_load(path)["state_dict"]["w"].tolist() == [1.0] * 4
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "last.ckpt"]
    assert all(n.startswith(".last.ckpt.") and n.endswith(".tmp") for n in leftovers)  # hidden, never loaded
