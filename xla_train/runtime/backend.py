"""One Backend per kind of device: the only code that asks a device its type.

Training callbacks, the run report, the benchmarks and the device listing ask a Backend, never a device's
type: wait for the device, cut and dispatch a lazy graph, save and restore its RNG, count its compiles, read
its peak memory, name it, and whether it compiles steps itself. So a new backend is one more subclass here and
a branch in runtime/plan.py (docs/layout.md, "Adding a backend").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from xla_train.errors import ConfigError

Accelerator = Literal["cpu", "gpu", "tpu", "xla"]  # what accelerator= names, past `auto`
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 matrix arithmetic


def cpu_bf16_flag(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The first native-bf16 flag this CPU reports, or None (also where /proc/cpuinfo does not exist)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return next((f for f in BF16_CPU_FLAGS if f in flags), None)


class Backend:
    """Eager PyTorch on the CPU; the base every other kind overrides where it differs."""

    device_type = "cpu"  # torch's device type for it
    compiles_steps = False  # it compiles every training step itself (so compile= and channels_last= do not apply)
    groups_steps = False  # it runs K training steps as one program (steps_per_execution)
    runs_on_host = True  # the host does the device's work (one device; no host and device shares to split)
    exclusive_runtime = False  # one process holds the runtime: another process cannot start it (a TPU's chips)
    waits_each_step = False  # work is queued asynchronously and no graph sync waits for it: time each step's end

    def wait(self, device) -> None:
        """Block until queued device work is done, so host clocks measure the device."""

    def cut_graph(self, device) -> None:
        """End the pending lazy graph and dispatch it; nothing where there is none."""

    def to_device(self, t: torch.Tensor, device) -> torch.Tensor:
        """A host tensor on the device as data."""
        return t.to(device)

    def sync_clock(self, cpu: bool = False, compiling: bool = False):
        """A function returning the seconds spent so far inside graph syncs (none here)."""
        return lambda: 0.0

    def rng_state(self, device):
        """The device's own RNG state where it has one apart from torch's."""
        return None

    def set_rng_state(self, device, state) -> None:
        pass

    def counters(self) -> tuple[int, float, int]:
        """(graphs compiled, seconds compiling, device-to-host transfers) so far: nothing is compiled ahead here."""
        return 0, 0.0, 0

    def compile_clock(self):
        """A function giving the seconds spent compiling so far in this process: torch.compile's here (its clock
        is installed on first use), XLA's own counter on XLA."""
        return self.compile_seconds  # a bound method, not a closure: the run's clock pickles to xla_mp workers

    def compile_seconds(self) -> float:
        from xla_train import compat

        return compat.inductor_compile_clock()()[1]  # installs once; later calls only read the totals

    def executions(self) -> int:
        """Compiled programs dispatched so far in this process."""
        return 0

    def read_back(self) -> int:
        """Programs read back from a persistent compile cache so far in this process, instead of compiled."""
        return 0

    def peak_mb(self, device) -> float | None:
        """Peak device memory where the runtime reports it."""
        return None

    def no_peak_memory(self, devices: int, described: str) -> str:
        """Why peak_mb() read nothing, in a table's words."""
        return "n/a"

    def runtime_setting(self) -> str:
        """The environment setting that picked the device, for a table's hardware line ("" where none does)."""
        return ""

    def child_env(self, env: dict) -> dict:
        """The environment for a child process that sets up this backend itself (a benchmark cell)."""
        return env

    def describe(self, device, cpu_model: str = "") -> str:
        """The device in a table's words."""
        return f"CPU, eager ({cpu_model})" if cpu_model else "CPU, eager"

    def native_bf16(self) -> tuple[str | None, str]:
        """(why this hardware multiplies bf16 natively, or None; why it does not): the eager precision default."""
        flag = cpu_bf16_flag()
        return (f"the CPU has {flag}" if flag else None), "the CPU has neither amx_bf16 nor avx512_bf16"

    def compile_default(self) -> tuple[bool | str, str]:
        """What compile=auto means here: "auto" (decided against the run's length) or False, and why."""
        if cpu_bf16_flag() != "amx_bf16":
            return False, "compiled steps were not faster on a CPU without AMX"
        return "auto", ""

    def execution_loop(self, setting: str = "auto", accelerator: str = "") -> str:
        """How K steps run as one program (runtime/torch_xla/step_program.py): what execution_loop=auto means here."""
        if setting not in EXECUTION_LOOPS:
            raise ConfigError(f"execution_loop={setting!r}; use one of {', '.join(EXECUTION_LOOPS)}")
        return "unroll" if setting == "auto" else setting

    def auto_steps(self, loop: str, run_steps: float | None = None) -> tuple[int, str, bool]:
        """(K, what auto chose and why, whether the run's length may still change it) for steps_per_execution=auto
        on a backend that runs `loop`; run_steps is the run's training steps where known."""
        return 1, "", False


