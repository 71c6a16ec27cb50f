"""One benchmark cell in its own process: a recipe on one accelerator at one batch size, through Lightning's fit.

    python -m xla_train.bench.cell '{"recipe": "quickstart", "accelerator": "xla", "batch": 32, ...}'

Why a process per cell: XLA's compile cache, the runtime's device count and a
process's peak memory all last as long as the process, so a cell that shared
one would inherit the previous cell's compiled graphs and memory high-water mark.

What runs is the product's training path: the recipe's Classifier and data
module (bench/build.py), and a Trainer built from `runtime.plan_hardware` with
its strategy, device loader and callbacks, for warm-up + timed steps of one
epoch, with no validation, logging or checkpointing.

How it times (Stopwatch, shared with the plain loop in overhead.py): a clock
reading each time a batch is in hand, before its step. On XLA the runtime lets
the host trace step n+1 while step n runs, and no further ahead, so the gap
between two readings is one step of pipelined training, as in a real epoch;
no wait is added that training would not have. On a GPU the host could queue
many steps, so each timed step waits for the device there. The window ends when
the device has finished the last step. The first step, which on XLA traces and
compiles, is timed to the end of its execution and kept out of the steady figure
with the rest of the warm-up.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
import traceback

from xla_train.errors import UserError


def host_peak_mb() -> float | None:
    """This process's peak resident memory (ru_maxrss: KiB on Linux, bytes on macOS)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2 ** 20 if sys.platform == "darwin" else 2 ** 10)


def device_peak_mb(device) -> float | None:
    """Peak device memory where the runtime reports it (TPU, GPU); None on XLA:CPU and the CPU."""
    try:
        if device.type == "cuda":
            import torch

            return torch.cuda.max_memory_allocated(device) / 2 ** 20
        if device.type == "xla":
            import torch_xla.core.xla_model as xm

            return xm.get_memory_info(device)["peak_bytes_used"] / 2 ** 20
    except (RuntimeError, KeyError):  # XLA:CPU: "GetAllocatorStats is not supported"
        pass
    return None


def device_name(device) -> str:
    if device.type == "xla":
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        try:
            kind = xm.xla_device_kind(device)  # e.g. "TPU v4"
        except RuntimeError:  # under SPMD the device is a virtual one, which has no kind
            kind = None
        return f"XLA:{xr.device_type()}" + (f" ({kind})" if kind and kind.lower() != "cpu" else "")
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    from xla_train.bench.report import cpu_model

    return f"CPU, eager ({cpu_model()})"


class Stopwatch:
    """Per-step clock for `warmup` untimed then `steps` timed steps; see the module docstring."""

    def __init__(self, warmup: int, steps: int, device) -> None:
        self.warmup, self.steps, self.device = warmup, steps, device
        self.xla = device.type == "xla"
        self.wait_each = device.type == "cuda"
        self.readings: list[float] = []
        self.first_step_s = None
        self.first_loss = None
        self._t0 = 0.0
        self._counters = [self._compiles()]

    def _compiles(self) -> tuple[int, float, int]:
        """(graphs compiled, seconds compiling, device-to-host transfers) so far in this process."""
        if not self.xla:
            return 0, 0.0, 0
        from xla_train.runtime.compile_guard import xla_counters

        return xla_counters()

    def _wait(self) -> None:
        from xla_train.runtime import wait_for_device

        if self.xla:
            import torch_xla

            torch_xla.sync()  # a no-op when the step already cut its graph
        wait_for_device(self.device)

    @property
    def last(self) -> int:
        return self.warmup + self.steps - 1

    def batch_ready(self, i: int) -> None:
        if i == 1:  # the first step, to the end of its execution
            self._wait()
            self.first_step_s = time.perf_counter() - self._t0
        if i == self.warmup:
            self._wait()
            self._counters.append(self._compiles())
        elif i > self.warmup and self.wait_each:
            self._wait()
        now = time.perf_counter()
        if i == 0:
            self._t0 = now
        if i >= self.warmup:
            self.readings.append(now)

    def step_done(self, i: int, loss=None) -> None:
        if i == 0 and loss is not None:
            self.first_loss = loss.detach()
        if i == self.last:
            self._wait()
            self.readings.append(time.perf_counter())
            self._counters.append(self._compiles())

    def result(self) -> dict:
        if len(self.readings) != self.steps + 1:
            raise RuntimeError(f"the run ended after {len(self.readings)} of {self.steps + 1} clock readings")
        times = [b - a for a, b in zip(self.readings, self.readings[1:])]
        (c0, s0, _), (c1, s1, h1), (c2, _, h2) = self._counters
        return {
            "first_step_s": self.first_step_s,
            "step_ms": statistics.median(times) * 1e3,
            "step_ms_mean": statistics.fmean(times) * 1e3,
            "step_times_ms": [t * 1e3 for t in times],
            "compiles": (c2 - c0) if self.xla else None,
            "timed_compiles": (c2 - c1) if self.xla else None,
            "compile_s": (s1 - s0) if self.xla else None,
            "timed_host_syncs": (h2 - h1) if self.xla else None,
            "first_loss": float(self.first_loss) if self.first_loss is not None else None,
        }


