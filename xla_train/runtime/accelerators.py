"""XLA accelerators that ask the PJRT runtime how many devices there are.

Lightning's stock XLAAccelerator counts TPU chips on the PCI bus and so sees
nothing under PJRT_DEVICE=CPU. Here `tpu` checks the PCI bus only to fail fast
on a machine without TPUs (no metadata server is contacted), then, like `xla`,
takes the device count from the runtime, which is right on every PJRT backend.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
import os

import torch
from lightning.pytorch.accelerators import XLAAccelerator
from typing_extensions import override

from xla_train.errors import HardwareError
from xla_train.runtime.tpu_lock import starting_runtime
from xla_train.runtime.probe import pjrt_device, require_cuda, require_tpu, resolve_accelerator


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
from xla_train.errors import UserError
from xla_train.runtime.accelerators import configure_pjrt, device_kind, runtime_device_count
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


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def keep_cuda_probe_off_the_trace() -> str | None:
    """Stop `torch.cuda.is_available()` from loading libnvidia-ml on every call; returns the value it replaced.

    Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1 when it is imported, so that
    its CUDA checks cannot poison a later fork. With it set, torch answers
    `is_available()` by dlopen-ing libnvidia-ml each time until CUDA is
    initialised, which an XLA run never does, and torch's Adam and AdamW ask
    in every `step()`: a library search in the middle of each trace, which
    also lets the GIL go to MpDeviceLoader's threads. Unset, torch asks the
    CUDA runtime once and caches the answer: no GPU on a TPU VM, and nothing
    initialised that a forked worker would need.
    """
    return os.environ.pop(NVML_CHECK, None)


def restore_cuda_probe(previous: str | None) -> None:
    if previous is not None:
        os.environ[NVML_CHECK] = previous


class TracingAccelerator(XLAAccelerator):
    """Lightning's XLAAccelerator, with torch's CUDA probe kept off every traced step for the run (in each
    process of strategy=xla_mp, which counts TPU cores this way without starting the runtime)."""

    _nvml_check: str | None = None

    @override
    def setup_device(self, device: torch.device) -> None:
        super().setup_device(device)
        self._nvml_check = keep_cuda_probe_off_the_trace()

    @override
    def teardown(self) -> None:
        restore_cuda_probe(self._nvml_check)  # the process as Lightning left it, for a GPU run after this one
        self._nvml_check = None
        super().teardown()


class PJRTAccelerator(TracingAccelerator):
    """The `xla` accelerator: whatever PJRT device is configured (the CPU here, a TPU on a TPU VM)."""

    kind = "xla"

    @staticmethod
    @override
    def auto_device_count() -> int:
        return runtime_device_count()

    @staticmethod
    @override
    def is_available() -> bool:
        try:
            return runtime_device_count() > 0
        except Exception:
            return False

    @staticmethod
    @override
    def parse_devices(devices):
        return parse_device_count(devices, runtime_device_count())

    @staticmethod
    @override
    def get_parallel_devices(devices) -> list[torch.device]:
        n = parse_device_count(devices, runtime_device_count())
        return [torch.device("xla", i) for i in range(n)]

    @staticmethod
    @override
    def name() -> str:
        return "xla"


class TPUAccelerator(PJRTAccelerator):
    """The `tpu` accelerator: refuses at once on a machine without TPUs."""

    kind = "tpu"

    @staticmethod
    @override
    def name() -> str:
        return "tpu"


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
