"""Compile accounting: how many XLA graphs each epoch compiled, and how long that took.

A run with static shapes compiles its graphs in the first steps and never
again; this callback makes that visible per epoch and logs it beside the
metrics, so a recompiling run shows up in the log rather than as a slow epoch.
"""
from __future__ import annotations

import time

import lightning.pytorch as pl

from xla_train.metrics_log import publish


def compile_counters() -> tuple[int, float]:
    """(graphs compiled so far, seconds spent compiling) in this process."""
    from torch_xla.debug import metrics as met

    count = met.counter_value("UncachedCompile") or 0
    data = met.metric_data("CompileTime")
    return int(count), (data[1] / 1e9 if data else 0.0)


class CompileAccounting(pl.Callback):
    def __init__(self) -> None:
        self.per_epoch: list[dict] = []
        self._start: tuple[int, float, float] | None = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = (*compile_counters(), time.perf_counter())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._start is None:
            return
        n0, s0, t0 = self._start
        n1, s1 = compile_counters()
        row = {"epoch": trainer.current_epoch, "compiles": n1 - n0, "compile_s": s1 - s0,
               "wall_s": time.perf_counter() - t0}
        self.per_epoch.append(row)
        publish(trainer, {"xla_compiles": row["compiles"], "xla_compile_s": row["compile_s"]})
        if trainer.is_global_zero:
            print(f"epoch {row['epoch'] + 1}  {row['wall_s']:.1f} s (compile {row['compile_s']:.1f} s, "
                  f"{row['compiles']} graph{'s' if row['compiles'] != 1 else ''})", flush=True)
