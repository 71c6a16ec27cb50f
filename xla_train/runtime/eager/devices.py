"""The eager runtime's devices: this CPU, or the CUDA GPUs torch sees; devices= checked before Lightning reads it."""

from __future__ import annotations

import os
import platform

from xla_train.errors import HardwareError
from xla_train.runtime.device_report import DeviceReport
from xla_train.runtime.probe import require_cuda


def missing() -> str | None:
    return None  # plain torch: every install has it


def started() -> bool:
    return False  # nothing to hold: another process may use the same CPU or GPU


def report(kind: str) -> DeviceReport:
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


def lightning_devices(kind: str, devices, gpus: int | None = None):
    """devices= for Lightning's own cpu/gpu accelerators, checked here so a bad value is one line, not
    Lightning's TypeError. -1 means all, as in Lightning (and on the XLA paths); on the CPU that is one process.
    `gpus`: the CUDA devices visible (asked of torch when None)."""
    if devices in ("auto", None, -1, "-1"):
        return "auto" if kind == "cpu" or devices in ("auto", None) else -1
    how = (
        "a number of processes of at least 1, or auto"
        if kind == "cpu"
        else "a number of GPUs of at least 1, GPU indices like 0,1 or [0,1], -1 or auto for all"
    )
    chosen = None
    if isinstance(devices, bool):
        pass
    elif isinstance(devices, int) or (isinstance(devices, str) and devices.strip().lstrip("-").isdigit()):
        chosen = int(devices)
        if chosen < 1:
            raise HardwareError(f"devices={chosen} must be at least 1; use {how}")
    elif kind == "gpu":
        indices = devices.split(",") if isinstance(devices, str) else devices

        def index(i) -> bool:
            if isinstance(i, str):
                return i.strip().isdigit()
            return isinstance(i, int) and not isinstance(i, bool) and i >= 0

        if isinstance(indices, (list, tuple)) and indices and all(index(i) for i in indices):
            chosen = [int(i) for i in indices]
    if chosen is None:
        raise HardwareError(f"devices={devices!r} is not a device count; use {how}")
    if kind == "gpu":
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        if (max(chosen) + 1 if isinstance(chosen, list) else chosen) > gpus:
            raise HardwareError(
                f"devices={devices} but this machine has {gpus} CUDA GPU(s); use 1 to {gpus} of "
                f"them (indices 0 to {gpus - 1}), or auto"
            )
    return chosen
