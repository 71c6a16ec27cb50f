"""The devices an accelerator= would train on, and the PJRT settings that pick them, without Lightning.

`python -m xla_train devices` is the first command on a new machine (and the benchmarks notebook's first cell):
it should answer in the time the runtime takes to start, not in the time Lightning, torchmetrics and their imports
take. Neither this process nor the short-lived one that asks the runtime imports Lightning.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

from xla_train.errors import HardwareError, UserError
from xla_train.runtime.probe import RUNTIMES, pjrt_device, require_cuda, require_tpu, resolve_accelerator
from xla_train.runtime.tpu_lock import starting_runtime


def configure_pjrt(kind: str, devices: int | str | None = None) -> None:
    """Set PJRT_DEVICE (and CPU_NUM_DEVICES) before the runtime starts. Safe to call twice."""
    if kind == "tpu":
        if os.environ.get("PJRT_DEVICE", "TPU").upper() != "TPU":
            raise HardwareError(
                f"accelerator=tpu but PJRT_DEVICE={os.environ['PJRT_DEVICE']}; unset PJRT_DEVICE or use accelerator=xla"
            )
        require_tpu()
        os.environ["PJRT_DEVICE"] = "TPU"
        return
    os.environ["PJRT_DEVICE"] = pjrt_device(kind)  # the one answer every default was chosen from
    if os.environ["PJRT_DEVICE"].upper() == "CPU" and "CPU_NUM_DEVICES" not in os.environ:
        if isinstance(devices, int) and devices > 0:
            os.environ["CPU_NUM_DEVICES"] = str(devices)
    with starting_runtime():  # the test mode's lock, which makes XLA:CPU one process's as a TPU is (tpu_lock.py)
        pass


@functools.lru_cache(maxsize=1)
def runtime_device_count() -> int:
    """Devices addressable by this process, from the PJRT runtime."""
    import torch_xla.runtime as xr

    with starting_runtime():
        return xr.addressable_runtime_device_count()


_LIST = """
import json, os
from xla_train.errors import UserError
from xla_train.runtime.devices import configure_pjrt, device_kind, runtime_device_count
try:
    import torch_xla
except Exception as e:
    print(json.dumps({{"import_error": f"{{type(e).__name__}}: {{e}}"}}))
    raise SystemExit(0)
try:
    configure_pjrt({kind!r})
    print(json.dumps({{"count": runtime_device_count(), "kind": device_kind(), "pjrt": os.environ["PJRT_DEVICE"]}}))
except UserError as e:
    print(json.dumps({{"error": str(e)}}))
"""


def list_xla_devices(kind: str) -> tuple[int, str, str]:
    """(device count, device kind, PJRT_DEVICE) of the XLA runtime accelerator=`kind` would start, without holding it.

    A process that starts the runtime holds a TPU's chips until it exits, and then no
    other process (a benchmark cell, a fit in a subprocess) can use them. So unless
    this process has started the runtime already, a short-lived one answers.
    """
    from xla_train.runtime.tpu_lock import runtime_started

    if runtime_started():
        configure_pjrt(kind)
        return runtime_device_count(), device_kind(), os.environ["PJRT_DEVICE"]
    answer = _listed(_LIST.format(kind=kind), f"the XLA runtime for accelerator={kind}")
    return answer["count"], answer["kind"], answer["pjrt"]


class TorchXLAMissing(HardwareError):
    """torch_xla does not import (not installed, or built for another torch): runtime=auto takes JAX."""


def device_kind() -> str:
    import torch_xla.runtime as xr

    return xr.device_type() or "unknown"


def parse_device_count(devices, available: int) -> int:
    if devices in ("auto", -1, "-1", None):
        return available
    try:
        n = int(devices)
    except (TypeError, ValueError):
        raise HardwareError(
            f"devices={devices!r} is not a device count; use a whole number from 1 to {available}, or auto"
        ) from None
    if not 1 <= n <= available:
        raise HardwareError(
            f"devices={n} but this machine has {available} XLA device(s); use 1 to {available}, or auto"
        )
    return n


@dataclass(frozen=True)
class DeviceReport:
    accelerator: str  # what to pass as accelerator=
    hardware: str
    names: tuple[str, ...]
    detail: str
    runtime: str = ""  # the XLA runtime that sees them (torch_xla, jax); "" for eager cpu and gpu
    also: tuple = ()  # the other installed runtime's report, or why it has none (a str)

    @property
    def count(self) -> int:
        return len(self.names)

    def __str__(self) -> str:
        n = self.count
        lines = [f"{n} {self.hardware} device{'s' if n != 1 else ''} (accelerator={self.accelerator}; {self.detail})"]
        lines += [f"  {name}  {self.hardware}" for name in self.names]
        return "\n".join(lines + [str(other) for other in self.also])


_LIST_JAX = """
import json
from xla_train.errors import UserError
from xla_train.runtime.jax.devices import jax_devices
try:
    found = jax_devices({kind!r})
    print(json.dumps({{"count": len(found), "kind": found[0].device_kind, "platform": found[0].platform}}))
