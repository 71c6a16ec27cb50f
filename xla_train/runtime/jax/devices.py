"""The JAX devices an accelerator= names, set up before JAX starts its backends.

accelerator=xla is JAX's own choice (a TPU, else a GPU, else the CPU), or the CPU where PJRT_DEVICE=CPU says so, as it
says for torch_xla; tpu and gpu ask for that platform. On the CPU, devices=N (else CPU_NUM_DEVICES, torch_xla's
setting) is the number of host devices JAX makes, which it fixes when its backends start: a process that already
started them with another count is told to start anew, in one line.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from xla_train.errors import ConfigError, HardwareError
from xla_train.runtime.device_report import DeviceReport, listed

PLATFORM = {"tpu": "tpu", "gpu": "cuda"}


TORCHAX = "0.0.13"  # pyproject.toml's jax extras pin it
REINSTALL = f"pip install --force-reinstall --no-deps torchax=={TORCHAX}"


def missing() -> str | None:
    """Why runtime=jax cannot run here, or None: jax and torchax 0.0.13 installed, found without importing them.
    torch_xla 2.9.0's wheel carries its own older copy of torchax (it needs flax), so installing both leaves whichever
    pip wrote last, and uninstalling torch_xla deletes torchax's files (docs/hardware.md, "Runtimes")."""
    from importlib import metadata

    if importlib.util.find_spec("jax") is None or not _installed("torchax"):
        return "needs jax and torchax, which are not installed"
    spec = importlib.util.find_spec("torchax")  # finds the package without importing it
    if spec is None:
        return (
            f"needs torchax, whose files are gone (uninstalling torch_xla 2.9 deletes them: its wheel carries a copy "
            f"of torchax); reinstall it: {REINSTALL}"
        )
    record = {str(f): f.hash.value for f in metadata.files("torchax") or [] if f.hash is not None}
    on_disk = os.path.join(list(spec.submodule_search_locations)[0], "tensor.py")
    if record.get("torchax/tensor.py") and record["torchax/tensor.py"] != _sha256(on_disk):
        return (
            f"needs torchax {TORCHAX}, but the torchax on disk is torch_xla 2.9's own older copy, which overwrote its "
            f"files as pip installed both; put {TORCHAX}'s back: {REINSTALL}"
        )
    return None


def require_jax() -> None:
    """jax and torchax importable, or one line saying how."""
    why = missing()
    if why is not None:
        how = "" if "pip install" in why else ": pip install 'xla_train[jax]' (or '[jax-tpu]', '[jax-cuda]')"
        raise ConfigError(f"runtime=jax {why}{how}")


def started() -> bool:
    """Whether this process has started JAX's backends (the CPU device count is fixed from then on)."""
    if "jax" not in sys.modules:
        return False
    from xla_train.runtime.jax import compat

    return compat.backends_started()


_LIST = """
import json
from xla_train.errors import UserError
from xla_train.runtime.jax.devices import jax_devices
try:
    found = jax_devices({kind!r})
    print(json.dumps({{"count": len(found), "kind": found[0].device_kind, "platform": found[0].platform}}))
except UserError as e:
    print(json.dumps({{"error": str(e)}}))
"""


def report(kind: str) -> DeviceReport:
    """The JAX devices accelerator=`kind` would train on with runtime=jax, counted in a short-lived process."""
    from importlib.metadata import version

    require_jax()
    answer = listed(_LIST.format(kind=kind), f"JAX for accelerator={kind}")
    names = tuple(f"{answer['platform']}:{i}" for i in range(answer["count"]))
    return DeviceReport(
        kind, f"JAX {answer['kind']}", names, f"runtime=jax, jax {version('jax')}, torchax {version('torchax')}", "jax"
    )


def _installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _sha256(path: str) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    import base64
    import hashlib

    with open(path, "rb") as f:
        return base64.urlsafe_b64encode(hashlib.sha256(f.read()).digest()).rstrip(b"=").decode()


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

    from xla_train.runtime.jax import compat

    platform = PLATFORM.get(kind)
    if platform is None and os.environ.get("PJRT_DEVICE", "").strip().lower() == "cpu":
        platform = "cpu"
    if not compat.backends_started():
        if platform == "cpu" or (platform is None and _wanted_cpu_devices(devices)):
            n = _wanted_cpu_devices(devices)
            if n:
                jax.config.update("jax_num_cpu_devices", n)
        if platform == "cpu":
            jax.config.update("jax_platforms", "cpu")
    try:
        found = jax.local_devices(backend=platform)  # this process's (with several, jax.devices() is all of theirs)
    except RuntimeError:
        raise HardwareError(
            f"accelerator={kind} on runtime=jax but JAX has no {platform.upper()} backend here; install "
            f"'xla_train[jax-{'tpu' if kind == 'tpu' else 'cuda'}]' on a machine with one, or use accelerator=xla"
        ) from None
    if devices in ("auto", None, -1, "-1"):
        return found
    n = _wanted_cpu_devices(devices)
    if n is None or n < 1:
        raise HardwareError(f"devices={devices} must be at least 1 (or auto for all)")
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
