"""`python -m xla_train devices` and `xla_train.devices()`: what this process can train on.

A notebook's first cell asks this to pick its settings, so `auto` answers the
way a fit with accelerator=auto would choose (a TPU on the PCI bus, then a CUDA
GPU, then the CPU). It never starts the XLA runtime in this process: on a TPU the
process that does holds the chips until it exits, and the notebook's benchmark
cells and fits in subprocesses could not have them. A short-lived process counts
them instead (runtime/accelerators.py, list_xla_devices).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from xla_train.errors import ConfigError
from xla_train.runtime.probe import ACCELERATORS, require_cuda, resolve_accelerator


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


def devices_command(pairs: dict[str, str]) -> int:
    """What a user checks first on a new machine: which devices each accelerator= would train on."""
    unknown = set(pairs) - {"accelerator"}
    if unknown:
        raise ConfigError(f"devices takes only accelerator={'|'.join(ACCELERATORS)}, not {', '.join(sorted(unknown))}")
    print(describe_devices(pairs.get("accelerator", "xla")))
    return 0


def describe_devices(accelerator: str = "auto") -> DeviceReport:
    kind = resolve_accelerator(str(accelerator))
    if kind in ("tpu", "xla"):
        from importlib.metadata import version

        from xla_train.runtime.accelerators import list_xla_devices

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
