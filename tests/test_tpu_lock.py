"""One process per TPU (libtpu's lock), emulated on XLA:CPU (runtime/tpu_lock.py): every order of calls a
notebook makes still works. tests/test_notebooks.py runs the benchmarks notebook itself this way."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import SCRIPTS, cli_env, run_paced, script_json
from xla_train.runtime.tpu_lock import EMULATE_ENV


@pytest.mark.slow  # a fit, a benchmark cell and a curve fit: two minutes on this shared machine
def test_a_process_holding_the_device_lists_benchmarks_and_fits_in_any_order(tmp_path):
    """devices() first claims nothing; after a fit this process holds the device, another process cannot get
    it (as on a TPU), and the benchmark cells and curve fits then run in this process instead."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    env.pop("CPU_NUM_DEVICES")
    out = script_json(SCRIPTS / "tpu_lock_kernel.py", env=env, cwd=tmp_path, timeout=600)
    assert "accelerator=xla" in out["devices_before"] and out["held_after_devices"] is False, out
    assert out["held_after_fit"] is True
    code, err = out["other_process"]
    assert code == 2 and err.startswith("xla_train: error: another process holds this TPU VM's chips"), err
    assert len(out["sweep"]) == 1 and out["sweep"][0]["step_ms"] > 0, out["sweep"]  # a real timing, no error
    assert any(line.startswith("128,0,") for line in out["curves"]), out["curves"]  # the curve fit's epoch
    assert "accelerator=xla" in out["devices_after"]


def test_devices_lists_the_emulated_tpu_without_holding_it(tmp_path):
    """The benchmarks notebook's first cell: after devices(), another process can still take the device."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    proc = run_paced([sys.executable, str(SCRIPTS / "tpu_lock_list_then_claim.py")], 120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "accelerator=xla" in proc.stdout and proc.stdout.strip().endswith("claimed"), proc.stdout


def test_a_second_process_cannot_take_the_emulated_tpu(tmp_path):
    """The test mode itself: while one process holds the device, another meets the TPU's own error (libtpu cannot
    open /dev/accel0), and the product makes that one line, exit 2, as it would on a TPU VM."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    hold = (
        "from xla_train.runtime.torch_xla.devices import configure_pjrt; configure_pjrt('xla'); "
        "import sys; print('held', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        other = run_paced([sys.executable, "-m", "xla_train", "devices", "accelerator=xla"], 120, env=env)
    finally:
        holder.communicate("", timeout=60)
    assert other.returncode == 2, other.stderr
    assert other.stderr.strip() == (
        "xla_train: error: another process holds this TPU VM's chips (open(/dev/accel0): "
        "Operation not permitted); one process at a time can: end the other one (a "
        "notebook kernel that has trained: restart it; `sudo lsof /dev/accel0` names "
        "it) and run again"
    ), other.stderr


@pytest.mark.parametrize(
    "message, device",
    [
        (
            "Bad StatusOr access: UNKNOWN: TPU initialization failed: open(/dev/accel0): Operation not permitted: "
            "Operation not permitted; Couldn't open device: /dev/accel0",
            "/dev/accel0",
        ),  # v2-v4 (pytorch/xla#5616)
        (
            "Bad StatusOr access: UNKNOWN: TPU initialization failed: open(/dev/vfio/0): Device or resource busy",
            "/dev/vfio/0",
        ),
    ],
)
def test_a_tpu_held_by_another_process_is_one_line_and_other_runtime_errors_pass_through(message, device):
    from xla_train.errors import HardwareError
    from xla_train.runtime.tpu_lock import starting_runtime

    with pytest.raises(HardwareError, match=re.escape(f"`sudo lsof {device}` names it")):
        with starting_runtime():
            raise RuntimeError(message)
    with pytest.raises(RuntimeError, match="something else"):
        with starting_runtime():
            raise RuntimeError("something else")
