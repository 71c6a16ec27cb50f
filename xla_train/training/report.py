"""What a run tells its user: where it writes, and per epoch, its throughput.

Throughput waits for the device once per epoch, so samples/s measures the
device and not how far ahead the host has queued work.
"""

from __future__ import annotations

import time

from typing_extensions import override

from xla_train.runtime.backend import MATMUL_MEANING
from xla_train.runtime.grouping import grouping_of
from xla_train.runtime.registry import backend_of_strategy
from xla_train.training.metrics_log import EpochCallback, publish


class RunReport(EpochCallback):
    def __init__(
        self,
        hardware: str,
        fast_path=None,
        matmul_precision: str | None = None,
        compile_cache: str | None = None,
        runtime: str = "",
    ) -> None:
        self.hardware, self.fast_path, self.matmul_precision = hardware, fast_path, matmul_precision
        self.runtime = runtime  # the XLA runtime, and why (runtime/plan.py); "" off XLA
        self.compile_cache = compile_cache
        self._t0 = 0.0
        self._samples = 0
        self._train_s: float | None = None

    @override
    def on_fit_start(self, trainer, pl_module) -> None:
        folder = trainer.log_dir  # every process asks: with several, it is a broadcast from the first
        if trainer.is_global_zero:
            hosts = f" on each of {trainer.num_nodes} hosts" if trainer.num_nodes > 1 else ""
            print(
                f"run folder: {folder}  (accelerator {self.hardware}, {trainer.num_devices} device(s){hosts})",
                flush=True,
            )
            if self.runtime:
                print(f"runtime: {self.runtime}", flush=True)
                print(f"precision: {trainer.precision}", flush=True)  # XLA; off XLA the fast path's line says it
            if self.fast_path is not None:  # cpu/gpu: what runtime/eager/fast_path.py picked, and why
                print(f"fast path: {self.fast_path.summary()}", flush=True)
            if self.matmul_precision:  # XLA: what "float32" means on a TPU
                print(
                    f"matmul precision: {self.matmul_precision} ({MATMUL_MEANING[self.matmul_precision]}; "
                    f"XLA:CPU computes float32)",
                    flush=True,
                )
            if self.compile_cache:  # a TPU: programs compiled once are read back by the next run
                print(f"compile cache: {self.compile_cache} (a later run reads its programs back)", flush=True)
            placement = getattr(trainer.datamodule, "placement", None)
            if placement:  # data.on_device: which path feeds the steps, and why
                print(f"data: {placement}", flush=True)
            g = grouping_of(trainer.strategy)  # K and the loop; with auto, what it chose and why
            loop, k, note, why = g.loop, g.k, g.note, g.loop_note
            if k > 1 or note:
                how = f"{'While loop' if loop == 'while' else 'unrolled program'} (execution_loop={loop}"
                how += f"; {why})" if why else ")"
                print(f"steps per execution: {note or k}" + (f", as an XLA {how}" if k > 1 else ""), flush=True)

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._t0, self._samples, self._train_s = time.perf_counter(), 0, None

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._samples += self._rows_loaded(trainer, batch)
        if batch_idx + 1 >= trainer.num_training_batches:
            self._stop_clock(pl_module)

    @staticmethod
    def _rows_loaded(trainer, batch) -> int:
        """This process's rows of the step. Not the device batch's shape: sharded over several hosts, each
        host's batch tensor is the global batch."""
        share = getattr(trainer.datamodule, "process_share", None)
        return share()[0] if share is not None else int(batch[0].shape[0])  # host-side numbers: no device sync

    def _stop_clock(self, pl_module) -> None:
        if self._train_s is None:
            backend_of_strategy(pl_module.trainer.strategy).wait(pl_module.device)
            self._train_s = time.perf_counter() - self._t0

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._stop_clock(pl_module)
        world = trainer.world_size
        rate = self._samples * world / self._train_s if self._train_s else 0.0
        publish(trainer, {"samples_per_s": rate, "train_seconds": self._train_s})

    @override
    def on_fit_end(self, trainer, pl_module) -> None:
        folder = trainer.log_dir
        if trainer.is_global_zero:
            print(f"run folder: {folder}", flush=True)
