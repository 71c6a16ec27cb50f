"""The devices an accelerator= would train on, asked of the runtime that would run it, without starting any runtime
in this process (runtime/device_report.py says why).

On XLA with runtime=auto, the report is the runtime auto takes (runtime/registry.py), with the other installed
runtimes below it and, for each registered one that is not installed, the extra that installs it.
"""

from __future__ import annotations

from xla_train.errors import HardwareError, UserError
from xla_train.runtime import registry
from xla_train.runtime.device_report import DeviceReport


def describe_devices(accelerator: str = "auto", runtime: str = "auto") -> DeviceReport:
    kind = registry.resolve_accelerator(str(accelerator), runtime)
    if runtime not in registry.runtime_names():
        raise HardwareError(f"runtime={runtime!r} is not known; use one of {', '.join(registry.runtime_names())}")
    chosen = registry.resolve_runtime(runtime, kind)
    first = chosen.module("devices").report(kind)
    if runtime != "auto" or not chosen.compiles:
        return first
    also = []
    for other in registry.RUNTIMES.values():
        if other is chosen:
            continue
        why = other.missing()
        if why is not None:
            also.append(
                f"runtime={other.name}: {why}: pip install 'xla_train[{other.extra}]'"
            )  # why says what is missing
            continue
        try:
            also.append(other.module("devices").report(kind))
        except UserError as e:
            also.append(f"runtime={other.name}: {e}")
    note = f"{first.detail}; runtime=auto takes {chosen.name} here"
    return DeviceReport(first.accelerator, first.hardware, first.names, note, first.runtime, tuple(also))
