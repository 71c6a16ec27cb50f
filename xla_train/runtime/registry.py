"""Names resolved once: runtime=, accelerator= and a device's type, into the objects the rest of a run holds.

Each runtime is a folder of runtime/ with the same file names for the same jobs (plan, backend, devices, strategy,
engine, compat), entered here once under its name, as Keras 3's backends and Lightning's strategy registry are;
nothing downstream compares a runtime's name. `auto` is decided here, from what is installed and the platform the
probe finds (docs/hardware.md, "Runtimes"). The folders are imported only when a run needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from xla_train.errors import ConfigError
from xla_train.runtime import probe
from xla_train.runtime.probe import PLATFORMS, platform_named  # noqa: F401 (the registry's names)

ACCELERATORS = ("auto", "tpu", "xla", "gpu", "cpu")


@dataclass(frozen=True)
class Runtime:
    """One runtime's entry: its folder, what it needs installed and where it runs."""

    name: str  # as runtime= names it
    package: str  # its folder, with plan.py, backend.py, devices.py, strategy.py, compat.py
    extra: str  # the pip extra that installs it ("" for what every install has)
    platforms: tuple[str, ...]  # where it runs (PLATFORMS)
    tpu_build: str = ""  # the libtpu release its TPU extra pins: on a TPU, the installed libtpu says whose it is
    compiles: bool = True  # whether it runs the steps as XLA programs (the eager runtime does not)
    device_types: tuple[str, ...] = field(default=())  # torch device types its backends answer for
    # whether one program runs over several processes of one machine's CPU (a pod slice in miniature): JAX's
    # multi-controller runtime can, over gloo; torch_xla's XLA:CPU cannot run collectives between processes
    local_processes: bool = False

    def module(self, name: str):
        """Its file `name` (plan, backend, devices, strategy, ...), imported now."""
        return importlib.import_module(f"{self.package}.{name}")

    def missing(self) -> str | None:
        """Why it cannot run here (not installed, or broken), in a few words; None where it can. Asks its own
        devices.py, which knows what to import and checks it without starting anything."""
        return self.module("devices").missing()

    def require(self) -> None:
        """One line naming the extra to install, where it cannot run here."""
        why = self.missing()
        if why is not None:
            how = "" if "pip install" in why else f": pip install 'xla_train[{self.extra}]'"  # a fix of its own
            raise ConfigError(f"runtime={self.name} {why}{how}")

    def __str__(self) -> str:
        return self.name


RUNTIMES: dict[str, Runtime] = {}  # the XLA runtimes runtime= names, in the order `devices` lists them
EAGER = Runtime("eager", "xla_train.runtime.eager", "", ("cpu", "gpu"), compiles=False, device_types=("cpu", "cuda"))


def register(runtime: Runtime) -> Runtime:
    """Enter a runtime under its name (a new one: docs/layout.md, "Adding a runtime")."""
    RUNTIMES[runtime.name] = runtime
    return runtime


def unregister(name: str) -> None:
    RUNTIMES.pop(name, None)


register(
    Runtime(
        "torch_xla",
        "xla_train.runtime.torch_xla",
        "torch-xla",
        ("cpu", "tpu"),
        tpu_build="0.0.21",
        device_types=("xla",),
    )
)
register(
    Runtime(
        "jax",
        "xla_train.runtime.jax",
        "jax",
        ("cpu", "gpu", "tpu"),
        tpu_build="0.0.42",
        device_types=("jax",),
        local_processes=True,
    )
)


def runtime_names() -> tuple[str, ...]:
    """What runtime= takes."""
    return ("auto", *RUNTIMES)


def installed() -> list[Runtime]:
    """The registered runtimes that can run here, in the registry's order."""
    return [r for r in RUNTIMES.values() if r.missing() is None]


def libtpu_release() -> str | None:
    """The installed libtpu's release (a TPU build of either runtime brings one), or None."""
    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return None


def choose_auto(platform: str, runtimes: Sequence[Runtime], libtpu: str | None = None) -> Runtime | None:
    """runtime=auto's rule, on what is installed: on a TPU the runtime whose TPU build is there (the libtpu release
    its extra pins; one environment cannot hold both), on a GPU JAX (torch_xla 2.9 has no GPU build), on the CPU the
    first registered, torch_xla, where installed, else the next. None where none of them runs there."""
    fits = [r for r in runtimes if platform in r.platforms]
    if platform == "tpu" and libtpu is not None:
        own = [r for r in fits if r.tpu_build and libtpu.startswith(r.tpu_build)]
        fits = own or fits
    return fits[0] if fits else None


