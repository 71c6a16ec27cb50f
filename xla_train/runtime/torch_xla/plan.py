"""runtime=torch_xla: from accelerator=/devices=/strategy= to the Trainer's arguments.

`tpu` and `xla` get the PJRT accelerators and an XLA strategy: the single-device one, SPMD over every device (of every
host on a pod slice), or on a TPU and on request Lightning's one process per device. K steps run as one program,
as runtime/grouping.py decides (docs/hardware.md, "Each accelerator").
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from xla_train import compat
from xla_train.errors import ConfigError, HardwareError
from xla_train.runtime.cache_folder import cache_folder, default_compile_cache
from xla_train.runtime.grouping import GroupingSettings
from xla_train.runtime.settings import HardwarePlan, PlanSettings
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.torch_xla.backend import XLA
from xla_train.runtime.probe import xla_platform
from xla_train.runtime.torch_xla.devices import configure_pjrt, parse_device_count

XLA_STRATEGIES = ("auto", "xla_single", "spmd", "xla_mp")
CACHE_FOLDER = "xla_compile_cache"  # compile_cache=auto's folder, in this machine's cache folder


@dataclass
class _Planned:
    trainer_kwargs: dict
    spmd_hosts: int
    compile_cache: str | None


def plan(kind: str, settings: PlanSettings, runtime, note: str = "") -> HardwarePlan:
    s = settings
    s.refuse_eager_knobs(kind)
    if s.strategy == "xla_mp" and s.steps_per_execution not in (1, "auto"):
        raise ConfigError(
            f"steps_per_execution={s.steps_per_execution} runs K steps as one XLA program (single device or SPMD); "
            f"strategy=xla_mp runs one step at a time, so leave it at 1"
        )
    grouping = GroupingSettings(s.steps_per_execution, s.execution_loop)
    host_platform = XLA.platform(kind) == "cpu"  # from the device the runtime will use, not yet set
    planned = _plan_xla(kind, s.devices, s.strategy, s.precision, s.compile_cache, s.num_nodes)  # sets PJRT_DEVICE
    compat.keep_torch_gru()  # torch_xla is imported now
    xla_compat.no_jax_for_torch_xla()  # jax's client and its draw from numpy's RNG stay out of a torch_xla run
    XLA.set_matmul_precision(s.matmul_precision)  # before the first trace (the runtime is up, nothing traced)
    strat = planned.trainer_kwargs["strategy"]
    if hasattr(strat, "plan_grouping"):  # not xla_mp's, which runs one step at a time
        strat.plan_grouping(grouping, host_platform, s.scan_chunk)
    return HardwarePlan(
        kind,
        planned.trainer_kwargs,
        runtime,
        XLA,
        s,
        spmd_hosts=planned.spmd_hosts,
        compile_cache=planned.compile_cache,
        runtime_note=note,
    )


def xla_precision_plugin(precision):
    """None for float32; bf16 runs under autocast (runtime/torch_xla/precision.py). The rest does not suit XLA."""
    p = str(precision) if precision is not None else "32-true"
    if p in ("32", "32-true"):
        return None
    from xla_train.runtime.torch_xla.precision import BF16_NAMES, XLABf16Autocast

    if p in BF16_NAMES:
        return XLABf16Autocast()
    if p == "bf16-true":
        raise ConfigError(
            "precision=bf16-true on XLA would set the deprecated XLA_USE_BF16 and store weights and "
            "checkpoints in bf16; use precision=bf16 (autocast, float32 weights)"
        )
    raise ConfigError(f"precision={p!r} is not for XLA; use precision=32 or precision=bf16")


def configure_compile_cache(setting: str | None) -> bool | None:
    """The persistent compile cache: on a TPU a second run reads its programs back instead of compiling them. It
    must precede any compilation. `auto` (the default) keeps it in default_compile_cache(CACHE_FOLDER) on a TPU, and nowhere on
    XLA:CPU, which writes that cache but cannot read it back; `off` (or none) keeps none; a path keeps it there.

    On a pod slice every host runs the same command: a path given is usually a shared file system, where host 0
    alone writes and the others only read (they compile what is not there yet, as host 0 does, without writing
    it a second time); auto's folder is each host's own, which each writes. Returns whether this host reads
    only; None where no cache is set up."""
    if not setting or setting == "off":
        return None
    auto = setting == "auto"
    if xla_platform() == "cpu":
        if not auto:
            warnings.warn(
                f"compile_cache={setting} has no effect on XLA:CPU (torch_xla writes that cache but cannot "
                f"read it back); it is for TPUs",
                stacklevel=3,
            )
        return None
    import torch_xla.runtime as xr

    path = default_compile_cache(CACHE_FOLDER) if auto else setting
    # the runtime has not started: the process index is the worker id
    readonly = not auto and xla_compat.tpu_worker_index() != 0
    xr.initialize_cache(cache_folder(path, setting), readonly=readonly)
    return readonly


def _plan_xla(kind: str, devices, strategy, precision=None, compile_cache=None, num_nodes=1) -> _Planned:
    from xla_train.runtime.torch_xla.accelerators import PJRTAccelerator, TPUAccelerator
    from xla_train.runtime.torch_xla.multihost import host_topology

    if strategy not in XLA_STRATEGIES:
        raise ConfigError(
            f"strategy={strategy!r} cannot run on accelerator={kind}; use one of {', '.join(XLA_STRATEGIES)}"
        )
    requested = None if devices in ("auto", None, -1, "-1") else devices
    try:
        requested = int(requested) if requested is not None else None
    except (TypeError, ValueError):
        raise HardwareError(f"devices={devices!r} is not a device count; use a whole number or auto") from None
    if requested is not None and requested < 1:
        raise HardwareError(f"devices={requested} must be at least 1 (or auto for all)")
    plugin = xla_precision_plugin(precision)
    configure_pjrt(kind, requested)
    cache = None
    if configure_compile_cache(compile_cache) is not None:
        cache = default_compile_cache(CACHE_FOLDER) if compile_cache == "auto" else compile_cache
    if strategy == "xla_mp":
        if num_nodes != 1:
            raise ConfigError("strategy=xla_mp finds a pod's hosts itself; leave num_nodes unset")
        return _Planned(_plan_xla_multiprocess(requested, plugin), 1, cache)
    topo = host_topology()
    if num_nodes not in (1, topo.process_count):
        raise HardwareError(
            f"num_nodes={num_nodes} but the XLA runtime has {topo.process_count} host(s); leave "
            f"num_nodes unset on XLA: on a pod slice the runtime finds every host itself"
        )
    n = parse_device_count(devices, topo.local_devices)
    accelerator = TPUAccelerator() if kind == "tpu" else PJRTAccelerator()
    if n == 1 and strategy != "spmd" and not topo.multi_host:
        from xla_train.runtime.torch_xla.strategy import XLASingleDeviceStrategy

        strat = XLASingleDeviceStrategy(0, accelerator=accelerator, precision_plugin=plugin)
    else:
        if strategy == "xla_single":
            what = f"{n}" if not topo.multi_host else f"the {topo.global_devices} of {topo.process_count} hosts"
            raise ConfigError(
                f"strategy=xla_single drives one device, not {what}; use strategy=spmd (the default "
                f"for several devices)" + ("" if topo.multi_host else " or devices=1")
            )
        _check_spmd_devices(n, topo)
        from xla_train.runtime.torch_xla.spmd import SPMDStrategy

        strat = SPMDStrategy(n, accelerator=accelerator, precision_plugin=plugin, topology=topo)
    # The accelerator and the precision travel inside the strategy; Lightning refuses them twice.
    kwargs = {
        "accelerator": "auto",
        "strategy": strat,
        "devices": n,
        "precision": None,
        "num_nodes": topo.process_count,
    }
    return _Planned(kwargs, topo.process_count, cache)


def _check_spmd_devices(n: int, topo) -> None:
    """An SPMD mesh spans every device of the runtime (an XLA rule), so n must be all of this host's."""
    if topo.multi_host and n != topo.local_devices:
        raise HardwareError(
            f"devices={n} but data parallelism (SPMD) spans every XLA device, and this host has "
            f"{topo.local_devices} (of {topo.global_devices} on {topo.process_count} hosts); "
            f"use devices=auto"
        )
    total = topo.global_devices
    if not topo.multi_host and n != total:
        how = f", or set CPU_NUM_DEVICES={n}" if xla_platform() == "cpu" else ""
        raise HardwareError(
            f"devices={n} but data parallelism (SPMD) spans every XLA device and this runtime has "
            f"{total}; use devices=auto (all {total}) or devices=1{how}"
        )


def _plan_xla_multiprocess(requested: int | None, plugin=None) -> dict:
    """strategy=xla_mp: Lightning's XLAStrategy, one process per TPU core. TPU only, and the parent process
    must not start the runtime, which the spawned processes own; Lightning's XLAAccelerator (under
    TracingAccelerator) counts the cores without starting it."""
    from xla_train.runtime.torch_xla.accelerators import TracingAccelerator
    from xla_train.runtime.torch_xla.multiprocess import XLAMultiProcessStrategy

    if os.environ.get("PJRT_DEVICE", "").strip().lower() != "tpu":
        raise HardwareError(
            f"strategy=xla_mp runs one process per TPU core and needs a TPU; on "
            f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE')} its collectives cannot run "
            f"(pytorch/xla#5005): use strategy=spmd, the default"
        )
    if requested == 1:
        raise ConfigError("strategy=xla_mp needs several devices; for one device leave strategy=auto")
    strat = XLAMultiProcessStrategy(accelerator=TracingAccelerator(), precision_plugin=plugin)
    return {"accelerator": "auto", "strategy": strat, "devices": requested or "auto", "precision": None}
