"""One process per TPU: the rule a TPU VM enforces, and a test mode that enforces it on XLA:CPU.

On a TPU VM the process that starts the PJRT runtime holds the chips until it exits; a second one fails as its
runtime starts ("TPU initialization failed: open(/dev/accel0): Operation not permitted"), since torch_xla lets
it past libtpu's lock file. `starting_runtime` turns that error into one line. With XLA_TRAIN_EMULATE_TPU_LOCK=PATH
XLA:CPU plays that TPU: starting the runtime takes an exclusive lock on PATH for the life of the process, so a
second process meets the same error here (docs/hardware.md, "One process per TPU").
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager

from xla_train.errors import HardwareError
from xla_train.runtime.probe import EMULATE_ENV, emulating_tpu


_held = None  # the open, locked file: closed (and so released) only when the process ends


def emulating() -> bool:
    return emulating_tpu()


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
        raise RuntimeError(
            f"Bad StatusOr access: UNKNOWN: TPU initialization failed: open(/dev/accel0): Operation "
            f"not permitted: Operation not permitted; Couldn't open device: /dev/accel0; Unable to "
            f"create Node RegisterInterface for node 0 ({EMULATE_ENV}: process {holder} holds the "
            f"emulated TPU)"
        ) from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    _held = f


_IN_USE = re.compile(
    r"TPU initialization failed: (open\((/dev/[\w/]+)\): (Operation not permitted|Device or "
    r"resource busy))"
)


@contextmanager
def starting_runtime():
    """Around whatever starts the XLA runtime: a TPU whose chips another process holds is one line, not the
    runtime's traceback (in the test mode, the emulated lock is taken here and fails the same way)."""
    try:
        claim_device()
        yield
    except RuntimeError as e:
        found = _IN_USE.search(str(e))
        if found is None:
            raise
        raise HardwareError(
            f"another process holds this TPU VM's chips ({found.group(1)}); one process at a time "
            f"can: end the other one (a notebook kernel that has trained: restart it; `sudo lsof "
            f"{found.group(2)}` names it) and run again"
        ) from None
