"""Compile accounting and the recompilation guard, from torch_xla's own counters.

With static shapes a phase compiles only in its first epoch, so a later compilation means a shape changed: the
guard warns (`xla_guard=warn`) or stops the run (`strict`), naming the phase and the batch shapes. Counters and
clocks are read on the host, never through a device sync, so the accounting (compiles and compile time per phase
and epoch, host syncs, the host's share of a step) costs no step time (docs/feeding.md, "Compile once, and show
it" and "Keep a TPU fed").
"""

from __future__ import annotations

import statistics
import time
import warnings

from typing_extensions import override

from xla_train.errors import UserError
from xla_train.runtime.grouping import grouping_of
from xla_train.runtime.registry import backend_of_strategy
from xla_train.training.metrics_log import EpochCallback, publish

GUARD_MODES = ("warn", "strict", "off")
PHASES = ("train", "validate", "test", "predict")


class RecompilationError(UserError):
    exit_code = 3


class RecompilationWarning(UserWarning):
    pass


def batch_shapes(batch) -> tuple:
    if hasattr(batch, "shape"):
        return (tuple(batch.shape),)
    if isinstance(batch, (list, tuple)):
        return tuple(s for b in batch for s in batch_shapes(b))
    if isinstance(batch, dict):
        return tuple(s for k in sorted(batch) for s in batch_shapes(batch[k]))
    return ()


def host_ms_per_step(host_s: list[float], k: int = 1) -> float | None:
    """The median over executions of the host's time per step. With steps_per_execution=k one step in k
    carries the group's dispatch and the others only keep their batch, so steps are counted k at a time."""
    if not host_s:
        return None
    groups = [host_s[i : i + k] for i in range(0, len(host_s), k)]
    return statistics.median(sum(g) / len(g) for g in groups) * 1e3


def _no_sync_clock() -> float:
    return 0.0