except UserError as e:
    print(json.dumps({{"error": str(e)}}))
"""


def _listed(script: str, what: str) -> dict:
    """The last JSON line a short-lived process prints (it starts the runtime, so this process does not)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HardwareError(f"{what} did not start ({tail})")
    answer = json.loads(lines[-1])
    if "import_error" in answer:
        raise TorchXLAMissing(f"runtime=torch_xla: torch_xla does not import here ({answer['import_error']})")
    if "error" in answer:
        raise HardwareError(answer["error"])
    return answer


def jax_report(kind: str) -> DeviceReport:
    """The JAX devices accelerator=`kind` would train on with runtime=jax, counted in a short-lived process."""
    from importlib.metadata import version

    from xla_train.runtime.jax.devices import require_jax

    require_jax()
    answer = _listed(_LIST_JAX.format(kind=kind), f"JAX for accelerator={kind}")
    names = tuple(f"{answer['platform']}:{i}" for i in range(answer["count"]))
    return DeviceReport(
        kind, f"JAX {answer['kind']}", names, f"runtime=jax, jax {version('jax')}, torchax {version('torchax')}", "jax"
    )


def torch_xla_report(kind: str) -> DeviceReport:
    from importlib.metadata import version

    count, hardware, pjrt = list_xla_devices(kind)  # without holding a TPU's chips in this process
    names = tuple(f"xla:{i}" for i in range(count))
    return DeviceReport(kind, hardware, names, f"PJRT_DEVICE={pjrt}, torch_xla {version('torch_xla')}", "torch_xla")


def describe_devices(accelerator: str = "auto", runtime: str = "auto") -> DeviceReport:
    """The devices accelerator= would train on, without starting an XLA runtime in this process. On XLA, runtime=auto
    reports the runtime a fit would choose (runtime/plan.py) and, below it, the other one where it is installed."""
    kind = resolve_accelerator(str(accelerator), runtime)
    if kind in ("tpu", "xla") or (kind == "gpu" and runtime == "jax"):
        if runtime not in RUNTIMES:
            raise HardwareError(f"runtime={runtime!r} is not known; use one of {', '.join(RUNTIMES)}")
        report = {"torch_xla": torch_xla_report, "jax": jax_report}
        if runtime != "auto":
            return report[runtime](kind)
        # as a fit's auto chooses: torch_xla where it imports (its own process finds out), else JAX; the other
        # one below it, where installed
        try:
            first, other = report["torch_xla"](kind), "jax"
        except TorchXLAMissing as missing:
            first, other = report["jax"](kind), str(missing)
        if other == "jax":
            try:
                other = report["jax"](kind)
            except UserError as e:
                other = f"runtime=jax: {e}"
        return DeviceReport(first.accelerator, first.hardware, first.names, first.detail, first.runtime, (other,))
    import torch

    if kind == "gpu":
        require_cuda()
        names = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
        return DeviceReport(
            "gpu", torch.cuda.get_device_name(0), names, f"torch {torch.__version__}, CUDA {torch.version.cuda}"
        )
    return DeviceReport(
        "cpu", "CPU", ("cpu",), f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"
    )
