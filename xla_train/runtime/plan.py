"""From accelerator=/devices=/strategy= to the Trainer's hardware arguments: the one place that decides what runs where.

`tpu` and `xla` get the PJRT accelerators and an XLA strategy: the single-device one, SPMD over every device
(of every host on a pod slice), or on a TPU and on request Lightning's one process per device. `cpu` and `gpu`
are plain Lightning (its DDP across nodes) with what runtime/eager/fast_path.py picks for the hardware; `auto` takes a
TPU if the PCI bus has one, then a GPU, then the CPU. Every choice writes checkpoints through the same atomic
writer (docs/hardware.md, "Each accelerator").
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from xla_train import compat
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.eager import fast_path as fast
from xla_train.runtime.cache_folder import cache_folder, default_compile_cache
from xla_train.errors import ConfigError, HardwareError
from xla_train.runtime.backend import backend_for
from xla_train.runtime.probe import RUNTIMES, pjrt_device, require_cuda, resolve_accelerator

XLA_STRATEGIES = ("auto", "xla_single", "spmd", "xla_mp")
# Device-resident data (data.on_device): what the splits may take on each device, where every device holds all
# of them (replicated; a batch's rows are gathered where they are needed). 1 GiB is an eighth of the smallest
# TPU core's memory (v2: 8 GiB) and a sixteenth of a v5e chip's, and holds CIFAR-10 (184 MB) and IMDB at
# maxlen 500 (200 MB) with room to spare. XLA_TRAIN_DEVICE_DATA_MB sets another.
DEVICE_DATA_MB = 1024


def resolve_execution_loop(setting: str = "auto", kind: str = "xla") -> str:
    """How K steps run as one program on accelerator=`kind`: what its backend answers for the PJRT device the
    runtime will use (runtime/probe.py, pjrt_device), decided before the runtime starts."""
    return backend_for(kind).execution_loop(setting, kind)


@dataclass
class HardwarePlan:
    kind: str
    trainer_kwargs: dict
    spmd_hosts: int = 1  # hosts that run one SPMD program in lockstep: a device read on one host alone would hang
    fast_path: fast.FastPath | None = None  # cpu and gpu: precision, channels_last, torch.compile
    matmul_precision: str | None = None  # XLA: float32 matmul and convolution precision (runtime/backend.py)
    compile_cache: str | None = None  # XLA: the persistent compile cache's folder, where one is read back
    runtime: str = "torch_xla"  # the XLA runtime that runs the steps (torch_xla or jax); eager where not XLA
    runtime_note: str = ""  # the runtime in the run report's words, and why auto chose it

    @property
    def is_xla(self) -> bool:
        return self.kind in ("tpu", "xla") or self.runtime == "jax"

    @property
    def backend(self):
        """What the run's hardware answers (runtime/backend.py): the JAX runtime's, or the accelerator's."""
        return backend_of_runtime(self.kind, self.runtime)

    @property
    def resident_data(self) -> tuple[bool, int]:
        """(whether data.on_device=auto puts the data on the device, the budget in bytes): on XLA, where every
        host-side step costs the accelerator time, and a loader cannot overlap as a GPU's can."""
        mb = os.environ.get("XLA_TRAIN_DEVICE_DATA_MB", str(DEVICE_DATA_MB))
        try:
            budget = int(float(mb) * 2**20)
        except ValueError:
            raise ConfigError(f"XLA_TRAIN_DEVICE_DATA_MB={mb!r} is not a number of megabytes") from None
        return self.is_xla, budget


def resolve_runtime(setting: str, kind: str) -> str:
    """The XLA runtime that runs accelerator=`kind`: torch_xla or jax, or "eager" where no XLA runs (cpu; gpu outside
    runtime=jax). auto is torch_xla where it imports, else JAX (docs/hardware.md, "Runtimes")."""
    if setting not in RUNTIMES:
        raise ConfigError(f"runtime={setting!r} is not known; use one of {', '.join(RUNTIMES)}")
    if kind == "cpu" or (kind == "gpu" and setting != "jax"):
        return "eager"
    if setting == "auto":
        return "torch_xla" if torch_xla_imports() else "jax"
    if setting == "torch_xla" and not torch_xla_imports():
        raise ConfigError(
            "runtime=torch_xla but torch_xla does not import here (not installed, or built for another torch): "
            "pip install torch-xla==2.9.0 with torch 2.9.0, or use runtime=jax (pip install 'xla_train[jax]')"
        )
    return setting


