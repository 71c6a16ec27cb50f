"""The sweep's published table: which settings get a column, what each figure means in the notes, and what
crossing processes costs a step, written with the rows and charts by bench/report.py.
"""

from __future__ import annotations

from pathlib import Path

from xla_train.bench import charts, report
from xla_train.runtime.registry import run_backend

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