def _clock_callback(watch_args: tuple):
    import lightning.pytorch as pl

    class StepClock(pl.Callback):
        def __init__(self) -> None:
            self.watch: Stopwatch | None = None

        def on_train_start(self, trainer, pl_module) -> None:
            self.watch = Stopwatch(*watch_args, pl_module.device)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            self.watch.batch_ready(batch_idx)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.watch.step_done(batch_idx, outputs["loss"] if isinstance(outputs, dict) else outputs)

    return StepClock()


class _Terminal:
    """A stream that says it is a terminal, so the live bar draws; what it draws is dropped."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def lightning_cell(spec: dict) -> dict:
    """Warm-up + timed steps of the recipe through Lightning's fit loop on the planned hardware."""
    import tempfile

    from lightning.pytorch import Trainer

    from xla_train.bench.build import recipe_parts, use_data
    from xla_train.runtime import plan_hardware

    accelerator = spec["accelerator"]
    devices = 1 if accelerator == "cpu" else spec.get("devices", 1)
    plan = plan_hardware(accelerator, devices, "auto", spec.get("precision"))
    model, dm = recipe_parts(spec["recipe"], {**spec.get("overrides", {}), "batch_size": str(spec["batch"])})
    n_devices = plan.trainer_kwargs.get("devices", 1)
    n_devices = n_devices if isinstance(n_devices, int) else 1
    batches = spec["warmup"] + spec["steps"]
    data = use_data(dm, model.net, spec.get("data", "synthetic"), batches * spec["batch"] * n_devices)
    clock = _clock_callback((spec["warmup"], spec["steps"]))
    extra = []
    if spec.get("progress_every"):  # the live bar as a terminal would get it (bench/pipeline.py)
        from xla_train.progress import KerasProgress

        extra.append(KerasProgress(spec["progress_every"], stream=_Terminal()))
    kwargs = {"precision": spec["precision"]} if spec.get("precision") else {}
    kwargs.update(plan.trainer_kwargs)
    with tempfile.TemporaryDirectory(prefix="xla_train-bench-") as tmp:
        trainer = Trainer(**kwargs, callbacks=[*plan.callbacks, clock, *extra], max_epochs=1, limit_train_batches=batches,
                          limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                          default_root_dir=tmp)
        trainer.fit(model, datamodule=dm)
    device = clock.watch.device
    out = clock.watch.result()
    global_batch = spec["batch"] * n_devices
    name = device_name(device) + (f" x{n_devices}" if n_devices > 1 else "")
    out.update(device=name, devices=n_devices, global_batch=global_batch, data=data,
               samples_per_s=global_batch / (out["step_ms"] / 1e3), device_peak_mb=device_peak_mb(device))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    try:
        if spec.get("side") == "plain":
            from xla_train.bench.overhead import plain_loop

            result, code = plain_loop(spec), 0
        else:
            result, code = lightning_cell(spec), 0
    except UserError as e:
        result, code = {"error": str(e)}, e.exit_code
    except Exception as e:  # recorded in the table; the traceback goes to the cell's log
        traceback.print_exc()
        result, code = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}, 1
    import torch

    result.update(host_peak_mb=host_peak_mb(), threads=torch.get_num_threads())
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