class CUDABackend(Backend):
    """Plain Lightning on CUDA (torch-xla 2.9 has no CUDA backend)."""

    device_type = "cuda"
    runs_on_host = False
    waits_each_step = True

    def wait(self, device) -> None:
        torch.cuda.synchronize(device)

    def rng_state(self, device):
        return torch.cuda.get_rng_state(device)

    def set_rng_state(self, device, state) -> None:
        if state is not None:
            torch.cuda.set_rng_state(state, device)

    def peak_mb(self, device) -> float | None:
        return torch.cuda.max_memory_allocated(device) / 2**20

    def describe(self, device, cpu_model: str = "") -> str:
        return torch.cuda.get_device_name(device)

    def native_bf16(self) -> tuple[str | None, str]:
        lacks = "the GPU has no native bf16 (compute capability < 8.0)"
        if not torch.cuda.is_available():
            return None, lacks
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) >= (8, 0) and torch.cuda.is_bf16_supported():
            return f"the GPU has compute capability {major}.{minor}", lacks
        return None, lacks

    def compile_default(self) -> tuple[bool | str, str]:
        return "auto", ""  # the samples rule; compiled GPU steps not yet measured here


_SYNC_SECONDS: list[float] | None = None  # [wall seconds, this thread's CPU seconds, compile seconds] in XLA syncs