def run_backend(kind: str, runtime: str = "auto"):
    """The backend a run of accelerator=`kind` on runtime= trains on, known before any runtime starts (a benchmark
    cell's): the JAX runtime's wherever runtime= resolves to JAX, accelerator=gpu included, else the accelerator's."""
    return backend_of_runtime(kind, resolve_runtime(runtime, kind))


def backend_of_runtime(kind: str, resolved: str):
    """The backend for accelerator=`kind` on a resolved runtime (torch_xla, jax or eager)."""
    if resolved == "jax":
        from xla_train.runtime.jax.backend import JAX_BACKEND

        return JAX_BACKEND
    return backend_for(kind)


def torch_xla_imports() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        import torch_xla  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def resolve_steps_per_execution(setting, kind: str, strategy, loop: str) -> tuple[int, str, bool]:
    """(K, what auto chose and why, whether the run's length still decides it: runtime/grouped_steps.py,
    fit_to_run). auto is the backend's answer for the loop; off XLA and under xla_mp, one step at a time as
    Lightning runs it."""
    if setting != "auto":
        return setting, "", False
    if kind in ("cpu", "gpu") or strategy == "xla_mp":
        return 1, "", False
    return backend_for(kind).auto_steps(loop)


def run_steps(epoch_steps: int, max_epochs=None, max_steps=-1) -> float:
    """The training steps of a run of `epoch_steps` an epoch under Lightning's max_epochs and max_steps (None and
    -1 as the Trainer reads them: both unset is 1,000 epochs, -1 epochs is no end)."""
    limit = max_steps if isinstance(max_steps, int) and max_steps > 0 else None
    if max_epochs is None:
        max_epochs = 1000 if limit is None else -1
    run = float("inf") if max_epochs < 0 else float(epoch_steps * max_epochs)
    return min(run, limit) if limit is not None else run


