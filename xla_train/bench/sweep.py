"""`bench` (the sweep): a grid of cells for a recipe, one process each, into a table and charts.

    python -m xla_train bench recipe=cifar10 accelerators=cpu,xla batch_sizes=32,128,512,1024 steps=20

Each cell runs in its own process (bench/cell.py); this one never starts an XLA runtime, since on a TPU
only one process at a time may hold the chips and every cell needs them. rounds>1 reverses the order each
round and pools the steps, so a slow spell falls on every cell; a failed cell is a row with its error
(docs/results.md, "How the benchmarks time"). Its table is bench/sweep_table.py's, its presets bench/presets.py.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Literal, Optional, Union

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from xla_train.bench import report
from xla_train.bench.cell import run_cell
from xla_train.bench.data import train_size
from xla_train.bench.sweep_table import write_sweep
from xla_train.config.build import build_parts
from xla_train.data.base import check_batch_size
from xla_train.errors import ConfigError
from xla_train.runtime.backend import Accelerator
from xla_train.runtime.registry import require_local_processes, run_backend, runtime_names
from xla_train.runtime.probe import own_accelerator, require_available

DeviceCount = Union[PositiveInt, Literal["auto"]]
Data = Literal["synthetic", "real"]
Setting = Union[bool, Literal["auto"]]
Loop = Literal["auto", "unroll", "while"]
Runtime = Literal[runtime_names()]
StepsSetting = Union[PositiveInt, Literal["auto"]]  # auto: what fit would choose for the recipe, batch and device


def check_accelerators(accelerators: list[str] | None) -> list[str]:
    """The accelerators asked for, each checked before any cell starts; by default cpu and this machine's own."""
    if not accelerators:
        return ["cpu", own_accelerator()]
    if len(set(accelerators)) != len(accelerators):
        raise ConfigError(f"accelerators={','.join(accelerators)} repeats an accelerator")
    for a in accelerators:
        require_available(a, f"accelerators= includes {a}")
    return accelerators


def check_processes(processes: list[int], devices: list, accelerators: list[str], runtimes: list[str]) -> None:
    """Cells of several processes: every runtime one that runs a program over several processes of this machine's
    CPU, and each device count one that every process count divides (each process brings the same number)."""
    for n in sorted(set(processes) - {1}):
        for a, rt in itertools.product(accelerators, runtimes):
            require_local_processes(n, a, rt)
        for d in devices:
            if d == "auto" or d % n:
                raise ConfigError(
                    f"processes={n} does not divide devices={d}: every process brings as many devices; use "
                    f"devices={2 * n} ({n} processes of 2) or another multiple of {n}"
                )


def run_rounds(cells: dict[str, dict], run_dir: Path, rounds: int, timeout: float, note=print) -> dict[str, dict]:
    """{name: result} for each cell spec, run `rounds` times in alternating order, steps of all rounds pooled."""
    runs: dict[str, list[dict]] = {name: [] for name in cells}
    for r in range(rounds):
        for name in list(cells) if r % 2 == 0 else list(cells)[::-1]:
            res = run_cell(cells[name], run_dir / "cells" / (name + (f"-round{r}" if rounds > 1 else "")), timeout)
            runs[name].append(res)
            note(f"{name}: " + (f"{res['step_ms']:.1f} ms/step" if "step_ms" in res else f"failed: {res['error']}"))
    out = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            out[name] = results[0]
            continue
        pooled = [t for r in ok for t in r["step_times_ms"]]
        out[name] = {
            **ok[0],
            "step_ms": statistics.median(pooled),
            "step_ms_mean": statistics.fmean(pooled),
            "step_times_ms": pooled,
            "rounds": len(ok),
            "first_step_s": statistics.median(r["first_step_s"] for r in ok),
            "samples_per_s": ok[0]["global_batch"] / (statistics.median(pooled) / 1e3),
            **split_medians(ok),
        }
    return out


def split_medians(results: list[dict]) -> dict:
    """Host and device ms per step over the split steps of every round (bench/timing.py)."""
    host = [t for r in results for t in r.get("host_times_ms") or []]
    device = [t for r in results for t in r.get("device_times_ms") or []]
    if not host:
        return {}
    h, d = statistics.median(host), statistics.median(device)
    cpu = [t for r in results for t in r.get("host_cpu_times_ms") or []]
    return {
        "host_ms_per_step": h,
        "device_ms_per_step": d,
        "host_bound": h >= d,
        **({"host_cpu_ms_per_step": statistics.median(cpu)} if cpu else {}),
    }