class XLABackend(Backend):
    """torch_xla through PJRT: a TPU, or XLA:CPU."""

    device_type = "xla"
    compiles_steps = groups_steps = exclusive_runtime = True
    runs_on_host = False

    def platform(self, accelerator: str = "xla") -> str:
        """The PJRT device the runtime will use (or uses): TPU, CPU, ...; resolved once, before any default."""
        from xla_train.runtime.probe import pjrt_device

        return pjrt_device(accelerator)

    def execution_loop(self, setting: str = "auto", accelerator: str = "xla") -> str:
        """auto: an XLA While loop, whose program does not grow with K, except on XLA:CPU, which runs a conv net's
        step inside a While body many times slower than unrolled (docs/feeding.md): there the net decides
        (runtime/grouped_steps.py, loop_for_net), and the plan's K calls unroll until it does."""
        loop = super().execution_loop(setting)
        if setting != "auto":
            return loop
        return "unroll" if self.platform(accelerator) == "CPU" else "while"

    def auto_steps(self, loop: str, run_steps: float | None = None) -> tuple[int, str, bool]:
        """A While program's compile time and host memory do not grow with K, so K is chosen for the device alone.
        An unrolled program's grow with K, so K=UNROLLED_K only where the run is long enough to pay back its longer
        compile and first execution (UNROLL_LONG_STEPS); a shorter run takes one step a program, still traced once,
        so that Lightning's loop traces no step again (docs/results.md, "What steps_per_execution=auto chooses").
        Before the run's length is known, UNROLLED_K."""
        if loop == "while":
            return WHILE_K, f"{WHILE_K} (auto)", False
        if run_steps is None:
            return UNROLLED_K, f"{UNROLLED_K} (auto)", True
        steps = "an unbounded number of" if run_steps == float("inf") else f"{int(run_steps):,}"
        if run_steps >= UNROLL_LONG_STEPS:
            why = f"{steps} training steps >= {UNROLL_LONG_STEPS:,}, enough to pay back the longer compile"
            return UNROLLED_K, f"{UNROLLED_K} (auto: {why})", False
        why = (
            f"{steps} training steps < {UNROLL_LONG_STEPS:,}, too few to pay back the longer compile of "
            f"{UNROLLED_K} unrolled steps; one step a program, traced once"
        )
        return 1, f"1 (auto: {why})", False

    def no_peak_memory(self, devices: int, described: str) -> str:
        """torch_xla reads no peak under SPMD (pjrt_computation_client.cpp answers for real devices, not the SPMD
        one) or on XLA:CPU (no allocator stats)."""
        if devices > 1:
            return "n/a (SPMD)"
        return "n/a (XLA:CPU)" if "XLA:CPU" in described else "n/a"

    def runtime_setting(self) -> str:
        return f"PJRT_DEVICE={self.platform()}"  # as resolved, whether set or probed

    def child_env(self, env: dict) -> dict:
        """The device this process resolved, so every cell runs on it; without CPU_NUM_DEVICES, because the child's
        devices= sets XLA:CPU's device count (runtime/devices.py)."""
        return {**{k: v for k, v in env.items() if k != "CPU_NUM_DEVICES"}, "PJRT_DEVICE": self.platform()}

    def wait(self, device) -> None:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()

    def cut_graph(self, device) -> None:
        import torch_xla

        torch_xla.sync()

    def to_device(self, t: torch.Tensor, device) -> torch.Tensor:
        """As a loader sends a batch: `.to()` would make a 0-dim 0 or 1 a constant of the graph (torch_xla's special
        scalars), so a value that changes between executions would compile its own program."""
        import torch_xla.core.xla_model as xm

        return xm.send_cpu_data_to_device([t], device)[0]

    def sync_clock(self, cpu: bool = False, compiling: bool = False):
        """Wall seconds (or with cpu=True the calling threads' CPU seconds, with compiling=True the seconds compiling)
        spent so far inside torch_xla.sync and xm.mark_step.

        Such a call hashes the graph, looks it up and dispatches it, but it also waits for the device while the
        previous step's execution still runs, and XLA:CPU sometimes runs the whole execution inside it, so a host
        clock around a step cannot tell the host's share from the device's without knowing this. The timing
        wrappers are installed once, for the life of the process (runtime/torch_xla/compat.py lists the patch)."""
        global _SYNC_SECONDS
        which = 2 if compiling else 1 if cpu else 0
        if _SYNC_SECONDS is None:
            from xla_train.runtime.torch_xla import compat as xla_compat

            _SYNC_SECONDS = xla_compat.time_xla_syncs()
        return lambda: _SYNC_SECONDS[which]

    def rng_state(self, device):
        import torch_xla.core.xla_model as xm

        return int(xm.get_rng_state(device))

    def set_rng_state(self, device, state) -> None:
        import torch_xla.core.xla_model as xm

        if state is not None:
            xm.set_rng_state(int(state), device)

    def compile_seconds(self) -> float:
        return self.counters()[1]

    def counters(self) -> tuple[int, float, int]:
        """torch_xla's own host-side counters, so reading them costs no device sync."""
        from torch_xla.debug import metrics as met

        compile_time = met.metric_data("CompileTime")
        transfers = met.metric_data("TransferFromDeviceTime")
        return (
            int(met.counter_value("UncachedCompile") or 0),
            compile_time[1] / 1e9 if compile_time else 0.0,
            int(transfers[0]) if transfers else 0,
        )

    def executions(self) -> int:
        """Every sync that found a graph looks it up in the compile cache (a hit or a compile), on the host as it
        dispatches. torch_xla's ExecuteComputation counter would lag: it counts as the device thread runs them."""
        from torch_xla.debug import metrics as met

        return sum(int(met.counter_value(n) or 0) for n in ("CachedCompile", "UncachedCompile"))

    def peak_mb(self, device) -> float | None:
        import torch_xla.core.xla_model as xm

        try:
            return xm.get_memory_info(device)["peak_bytes_used"] / 2**20
        except (RuntimeError, KeyError):  # XLA:CPU: "GetAllocatorStats is not supported"; SPMD's virtual device
            return None

    def describe(self, device, cpu_model: str = "") -> str:
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        try:
            kind = xm.xla_device_kind(device)  # e.g. "TPU v4"
        except RuntimeError:  # under SPMD the device is a virtual one, which has no kind
            kind = None
        return f"XLA:{xr.device_type()}" + (f" ({kind})" if kind and kind.lower() != "cpu" else "")

    def set_matmul_precision(self, precision: str) -> None:
        """torch_xla's precision for float32 matmuls and convolutions (torch_xla/backends/__init__.py, 2.9.0):
        process wide, read as each graph is lowered. So it is set once, before the first trace; a change after a
        graph has run would leave the cached graphs at the old precision and the new ones at the new, and is
        refused. XLA:CPU computes float32 whatever it says."""
        import logging

        import torch_xla.backends as backends

        if precision not in MATMUL_PRECISIONS:
            raise ConfigError(f"matmul_precision={precision!r}; use one of {', '.join(MATMUL_PRECISIONS)}")
        current = backends.get_mat_mul_precision()
        if precision == current:
            return
        if self.executions():
            raise ConfigError(
                f"matmul_precision={precision}: this process has already run XLA graphs at {current}; "
                f"the precision is set once per process, before the first step (start a new process)"
            )
        log = logging.getLogger(backends.__name__)
        level = log.level
        log.setLevel(logging.ERROR)  # its warning about setting it twice: this is the first time here
        try:
            backends.set_mat_mul_precision(precision)
        finally:
            log.setLevel(level)