def plan_hardware(
    accelerator: str = "auto",
    devices="auto",
    strategy="auto",
    precision=None,
    compile_cache: str | None = "auto",
    num_nodes=1,
    steps_per_execution: int | str = 1,
    compile: fast.CompileSetting = "auto",
    channels_last: fast.CompileSetting = "auto",
    execution_loop: str = "auto",
    matmul_precision: str = "default",
    runtime: str = "auto",
) -> HardwarePlan:
    if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
        raise ConfigError(f"num_nodes={num_nodes!r} must be a whole number of at least 1")
    if steps_per_execution != "auto" and (
        not isinstance(steps_per_execution, int) or isinstance(steps_per_execution, bool) or steps_per_execution < 1
    ):
        raise ConfigError(f"steps_per_execution={steps_per_execution!r} must be a whole number of at least 1, or auto")
    compat.keep_torch_gru()  # a run after one on XLA in this process (a notebook): torch's own nn.GRU
    compat.no_tpu_for_lightning()  # no TPU on the bus: Lightning's banner must not ask the metadata server
    kind = resolve_accelerator(str(accelerator), runtime)
    chosen = resolve_runtime(runtime, kind)
    if chosen != "eager":
        from xla_train.runtime.jax.compat import import_jax_keeping_numpy_rng
        from xla_train.runtime.layers.scan_rnn import default_chunk

        default_chunk()  # a bad XLA_TRAIN_SCAN_CHUNK stops the run here, before its folder is written
        import_jax_keeping_numpy_rng()  # not later, in torch_xla's loader thread, drawing from numpy's RNG
    imports = "imports" if chosen == "torch_xla" else "does not import"
    runtime_note = chosen if runtime != "auto" else f"{chosen} (auto: torch_xla {imports} here)"
    if chosen == "jax":
        from xla_train.runtime.jax.plan import configure_compile_cache as jax_compile_cache
        from xla_train.runtime.jax.plan import plan_jax

        kwargs = plan_jax(
            kind, devices, strategy, precision, num_nodes, steps_per_execution, execution_loop, matmul_precision
        )
        platform = kwargs["strategy"].engine.platform
        cache = jax_compile_cache(compile_cache, platform, default_compile_cache("jax"))
        return HardwarePlan(
            kind,
            kwargs,
            matmul_precision=matmul_precision,
            compile_cache=cache,
            runtime="jax",
            runtime_note=runtime_note,
        )
    loop = resolve_execution_loop(execution_loop, kind)  # from the PJRT device the runtime will use, not yet set
    steps_per_execution, note, pending = resolve_steps_per_execution(steps_per_execution, kind, strategy, loop)
    if steps_per_execution > 1 and (kind in ("cpu", "gpu") or strategy == "xla_mp"):
        where = "strategy=xla_mp" if strategy == "xla_mp" else f"accelerator={kind}"
        raise ConfigError(
            f"steps_per_execution={steps_per_execution} runs K steps as one XLA program (single "
            f"device or SPMD); {where} runs one step at a time, so leave it at 1"
        )
    if kind in ("cpu", "gpu") and matmul_precision != "default":
        raise ConfigError(
            f"matmul_precision={matmul_precision} sets XLA's float32 matmul precision; accelerator="
            f"{kind} computes float32 as asked (precision= chooses bf16 there), so leave it at default"
        )
    if kind in ("cpu", "gpu"):
        if compile_cache and compile_cache not in ("auto", "off"):
            warnings.warn(
                f"compile_cache={compile_cache} has no effect on accelerator={kind}: it caches XLA compilations",
                stacklevel=2,
            )
        if kind == "gpu":
            require_cuda()
        from xla_train.runtime.checkpoint_io import (
            AtomicCheckpointIO,
        )  # Lightning's plugin base: imported only to train

        path = fast.choose(kind, precision, compile, channels_last)
        kwargs = {
            "accelerator": kind,
            "devices": _lightning_devices(kind, devices),
            "plugins": [AtomicCheckpointIO()],
            "precision": path.precision,
        }
        if strategy != "auto":
            kwargs["strategy"] = _lightning_strategy(kind, strategy)
        return HardwarePlan(kind, kwargs, fast_path=path)
    fast.choose(kind, precision, compile, channels_last)  # refuses compile= and channels_last= on XLA
    from xla_train.runtime.backend import xla

    plan = _plan_xla(kind, devices, strategy, precision, compile_cache, num_nodes)  # first: it sets PJRT_DEVICE
    compat.keep_torch_gru()  # torch_xla is imported now
    xla().set_matmul_precision(
        matmul_precision
    )  # before the first trace (the runtime is up, nothing traced); not after
    plan.matmul_precision, plan.runtime_note = matmul_precision, runtime_note
    from xla_train.runtime.grouped_steps import GroupedSteps, Grouping

    strat = plan.trainer_kwargs["strategy"]
    if isinstance(strat, GroupedSteps):  # not xla_mp's, which runs one step at a time
        strat.plan_grouping(Grouping(steps_per_execution, loop, note, pending, execution_loop))
    return plan


def _lightning_devices(kind: str, devices, gpus: int | None = None):
    """devices= for Lightning's own cpu/gpu accelerators, checked here so a bad value is one line, not
    Lightning's TypeError. -1 means all, as in Lightning (and on the XLA paths); on the CPU that is one process.
    `gpus`: the CUDA devices visible (asked of torch when None)."""
    if devices in ("auto", None, -1, "-1"):
        return "auto" if kind == "cpu" or devices in ("auto", None) else -1
    how = (
        "a number of processes of at least 1, or auto"
        if kind == "cpu"
        else "a number of GPUs of at least 1, GPU indices like 0,1 or [0,1], -1 or auto for all"
    )
    chosen = None
    if isinstance(devices, bool):
        pass
    elif isinstance(devices, int) or (isinstance(devices, str) and devices.strip().lstrip("-").isdigit()):
        chosen = int(devices)
        if chosen < 1:
            raise HardwareError(f"devices={chosen} must be at least 1; use {how}")
    elif kind == "gpu":
        indices = devices.split(",") if isinstance(devices, str) else devices

        def index(i) -> bool:
            if isinstance(i, str):
                return i.strip().isdigit()
            return isinstance(i, int) and not isinstance(i, bool) and i >= 0

        if isinstance(indices, (list, tuple)) and indices and all(index(i) for i in indices):
            chosen = [int(i) for i in indices]
    if chosen is None:
        raise HardwareError(f"devices={devices!r} is not a device count; use {how}")
    if kind == "gpu":
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        if (max(chosen) + 1 if isinstance(chosen, list) else chosen) > gpus:
            raise HardwareError(
                f"devices={devices} but this machine has {gpus} CUDA GPU(s); use 1 to {gpus} of "
                f"them (indices 0 to {gpus - 1}), or auto"
            )
    return chosen


