"""`python -m xla_train devices` and `xla_train.devices()`: what this process can train on.

A notebook's first cell asks this to pick its settings, so `auto` answers the
way a fit with accelerator=auto would choose (a TPU on the PCI bus, then a CUDA
GPU, then the CPU). It never starts the XLA runtime in this process: on a TPU the
process that does holds the chips until it exits, and the notebook's benchmark
cells and fits in subprocesses could not have them. A short-lived process counts
them instead (runtime/accelerators.py, describe_devices).
"""

from __future__ import annotations

from xla_train.cli.keys import read_keys


def devices_command(pairs: dict[str, str], flags: list[str]) -> int:
    fn, kwargs = parse(pairs, flags)
    return fn(**kwargs)


def parse(pairs: dict[str, str], flags: list[str]) -> tuple:
    return devices, read_keys(devices, pairs, flags, prog="devices")


def devices(accelerator: str = "xla") -> int:
    """What a user checks first on a new machine: which devices accelerator= (xla|tpu|gpu|cpu|auto) trains on."""
    from xla_train.runtime.accelerators import describe_devices

    print(describe_devices(accelerator))
    return 0