EXECUTION_LOOPS = ("auto", "unroll", "while")
# steps_per_execution=auto. Where the K steps run as a While loop, WHILE_K: an estimate for a TPU (docs/feeding.md),
# which still leaves an epoch of CIFAR-10 at a v5e-8's global batch of 1,024 at least one full group. Where they
# run unrolled (XLA:CPU), measured there against one step a program traced once: K=8 compiles longer and holds
# more memory for steps only a little shorter, so it repays itself only over a long run. So UNROLLED_K from
# UNROLL_LONG_STEPS training steps, else one step a program (the figures: docs/results.md, "What
# steps_per_execution=auto chooses").
WHILE_K = 32
UNROLLED_K = 8
UNROLL_LONG_STEPS = 1000
MATMUL_PRECISIONS = ("default", "high", "highest")
MATMUL_MEANING = {
    "default": "one bf16 pass for float32 on a TPU",
    "high": "three bf16 passes on a TPU, about 14 bits",
    "highest": "six bf16 passes on a TPU, about float32",
}

BACKENDS: dict[str, Backend] = {b.device_type: b for b in (Backend(), CUDABackend(), XLABackend())}
_BY_ACCELERATOR = {"cpu": "cpu", "gpu": "cuda", "tpu": "xla", "xla": "xla"}


def backend_of(device) -> Backend:
    """The backend of a torch device (or its type's name)."""
    return BACKENDS[torch.device(device).type]


def backend_for(accelerator: str) -> Backend:
    """The backend an accelerator= name trains on (`auto` as runtime/probe.py resolves it on this machine)."""
    if accelerator == "auto":
        from xla_train.runtime.probe import resolve_accelerator

        accelerator = resolve_accelerator("auto")
    return BACKENDS[_BY_ACCELERATOR[accelerator]]


def backend_of_strategy(strategy) -> Backend:
    """The backend a Trainer's strategy trains on: its own where it names one (the JAX runtime's), else its root
    device's."""
    own = getattr(strategy, "backend", None)
    return own if own is not None else backend_of(strategy.root_device)


def xla() -> XLABackend:
    return BACKENDS["xla"]
