"""accelerator=cpu|gpu: plain Lightning (its DDP across nodes), with what runtime/eager/fast_path.py picks for the
hardware; every choice writes checkpoints through the same atomic writer (docs/hardware.md, "Each accelerator")."""

from __future__ import annotations

import warnings

from xla_train.errors import ConfigError
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.eager import fast_path as fast
from xla_train.runtime.eager.backend import backend_for
from xla_train.runtime.eager.devices import lightning_devices
from xla_train.runtime.eager.strategy import lightning_strategy
from xla_train.runtime.probe import require_cuda
from xla_train.runtime.settings import HardwarePlan, PlanSettings


def plan(kind: str, settings: PlanSettings, runtime, note: str = "") -> HardwarePlan:
    if settings.steps_per_execution not in (1, "auto"):
        raise ConfigError(
            f"steps_per_execution={settings.steps_per_execution} runs K steps as one XLA program (single "
            f"device or SPMD); accelerator={kind} runs one step at a time, so leave it at 1"
        )
    if settings.matmul_precision != "default":
        raise ConfigError(
            f"matmul_precision={settings.matmul_precision} sets XLA's float32 matmul precision; accelerator="
            f"{kind} computes float32 as asked (precision= chooses bf16 there), so leave it at default"
        )
    cache = settings.compile_cache
    if cache and cache not in ("auto", "off"):
        warnings.warn(
            f"compile_cache={cache} has no effect on accelerator={kind}: it caches XLA compilations", stacklevel=3
        )
    if kind == "gpu":
        require_cuda()
    path = fast.choose(kind, settings.precision, settings.compile, settings.channels_last)
    kwargs = {
        "accelerator": kind,
        "devices": lightning_devices(kind, settings.devices),
        "plugins": [AtomicCheckpointIO()],
        "precision": path.precision,
    }
    if settings.strategy != "auto":
        kwargs["strategy"] = lightning_strategy(kind, settings.strategy)
    return HardwarePlan(kind, kwargs, runtime, backend_for(kind), settings, fast_path=path, runtime_note=note)