class CompileAccounting(EpochCallback):
    def __init__(self, mode: str = "warn") -> None:
        if mode not in GUARD_MODES:
            raise ValueError(f"xla_guard={mode!r}; use one of {', '.join(GUARD_MODES)}")
        self.mode = mode
        self.per_epoch: list[dict] = []
        self.per_phase = {p: {"graphs": 0, "compile_s": 0.0} for p in PHASES}
        self._warm: set[str] = set()
        self._shapes: dict[str, set] = {p: set() for p in PHASES}
        self._phase_start: dict[str, tuple[int, float, int]] = {}
        self._last = (0, 0.0, 0)
        self._epoch_start: tuple | None = None
        self.train_transfers: list[int] = []
        self.train_executions: list[int] = []  # programs run by an epoch's training steps: steps/K with K per run
        self._batch_t0 = (0.0, 0.0, 0.0, 0.0)
        self._in_syncs = self._compiling_in_syncs = _no_sync_clock  # functions: xla_mp pickles callbacks to workers
        self._host_s: list[float] = []  # this epoch's steps: batch arrival to step end, host clock

    _backend = None  # the run's (runtime/backend.py), from its strategy at setup

    @override
    def setup(self, trainer, pl_module, stage: str) -> None:
        self._backend = backend_of_strategy(trainer.strategy)
        self._read_start = self._backend.read_back()  # an earlier run in this process read its own

    # --- phases -----------------------------------------------------------------
    def _start(self, phase: str) -> None:
        self._phase_start[phase] = self._last = self._backend.counters()

    def _end(self, phase: str, warm_up_done: bool = True) -> None:
        start = self._phase_start.pop(phase, None)
        if start is None:
            return
        now = self._backend.counters()
        self.per_phase[phase]["graphs"] += now[0] - start[0]
        self.per_phase[phase]["compile_s"] += now[1] - start[1]
        if warm_up_done:
            self._warm.add(phase)

    def _check(self, phase: str, batch, pl_module, now: tuple | None = None) -> None:
        shapes = batch_shapes(batch)
        now = now or self._backend.counters()
        new = now[0] - self._last[0]
        self._last = now
        seen = self._shapes[phase]
        if new and phase in self._warm and self.mode != "off":
            if not seen or shapes in seen:  # the same inputs: the graph changed inside the step, usually the net
                net = type(getattr(pl_module, "net", pl_module))
                changed = (
                    f"; the input shapes are unchanged, so the net's forward ({net.__module__}.{net.__qualname__}) "
                    f"most likely made it: an .item(), a Python branch on a tensor's value, or a shape that depends "
                    f"on the data (x[mask], nonzero); keep shapes fixed (torch.where instead of a mask index)"
                )
            else:
                changed = f"; input shapes {shapes} are new (seen before: {sorted(seen)})"
            message = (
                f"XLA compiled {new} new graph(s) during {phase} after warm-up{changed}. Every new shape "
                f"or graph costs a compile; run with PT_XLA_DEBUG_LEVEL=2 to see torch_xla's compile cause"
            )
            if self.mode == "strict":
                raise RecompilationError(message + " (xla_guard=strict stops here; xla_guard=warn only warns)")
            warnings.warn(message, RecompilationWarning, stacklevel=2)
        seen.add(shapes)

    # train
    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start("train")
        self._epoch_start = (*self._backend.counters(), time.perf_counter())
        self._executions_start, self._host_s = self._backend.executions(), []

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._in_syncs, self._compiling_in_syncs = self._backend.sync_clock(), self._backend.sync_clock(compiling=True)
        super().on_train_start(trainer, pl_module)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch_t0 = (
            time.perf_counter(),
            self._backend.counters()[1],
            self._in_syncs(),
            self._compiling_in_syncs(),
        )

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        t0, compiled, synced, compiled_in_syncs = self._batch_t0
        # compiles are shown apart, and a sync may wait for the device (runtime/backend.py, sync_clock): both are
        # taken out, a compile inside a sync once
        elapsed = time.perf_counter() - t0
        now = self._backend.counters()  # read once a step: the compile seconds here and the guard's count below
        outside = (now[1] - compiled) - (self._compiling_in_syncs() - compiled_in_syncs)
        self._host_s.append(elapsed - outside - (self._in_syncs() - synced))
        self._check("train", batch, pl_module, now)
        if batch_idx + 1 >= trainer.num_training_batches:
            self._end_training_steps()  # validation, which runs before on_train_epoch_end, is its own phase

    def _end_training_steps(self) -> None:
        """At the epoch's last batch, or at its end when max_steps cut it short: what its training steps did."""
        if self._epoch_start is not None and "train" in self._phase_start:
            self.train_transfers.append(self._backend.counters()[2] - self._epoch_start[2])
            self.train_executions.append(self._backend.executions() - self._executions_start)
            self._end("train")

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._epoch_start is None:
            return
        self._end_training_steps()
        n0, s0, _, t0 = self._epoch_start
        n1, s1, _ = self._backend.counters()
        row = {
            "epoch": trainer.current_epoch,
            "compiles": n1 - n0,
            "compile_s": s1 - s0,
            "wall_s": time.perf_counter() - t0,
            "host_syncs": self.train_transfers[-1] if self.train_transfers else 0,
            "executions": self.train_executions[-1] if self.train_executions else 0,
            "host_ms": host_ms_per_step(self._host_s, grouping_of(trainer.strategy).k),
        }
        self.per_epoch.append(row)
        publish(
            trainer,
            {
                "xla_compiles": row["compiles"],
                "xla_compile_s": row["compile_s"],
                "xla_host_syncs": row["host_syncs"],
                "xla_executions": row["executions"],
                **({"xla_host_ms_per_step": row["host_ms"]} if row["host_ms"] is not None else {}),
            },
        )
        self._epoch_start = None

    @override
    def on_fit_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.per_epoch:
            print(
                "  |  ".join(
                    f"epoch {r['epoch'] + 1}  {r['wall_s']:.1f} s (compile {r['compile_s']:.1f} s)"
                    for r in self.per_epoch
                ),
                flush=True,
            )
            read = self._backend.read_back() - self._read_start if self._backend is not None else 0
            print(
                "compiled graphs by phase: "
                + ", ".join(
                    f"{p} {v['graphs']} ({v['compile_s']:.1f} s)" for p, v in self.per_phase.items() if v["graphs"]
                )
                + (f"; {read} program(s) read back from the compile cache, not compiled" if read else ""),
                flush=True,
            )


def _evaluation_hooks(phase: str, stage: str) -> dict:
    """An evaluation phase's three hooks (the sanity check warms validation up too). The phase ends at
    `on_{stage}_end`, not at the epoch's end: Lightning calls the module's epoch-end hook after the callbacks' and
    computes the epoch's metrics after both, and on XLA the evaluation program may first be compiled there, where its
    value is first read (a one-batch validation, as in the sanity check)."""

    def start(self, trainer, pl_module) -> None:
        self._start(phase)

    def batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._check(phase, batch, pl_module)

    def end(self, trainer, pl_module) -> None:
        self._end(phase)

    return {f"on_{stage}_epoch_start": start, f"on_{stage}_batch_end": batch_end, f"on_{stage}_end": end}


for _phase, _stage in (("validate", "validation"), ("test", "test"), ("predict", "predict")):
    for _name, _hook in _evaluation_hooks(_phase, _stage).items():
        setattr(CompileAccounting, _name, override(_hook))
