"""`python -m xla_train devices` and `xla_train.devices()`: the devices an accelerator= would train on.

The command's default is `xla` (what the PJRT runtime sees); the Python API's is `auto`, which chooses as a fit
with accelerator=auto would (a TPU on the PCI bus, then a CUDA GPU, then the CPU). Neither starts the XLA runtime in
this process: on a TPU the process that does holds the chips until it exits, and a notebook's later fits and
benchmark subprocesses could not have them. A short-lived process counts them (runtime/devices.py).
"""

from __future__ import annotations

from xla_train.cli.keys import read_keys


def parse(pairs: dict[str, str], flags: list[str]) -> tuple:
    return devices, read_keys(devices, pairs, flags, prog="devices")


def devices(accelerator: str = "xla", runtime: str = "auto") -> int:
    """What a user checks first on a new machine: which devices accelerator= (xla|tpu|gpu|cpu|auto) trains on, on
    runtime= (torch_xla|jax; auto: the one a fit would choose, and the other below it where installed)."""
    from xla_train.runtime.devices import describe_devices

    print(describe_devices(accelerator, runtime))
    return 0
