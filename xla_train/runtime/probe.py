"""What hardware this machine has: the one probe behind accelerator=auto, runtime=auto, `devices` and the benchmarks.

It reads the PCI bus for TPU chips (never a metadata server) and asks torch for CUDA, and it imports and starts no
XLA runtime: on a TPU only one process may hold the chips, and the one that asks is often not the one that will
train. So it answers alike whichever runtime is installed, or none.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from xla_train.errors import ConfigError, HardwareError

# Google's PCI vendor id and its TPU chips' device ids (v2/v3, v4, v5e, v6e, two test parts, 7x), as torch_xla
# 2.9.0's _internal/tpu.py lists them: the same answer with or without torch_xla installed.
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICES = frozenset({"0x0027", "0x005e", "0x0063", "0x006f", "0x0056", "0x0062", "0x0076"})
PCI_DEVICES = "/sys/bus/pci/devices"
EMULATE_ENV = "XLA_TRAIN_EMULATE_TPU_LOCK"  # runtime/tpu_lock.py's test mode: XLA:CPU plays a TPU
PLATFORMS = ("cpu", "gpu", "tpu")  # the one spelling of each: PJRT's "CPU", JAX's "cuda" are read into these


def platform_named(name: str) -> str:
    """A platform as any runtime spells it ("CPU", "TPU", "cuda", "gpu"), in the one spelling of PLATFORMS."""
    found = {"cuda": "gpu", "rocm": "gpu"}.get(name.strip().lower(), name.strip().lower())
    if found not in PLATFORMS:
        raise ConfigError(f"platform {name!r} is not known; use one of {', '.join(PLATFORMS)}")
    return found


def tpu_chips(root: str = PCI_DEVICES) -> int:
    """TPU chips attached to this host through PCI."""
    chips = 0
    for vendor in glob.glob(os.path.join(root, "*", "vendor")):
        try:
            if Path(vendor).read_text().strip() != GOOGLE_PCI_VENDOR:
                continue
            chips += Path(vendor).with_name("device").read_text().strip() in TPU_PCI_DEVICES
        except OSError:
            continue
    return chips


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def emulating_tpu() -> bool:
    """The test mode in which XLA:CPU plays a TPU (one process at a time)."""
    return bool(os.environ.get(EMULATE_ENV)) and os.environ.get("PJRT_DEVICE", "cpu").strip().lower() == "cpu"


def xla_platform(accelerator: str = "xla") -> str:
    """The platform an XLA run of accelerator= will start on (cpu, gpu or tpu), decided before anything is chosen
    from it (the loop, K, the data path, the benchmark cells): tpu and gpu as named; for xla the user's PJRT_DEVICE
    where set (XLA's own setting, which both runtimes read), else a TPU where the PCI bus has TPU chips, else the
    CPU. It sets nothing."""
    if accelerator in ("tpu", "gpu"):
        return accelerator
    chosen = os.environ.get("PJRT_DEVICE", "").strip()
    if chosen:
        return platform_named(chosen)
    return "tpu" if tpu_chips() else "cpu"


def require_cuda(what: str = "accelerator=gpu") -> None:
    if not cuda_available():
        raise HardwareError(f"{what} but no CUDA GPU is visible; use accelerator=cpu or xla")


def require_tpu(what: str = "accelerator=tpu") -> None:
    if tpu_chips() == 0:
        raise HardwareError(
            f"{what} but this machine has no TPU; use accelerator=xla (XLA on the CPU, "
            f"PJRT_DEVICE=CPU) or accelerator=cpu"
        )


def own_accelerator() -> str:
    """This machine's own accelerator: a TPU, else a CUDA GPU, else xla (XLA on this CPU)."""
    return "tpu" if tpu_chips() else "gpu" if cuda_available() else "xla"


def require_available(accelerator: str, what: str) -> None:
    """Fail at once, in one line, when this machine lacks the hardware an accelerator= name needs."""
    if accelerator == "tpu":
        require_tpu(what)
    elif accelerator == "gpu":
        require_cuda(what)
