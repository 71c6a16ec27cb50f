"""What hardware this machine has: the one probe behind accelerator=auto, `devices` and the benchmarks.

It reads the PCI bus for TPU chips (never a metadata server) and asks torch
for CUDA, and it starts no XLA runtime: on a TPU only one process may hold
the chips, and the one that asks is often not the one that will train.
"""

from __future__ import annotations

import os

from xla_train import compat
from xla_train.errors import ConfigError, HardwareError

ACCELERATORS = ("auto", "tpu", "xla", "gpu", "cpu")
RUNTIMES = ("auto", "torch_xla", "jax")  # the XLA runtimes (runtime/plan.py, resolve_runtime)


def tpu_chips() -> int:
    """TPU chips attached to this host (0 where torch_xla is not installed)."""
    try:
        return compat.tpu_chips_on_pci_bus()
    except ImportError:
        return 0


def pjrt_device(accelerator: str = "xla") -> str:
    """The PJRT device the XLA runtime will start on, decided before anything is chosen from it (the loop, K, the
    data path, the benchmark cells): TPU for accelerator=tpu; else the user's PJRT_DEVICE where set, else TPU where
    the PCI bus has TPU chips, else CPU. It sets nothing, and accelerators.configure_pjrt writes this same answer
    into PJRT_DEVICE, so a second run in the process (a notebook) is answered alike."""
    if accelerator == "tpu":
        return "TPU"
    chosen = os.environ.get("PJRT_DEVICE", "").strip()
    if chosen:
        return chosen.upper()
    return "TPU" if tpu_chips() else "CPU"


def require_cuda(what: str = "accelerator=gpu") -> None:
    import torch

    if not torch.cuda.is_available():
        raise HardwareError(f"{what} but no CUDA GPU is visible; use accelerator=cpu or xla")


def require_tpu(what: str = "accelerator=tpu") -> None:
    if tpu_chips() == 0:
        raise HardwareError(
            f"{what} but this machine has no TPU; use accelerator=xla (XLA on the CPU, "
            f"PJRT_DEVICE=CPU) or accelerator=cpu"
        )


def require_available(accelerator: str, what: str) -> None:
    """Fail at once, in one line, when this machine lacks the hardware an accelerator= name needs."""
    if accelerator == "tpu":
        require_tpu(what)
    elif accelerator == "gpu":
        require_cuda(what)


def own_accelerator() -> str:
    """What `auto` picks on this machine, or `xla` where that is the CPU: the XLA path on it."""
    own = resolve_accelerator("auto")
    return "xla" if own == "cpu" else own


def resolve_accelerator(accelerator: str, runtime: str = "auto") -> str:
    """The accelerator itself, or for `auto` a TPU if the PCI bus has one, else a CUDA GPU, else the CPU. A runtime
    named (torch_xla or jax) asks for XLA, so `auto` is then never eager: a TPU, a GPU where that runtime has one
    (JAX's), else XLA on the CPU."""
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"accelerator={accelerator!r} is not known; use one of {', '.join(ACCELERATORS)}")
    if accelerator != "auto":
        check_runtime_runs_on(accelerator, runtime)
        return accelerator
    if tpu_chips():
        return "tpu"
    from xla_train.runtime.tpu_lock import emulating

    if emulating() or runtime == "torch_xla":  # XLA:CPU plays the TPU; torch_xla has no GPU build
        return "xla"
    import torch

    if torch.cuda.is_available():
        return "gpu"
    return "xla" if runtime == "jax" else "cpu"


def check_runtime_runs_on(accelerator: str, runtime: str) -> None:
    """One line where runtime= names an XLA runtime that cannot run accelerator=, rather than a run without it."""
    if accelerator == "cpu" and runtime in ("torch_xla", "jax"):
        raise ConfigError(
            f"runtime={runtime} runs XLA, and accelerator=cpu is eager PyTorch without it; use accelerator=xla "
            f"(XLA on this CPU) or auto, or leave runtime=auto"
        )
    if accelerator == "gpu" and runtime == "torch_xla":
        raise ConfigError(
            "runtime=torch_xla has no GPU build (torch-xla 2.9.0 on PyPI); use runtime=jax for XLA on the GPU, "
            "or leave runtime=auto for eager CUDA"
        )