def sweep(
    recipe: str,
    accelerators: Optional[list[Accelerator]] = None,
    runtimes: list[Runtime] = ["auto"],
    scan_chunk: Optional[PositiveInt] = None,
    batch_sizes: list[PositiveInt] = [32, 128, 512, 1024],
    devices: list[DeviceCount] = [1],
    processes: list[PositiveInt] = [1],
    progress_every: list[NonNegativeInt] = [0],
    steps_per_execution: list[StepsSetting] = ["auto"],
    execution_loop: list[Loop] = ["auto"],
    on_device: Optional[list[Setting]] = None,
    steps: PositiveInt = 20,
    warmup: PositiveInt = 3,
    rounds: PositiveInt = 1,
    precision: Optional[list[Union[int, str]]] = None,
    compile: list[Setting] = ["auto"],
    channels_last: list[Setting] = ["auto"],
    data: Data = "synthetic",
    chart_batch: Optional[PositiveInt] = None,
    timeout: PositiveFloat = 1800.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    grid: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    """Every accelerator (x runtime on XLA) x devices (x processes they are split between) x batch size (x live-bar
    refresh, x steps per execution on XLA, x precision, x compile and channels_last on cpu/gpu, x any recipe key in
    `grid`) of a recipe. on_device= (data.on_device) and execution_loop= (for steps_per_execution > 1) are lists like
    the rest."""
    from tqdm import tqdm

    accelerators = check_accelerators(accelerators)
    check_processes(processes, devices, accelerators, runtimes)
    for b in batch_sizes:
        check_batch_size(b)
    overrides, grid = dict(overrides or {}), dict(grid or {})
    if on_device is not None:
        grid["on_device"] = [str(v).lower() for v in on_device]
    _, dm = build_parts(recipe, {**overrides, **{k: str(v[0]) for k, v in grid.items()}})  # bad keys fail here
    n_train, source = train_size(dm)
    run_dir = report.new_run_dir(runs_dir)
    cells = {}
    for a, rt, d, n, b, p, k, loop, prec, comp, cl, *values in itertools.product(
        accelerators,
        runtimes,
        devices,
        processes,
        batch_sizes,
        progress_every,
        steps_per_execution,
        execution_loop,
        precision or [None],
        compile,
        channels_last,
        *grid.values(),
    ):
        backend = run_backend(a, rt)  # accelerator=gpu runs eager, or XLA where runtime=jax
        rt = rt if backend.groups_steps else "auto"  # eager: one cell, whatever runtimes= lists (a name repeats)
        d = 1 if backend.runs_on_host else d
        k = k if backend.groups_steps else 1  # K steps as one program; auto is decided in the cell, as fit does
        loop = "auto" if k == 1 else loop
        comp, cl = ("auto", "auto") if backend.compiles_steps else (comp, cl)  # it compiles the step itself
        keys = dict(zip(grid, map(str, values)))
        name = (
            f"{a}"
            + (f"-{rt}" if rt != "auto" else "")
            + f"-d{d}"
            + (f"-p{n}" if n > 1 else "")
            + f"-b{b}"
            + (f"-k{k}" if k != 1 else "")
            + (f"-{loop}" if loop != "auto" else "")
            + (f"-p{p}" if p else "")
            + (f"-{prec}" if prec else "")
            + _flag("compile", comp)
            + _flag("cl", cl)
            + "".join(f"-{n}{v}" for n, v in keys.items())
        )
        cells[name] = {
            "recipe": recipe,
            "overrides": {**overrides, **keys},
            "accelerator": a,
            "runtime": rt,
            "devices": d,
            "processes": n,
            "batch": b,
            "progress_every": p,
            "steps_per_execution": k,
            "execution_loop": loop,
            "scan_chunk_set": scan_chunk,
            "precision": prec,
            "compile": comp,
            "channels_last": cl,
            "warmup": warmup,
            "steps": steps,
            "data": data,
            "train_size": n_train,  # with the recipe's epochs, the run that steps_per_execution=auto is chosen for
            **keys,
        }
    bar = tqdm(total=len(cells) * rounds, desc="bench", unit="cell", disable=None)
    results = run_rounds(cells, run_dir, rounds, timeout, note=lambda line: (bar.update(), bar.write(line)))
    bar.close()
    rows = []
    for name, spec in cells.items():
        row = {**{k: v for k, v in spec.items() if k != "overrides"}, "train_size_source": source, **results[name]}
        row.setdefault("global_batch", spec["batch"] * spec["devices"] if isinstance(spec["devices"], int) else None)
        row["train_size"] = n_train
        if isinstance(row.get("on_device"), str):  # a cell that failed before deciding: the setting asked for
            row["on_device"] = {"true": True, "false": False}.get(row["on_device"], row["on_device"])
        if row.get("step_ms") is not None and row.get("global_batch"):
            row["steps_per_epoch"] = n_train // row["global_batch"]  # training drops each epoch's partial batch
            row["epoch_s"] = row["steps_per_epoch"] * row["step_ms"] / 1e3
        rows.append(row)
    write_sweep(run_dir, rows, locals(), n_train, source, list(grid))
    return (0 if any(r.get("step_ms") is not None for r in rows) else 1), run_dir


def _flag(name: str, value) -> str:
    """A cell name's part for a cpu/gpu knob: nothing for auto, -NAME for on, -noNAME for off."""
    return "" if value == "auto" else f"-{name}" if value else f"-no{name}"
