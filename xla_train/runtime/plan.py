"""From accelerator=/devices=/strategy= to the Trainer's hardware arguments.

This is the one place that decides what runs where. `tpu` and `xla` get the
PJRT accelerators and an XLA strategy; `cpu` and `gpu` are plain Lightning;
`auto` takes a TPU if the PCI bus has one, then a GPU, then the CPU. Every
choice writes checkpoints through the same atomic writer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from xla_train.checkpoint_io import AtomicCheckpointIO
from xla_train.errors import ConfigError, HardwareError

ACCELERATORS = ("auto", "tpu", "xla", "gpu", "cpu")
XLA_STRATEGIES = ("auto", "xla_single")


@dataclass
class HardwarePlan:
    kind: str
    trainer_kwargs: dict
    callbacks: list = field(default_factory=list)

    @property
    def is_xla(self) -> bool:
        return self.kind in ("tpu", "xla")


def resolve_accelerator(accelerator: str) -> str:
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"accelerator={accelerator!r} is not known; use one of {', '.join(ACCELERATORS)}")
    if accelerator != "auto":
        return accelerator
    from xla_train.runtime.accelerators import tpu_chips_on_pci_bus

    try:
        if tpu_chips_on_pci_bus():
            return "tpu"
    except ImportError:
        pass
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def plan_hardware(accelerator: str = "auto", devices="auto", strategy="auto", precision=None) -> HardwarePlan:
    kind = resolve_accelerator(str(accelerator))
    if kind in ("cpu", "gpu"):
        if kind == "gpu":
            import torch

            if not torch.cuda.is_available():
                raise HardwareError("accelerator=gpu but no CUDA GPU is visible; use accelerator=cpu or xla")
        kwargs = {"accelerator": kind, "devices": devices, "plugins": [AtomicCheckpointIO()]}
        if strategy != "auto":
            kwargs["strategy"] = strategy
        return HardwarePlan(kind, kwargs)
    return _plan_xla(kind, devices, strategy)


def _plan_xla(kind: str, devices, strategy) -> HardwarePlan:
    from xla_train.runtime.accelerators import (PJRTAccelerator, TPUAccelerator, configure_pjrt,
                                                parse_device_count, runtime_device_count)
    from xla_train.runtime.compile_guard import CompileAccounting

    if strategy not in XLA_STRATEGIES:
        raise ConfigError(f"strategy={strategy!r} cannot run on accelerator={kind}; use one of "
                          f"{', '.join(XLA_STRATEGIES)}")
    requested = None if devices in ("auto", None, -1, "-1") else devices
    try:
        requested = int(requested) if requested is not None else None
    except (TypeError, ValueError):
        raise HardwareError(f"devices={devices!r} is not a device count; use a whole number or auto") from None
    if requested is not None and requested < 1:
        raise HardwareError(f"devices={requested} must be at least 1 (or auto for all)")
    configure_pjrt(kind, requested)
    n = parse_device_count(devices, runtime_device_count())
    accelerator = TPUAccelerator() if kind == "tpu" else PJRTAccelerator()
    if n == 1:
        from xla_train.runtime.strategies import XLASingleDeviceStrategy

        strat = XLASingleDeviceStrategy(0, accelerator=accelerator)
    else:
        raise HardwareError(f"devices={n}: data-parallel training over several XLA devices is not "
                            f"available yet; use devices=1")
    # The accelerator travels inside the strategy; Lightning refuses it twice.
    return HardwarePlan(kind, {"accelerator": "auto", "strategy": strat, "devices": n},
                        callbacks=[CompileAccounting()])
