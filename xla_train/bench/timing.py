"""How every benchmark times: one clock for training steps, one for host calls.

The Stopwatch reads its clock when a batch is in hand, so on XLA a reading's gap is one pipelined step; split steps
after the timed ones, each begun on an idle device, give the host's and device's shares. A cell's loops
(bench/loops.py) and the host-call benchmarks time with these alone (docs/results.md, "How the benchmarks time").
"""

from __future__ import annotations

import statistics
import time

from xla_train.runtime.grouping import grouping_of
from xla_train.runtime.registry import backend_of


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
