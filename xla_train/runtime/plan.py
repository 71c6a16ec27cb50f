"""From accelerator=/devices=/strategy= and the run settings to the Trainer's hardware: the one place that decides
what runs where, by asking the chosen runtime.

The registry (runtime/registry.py) resolves accelerator= and runtime= once; the runtime's own plan.py builds its
strategy and Trainer arguments from the typed settings (runtime/settings.py). Nothing here knows a runtime's code.
"""

from __future__ import annotations

from xla_train import compat
from xla_train.runtime import probe, registry
from xla_train.runtime.settings import DEVICE_DATA_MB, PROCESS_TIMEOUT_S, CompileSetting, HardwarePlan, PlanSettings


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
    compile: CompileSetting = "auto",
    channels_last: CompileSetting = "auto",
    execution_loop: str = "auto",
    matmul_precision: str = "default",
    runtime: str = "auto",
    scan_chunk: int | None = None,
    device_data_mb: float = DEVICE_DATA_MB,
    process_timeout: float = PROCESS_TIMEOUT_S,
) -> HardwarePlan:
    settings = PlanSettings(
        accelerator=str(accelerator),
        devices=devices,
        strategy=strategy,
        precision=precision,
        compile_cache=compile_cache,
        num_nodes=num_nodes,
        steps_per_execution=steps_per_execution,
        compile=compile,
        channels_last=channels_last,
        execution_loop=execution_loop,
        matmul_precision=matmul_precision,
        runtime=runtime,
        scan_chunk=scan_chunk,
        device_data_mb=device_data_mb,
        process_timeout=process_timeout,
    )
    return plan_settings(settings)


def plan_settings(settings: PlanSettings) -> HardwarePlan:
    compat.keep_torch_gru()  # a run after one on XLA in this process (a notebook): torch's own nn.GRU
    kind = registry.resolve_accelerator(settings.accelerator, settings.runtime)
    chosen = registry.resolve_runtime(settings.runtime, kind)
    compat.no_tpu_for_lightning(probe.tpu_chips())  # no TPU: Lightning's banner must not ask the metadata server
    note = chosen.name if settings.runtime != "auto" or not chosen.compiles else f"{chosen.name} ({why_auto(kind)})"
    return chosen.module("plan").plan(kind, settings, chosen, note)


def why_auto(kind: str) -> str:
    """What runtime=auto went by, in the run report's words."""
    platform = probe.xla_platform(kind)
    names = " and ".join(r.name for r in registry.installed()) or "none"
    return f"auto: a {platform.upper()}, with {names} installed here"