def _lightning_strategy(kind: str, strategy):
    """strategy= for the cpu/gpu accelerators: a name Lightning registers (ddp, fsdp, ...) or a Strategy object."""
    if not isinstance(strategy, str):
        return strategy
    from lightning.pytorch.strategies import StrategyRegistry

    names = [n for n in StrategyRegistry.available_strategies() if "xla" not in n and "tpu" not in n]
    if strategy.lower() not in names:
        main = [n for n in names if "find_unused" not in n and "_stage" not in n]  # variants of these
        raise ConfigError(
            f"strategy={strategy!r} cannot run on accelerator={kind}; use auto or one of Lightning's "
            f"strategies: {', '.join(main)} (or their variants, such as ddp_find_unused_parameters_true)"
        )
    return strategy.lower()


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
    must precede any compilation. `auto` (the default) keeps it in default_compile_cache() on a TPU, and nowhere on
    XLA:CPU, which writes that cache but cannot read it back; `off` (or none) keeps none; a path keeps it there.

    On a pod slice every host runs the same command: a path given is usually a shared file system, where host 0
    alone writes and the others only read (they compile what is not there yet, as host 0 does, without writing
    it a second time); auto's folder is each host's own, which each writes. Returns whether this host reads
    only; None where no cache is set up."""
    if not setting or setting == "off":
        return None
    auto = setting == "auto"
    if pjrt_device() == "CPU":
        if not auto:
            warnings.warn(
                f"compile_cache={setting} has no effect on XLA:CPU (torch_xla writes that cache but cannot "
                f"read it back); it is for TPUs",
                stacklevel=3,
            )
        return None
    import torch_xla.runtime as xr

    path = default_compile_cache() if auto else setting
    # the runtime has not started: the process index is the worker id
    readonly = not auto and xla_compat.tpu_worker_index() != 0
    xr.initialize_cache(cache_folder(path, setting), readonly=readonly)
    return readonly


def _plan_xla(kind: str, devices, strategy, precision=None, compile_cache=None, num_nodes=1) -> HardwarePlan:
    from xla_train.runtime.torch_xla.accelerators import PJRTAccelerator, TPUAccelerator
    from xla_train.runtime.devices import configure_pjrt, parse_device_count
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
        cache = default_compile_cache() if compile_cache == "auto" else compile_cache
    if strategy == "xla_mp":
        if num_nodes != 1:
            raise ConfigError("strategy=xla_mp finds a pod's hosts itself; leave num_nodes unset")
        return _plan_xla_multiprocess(kind, requested, plugin)
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
    return HardwarePlan(kind, kwargs, spmd_hosts=topo.process_count, compile_cache=cache)


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
        how = f", or set CPU_NUM_DEVICES={n}" if pjrt_device() == "CPU" else ""
        raise HardwareError(
            f"devices={n} but data parallelism (SPMD) spans every XLA device and this runtime has "
            f"{total}; use devices=auto (all {total}) or devices=1{how}"
        )


def _plan_xla_multiprocess(kind: str, requested: int | None, plugin=None) -> HardwarePlan:
    """strategy=xla_mp: Lightning's XLAStrategy, one process per TPU core. TPU only, and the parent process
    must not start the runtime, which the spawned processes own; Lightning's XLAAccelerator (under
    TracingAccelerator) counts the cores without starting it."""
    from xla_train.runtime.torch_xla.accelerators import TracingAccelerator
    from xla_train.runtime.torch_xla.multiprocess import XLAMultiProcessStrategy

    if os.environ.get("PJRT_DEVICE", "").upper() != "TPU":
        raise HardwareError(
            f"strategy=xla_mp runs one process per TPU core and needs a TPU; on "
            f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE')} its collectives cannot run "
            f"(pytorch/xla#5005): use strategy=spmd, the default"
        )
    if requested == 1:
        raise ConfigError("strategy=xla_mp needs several devices; for one device leave strategy=auto")
    strat = XLAMultiProcessStrategy(accelerator=TracingAccelerator(), precision_plugin=plugin)
    return HardwarePlan(
        kind, {"accelerator": "auto", "strategy": strat, "devices": requested or "auto", "precision": None}
    )
