"""One process per TPU: the rule libtpu enforces, and a test mode that enforces it on XLA:CPU.

On a TPU VM the process that starts the PJRT runtime holds the chips until it
exits (libtpu takes /tmp/libtpu_lockfile); any other process that starts one
fails. A notebook kernel that asked for its devices, then ran benchmark cells
or fits in subprocesses, would fail that way on a TPU and nowhere else.

With XLA_TRAIN_EMULATE_TPU_LOCK=PATH, XLA:CPU plays that TPU: `auto` picks it
(accelerator=xla), and starting the runtime takes an exclusive lock on PATH,
held for the life of the process, so a second process fails as on a TPU.
"""
from __future__ import annotations

import os

from xla_train.errors import HardwareError

EMULATE_ENV = "XLA_TRAIN_EMULATE_TPU_LOCK"

_held = None  # the open, locked file: closed (and so released) only when the process ends


def emulating() -> bool:
    return bool(os.environ.get(EMULATE_ENV)) and os.environ.get("PJRT_DEVICE", "CPU").upper() == "CPU"


def claim_device() -> None:
    """Before this process starts the XLA runtime, in the test mode: take the device, or fail as libtpu does."""
    global _held
    if _held is not None or not emulating():
        return
    import fcntl

    f = open(os.environ[EMULATE_ENV], "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise HardwareError(f"the TPU is already in use by process {holder} ({EMULATE_ENV}: XLA:CPU stands in for "
                            f"a TPU, whose chips one process holds at a time)") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    _held = f


def runtime_started() -> bool:
    """Whether this process has started the XLA runtime (and so, on a TPU, holds its chips)."""
    import sys

    if "torch_xla" not in sys.modules:
        return False
    from xla_train import compat

    return compat.xla_runtime_started()
