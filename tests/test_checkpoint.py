"""Checkpoint writes are atomic: a crash, a kill or a full disk never costs the previous file."""

import errno
import gc
import os
import sys

import pytest
import torch

from helpers import SCRIPTS, run_paced, script_json
from xla_train.checkpoint import atomic_save, safe_load
from xla_train.errors import CheckpointError


def good(path, value=1.0):
    atomic_save({"state_dict": {"w": torch.full((4,), value)}}, path)


def test_atomic_save_writes_plain_cpu_tensors_and_leaves_no_temp_file(tmp_path):
    good(tmp_path / "last.ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert safe_load(tmp_path / "last.ckpt")["state_dict"]["w"].device.type == "cpu"


@pytest.mark.parametrize("collector_on", [True, False])
def test_a_save_leaves_nothing_for_the_cyclic_collector(tmp_path, collector_on):
    """torch.save's pickler class holds every storage it wrote in a reference cycle; the save frees that cycle at
    once, so a host copy of the tensors does not outlive it. 3,000 tensors: enough allocations that objects made
    early in the save would have been moved to an older generation had the collector run. The collector's own
    state (a user may have turned it off) is left as it was."""
    state = {f"w{i}": torch.full((4,), float(i)) for i in range(3000)}
    gc.collect()
    was = gc.isenabled()
    try:
        if not collector_on:
            gc.disable()
        atomic_save(state, tmp_path / "a.ckpt")
        assert gc.isenabled() == collector_on
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = sum(type(o).__name__ == "UntypedStorage" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        (gc.enable if was else gc.disable)()
    assert left == 0
    assert torch.load(tmp_path / "a.ckpt", weights_only=True)["w2999"][0] == 2999


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
    proc = run_paced([sys.executable, "-c", code], 300)
    assert proc.returncode == -9
    assert safe_load(path)["state_dict"]["w"].tolist() == [1.0] * 4
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "last.ckpt"]
    assert all(n.startswith(".last.ckpt.") and n.endswith(".tmp") for n in leftovers)  # hidden, never loaded


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_checkpoints_get_the_ordinary_umask_mode(tmp_path, umask, mode):
    """Others on shared storage can read a checkpoint where the umask lets them (mkstemp's 0600 never did)."""
    old = os.umask(umask)
    try:
        good(tmp_path / "last.ckpt")
        good(tmp_path / "last.ckpt", 2.0)  # a rewrite too
    finally:
        os.umask(old)
    assert (tmp_path / "last.ckpt").stat().st_mode & 0o777 == mode


@pytest.mark.parametrize("fail", ["fsync", "open"])
def test_a_failing_folder_fsync_is_one_line(tmp_path, monkeypatch, fail):
    path = tmp_path / "last.ckpt"
    real_fsync, real_open = os.fsync, os.open
    folder_fds = set()

    def open_(p, flags, *args, **kwargs):
        if os.fspath(p) == str(tmp_path):
            if fail == "open":
                raise OSError(errno.EIO, "Input/output error")
            fd = real_open(p, flags, *args, **kwargs)
            folder_fds.add(fd)
            return fd
        return real_open(p, flags, *args, **kwargs)

    def fsync(fd):
        if fd in folder_fds:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(CheckpointError) as e:
        good(path, 3.0)
    monkeypatch.undo()
    assert str(e.value) == (
        f"wrote checkpoint {path}, but could not flush its folder to disk: Input/output error; "
        f"a crash before the storage flushes may lose it: check the storage"
    )
    assert safe_load(path)["state_dict"]["w"][0] == 3.0 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_folder_that_cannot_be_fsynced_at_all_is_not_an_error(tmp_path, monkeypatch):
    """Some file systems answer EINVAL to fsync on a folder (POSIX allows it): nothing failed there."""
    real_fsync = os.fsync
    file_fds = []

    def fsync(fd):
        if not file_fds:  # the first fsync is the file's
            file_fds.append(fd)
            return real_fsync(fd)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", fsync)
    good(tmp_path / "last.ckpt")
    monkeypatch.undo()
    assert safe_load(tmp_path / "last.ckpt")["state_dict"]["w"][0] == 1.0


class _Callable:
    """Pickles as a call of `open`: a weights-only load must refuse it, and nothing may run it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _unsafe_files(folder):
    import pickle

    marker = folder / "pwned"
    torch.save({"state_dict": {}, "payload": _Callable(marker)}, folder / "zip.ckpt")  # torch's zip format
    with open(folder / "bare.ckpt", "wb") as f:  # a bare pickle, as torch.save(_use_new_zipfile_serialization=False)
        pickle.dump({"state_dict": {}, "payload": _Callable(marker)}, f)
    torch.save({"state_dict": {}, "hook": print}, folder / "function.ckpt")
    return marker


@pytest.mark.parametrize("name,found", [("zip", "io.open"), ("bare", "io.open"), ("function", "print")])
@pytest.mark.parametrize(
    "command", [["predict", "text=a film"], ["export", "format=pt2"], ["fit", "recipe=quickstart", "accelerator=cpu"]]
)
def test_an_unsafe_checkpoint_is_called_unsafe_by_every_command(tmp_path, monkeypatch, capsys, name, found, command):
    """predict, export and resume (fit ckpt=) all read through safe_load: one line naming what was found and a
    safe way on, never torch's advice to load with weights_only=False."""
    from xla_train.cli.main import main

    monkeypatch.chdir(tmp_path)
    marker = _unsafe_files(tmp_path)
    assert main([*command, f"ckpt={tmp_path / f'{name}.ckpt'}"]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("xla_train: error:")]
    assert len(err) == 1, err
    line = err[0]
    assert (
        f"{name}.ckpt is unsafe: it holds objects that a weights-only load refuses (Unsupported global: {found})"
        in line
    )
    assert "re-save it with xla_train, or convert it to plain tensors in a process you trust" in line
    assert "weights_only" not in line and "likely succeed" not in line and "not a readable" not in line
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"garbage", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94."])
def test_a_damaged_file_is_not_called_unsafe_and_torch_advice_is_never_quoted(tmp_path, content):
    (tmp_path / "x.ckpt").write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        safe_load(tmp_path / "x.ckpt")
    line = str(e.value)
    assert "is not a readable checkpoint" in line and "unsafe" not in line, line
    assert "weights_only" not in line and "likely succeed" not in line and "\n" not in line


def test_an_xla_checkpoint_comes_to_the_host_in_one_transfer(tmp_path):
    """runtime/checkpoint_io.py moves every XLA tensor of a checkpoint in one call: `.cpu()` on each was one
    transfer per tensor (54 for this net's weights and Adam state)."""
    path = tmp_path / "x.ckpt"
    seen = script_json(SCRIPTS / "checkpoint_xla_save.py", args=[path])
    assert seen == {"transfers": 1, "same": True, "cpu": True, "moments": 16, "epoch": 3}, seen
