"""The devices an accelerator= would train on, and the PJRT settings that pick them, without Lightning.

`python -m xla_train devices` is the first command on a new machine (and the benchmarks notebook's first cell):
it should answer in the time the runtime takes to start, not in the time Lightning, torchmetrics and their imports
take. Neither this process nor the short-lived one that asks the runtime imports Lightning.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

from xla_train.errors import HardwareError
from xla_train.runtime.probe import pjrt_device, require_cuda, require_tpu, resolve_accelerator
from xla_train.runtime.tpu_lock import starting_runtime


def configure_pjrt(kind: str, devices: int | str | None = None) -> None:
    """Set PJRT_DEVICE (and CPU_NUM_DEVICES) before the runtime starts. Safe to call twice."""
    if kind == "tpu":
        if os.environ.get("PJRT_DEVICE", "TPU").upper() != "TPU":
            raise HardwareError(
                f"accelerator=tpu but PJRT_DEVICE={os.environ['PJRT_DEVICE']}; unset PJRT_DEVICE or use accelerator=xla"
            )
        require_tpu()
        os.environ["PJRT_DEVICE"] = "TPU"
        return
    os.environ["PJRT_DEVICE"] = pjrt_device(kind)  # the one answer every default was chosen from
    if os.environ["PJRT_DEVICE"].upper() == "CPU" and "CPU_NUM_DEVICES" not in os.environ:
        if isinstance(devices, int) and devices > 0:
            os.environ["CPU_NUM_DEVICES"] = str(devices)
    with starting_runtime():  # the test mode's lock, which makes XLA:CPU one process's as a TPU is (tpu_lock.py)
        pass


@functools.lru_cache(maxsize=1)
def runtime_device_count() -> int:
    """Devices addressable by this process, from the PJRT runtime."""
    import torch_xla.runtime as xr

    with starting_runtime():
        return xr.addressable_runtime_device_count()


_LIST = """
import json, os
from xla_train import compat
from xla_train.errors import UserError
from xla_train.runtime.devices import configure_pjrt, device_kind, runtime_device_count
compat.defer_torch_xla_dynamo_bridge()  # a process that only counts devices never compiles
try:
    configure_pjrt({kind!r})
    print(json.dumps({{"count": runtime_device_count(), "kind": device_kind(), "pjrt": os.environ["PJRT_DEVICE"]}}))
except UserError as e:
    print(json.dumps({{"error": str(e)}}))
"""


def list_xla_devices(kind: str) -> tuple[int, str, str]:
    """(device count, device kind, PJRT_DEVICE) of the XLA runtime accelerator=`kind` would start, without holding it.

    A process that starts the runtime holds a TPU's chips until it exits, and then no
    other process (a benchmark cell, a fit in a subprocess) can use them. So unless
    this process has started the runtime already, a short-lived one answers.
    """
    import json
    import subprocess
    import sys

    from xla_train.runtime.tpu_lock import runtime_started

    if runtime_started():
        configure_pjrt(kind)
        return runtime_device_count(), device_kind(), os.environ["PJRT_DEVICE"]
    proc = subprocess.run([sys.executable, "-c", _LIST.format(kind=kind)], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HardwareError(f"the XLA runtime for accelerator={kind} did not start ({tail})")
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise HardwareError(answer["error"])
    return answer["count"], answer["kind"], answer["pjrt"]


def device_kind() -> str:
    import torch_xla.runtime as xr

    return xr.device_type() or "unknown"


def parse_device_count(devices, available: int) -> int:
    if devices in ("auto", -1, "-1", None):
        return available
    try:
        n = int(devices)
    except (TypeError, ValueError):
        raise HardwareError(
            f"devices={devices!r} is not a device count; use a whole number from 1 to {available}, or auto"
        ) from None
    if not 1 <= n <= available:
        raise HardwareError(
            f"devices={n} but this machine has {available} XLA device(s); use 1 to {available}, or auto"
        )
    return n


@dataclass(frozen=True)
class DeviceReport:
    accelerator: str  # what to pass as accelerator=
    hardware: str
    names: tuple[str, ...]
    detail: str

    @property
    def count(self) -> int:
        return len(self.names)

    def __str__(self) -> str:
        n = self.count
        lines = [f"{n} {self.hardware} device{'s' if n != 1 else ''} (accelerator={self.accelerator}; {self.detail})"]
        return "\n".join(lines + [f"  {name}  {self.hardware}" for name in self.names])


def describe_devices(accelerator: str = "auto") -> DeviceReport:
    """The devices accelerator= would train on, without starting the XLA runtime in this process."""
    kind = resolve_accelerator(str(accelerator))
    if kind in ("tpu", "xla"):
        from importlib.metadata import version

        count, hardware, pjrt = list_xla_devices(kind)  # without holding a TPU's chips in this process
        names = tuple(f"xla:{i}" for i in range(count))
        return DeviceReport(kind, hardware, names, f"PJRT_DEVICE={pjrt}, torch_xla {version('torch_xla')}")
    import torch

    if kind == "gpu":
        require_cuda()
        names = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
        return DeviceReport(
            "gpu", torch.cuda.get_device_name(0), names, f"torch {torch.__version__}, CUDA {torch.version.cuda}"
        )
    return DeviceReport(
        "cpu", "CPU", ("cpu",), f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"
    )
