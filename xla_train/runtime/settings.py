"""The hardware settings of a run, typed, and the plan a runtime makes of them: what runtime/plan.py hands the chosen
runtime's own plan.py, and what the Trainer and the run report are built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xla_train.errors import ConfigError
from xla_train.runtime.grouping import EXECUTION_LOOPS

# Device-resident data (data.on_device): what the splits may take on each device, where every device holds all of
# them (replicated; a batch's rows are gathered where they are needed). 1 GiB is an eighth of the smallest TPU core's
# memory (v2: 8 GiB) and a sixteenth of a v5e chip's, and holds CIFAR-10 and IMDB at maxlen 500 with room to spare.
DEVICE_DATA_MB = 1024
CompileSetting = bool | str  # True, False or "auto"
# Several processes (num_nodes on runtime=jax): how long each waits for the others to join before it ends in one line
# naming the missing ones. JAX's own default: a pod slice's hosts may come up minutes apart.
PROCESS_TIMEOUT_S = 300


@dataclass(frozen=True)
class PlanSettings:
    """What a user sets about the hardware (the trainer's keys and the run settings: docs/commands.md)."""

    accelerator: str = "auto"
    devices: Any = "auto"
    strategy: Any = "auto"
    precision: Any = None
    compile_cache: str | None = "auto"
    num_nodes: Any = 1
    steps_per_execution: int | str = 1
    compile: bool | str = "auto"
    channels_last: bool | str = "auto"
    execution_loop: str = "auto"
    matmul_precision: str = "default"
    runtime: str = "auto"
    scan_chunk: int | None = None  # the scan's time steps per loop iteration; None: the runtime's for its platform
    device_data_mb: float = DEVICE_DATA_MB  # what data.on_device=auto may put on each device
    process_timeout: float = PROCESS_TIMEOUT_S  # several processes: how long each waits for the others to join

    def __post_init__(self) -> None:
        n = self.num_nodes
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"num_nodes={n!r} must be a whole number of at least 1")
        k = self.steps_per_execution
        if k != "auto" and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise ConfigError(f"steps_per_execution={k!r} must be a whole number of at least 1, or auto")
        c = self.scan_chunk
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or c < 1):
            raise ConfigError(f"scan_chunk={c!r} is not a number of time steps (a whole number, 1 or more)")
        if self.execution_loop not in EXECUTION_LOOPS:  # before any runtime starts
            raise ConfigError(f"execution_loop={self.execution_loop!r}; use one of {', '.join(EXECUTION_LOOPS)}")
        object.__setattr__(self, "compile", parse_setting("compile", self.compile))
        object.__setattr__(self, "channels_last", parse_setting("channels_last", self.channels_last))
        t = self.process_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
            raise ConfigError(f"process_timeout={t!r} is not a number of seconds (more than 0)")
        mb = self.device_data_mb
        if isinstance(mb, bool) or not isinstance(mb, (int, float)) or mb < 0:
            raise ConfigError(f"device_data_mb={mb!r} is not a number of megabytes (0 or more)")

    def refuse_eager_knobs(self, kind: str) -> None:
        """compile= and channels_last= are the eager runtime's; a runtime that compiles each step refuses them."""
        for key in ("compile", "channels_last"):
            if getattr(self, key) is True:
                what = "torch.compile (inductor)" if key == "compile" else "a memory format for eager convolutions"
                raise ConfigError(
                    f"{key}=true is {what} for accelerator=cpu or gpu; accelerator={kind} already "
                    f"compiles each step with XLA, so leave {key} unset"
                )


def parse_setting(key: str, value) -> CompileSetting:
    """True, False or "auto" from a key's value (the CLI gives strings, Python bools)."""
    if isinstance(value, bool) or value == "auto":
        return value
    if value is None:
        return "auto"
    lowered = str(value).strip().lower()
    if lowered in ("true", "false", "auto"):
        return {"true": True, "false": False}.get(lowered, "auto")
    raise ConfigError(f"{key}={value!r} is not a setting; use {key}=true, false or auto")


@dataclass
class HardwarePlan:
    """A runtime's answer: the Trainer's hardware arguments and what the run report says of them."""

    kind: str  # the accelerator, resolved: tpu, xla, gpu or cpu
    trainer_kwargs: dict
    runtime: Any  # the registry's Runtime that runs the steps
    backend: Any  # what the rest of the run asks of its devices (runtime/backend.py)
    settings: PlanSettings = field(default_factory=PlanSettings)
    spmd_hosts: int = 1  # hosts that run one SPMD program in lockstep: a device read on one host alone would hang
    fast_path: Any = None  # cpu and gpu: precision, channels_last, torch.compile (runtime/eager/fast_path.py)
    compile_cache: str | None = None  # XLA: the persistent compile cache's folder, where one is read back
    runtime_note: str = ""  # the runtime in the run report's words, and why auto chose it

    @property
    def is_xla(self) -> bool:
        return self.runtime.compiles

    @property
    def matmul_precision(self) -> str | None:
        return self.settings.matmul_precision if self.is_xla else None

    @property
    def resident_data(self) -> tuple[bool, int]:
        """(whether data.on_device=auto puts the data on the device, the budget in bytes): on XLA, where every
        host-side step costs the accelerator time, and a loader cannot overlap as a GPU's can."""
        return self.is_xla, int(self.settings.device_data_mb * 2**20)
