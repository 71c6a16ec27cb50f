"""`python -m xla_train devices` and `xla_train.devices()`: what this process can train on.

A notebook's first cell asks this to pick its settings, so `auto` answers the
way a fit with accelerator=auto would choose (a TPU on the PCI bus, then a CUDA
GPU, then the CPU). It never starts the XLA runtime in this process: on a TPU the
process that does holds the chips until it exits, and the notebook's benchmark
cells and fits in subprocesses could not have them. A short-lived process counts
them instead (runtime/accelerators.py, describe_devices).
"""

from __future__ import annotations

from xla_train.errors import ConfigError
from xla_train.runtime.accelerators import describe_devices
from xla_train.runtime.probe import ACCELERATORS


def devices_command(pairs: dict[str, str]) -> int:
    """What a user checks first on a new machine: which devices each accelerator= would train on."""
    unknown = set(pairs) - {"accelerator"}
    if unknown:
        raise ConfigError(f"devices takes only accelerator={'|'.join(ACCELERATORS)}, not {', '.join(sorted(unknown))}")
    print(describe_devices(pairs.get("accelerator", "xla")))
    return 0
