"""bench replicas, lstm and pipeline: the sweep (bench/sweep.py) with a question's own defaults. Each key is
named as the sweep names it, so the command line reads a preset's keys from its signature as it does the sweep's.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from xla_train.bench.sweep import Data, DeviceCount, Runtime, sweep
from xla_train.runtime.backend import Accelerator


def _preset(arguments: dict, **fixed) -> tuple[int, Path]:
    """sweep() with a preset's arguments (each named as sweep names it) and what the preset fixes."""
    takes = inspect.signature(sweep).parameters
    return sweep(**{k: v for k, v in arguments.items() if k in takes}, **fixed)


def replicas(
    recipe: str = "quickstart",
    devices: Optional[list[DeviceCount]] = None,
    processes: PositiveInt = 1,
    runtimes: list[Runtime] = ["auto"],
    batch_sizes: list[PositiveInt] = [16],
    steps: PositiveInt = 10,
    warmup: PositiveInt = 3,
    data: Data = "synthetic",
    timeout: PositiveFloat = 1800.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    """One against n XLA devices (SPMD), at one per-device batch: the cost of the partitioned program (devices 1
    and 8 by default). processes=N: each device count in one process against N processes of a share each (8 by
    default), on runtime=jax, which the bench starts on this machine's CPU: the cost of crossing processes."""
    arguments = {**locals(), "devices": devices or ([1, 8] if processes == 1 else [8])}
    return _preset({**arguments, "processes": sorted({1, processes})}, accelerators=["xla"])


def lstm(
    recipe: str = "imdb",
    maxlens: list[PositiveInt] = [100, 200, 500],
    accelerators: list[Accelerator] = ["xla"],
    runtimes: list[Runtime] = ["auto"],
    scan_chunk: Optional[PositiveInt] = None,
    batch_sizes: list[PositiveInt] = [128],
    steps: PositiveInt = 10,
    warmup: PositiveInt = 3,
    timeout: PositiveFloat = 1800.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    """The LSTM at each sequence length: on XLA the scan's compile time stays flat as maxlen grows."""
    return _preset(locals(), grid={"maxlen": maxlens})


def pipeline(
    recipe: str = "quickstart",
    progress_every: list[NonNegativeInt] = [0, 10],
    accelerators: list[Accelerator] = ["xla"],
    batch_sizes: list[PositiveInt] = [32],
    steps: PositiveInt = 30,
    warmup: PositiveInt = 3,
    rounds: PositiveInt = 2,
    timeout: PositiveFloat = 900.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    """Training with the live progress bar off and on: its host syncs and what they cost per step."""
    return _preset(locals())
