"""XLA accelerators that ask the PJRT runtime how many devices there are.

Lightning's stock XLAAccelerator counts TPU chips on the PCI bus and so sees
nothing under PJRT_DEVICE=CPU. Here `tpu` checks the PCI bus only to fail fast
on a machine without TPUs (no metadata server is contacted), then, like `xla`,
takes the device count from the runtime (runtime/devices.py), which is right on every PJRT backend.
"""

from __future__ import annotations

import os

import torch
from lightning.pytorch.accelerators import XLAAccelerator
from typing_extensions import override

from xla_train.runtime.torch_xla.devices import parse_device_count, runtime_device_count


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
