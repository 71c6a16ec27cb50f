"""`bench` (the sweep) and its presets: a grid of cells for a recipe, one process each, into a table and charts.

    python -m xla_train bench recipe=cifar10 accelerators=cpu,xla batch_sizes=32,128,512,1024 steps=20

Each cell runs in its own process (bench/timing.py); this one never starts an XLA runtime, since on a TPU
only one process at a time may hold the chips and every cell needs them. rounds>1 reverses the order each
round and pools the steps, so a slow spell falls on every cell; a failed cell is a row with its error
(docs/results.md, "How the benchmarks time").
"""

from __future__ import annotations

import inspect

import itertools
import statistics
from pathlib import Path
from typing import Literal, Optional, Union

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from xla_train.bench import charts, report
from xla_train.bench.data import train_size
from xla_train.bench.timing import run_cell
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
FAST_KEYS = ("precision", "compile", "channels_last")  # runtime/eager/fast_path.py's knobs, on cpu and gpu
COLUMNS = [
    "recipe",
    "accelerator",
    "runtime",
    "device",
    "devices",
    "processes",
    "batch",
    "global_batch",
    "steps_per_execution",
    "steps_per_execution_used",
    "execution_loop",
    "execution_loop_used",
    "scan_chunk",
    "traced_once",
    "on_device",
    "matmul_precision",
    "progress_every",
    "data",
    "precision",
    "compile",
    "channels_last",
    "warmup",
    "steps",
    "rounds",
    "first_step_s",
    "compile_s",
    "compiles",
    "timed_compiles",
    "timed_host_syncs",
    "step_ms",
    "step_ms_mean",
    "host_ms_per_step",
    "host_cpu_ms_per_step",
    "device_ms_per_step",
    "host_bound",
    "split_steps",
    "samples_per_s",
    "train_size",
    "train_size_source",
    "steps_per_epoch",
    "epoch_s",
    "host_peak_mb",
    "device_peak_mb",
    "threads",
    "error",
]
HEADERS = [
    "accelerator",
    "device",
    "batch",
    "first step s",
    "compile s",
    "compiles",
    "step ms",
    "host ms",
    "device ms",
    "samples/s",
    "epoch s",
    "host MB",
    "device MB",
    "note",
]


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


def table_row(r: dict, grid: list[str]) -> list:
    fmt = report.fmt
    note = r.get("error") or "; ".join(
        filter(
            None,
            [
                "recompiled while timed: more warmup=?" if r.get("timed_compiles") else "",
                "host-bound" if r.get("host_bound") else "",
            ],
        )
    )
    own = ("steps_per_execution", "execution_loop", "progress_every")
    extra = [shown_setting(r, k) for k in own if k in grid]
    return [
        r["accelerator"],
        r.get("device", "-"),
        r.get("global_batch", "-"),
        *extra,
        *(r.get(k) for k in grid if k not in own),
        fmt(r.get("first_step_s"), 2),
        fmt(r.get("compile_s"), 1),
        fmt(r.get("compiles")),
        fmt(r.get("step_ms"), 1),
        fmt(r.get("host_ms_per_step"), 1),
        fmt(r.get("device_ms_per_step"), 1),
        fmt(r.get("samples_per_s")),
        fmt(r.get("epoch_s")),
        fmt(r.get("host_peak_mb"), 0),
        device_mb(r),
        note,
    ]


def shown_setting(r: dict, key: str) -> str:
    """A grid cell: the setting, and what it resolved to in the cell where it was auto (`8 (auto)`)."""
    setting, used = r.get(key), r.get(f"{key}_used")
    if setting == "auto" and used is not None:
        return f"{used} (auto)"
    return str(setting) if setting not in (None, "") else "-"


def device_mb(r: dict) -> str:
    """The peak device memory cell: blank only where nothing ran; where the runtime reads none, why."""
    if r.get("device_peak_mb") is not None:
        return report.fmt(r["device_peak_mb"], 0)
    if r.get("error") or not r.get("device"):
        return "-"
    return run_backend(r["accelerator"], r.get("runtime") or "auto").no_peak_memory(r.get("devices") or 1, r["device"])


