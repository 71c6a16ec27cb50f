"""runtime=jax: from accelerator=/devices=/strategy= to the Trainer's arguments, as runtime/torch_xla/plan.py decides
them for torch_xla. One process drives every device of the host through one program (as SPMD does on torch_xla); K steps
are one program, unrolled on the CPU (whose loop runs a conv net's step many times slower) and a loop elsewhere."""

from __future__ import annotations

from xla_train.errors import ConfigError, HardwareError
from xla_train.runtime.cache_folder import cache_folder, default_compile_cache
from xla_train.runtime.grouping import GroupingSettings
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
    from xla_train.runtime.jax.strategy import JaxStrategy

    s = settings
    s.refuse_eager_knobs(kind)
    if s.strategy not in ("auto", "spmd"):
        raise ConfigError(f"strategy={s.strategy!r} on runtime=jax; leave it at auto (one program drives every device)")
    if s.num_nodes != 1:
        raise HardwareError("runtime=jax runs on one host here; leave num_nodes unset")
    p = str(s.precision) if s.precision is not None else "32"
    if p not in PRECISIONS:
        raise ConfigError(f"precision={p!r} is not for runtime=jax; use precision=32 or precision=bf16")
    found = jax_devices(kind, s.devices)
    platform = platform_named(found[0].platform)
    grouping = GroupingSettings(s.steps_per_execution, s.execution_loop)
    strat = JaxStrategy(found, precision=p, matmul_precision=s.matmul_precision)
    strat.plan_grouping(grouping, platform == "cpu", s.scan_chunk)  # and hands its engine the loop
    cache = configure_compile_cache(s.compile_cache, platform, default_compile_cache("jax_compile_cache"))
    kwargs = {"accelerator": "auto", "strategy": strat, "devices": len(found), "precision": None}
    return HardwarePlan(kind, kwargs, runtime, strat.backend, s, compile_cache=cache, runtime_note=note)
