"""What this process can train on: `python -m xla_train devices` and `xla_train.devices()`.

A notebook's first cell asks this to pick its settings, so `auto` answers the
way a fit with accelerator=auto would choose (a TPU on the PCI bus, then a CUDA
GPU, then the CPU) and starts no XLA runtime unless it finds a TPU. Asking for
tpu or xla starts the PJRT runtime in this process, as a fit would.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from xla_train.errors import HardwareError


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
    from xla_train.runtime.plan import resolve_accelerator

    kind = resolve_accelerator(str(accelerator))
    if kind in ("tpu", "xla"):
        from xla_train.runtime.accelerators import configure_pjrt, device_kind, runtime_device_count

        configure_pjrt(kind)
        import torch_xla

        names = tuple(f"xla:{i}" for i in range(runtime_device_count()))
        return DeviceReport(kind, device_kind(), names,
                            f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}, torch_xla {torch_xla.__version__}")
    import torch

    if kind == "gpu":
        if not torch.cuda.is_available():
            raise HardwareError("accelerator=gpu but no CUDA GPU is visible; use accelerator=cpu or xla")
        names = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
        return DeviceReport("gpu", torch.cuda.get_device_name(0), names,
                            f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    return DeviceReport("cpu", "CPU", ("cpu",), f"{platform.machine()}, {os.cpu_count()} cores, "
                                                f"{torch.get_num_threads()} torch threads")
