"""What the rest of the package may ask of a device: the Backend interface every runtime implements.

Training callbacks, the run report, the benchmarks and the device listing ask a Backend, never a device's
type: wait for the device, cut and dispatch a lazy graph, save and restore its RNG, count its compiles, read
its peak memory, name it, and whether it compiles steps itself. Each runtime's folder has its backend.py, and
runtime/registry.py finds the one for a device (docs/layout.md, "Adding a runtime").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch


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
    """The host: eager PyTorch on the CPU, the base every other kind overrides where it differs."""

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


MATMUL_PRECISIONS = ("default", "high", "highest")
MATMUL_MEANING = {
    "default": "one bf16 pass for float32 on a TPU",
    "high": "three bf16 passes on a TPU, about 14 bits",
    "highest": "six bf16 passes on a TPU, about float32",
}
