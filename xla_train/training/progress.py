"""Keras-style progress that never makes a training step wait for the host.

The running loss and accuracy are the task's on-device sums, read at most every `every` steps for a live bar
(terminals only; `every=0` turns it off) and once at epoch end for the Keras line: `STEPS/STEPS - TIME MS/step
(host MS) - loss - acc - val_loss - val_acc - samples/s` (README's quick start shows real ones). A log file gets
only the epoch lines. An epoch resumed mid-way says so (`6/6 (3 after resume)`): its time and metrics cover only
the steps this process ran; one that max_steps ends early says where (`6/12`), as Keras's bar stops.
"""

from __future__ import annotations

import sys
import time

from typing_extensions import override

from xla_train.training.metrics_log import EpochCallback, validated_this_epoch


def _fmt_time(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"


class KerasProgress(EpochCallback):
    def __init__(self, every: int = 50, stream=None) -> None:
        self.every = every
        self._stream = stream  # None: sys.stdout when printing (an open stream cannot go to an xla_mp worker)
        self._t0 = 0.0
        self._steps = 0  # steps this process ran in the epoch
        self._first = self._last = 0  # the epoch's first and last step this process ran, counted from 1
        self.live = self.stream.isatty() and every > 0

    @property
    def stream(self):
        return self._stream or sys.stdout

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._t0, self._steps, self._first, self._last = time.perf_counter(), 0, 0, 0
        if trainer.is_global_zero:
            print(f"Epoch {trainer.current_epoch + 1}/{trainer.max_epochs}", file=self.stream, flush=True)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._steps += 1
        done, total = batch_idx + 1, trainer.num_training_batches
        self._first, self._last = self._first or done, done
        if not (self.live and trainer.is_global_zero and done % self.every == 0 and done < total):
            return
        running = pl_module.running_metrics("train")  # the only host read: every `every` steps
        elapsed = time.perf_counter() - self._t0
        width = 30
        filled = int(width * done / total)
        bar = "=" * max(0, filled - 1) + ">" + "." * (width - filled)
        eta = elapsed / done * (total - done)
        metrics = " - ".join(f"{k}: {v:.4f}" for k, v in running.items())
        self.stream.write(f"\r{done}/{total} [{bar}] - ETA: {_fmt_time(eta)} - {metrics}")
        self.stream.flush()

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        fresh = validated_this_epoch(trainer)  # else val_* are the last validated epoch's
        m = {k: float(v) for k, v in trainer.callback_metrics.items() if fresh or not k.startswith("val_")}
        total, steps = trainer.num_training_batches, self._steps
        train_s = m.get("train_seconds", time.perf_counter() - self._t0)
        # a resumed epoch starts past its first step; max_steps may end one before its last
        done = f"{self._last or total}/{total}" + (f" ({steps} after resume)" if self._first > 1 else "")
        parts = [done, f"{_fmt_time(train_s)} {train_s / max(steps, 1) * 1000:.0f}ms/step"]
        if "xla_host_ms_per_step" in m:  # the host's share of a step (compile_guard.py): near ms/step = host-bound
            parts[-1] += f" (host {m['xla_host_ms_per_step']:.1f}ms)"
        for key, name in (
            ("train_loss", "loss"),
            ("train_acc", "acc"),
            ("val_loss", "val_loss"),
            ("val_acc", "val_acc"),
        ):
            if key in m:
                parts.append(f"{name}: {m[key]:.4f}")
        if "samples_per_s" in m:
            parts.append(f"{m['samples_per_s']:,.0f} samples/s")
        if "xla_compile_s" in m:
            graphs = int(m.get("xla_compiles", 0))
            parts.append(f"compile {m['xla_compile_s']:.1f} s ({graphs} graph{'s' if graphs != 1 else ''})")
        if m.get("inductor_compiles"):  # torch.compile on cpu/gpu (runtime/eager/fast_path.py): the first epoch's
            n = int(m["inductor_compiles"])
            parts.append(f"compile {m['inductor_compile_s']:.1f} s (inductor, {n} graph{'s' if n != 1 else ''})")
        if self.live:
            self.stream.write("\r")
        print(" - ".join(parts), file=self.stream, flush=True)
