"""How every benchmark times: one clock for training steps, one for host calls, one subprocess per cell.

A cell runs in a fresh process (`python -m xla_train.bench.timing SPEC`): XLA's compile cache, device count
and peak memory last as long as a process. `Loop` builds the recipe as fit does; LightningLoop (Lightning's
fit loop) and PlainLoop (a hand-written torch_xla loop) override its `steps`. The Stopwatch reads its clock
when a batch is in hand, so on XLA a reading's gap is one pipelined step; split steps after the timed ones,
each begun on an idle device, give the host's and device's shares (docs/results.md, "How the benchmarks time").
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from xla_train.errors import UserError
from xla_train.runtime import registry
from xla_train.runtime.grouping import grouping_of
from xla_train.runtime.registry import backend_for, backend_of, run_backend, runtime_started


def units(warmup: int, steps: int, backend, k: int = 1) -> tuple[int, int, int]:
    """(warm-up, timed, split) executions. An execution is one step, or k with steps_per_execution=k, and is
    what the clock times: steps inside one only keep their batch. No split ones on eager CPU, where the host
    does everything."""
    timed = -(-steps // k)
    split = 0 if backend.runs_on_host else min(timed, -(-10 // k))
    return -(-warmup // k), timed, split


def traced_once(strategy) -> bool:
    """Whether the strategy's steps run a program traced once (any K, or auto's one step a program) as it stands
    now: its setup may have fallen back to Lightning's own step. Such a step's loss stays on the device."""
    return grouping_of(strategy).k > 1 or getattr(strategy, "trace_once", False)


class Stopwatch:
    def __init__(self, warmup: int, steps: int, device, k: int = 1, reads_loss: bool = True, backend=None) -> None:
        self.device, self.k, self.reads_loss = device, k, reads_loss
        self.backend = backend or backend_of(device)
        self.warmup, self.steps, self.split = units(warmup, steps, self.backend, k)
        self.xla, self.wait_each = self.backend.compiles_steps, self.backend.waits_each_step
        self.readings: list[float] = []
        self.host_s: list[float] = []
        self.host_cpu_s: list[float] = []
        self.device_s: list[float] = []
        self.first_step_s = self.first_loss = None
        self.scan_chunk = None  # the loop sets it from the net it runs (runtime/layers/scan_rnn.py's scan_chunk)
        self._t0 = self._idle = 0.0
        self._counters = [self.backend.counters()]
        self._in_syncs = self.backend.sync_clock() if self.split else (lambda: 0.0)
        self._cpu_in_syncs = self.backend.sync_clock(cpu=True) if self.split else (lambda: 0.0)
        self._synced = self._idle_cpu = self._cpu_synced = 0.0

    def _wait(self) -> None:
        self.backend.cut_graph(self.device)  # a no-op when the step already cut its graph
        self.backend.wait(self.device)

    @property
    def last(self) -> int:
        """The last timed execution; the split ones come after it."""
        return self.warmup + self.steps - 1

    @property
    def total(self) -> int:
        """Every step the loop must run: warm-up, timed and split executions of k steps."""
        return (self.last + 1 + self.split) * self.k

    def batch_ready(self, step: int) -> None:
        if step % self.k:
            return
        i = step // self.k
        if i == 1:  # the first execution, to its end
            self._wait()
            self.first_step_s = time.perf_counter() - self._t0
        if i == self.warmup:
            self._wait()
            self._counters.append(self.backend.counters())
        elif self.warmup < i <= self.last and self.wait_each:
            self._wait()
        now = time.perf_counter()
        if i == 0:
            self._t0 = now
        if self.warmup <= i <= self.last:
            self.readings.append(now)

    def step_done(self, step: int, loss=None) -> None:
        if step == 0 and loss is not None and self.reads_loss and self.k == 1:  # a program's step loss stays there
            self.first_loss = loss.detach() if hasattr(loss, "detach") else loss  # a torch tensor, or a JAX array
        if step % self.k != self.k - 1:
            return
        i = step // self.k
        if i == self.last:
            self._wait()
            self._mark_idle()
            self.readings.append(self._idle)
            self._counters.append(self.backend.counters())
        elif i > self.last:  # a split execution: it began on an idle device at self._idle
            self.backend.cut_graph(self.device)
            dispatched, synced = time.perf_counter(), self._in_syncs()
            cpu, cpu_synced = time.thread_time(), self._cpu_in_syncs()
            self.backend.wait(self.device)
            idle = time.perf_counter()
            in_syncs = synced - self._synced  # graph lookup and dispatch, and on XLA:CPU at times the run itself
            self.host_s.append((dispatched - self._idle - in_syncs) / self.k)
            self.device_s.append((in_syncs + idle - dispatched) / self.k)
            self.host_cpu_s.append((cpu - self._idle_cpu - (cpu_synced - self._cpu_synced)) / self.k)
            self._mark_idle()

    def _mark_idle(self) -> None:
        """Where the host's turn begins: the device has nothing left to run."""
        self._idle, self._synced = time.perf_counter(), self._in_syncs()
        self._idle_cpu, self._cpu_synced = time.thread_time(), self._cpu_in_syncs()

    def result(self) -> dict:
        if len(self.readings) != self.steps + 1:
            raise RuntimeError(f"the run ended after {len(self.readings)} of {self.steps + 1} clock readings")
        if len(self.host_s) != self.split:
            raise RuntimeError(f"the run ended after {len(self.host_s)} of {self.split} split steps")
        times = [(b - a) / self.k for a, b in zip(self.readings, self.readings[1:])]  # per step
        (c0, s0, _), (c1, s1, h1), (c2, _, h2) = self._counters
        xla = (lambda v: v) if self.xla else (lambda v: None)
        split = {"host_ms_per_step": None, "device_ms_per_step": None, "host_bound": None, "host_cpu_ms_per_step": None}
        if self.split:
            host, dev = statistics.median(self.host_s) * 1e3, statistics.median(self.device_s) * 1e3
            split = {
                "host_ms_per_step": host,
                "device_ms_per_step": dev,
                "host_bound": host >= dev,
                "host_cpu_ms_per_step": statistics.median(self.host_cpu_s) * 1e3,
                "host_times_ms": [t * 1e3 for t in self.host_s],
                "host_cpu_times_ms": [t * 1e3 for t in self.host_cpu_s],
                "device_times_ms": [t * 1e3 for t in self.device_s],
            }
        return {
            "first_step_s": self.first_step_s,
            "step_ms": statistics.median(times) * 1e3,
            "step_ms_mean": statistics.fmean(times) * 1e3,
            "step_times_ms": [t * 1e3 for t in times],
            "compiles": xla(c2 - c0),
            "timed_compiles": xla(c2 - c1),
            "compile_s": xla(s1 - s0),
            "timed_host_syncs": xla(h2 - h1),
            "split_steps": self.split * self.k,
            **split,
            "first_loss": float(self.first_loss) if self.first_loss is not None else None,
        }


