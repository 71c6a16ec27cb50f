"""What the rest of the package may ask of torch_xla's devices (runtime/backend.py's Backend): a TPU, or XLA:CPU,
through PJRT. Its compiles, executions and transfers come from torch_xla's own host-side counters."""

from __future__ import annotations

import torch

from xla_train.errors import ConfigError
from xla_train.runtime.backend import MATMUL_PRECISIONS, Backend
from xla_train.runtime.probe import xla_platform

_SYNC_SECONDS: list[float] | None = None  # [wall seconds, this thread's CPU seconds, compile seconds] in XLA syncs


class XLABackend(Backend):
    """torch_xla through PJRT: a TPU, or XLA:CPU."""

    device_type = "xla"
    compiles_steps = groups_steps = exclusive_runtime = True
    runs_on_host = False

    def platform(self, accelerator: str = "xla") -> str:
        """The platform the runtime will use (or uses): tpu or cpu; resolved once, before any default."""
        return xla_platform(accelerator)

    def no_peak_memory(self, devices: int, described: str) -> str:
        """torch_xla reads no peak under SPMD (pjrt_computation_client.cpp answers for real devices, not the SPMD
        one) or on XLA:CPU (no allocator stats)."""
        if devices > 1:
            return "n/a (SPMD)"
        return "n/a (XLA:CPU)" if "XLA:CPU" in described else "n/a"

    def runtime_setting(self) -> str:
        return f"PJRT_DEVICE={self.platform().upper()}"  # as resolved, whether set or probed

    def child_env(self, env: dict) -> dict:
        """The device this process resolved, so every cell runs on it; without CPU_NUM_DEVICES, because the child's
        devices= sets XLA:CPU's device count (runtime/devices.py)."""
        return {**{k: v for k, v in env.items() if k != "CPU_NUM_DEVICES"}, "PJRT_DEVICE": self.platform().upper()}

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


XLA = XLABackend()


def backend_for(accelerator: str) -> XLABackend:
    return XLA


def backend_of(device_type: str) -> XLABackend:
    return XLA
