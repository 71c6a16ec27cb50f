"""The JAX devices an accelerator= names, set up before JAX starts its backends.

accelerator=xla is JAX's own choice (a TPU, else a GPU, else the CPU), or the CPU where PJRT_DEVICE=CPU says so, as it
says for torch_xla; tpu and gpu ask for that platform. On the CPU, devices=N (else CPU_NUM_DEVICES, torch_xla's
setting) is the number of host devices JAX makes, which it fixes when its backends start: a process that already
started them with another count is told to start anew, in one line.
"""

from __future__ import annotations

import importlib.util
import os

from xla_train.errors import ConfigError, HardwareError

PLATFORM = {"tpu": "tpu", "gpu": "cuda"}


def require_jax() -> None:
    missing = [m for m in ("jax", "torchax") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"runtime=jax needs {' and '.join(missing)}, which are not installed: pip install 'xla_train[jax]' "
            f"(or 'xla_train[jax-tpu]', 'xla_train[jax-cuda]'), or use runtime=torch_xla"
        )


def _wanted_cpu_devices(devices) -> int | None:
    if devices not in ("auto", None, -1, "-1"):
        try:
            return int(devices)
        except (TypeError, ValueError):
            raise HardwareError(f"devices={devices!r} is not a device count; use a whole number or auto") from None
    value = os.environ.get("CPU_NUM_DEVICES", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def jax_devices(kind: str, devices="auto") -> list:
    """The devices a run of accelerator=`kind` trains on: `devices` of them (all where auto)."""
    require_jax()
    import jax

    from xla_train.runtime.engine.jax import compat

    platform = PLATFORM.get(kind)
    if platform is None and os.environ.get("PJRT_DEVICE", "").strip().upper() == "CPU":
        platform = "cpu"
    if not compat.backends_started():
        if platform == "cpu" or (platform is None and _wanted_cpu_devices(devices)):
            n = _wanted_cpu_devices(devices)
            if n:
                jax.config.update("jax_num_cpu_devices", n)
        if platform == "cpu":
            jax.config.update("jax_platforms", "cpu")
    try:
        found = jax.devices(platform) if platform else jax.devices()
    except RuntimeError:
        raise HardwareError(
            f"accelerator={kind} on runtime=jax but JAX has no {platform.upper()} backend here; install "
            f"'xla_train[jax-{'tpu' if kind == 'tpu' else 'cuda'}]' on a machine with one, or use accelerator=xla"
        ) from None
    if devices in ("auto", None, -1, "-1"):
        return found
    n = _wanted_cpu_devices(devices)
    if n is None or n < 1:
        raise HardwareError(f"devices={devices!r} must be at least 1 (or auto for all)")
    if n > len(found):
        how = (
            "; JAX fixed the CPU's device count when it started: run in a new process"
            if found[0].platform == "cpu"
            else ""
        )
        raise HardwareError(
            f"devices={n} but JAX has {len(found)} {found[0].platform.upper()} device(s) here; use 1 to "
            f"{len(found)}, or auto{how}"
        )
    return found[:n]