def write_sweep(run_dir: Path, rows: list[dict], opts: dict, n_train: int, source: str, grid: list[str]) -> None:
    grouped = any((r.get("steps_per_execution_used") or 1) > 1 for r in rows)
    for key in ("progress_every", "execution_loop", "steps_per_execution"):
        if len(opts[key]) > 1 or (key != "progress_every" and (opts[key] != ["auto"] or grouped)):
            grid = [key, *grid]
    grid += [key for key in FAST_KEYS if len(opts[key] or []) > 1]
    if opts["runtimes"] != ["auto"]:
        grid = [*grid, "runtime"]
    if opts["processes"] != [1]:
        grid = [*grid, "processes"]
    names = {"progress_every": "bar every", "steps_per_execution": "steps/execution", "execution_loop": "loop"}
    headers = HEADERS[:3] + [names.get(k, k) for k in grid] + HEADERS[3:]
    prov = report.provenance(opts["command"], sorted({r["device"] for r in rows if r.get("device")}))
    table = [table_row(r, grid) for r in rows]
    data = sorted({r["data"] for r in rows if r.get("data")})
    notes = [
        f"recipe {opts['recipe']}"
        + "".join(f", {k}={v}" for k, v in opts["overrides"].items())
        + (f", precision {opts['precision'][0]}" if len(opts["precision"] or []) == 1 else ""),
        f"step ms: median of {opts['steps']} timed steps after {opts['warmup']} warm-up steps"
        + (f", x {opts['rounds']} rounds in alternating order" if opts["rounds"] > 1 else "")
        + f", pipelined as in training; samples/s = batch / step; epoch s = {n_train:,} training samples "
        f"({source}) // batch x step",
        "first step: the first training step to the end of its execution (on XLA: trace + compile + run; "
        "with compile: torch.compile's forward, and its backward, which compiles at the first backward); "
        "compiles: XLA graphs compiled in the cell, or with compile on cpu/gpu torch.compile's (inductor) "
        "compilations and their seconds (- for eager)",
        "host ms / device ms: medians of split steps run after the timed ones, each started on an idle device: "
        "host = fetch, hooks, trace and sync up to dispatch; device = the wait for the execution after it "
        "(- for eager CPU, where the host does everything); host-bound: host ms >= device ms, so the "
        "accelerator idles for part of every step",
        "data: "
        + (" and ".join(data) or "-")
        + (
            " (random inputs of the recipe's exact shapes and dtypes through its own loader and transform)"
            if "synthetic" in data
            else ""
        ),
    ]
    if any(r.get("traced_once") and (r.get("steps_per_execution_used") or 1) == 1 for r in rows):
        notes.append(
            "steps/execution 1 (auto) on XLA: each step runs the program its first step traced, a group of one, "
            "instead of being traced again by Lightning's loop"
        )
    if grouped:
        notes.append(
            "steps/execution k > 1: k training steps traced once and run as one XLA program; its cells "
            "time whole executions and divide by k, and their first step is the first execution of k"
        )
    notes += process_notes(rows, grid)
    if any("XLA:CPU" in (r.get("device") or "") for r in rows):
        notes.append("XLA:CPU is XLA compiling for this machine's CPU (PJRT_DEVICE=CPU): not a TPU figure")
    made = charts.sweep_charts(run_dir, rows, prov, opts["recipe"], opts.get("chart_batch"))
    report.publish(
        run_dir,
        "bench",
        f"xla_train bench: {opts['recipe']}",
        prov,
        rows,
        COLUMNS + [k for k in grid if k not in COLUMNS],
        headers,
        table,
        notes,
        made,
    )


# what a cell of several processes and its one-process twin share: everything the grid sets but the process count
SAME_CELL = ("accelerator", "runtime", "devices", "batch", "progress_every", "steps_per_execution", "execution_loop")


def process_notes(rows: list[dict], grid: list[str]) -> list[str]:
    """What crossing processes costs a step: each cell of several processes against one process of as many devices
    (the same global batch and program), and what crosses."""
    same = (*SAME_CELL, *(k for k in grid if k not in SAME_CELL and k != "processes"))
    ones = {tuple(r.get(k) for k in same): r for r in rows if r.get("processes", 1) == 1}
    costs = []
    for r in rows:
        one = ones.get(tuple(r.get(k) for k in same))
        if r.get("processes", 1) == 1 or one is None or r.get("step_ms") is None or one.get("step_ms") is None:
            continue
        n, d, extra = r["processes"], r["devices"], r["step_ms"] - one["step_ms"]
        costs.append(
            f"{n} processes of {d // n} device(s) against 1 of {d} (global batch {r['global_batch']}): "
            f"{extra:+.1f} ms a step ({extra / one['step_ms']:+.0%})"
        )
    if not costs:
        return []
    return [
        "processes: "
        + "; ".join(costs)
        + ". One program over every device either way; with several processes the step's all-reduce (the gradient, "
        "the metrics' sums) crosses them: here gloo over this machine's loopback TCP between XLA:CPU processes that "
        "share its cores, on a TPU pod slice the chips' interconnect (ICI; DCN between slices), on GPU nodes NCCL"
    ]


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
