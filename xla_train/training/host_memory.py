"""Give the C heap's free pages back to the OS during a run, so that a long run's resident memory does not creep.

glibc raises its mmap threshold to the size of each mmapped block it frees, so after the first few steps a
multi-MB buffer comes from the heap instead: XLA:CPU's device buffers, a checkpoint's host copies, validation
batches. Freed between epochs in differing sizes, they leave the heap full of free pages that stay resident. On
the quickstart (XLA:CPU) resident memory rose by over a third in 12 epochs while a bench of the same steps held
flat. malloc_trim(0) hands whole free pages back (madvise): after each of the run's first 8 steps, by
when the compiler's working memory is freed, and after every epoch. A fixed mmap threshold also stops the creep,
but made every step slower, a page fault for every buffer (docs/results.md, "Peak memory"). No glibc: nothing.
"""

from __future__ import annotations

import ctypes

import lightning.pytorch as pl
from typing_extensions import override

FIRST_STEPS = 8  # trims after each of this process's first steps: the compile's memory is freed by then


def malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS): opened once, before the steps."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def trim_host_heap(trim=None) -> bool:
    """Return the C heap's free pages to the OS; False where there is no malloc_trim."""
    trim = trim or malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HostHeapTrim(pl.Callback):
    def __init__(self, first_steps: int = FIRST_STEPS) -> None:
        self.first_steps, self.trims = first_steps, 0
        self._steps, self._trim = 0, None

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._trim = malloc_trim()  # not inside a step: opening a library mid-trace is what runtime/ avoids

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._steps += 1
        if self._steps <= self.first_steps:
            self._release()

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._release()

    def _release(self) -> None:
        if self._trim is not None and trim_host_heap(self._trim):
            self.trims += 1
