"""Where a run's time went, from the command to its last test batch: start-up, compile, train, validate, test.

A short run on a TPU is mostly fixed costs (imports, compiles), so `fit` ends with one line that says so. Every
second of wall time is charged to one part as the run moves: start-up until the first step or sanity check, then
training, with the validation and test loops cut out of it, and every compile second (XLA's own counter, or
torch.compile's) moved out of whatever part it fell in. The parts cover the run by construction; a part below
zero would show a compile counted twice (docs/feeding.md, "Where a run's time goes").
"""

from __future__ import annotations

import os
import time

import lightning.pytorch as pl
from typing_extensions import override

PARTS = ("start-up", "compile", "train", "validate", "test")


def process_start(early: tuple[float, float] | None = None) -> float:
    """When this command's interpreter started, on the perf_counter clock: a command's clock starts there,
    interpreter and imports included. `early`: (perf_counter, process_time) read before any heavy import
    (cli/main.py). The process's start (Linux's /proc) is too early where a shell ran the command in its own
    process (`bash -c 'pip install ... && python -m xla_train'` execs its last command): the interpreter started
    about its CPU time before `early`, the start-up being CPU work."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # starttime, in clock ticks since boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = now - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        started = None
    if early is None:
        return now if started is None else started
    interpreter = early[0] - early[1]
    return interpreter if started is None else max(started, interpreter)


class RunClock(pl.Callback):
    """`started`: when the run began on the perf_counter clock; `compile_seconds()`: compile seconds so far."""

    def __init__(self, started: float, compile_seconds) -> None:
        self.started, self.compile_seconds = started, compile_seconds
        self.parts = dict.fromkeys(PARTS, 0.0)
        self._current, self._outer = "start-up", []
        self._t, self._c = started, compile_seconds()

    def _switch(self, part: str) -> None:
        """Charge the time since the last switch to the current part (its compile seconds to compile)."""
        now, c = time.perf_counter(), self.compile_seconds()
        compiled = c - self._c
        self.parts["compile"] += compiled
        self.parts[self._current] += (now - self._t) - compiled
        self._t, self._c, self._current = now, c, part

    def _enter(self, part: str) -> None:
        self._outer.append(self._current)
        self._switch(part)

    def _exit(self) -> None:
        if self._outer:
            self._switch(self._outer.pop())

    @override
    def on_validation_start(self, trainer, pl_module) -> None:  # the sanity check's too
        self._enter("validate")

    @override
    def on_validation_end(self, trainer, pl_module) -> None:
        self._exit()

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._switch("train")

    @override
    def on_fit_end(self, trainer, pl_module) -> None:
        self._switch("test")  # what follows a fit: loading the best checkpoint, testing it

    @override
    def on_test_start(self, trainer, pl_module) -> None:
        self._enter("test")

    @override
    def on_test_end(self, trainer, pl_module) -> None:
        self._exit()

    def summary(self) -> str:
        """The parts so far and the wall time since the start, in one line."""
        self._switch(self._current)
        wall = time.perf_counter() - self.started
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.parts.items())
        return f"time: {parts} (wall {wall:.1f} s)"