def resolve_runtime(setting: str, accelerator: str, platform: Callable[[], str] | None = None) -> Runtime:
    """The runtime a run of accelerator= (resolved: tpu, xla, gpu or cpu) takes for runtime=`setting`: the eager one
    on accelerator=cpu, and on accelerator=gpu unless an XLA runtime is named; on XLA, auto's rule (choose_auto)."""
    if setting not in runtime_names():
        raise ConfigError(f"runtime={setting!r} is not known; use one of {', '.join(runtime_names())}")
    if accelerator == "cpu" or (accelerator == "gpu" and setting == "auto"):
        return EAGER  # eager PyTorch, CUDA's own on a GPU; XLA there is asked for by name (runtime=jax)
    if setting != "auto":
        runtime = RUNTIMES[setting]
        where = probe.xla_platform(accelerator) if platform is None else platform()
        if where not in runtime.platforms:
            raise ConfigError(
                f"runtime={setting} does not run on a {where.upper()} (it runs on {', '.join(runtime.platforms)}); "
                f"use runtime=auto"
            )
        runtime.require()
        return runtime
    where = probe.xla_platform(accelerator) if platform is None else platform()
    chosen = choose_auto(where, installed(), libtpu_release())
    if chosen is None:
        names = " or ".join(f"'xla_train[{r.extra}]'" for r in RUNTIMES.values() if where in r.platforms)
        raise ConfigError(
            f"accelerator={accelerator} needs an XLA runtime and none is installed here: pip install {names}"
        )
    return chosen


def resolve_accelerator(accelerator: str, runtime: str = "auto") -> str:
    """The accelerator itself, or for `auto` a TPU if the PCI bus has one, else XLA on this CPU where runtime= names
    an XLA runtime, else a CUDA GPU, else the CPU (eager)."""
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"accelerator={accelerator!r} is not known; use one of {', '.join(ACCELERATORS)}")
    if accelerator != "auto":
        if accelerator == "cpu" and runtime in RUNTIMES:
            raise ConfigError(
                f"runtime={runtime} runs XLA, and accelerator=cpu is eager PyTorch without it; use accelerator=xla "
                f"(XLA on this CPU) or auto, or leave runtime=auto"
            )
        if accelerator == "gpu" and runtime in RUNTIMES and "gpu" not in RUNTIMES[runtime].platforms:
            others = [r.name for r in RUNTIMES.values() if "gpu" in r.platforms]
            raise ConfigError(
                f"runtime={runtime} has no GPU build; use runtime={' or '.join(others)} for XLA on the GPU, "
                f"or leave runtime=auto"
            )
        return accelerator
    if probe.tpu_chips():
        return "tpu"
    if probe.emulating_tpu() or runtime in RUNTIMES and "gpu" not in RUNTIMES[runtime].platforms:
        return "xla"  # XLA:CPU plays the TPU, or the runtime named has no GPU build
    if probe.cuda_available():
        return "gpu"
    return "xla" if runtime in RUNTIMES else "cpu"


def require_local_processes(n: int, accelerator: str, setting: str) -> None:
    """One line where accelerator= on runtime=`setting` cannot run one program over n processes of this machine's
    CPU, as a benchmark's cell of several processes does (a pod slice in miniature)."""
    kind = resolve_accelerator(accelerator, setting)
    runtime = resolve_runtime(setting, kind)
    if not runtime.local_processes:
        named = f"runtime={setting}" + (f" ({runtime.name} here)" if setting != runtime.name else "")
        raise ConfigError(
            f"processes={n} runs one program over {n} processes of this machine's CPU, which {named} cannot on "
            f"accelerator={accelerator}; use runtimes=jax"
        )
    where = probe.xla_platform(kind)
    if where != "cpu":
        raise ConfigError(
            f"processes={n} splits this machine's XLA:CPU devices between processes, and accelerator={accelerator} "
            f"runs on its {where.upper()}; a pod's processes are its hosts (docs/scaling.md)"
        )


def backend_for(accelerator: str, runtime: Runtime | None = None):
    """The Backend a run of accelerator= on `runtime` trains on, known before any runtime starts (a benchmark cell's);
    runtime None: the one runtime=auto takes for it."""
    if accelerator == "auto":
        accelerator = resolve_accelerator("auto")
    if runtime is None:
        runtime = resolve_runtime("auto", accelerator)
    return runtime.module("backend").backend_for(accelerator)


def run_backend(accelerator: str, runtime: str = "auto"):
    """The Backend a run of accelerator= on runtime= (a name) trains on."""
    kind = resolve_accelerator(accelerator, runtime)
    return backend_for(kind, resolve_runtime(runtime, kind))


def backend_of(device):
    """The Backend of a torch device (or its type's name), asked of the runtime that owns that device type."""
    import torch

    kind = torch.device(device).type
    for runtime in (EAGER, *RUNTIMES.values()):
        if kind in runtime.device_types:
            return runtime.module("backend").backend_of(kind)
    raise ConfigError(f"no runtime answers for torch device type {kind!r}")


def backend_of_strategy(strategy):
    """The Backend a Trainer's strategy trains on: its own where it holds one (the XLA runtimes' strategies), else
    its root device's (Lightning's own strategies, on the eager runtime)."""
    own = getattr(strategy, "backend", None)
    return own if own is not None else backend_of(strategy.root_device)


def runtime_started() -> bool:
    """Whether this process has started an XLA runtime that holds its devices (on a TPU, its chips). Each runtime's
    started() looks in sys.modules first, so asking imports no runtime."""
    return any(r.module("devices").started() for r in RUNTIMES.values())