def time_calls(fns: list, repeats: int, warmup: int, block: int = 1) -> list[list[float]]:
    """Seconds per call of each host function, the calls interleaved so that a slow spell falls on all alike.

    With block > 1 each function runs `block` calls in a row per turn: a runtime whose threads keep spinning
    after a call (OpenMP, ONNX Runtime) then slows only the first call of the next function's block, which
    the median leaves out, instead of every call."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    out = [[] for _ in fns]
    for start in range(0, repeats, block):
        for fn, times in zip(fns, out):
            for _ in range(min(block, repeats - start)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    return out


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Loop:
    """Warm-up + timed training steps of a recipe on the planned hardware; a variant overrides `steps`."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def run(self) -> dict:
        from xla_train import compat
        from xla_train.bench.data import use_data
        from xla_train.bench.report import cpu_model
        from xla_train.config.build import build_run
        from xla_train.runtime.plan import plan_hardware

        s = self.spec
        accelerator, processes = s["accelerator"], s.get("processes", 1)
        devices = s.get("devices", 1) if processes == 1 else s["devices"] // processes  # each process's share
        plan = plan_hardware(
            accelerator,
            1 if backend_for(accelerator).runs_on_host else devices,
            "auto",
            s.get("precision"),
            num_nodes=processes,
            steps_per_execution=s.get("steps_per_execution", 1),
            execution_loop=s.get("execution_loop", "auto"),
            compile=s.get("compile", "auto"),
            channels_last=s.get("channels_last", "auto"),
            runtime=s.get("runtime", "auto"),
            scan_chunk=s.get("scan_chunk_set"),
            compile_cache="off",  # a cell times its compile: a cache would hand it the last run's programs
        )
        model, dm, length = build_run(s["recipe"], {**s.get("overrides", {}), "batch_size": str(s["batch"])})
        n = plan.trainer_kwargs.get("devices", 1)
        n = (n if isinstance(n, int) else 1) * processes  # every device of every process
        strategy = plan.trainer_kwargs.get("strategy")
        self.k = self.steps_per_execution(strategy, s, length, n, model)
        self.total = sum(units(s["warmup"], s["steps"], backend_for(accelerator), self.k)) * self.k
        data = use_data(dm, model.net, s.get("data", "synthetic"), self.total * s["batch"] * n)
        dm.place(*plan.resident_data)  # data.on_device: resident or streamed, as fit decides
        inductor = compat.inductor_compile_clock()
        watch = self.steps(plan, model, dm)
        out = watch.result()
        fp = plan.fast_path
        if fp is not None:  # what the cell ran with, its defaults resolved (runtime/eager/fast_path.py)
            out.update(precision=fp.precision, compile=fp.compile, channels_last=fp.channels_last)
            if fp.compile:
                out["compiles"], out["compile_s"] = inductor()
        out.update(
            on_device=dm.resident,
            steps_per_execution_used=self.k,
            execution_loop_used=grouping_of(strategy).loop if self.k > 1 else None,
            traced_once=traced_once(strategy),
            scan_chunk=watch.scan_chunk,
            grouping_note=grouping_of(strategy).note or None,  # what auto chose, and why
            matmul_precision=plan.matmul_precision,
        )  # XLA: the float32 matmul precision in effect
        split = f" ({processes} processes of {n // processes})" if processes > 1 else ""
        out.update(
            device=watch.backend.describe(watch.device, cpu_model()) + (f" x{n}" if n > 1 else "") + split,
            devices=n,
            global_batch=s["batch"] * n,
            data=data,
            samples_per_s=s["batch"] * n / (out["step_ms"] / 1e3),
            device_peak_mb=watch.backend.peak_mb(watch.device),
            runtime=plan.runtime.name if plan.is_xla else None,
        )
        return out

    def steps(self, plan, model, dm) -> Stopwatch:
        raise NotImplementedError

    @staticmethod
    def steps_per_execution(strategy, spec: dict, length: tuple, devices: int, model=None) -> int:
        """K (and the loop) as fit would run this recipe: auto decided against the recipe's own run (its epochs of
        its training set at this global batch, the spec's train_size) and its net, not against the few steps a cell
        times. A spec without train_size sets its K (bench overhead's 1): only the net is left to decide the loop."""
        g = grouping_of(strategy)
        if g.pending or g.loop_pending:
            from xla_train.runtime.plan import run_steps

            if "train_size" not in spec:
                strategy.fit_to_run(strategy.steps_per_execution, None, model)
                return strategy.steps_per_execution
            epoch = max(1, spec["train_size"] // (spec["batch"] * devices))
            strategy.fit_to_run(epoch, run_steps(epoch, *length), model)
        return grouping_of(strategy).k


class LightningLoop(Loop):
    """The product's path: Lightning's fit loop with the planned strategy and the run's XLA callback."""

    def steps(self, plan, model, dm) -> Stopwatch:
        import lightning.pytorch as pl
        from typing_extensions import override

        from xla_train.runtime.registry import backend_of_strategy
        from xla_train.runtime.eager.fast_path import FastPathCallback
        from xla_train.runtime.layers.scan_rnn import scan_chunk
        from xla_train.training.compile_guard import CompileAccounting
        from xla_train.training.progress import KerasProgress

        s, k = self.spec, self.k

        class Clock(pl.Callback):
            @override
            def on_train_start(self, trainer, pl_module):
                self.watch = Stopwatch(
                    s["warmup"],
                    s["steps"],
                    pl_module.device,
                    k,
                    not traced_once(trainer.strategy),
                    backend_of_strategy(trainer.strategy),
                )
                self.watch.scan_chunk = scan_chunk(pl_module)  # the strategy has swapped its scans in by now

            @override
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                self.watch.batch_ready(batch_idx)

            @override
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.watch.step_done(batch_idx, outputs["loss"] if isinstance(outputs, dict) else outputs)
                if batch_idx == 0 and k == 1 and self.watch.first_loss is None:  # a program's: from its epoch sums
                    self.watch.first_loss = pl_module.running_metrics("train").get("loss")

        clock = Clock()
        callbacks = [CompileAccounting()] if plan.is_xla else []
        if plan.fast_path is not None:
            callbacks.append(FastPathCallback(plan.fast_path))
        if s.get("progress_every"):  # the live bar as a terminal would get it, drawn into nothing
            callbacks.append(KerasProgress(s["progress_every"], stream=_Terminal()))
        with tempfile.TemporaryDirectory(prefix="xla_train-bench-") as tmp:
            pl.Trainer(
                **plan.trainer_kwargs,
                callbacks=[*callbacks, clock],
                max_epochs=1,
                limit_train_batches=self.total,
                limit_val_batches=0,
                num_sanity_val_steps=0,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                use_distributed_sampler=False,
                default_root_dir=tmp,
            ).fit(model, datamodule=dm)
        return clock.watch


class PlainLoop(Loop):
    """What each runtime's docs teach, on one device, with no Lightning: on torch_xla the device loader, loss,
    backward and step; on JAX one jitted step of loss, gradient and update (runtime/jax/plain_step.py). Each
    with the layer rewrites xla_train swaps in on that runtime, so both sides run the same graph."""

    def steps(self, plan, model, dm) -> Stopwatch:
        from xla_train.objective import cosine_decay, lr_scheduler, make_optimizer

        hp, net = model.hparams, model.net
        opt = make_optimizer(hp, net.parameters())
        total = self.total  # Lightning's estimated_stepping_batches for this run
        sched = lr_scheduler(opt, [cosine_decay(total)] if hp.schedule == "cosine" else [])
        run = self.jax_steps if plan.runtime is registry.RUNTIMES["jax"] else self.torch_xla_steps
        return run(plan, net, opt, sched, dm)

    def torch_xla_steps(self, plan, net, opt, sched, dm) -> Stopwatch:
        import torch

        from xla_train.objective import masked_stats
        from xla_train.runtime.torch_xla.accelerators import keep_cuda_probe_off_the_trace
        from xla_train.runtime.torch_xla.backend import XLA
        from xla_train.runtime.layers import rewrites
        from xla_train.runtime.torch_xla.engine import layer_rewrites
        from xla_train.runtime.torch_xla.strategy import device_loader
        from xla_train.runtime.layers.scan_rnn import scan_chunk

        s = self.spec
        device = plan.trainer_kwargs["strategy"].root_device
        keep_cuda_probe_off_the_trace()  # as xla_train's XLA runs do, and as a process without Lightning is
        rewrites.apply(net, layer_rewrites(), verbose=False)  # as xla_train's torch_xla runs do
        net.to(device).train()
        # the device's generator from the seed, as torch_xla's docs teach and xla_train's strategy does: the same masks
        XLA.set_rng_state(device, torch.initial_seed())
        watch = Stopwatch(s["warmup"], s["steps"], device)
        watch.scan_chunk = scan_chunk(net)
        inputs = dm.batch_inputs()
        for i, batch in enumerate(device_loader(dm.train_dataloader(), device)):
            watch.batch_ready(i)
            x, y = inputs(batch, "train", train=True)
            loss, _ = masked_stats(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            watch.step_done(i, loss)
            if i == watch.total - 1:
                break
        return watch

    def jax_steps(self, plan, net, opt, sched, dm) -> Stopwatch:
        import torch

        from xla_train.objective import masked_stats
        from xla_train.runtime.jax.plain_step import PlainStep
        from xla_train.runtime.jax.strategy import layer_rewrites
        from xla_train.runtime.layers import rewrites
        from xla_train.runtime.layers.scan_rnn import scan_chunk

        s, strategy = self.spec, plan.trainer_kwargs["strategy"]
        engine = strategy.engine
        rewrites.apply(net, layer_rewrites(len(engine.devices), engine.platform), verbose=False)
        net.train()
        step = PlainStep(
            engine, net, opt, dm.batch_inputs(), lambda out, y: masked_stats(out, y)[0], torch.initial_seed()
        )
        watch = Stopwatch(s["warmup"], s["steps"], strategy.root_device, backend=plan.backend)
        watch.scan_chunk = scan_chunk(net)
        try:
            for i, batch in enumerate(dm.train_dataloader()):
                watch.batch_ready(i)
                loss = step(batch, i)
                if sched is not None:
                    sched.step()
                watch.step_done(i, loss)
                if i == watch.total - 1:
                    break
        finally:
            step.close()
        return watch


LOOPS = {"lightning": LightningLoop, "plain": PlainLoop}


class _Terminal:
    """A stream that says it is a terminal, so the live bar draws; what it draws is dropped."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def run_logged(args: list[str], log: Path, timeout: float, env: dict | None = None) -> int | None:
    """`python ARGS` in a child process, its output into `log`: its exit code, or None when it ran past `timeout`
    (and was killed). Every benchmark's child processes start here."""
    with open(log, "w") as f:
        try:
            proc = subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return proc.returncode


def run_together(args: list[list[str]], logs: list[Path], timeout: float, envs: list[dict | None]) -> list:
    """run_logged for several children at once (the processes of one program), each with its own log: their exit
    codes, None for each that ran past `timeout`."""
    from concurrent.futures import ThreadPoolExecutor

    if len(args) == 1:  # in this thread, as every other benchmark's child
        return [run_logged(args[0], logs[0], timeout, envs[0])]
    with ThreadPoolExecutor(len(args)) as pool:
        return list(pool.map(run_logged, args, logs, [timeout] * len(args), envs))


def free_port() -> int:
    """A TCP port free on this machine whose next one is free too (runtime/jax/multihost.py serves its roll call at
    the coordinator's port + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535 and _free(port + 1):
            return port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_cell(spec: dict, stem: Path, timeout: float) -> dict:
    """One cell in a fresh process; its output goes to STEM.log, its result to STEM.json. A cell of several
    processes (bench replicas processes=N) runs them together on this machine's CPU, each told who is who as a launch
    without a cluster tells them: process 0's result is the cell's, the others' lie beside it (STEM-processI)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    n = spec.get("processes", 1)
    results = [
        s.with_suffix(".json") for s in [stem] + [stem.with_name(f"{stem.name}-process{i}") for i in range(1, n)]
    ]
    for path in results:
        path.unlink(missing_ok=True)
    backend = run_backend(spec["accelerator"], spec.get("runtime") or "auto")
    if backend.exclusive_runtime and runtime_started():
        # This process holds the XLA runtime (on a TPU its chips, which no cell process could then get), so the
        # cell runs here: after this process's own graphs and at its memory high-water mark (runtime/tpu_lock.py).
        main([json.dumps({**spec, "result_path": str(results[0])})])
        return json.loads(results[0].read_text())
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env = backend.child_env(env)  # JAX's passes PJRT_DEVICE on as set: unset, JAX takes its own GPU or TPU
    args = [["-m", "xla_train.bench.timing", json.dumps({**spec, "result_path": str(path)})] for path in results]
    codes = run_together(args, [p.with_suffix(".log") for p in results], timeout, process_envs(env, n))
    if None in codes:
        return {"error": f"did not finish in {timeout:g} s (timeout=)"}
    found = [json.loads(p.read_text()) for p in results if p.is_file()]
    if any("error" in r for r in found) or len(found) == n:  # a process's own error says more than the others' end
        return next((r for r in found if "error" in r), found[0])
    code = next(c for c, p in zip(codes, results) if not p.is_file())
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return {"error": f"the cell process died ({how}; out of memory?)"}


def process_envs(env: dict, n: int) -> list[dict]:
    """The environments of a cell's n processes: one as given; several on this machine's CPU, JAX's three variables
    telling each who it is."""
    if n == 1:
        return [env]
    port = free_port()
    who = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": str(n), "PJRT_DEVICE": "CPU"}
    return [{**env, **who, "JAX_PROCESS_ID": str(i)} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    try:
        result, code = LOOPS[spec.get("loop", "lightning")](spec).run(), 0
    except UserError as e:
        result, code = {"error": str(e)}, e.exit_code
    except Exception as e:  # recorded in the table; the traceback goes to the cell's log
        traceback.print_exc()
        result, code = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}, 1
    import resource

    import torch

    result.update(
        host_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, threads=torch.get_num_threads()
    )
    Path(spec["result_path"]).write_text(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main())
