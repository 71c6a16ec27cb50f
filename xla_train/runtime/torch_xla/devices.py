"""torch_xla's devices: the PJRT settings that pick them, set before its runtime starts, and their count and kind,
asked without holding them (runtime/device_report.py says why)."""

from __future__ import annotations

import functools
import os
import sys

from xla_train.errors import HardwareError
from xla_train.runtime.device_report import DeviceReport, listed
from xla_train.runtime.probe import platform_named, require_tpu, xla_platform
from xla_train.runtime.tpu_lock import starting_runtime


def missing() -> str | None:
    """Why runtime=torch_xla cannot run here, or None: torch_xla must import (a wheel built for another torch
    fails as it loads)."""
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        return "needs torch_xla, which is not installed"
    try:
        import torch_xla  # noqa: F401
    except (ImportError, OSError, RuntimeError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        return f"needs torch_xla, which does not import here ({type(e).__name__}: {first})"
    return None


def started() -> bool:
    """Whether this process has started the XLA runtime (and so, on a TPU, holds its chips)."""
    if "torch_xla" not in sys.modules:
        return False
    from xla_train.runtime.torch_xla import compat as xla_compat

    return xla_compat.xla_runtime_started()


def pjrt_device(accelerator: str = "xla") -> str:
    """The PJRT device the runtime will start on, as PJRT_DEVICE spells it (TPU, CPU): runtime/probe.py's answer.
    configure_pjrt writes it into PJRT_DEVICE, so a second run in the process (a notebook) is answered alike."""
    return xla_platform(accelerator).upper()


def configure_pjrt(kind: str, devices: int | str | None = None) -> None:
    """Set PJRT_DEVICE (and CPU_NUM_DEVICES) before the runtime starts. Safe to call twice."""
    if kind == "tpu":
        named = os.environ.get("PJRT_DEVICE", "").strip()
        if named and platform_named(named) != "tpu":
            raise HardwareError(
                f"accelerator=tpu but PJRT_DEVICE={os.environ['PJRT_DEVICE']}; unset PJRT_DEVICE or use accelerator=xla"
            )
        require_tpu()
        os.environ["PJRT_DEVICE"] = "TPU"
        return
    os.environ["PJRT_DEVICE"] = pjrt_device(kind)  # the one answer every default was chosen from
    if xla_platform(kind) == "cpu" and "CPU_NUM_DEVICES" not in os.environ:
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
from xla_train.runtime.torch_xla.devices import configure_pjrt, device_kind, runtime_device_count
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
    if started():
        configure_pjrt(kind)
        return runtime_device_count(), device_kind(), os.environ["PJRT_DEVICE"]
    answer = listed(_LIST.format(kind=kind), f"the XLA runtime for accelerator={kind}")
    return answer["count"], answer["kind"], answer["pjrt"]


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


def report(kind: str) -> DeviceReport:
    """The XLA devices accelerator=`kind` would train on with runtime=torch_xla."""
    from importlib.metadata import version

    count, hardware, pjrt = list_xla_devices(kind)  # without holding a TPU's chips in this process
    names = tuple(f"xla:{i}" for i in range(count))
    return DeviceReport(kind, hardware, names, f"PJRT_DEVICE={pjrt}, torch_xla {version('torch_xla')}", "torch_xla")
