"""One process per TPU (libtpu's lock), emulated on XLA:CPU (runtime/exclusive.py): every order of calls a
notebook makes still works. tests/test_notebooks.py runs the benchmarks notebook itself this way."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import cli_env
from xla_train.runtime.exclusive import EMULATE_ENV

KERNEL = """
import json, subprocess, sys
import xla_train
from xla_train.runtime.exclusive import runtime_started
out = {"devices_before": str(xla_train.devices()), "held_after_devices": runtime_started()}
run = xla_train.fit("quickstart", accelerator="xla", epochs=1, predict_samples=0, test_after_fit=False,
                    **{"trainer.limit_train_batches": 2, "trainer.limit_val_batches": 1})
out["held_after_fit"] = runtime_started()
other = subprocess.run([sys.executable, "-m", "xla_train", "devices", "accelerator=xla"], capture_output=True,
                       text=True)
out["other_process"] = [other.returncode, other.stderr.strip()]
sweep = xla_train.benchmark("sweep", recipe="quickstart", accelerators="xla", batch_sizes="32", steps=2, warmup=1)
out["sweep"] = [json.loads(p.read_text()) for p in sorted(sweep.glob("cells/*.json"))]
curves = xla_train.benchmark("curves", recipe="quickstart", accelerator="xla", batch_sizes="128", epochs=1)
out["curves"] = (curves / "curves.csv").read_text().splitlines()
out["devices_after"] = str(xla_train.devices("xla"))
print(json.dumps(out))
"""


@pytest.mark.slow  # a fit, a benchmark cell and a curve fit: two minutes on this shared machine
def test_a_process_holding_the_device_lists_benchmarks_and_fits_in_any_order(tmp_path):
    """devices() first claims nothing; after a fit this process holds the device, another process cannot get
    it (as on a TPU), and the benchmark cells and curve fits then run in this process instead."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    env.pop("CPU_NUM_DEVICES")
    proc = subprocess.run([sys.executable, "-c", KERNEL], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "accelerator=xla" in out["devices_before"] and out["held_after_devices"] is False, out
    assert out["held_after_fit"] is True
    code, err = out["other_process"]
    assert code == 2 and err.startswith("xla_train: error: the TPU is already in use by process"), err
    assert len(out["sweep"]) == 1 and out["sweep"][0]["step_ms"] > 0, out["sweep"]  # a real timing, no error
    assert any(line.startswith("128,0,") for line in out["curves"]), out["curves"]  # the curve fit's epoch
    assert "accelerator=xla" in out["devices_after"]


LIST_THEN_CLAIM = """
import subprocess, sys
import xla_train
from xla_train.runtime.exclusive import runtime_started
print(xla_train.devices())
assert not runtime_started()
claim = "from xla_train.runtime.accelerators import configure_pjrt; configure_pjrt('xla'); print('claimed')"
print(subprocess.run([sys.executable, "-c", claim], capture_output=True, text=True).stdout.strip())
"""


def test_devices_lists_the_emulated_tpu_without_holding_it(tmp_path):
    """The benchmarks notebook's first cell: after devices(), another process can still take the device."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    proc = subprocess.run([sys.executable, "-c", LIST_THEN_CLAIM], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "accelerator=xla" in proc.stdout and proc.stdout.strip().endswith("claimed"), proc.stdout


def test_a_second_process_cannot_take_the_emulated_tpu(tmp_path):
    """The test mode itself: while one process holds the device, another's start is one line, exit 2."""
    env = cli_env(1, **{EMULATE_ENV: str(tmp_path / "libtpu_lockfile")})
    hold = ("from xla_train.runtime.accelerators import configure_pjrt; configure_pjrt('xla'); "
            "import sys; print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        other = subprocess.run([sys.executable, "-m", "xla_train", "devices", "accelerator=xla"], env=env,
                               capture_output=True, text=True, timeout=120)
    finally:
        holder.communicate("", timeout=60)
    assert other.returncode == 2, other.stderr
    assert other.stderr.strip() == (f"xla_train: error: the TPU is already in use by process {holder.pid} "
                                    f"({EMULATE_ENV}: XLA:CPU stands in for a TPU, whose chips one process holds "
                                    f"at a time)"), other.stderr
