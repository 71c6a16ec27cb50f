"""runtime=jax: from accelerator=/devices=/strategy= to the Trainer's arguments, as runtime/torch_xla/plan.py decides
them for torch_xla. One process drives every device of the host through one program (as SPMD does on torch_xla), and
num_nodes processes (a pod slice's hosts) run that program over all of their devices (runtime/jax/multihost.py); K
steps are one program, unrolled on the CPU (whose loop runs a conv net's step many times slower) and a loop elsewhere."""

from __future__ import annotations

from xla_train.errors import ConfigError, HardwareError
from xla_train.runtime.cache_folder import cache_folder, default_compile_cache
from xla_train.runtime.grouping import GroupingSettings
from xla_train.runtime.hosts import HostTopology
from xla_train.runtime.probe import platform_named
from xla_train.runtime.settings import HardwarePlan, PlanSettings

PRECISIONS = ("32", "32-true", "bf16", "bf16-mixed")


def configure_compile_cache(setting: str | None, platform: str, default: str) -> str | None:
    """JAX's persistent compile cache, as torch_xla's on a TPU: a later run reads its programs back instead of
    compiling them. `auto` keeps it in `default` (this machine's own cache folder) on a TPU or a GPU, where a step's
    programs take long to compile, and nowhere on the CPU; a folder keeps it there on any platform (JAX reads it back
    on the CPU too); `off` keeps none. JAX caches a program whose compile took at least a second
    (`jax_persistent_cache_min_compile_time_secs`). Set before the run compiles anything. The folder, like any
    compile cache, holds programs this machine will run, so it stays the user's own. Returns the folder, or None."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = None
    if setting and setting != "off" and not (setting == "auto" and platform == "cpu"):
        path = cache_folder(default if setting == "auto" else setting, setting)
    if jax.config.jax_compilation_cache_dir != path:  # an earlier run in this process (a notebook) kept another
        compilation_cache.reset_cache()
        compilation_cache.set_cache_dir(path)
    return path


def plan(kind: str, settings: PlanSettings, runtime, note: str = "") -> HardwarePlan:
    from xla_train.runtime.jax.devices import jax_devices
    from xla_train.runtime.jax.multihost import join
    from xla_train.runtime.jax.strategy import JaxStrategy

    s = settings
    s.refuse_eager_knobs(kind)
    if s.strategy not in ("auto", "spmd"):
        raise ConfigError(f"strategy={s.strategy!r} on runtime=jax; leave it at auto (one program drives every device)")
    p = str(s.precision) if s.precision is not None else "32"
    if p not in PRECISIONS:
        raise ConfigError(f"precision={p!r} is not for runtime=jax; use precision=32 or precision=bf16")
    joined = join(s.num_nodes, s.process_timeout)  # before JAX starts a backend
    found = jax_devices(kind, s.devices)  # this process's
    topology, mesh = processes_of(found, joined, s.num_nodes, s.devices)
    platform = platform_named(found[0].platform)
    grouping = GroupingSettings(s.steps_per_execution, s.execution_loop)
    strat = JaxStrategy(mesh, precision=p, matmul_precision=s.matmul_precision, topology=topology)
    strat.plan_grouping(grouping, platform == "cpu", s.scan_chunk)  # and hands its engine the loop
    cache = configure_compile_cache(s.compile_cache, platform, default_compile_cache("jax_compile_cache"))
    kwargs = {
        "accelerator": "auto",
        "strategy": strat,
        "devices": len(found),
        "precision": None,
        "num_nodes": topology.process_count,
    }
    return HardwarePlan(
        kind,
        kwargs,
        runtime,
        strat.backend,
        s,
        spmd_hosts=topology.process_count,
        compile_cache=cache,
        runtime_note=note,
    )


def processes_of(found: list, joined: bool, num_nodes: int, devices) -> tuple:
    """This process's place among the processes, and the devices of the program's mesh: with several processes,
    every device of every process, in process order, so that each process's rows of a global batch are its slice of
    it. The mesh spans every device, so each process brings all of its own."""
    import jax

    from xla_train.runtime.jax.multihost import topology

    if not joined:
        return HostTopology(0, 1, len(found), len(found)), found
    topo = topology(num_nodes)
    if len(found) != topo.local_devices:
        raise HardwareError(
            f"devices={devices} but one program over several processes spans every device, and this process has "
            f"{topo.local_devices}; use devices=auto"
        )
    if topo.global_devices != topo.local_devices * topo.process_count:
        raise HardwareError(
            f"this process has {topo.local_devices} device(s) but the {topo.process_count} processes have "
            f"{topo.global_devices} in all; data parallelism needs the same number in every process"
        )
    return topo, sorted(jax.devices(found[0].platform), key=lambda d: (d.process_index, d.id))
