"""`bench` (the sweep): every accelerator x batch size for a recipe, one process per cell, into a table and charts.

    python -m xla_train bench recipe=cifar10 accelerators=cpu,xla batch_sizes=32,128,512,1024 steps=20

Per cell (bench/cell.py says how it is timed): the first step (trace and
compile on XLA), the steady step as the median of the timed steps, samples/s,
the epoch it projects for the recipe's full training set, XLA compilations,
peak host memory and, where the runtime reports it, peak device memory. A cell
that fails (out of memory at a large batch, say) is recorded with its error
and the sweep goes on. This process never starts an XLA runtime itself: on a
TPU only one process at a time may hold the chips, and each cell needs them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from xla_train.errors import HardwareError

COLUMNS = ["recipe", "accelerator", "device", "devices", "batch", "global_batch", "data", "precision", "warmup",
           "steps", "first_step_s", "compile_s", "compiles", "timed_compiles", "timed_host_syncs", "step_ms",
           "step_ms_mean",
           "samples_per_s", "train_size", "train_size_source", "steps_per_epoch", "epoch_s", "host_peak_mb",
           "device_peak_mb", "threads", "error"]


def available_accelerators() -> list[str]:
    """cpu, plus the machine's accelerator: a TPU if the PCI bus has one, else a CUDA GPU, else XLA on the CPU."""
    from xla_train.runtime.accelerators import tpu_chips_on_pci_bus

    try:
        if tpu_chips_on_pci_bus():
            return ["cpu", "tpu"]
    except ImportError:
        pass
    import torch

    return ["cpu", "gpu" if torch.cuda.is_available() else "xla"]


def check_available(accelerators: list[str]) -> None:
    """Fail before the first cell, not in every one of them."""
    if "tpu" in accelerators:
        from xla_train.runtime.accelerators import tpu_chips_on_pci_bus

        if not tpu_chips_on_pci_bus():
            raise HardwareError("accelerators= includes tpu but this machine has no TPU; use xla (XLA on the CPU) "
                                "or cpu")
    if "gpu" in accelerators:
        import torch

        if not torch.cuda.is_available():
            raise HardwareError("accelerators= includes gpu but no CUDA GPU is visible; use cpu or xla")


def run_cell(spec: dict, stem: Path, timeout: float) -> dict:
    """Run bench/cell.py in a fresh process; its output goes to STEM.log, its result to STEM.json."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    result_path = stem.with_suffix(".json")
    result_path.unlink(missing_ok=True)
    spec = {**spec, "result_path": str(result_path)}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(stem.with_suffix(".log"), "w") as log:
        try:
            proc = subprocess.run([sys.executable, "-m", "xla_train.bench.cell", json.dumps(spec)],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish in {timeout:g} s (timeout=)"}
    if result_path.is_file():
        return json.loads(result_path.read_text())
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
    return {"error": f"the cell process died ({how}; out of memory?)"}


def project_epoch(row: dict, train_size: int) -> None:
    """Training drops each epoch's last partial batch, so an epoch is train_size // global batch steps."""
    row["train_size"] = train_size
    if row.get("step_ms") is not None and row.get("global_batch"):
        row["steps_per_epoch"] = train_size // row["global_batch"]
        row["epoch_s"] = row["steps_per_epoch"] * row["step_ms"] / 1e3


def sweep_command(opts: dict) -> int:
    from tqdm import tqdm

    from xla_train.bench import report
    from xla_train.bench.build import recipe_parts, train_size

    accelerators = opts["accelerators"] or available_accelerators()
    check_available(accelerators)
    _, dm = recipe_parts(opts["recipe"], dict(opts["overrides"]))  # bad recipes and keys fail here, once
    n_train, source = train_size(dm)
    run_dir = report.new_results_dir(opts)
    cells = [(a, b) for a in accelerators for b in opts["batch_sizes"]]
    rows = []
    bar = tqdm(cells, desc="bench", unit="cell", disable=None)
    for accelerator, batch in bar:
        bar.set_postfix_str(f"{accelerator} batch {batch}")
        spec = {"recipe": opts["recipe"], "overrides": opts["overrides"], "accelerator": accelerator,
                "devices": opts["devices"], "precision": opts["precision"], "batch": batch,
                "warmup": opts["warmup"], "steps": opts["steps"], "data": opts["data"]}
        res = run_cell(spec, run_dir / "cells" / f"{accelerator}-b{batch}", opts["timeout"])
        row = {**{k: v for k, v in spec.items() if k != "overrides"}, "train_size_source": source, **res}
        if "global_batch" not in row and isinstance(opts["devices"], int):
            row["global_batch"] = batch * (1 if accelerator == "cpu" else opts["devices"])
        project_epoch(row, n_train)
        rows.append(row)
        done = (f"{row['step_ms']:.1f} ms/step, epoch {row['epoch_s']:.1f} s" if row.get("epoch_s") is not None
                else f"failed: {row.get('error')}")
        bar.write(f"{accelerator:>4} batch {batch:>5}: {done}")
    bar.close()
    write_sweep(run_dir, rows, opts, n_train, source)
    return 0 if any(r.get("step_ms") is not None for r in rows) else 1


HEADERS = ["accelerator", "device", "batch", "first step s", "compile s", "compiles", "step ms", "samples/s",
           "epoch s", "host MB", "device MB", "note"]


def table_row(r: dict) -> list:
    from xla_train.bench.report import fmt

    note = r.get("error") or ("recompiled while timed: more warmup=?" if r.get("timed_compiles") else "")
    return [r["accelerator"], r.get("device", "-"), r.get("global_batch", "-"), fmt(r.get("first_step_s"), 2),
            fmt(r.get("compile_s"), 1), fmt(r.get("compiles")), fmt(r.get("step_ms"), 1), fmt(r.get("samples_per_s")),
            fmt(r.get("epoch_s")), fmt(r.get("host_peak_mb"), 0), fmt(r.get("device_peak_mb"), 0), note]


def write_sweep(run_dir: Path, rows: list[dict], opts: dict, n_train: int, source: str) -> None:
    from xla_train.bench import charts, report

    prov = report.provenance(opts["command"], sorted({r["device"] for r in rows if r.get("device")}))
    report.write_csv(run_dir / "bench.csv", rows, COLUMNS, prov)
    table = [table_row(r) for r in rows]
    data = sorted({r["data"] for r in rows if r.get("data")})
    notes = [f"recipe {opts['recipe']}" + "".join(f", {k}={v}" for k, v in opts["overrides"].items())
             + (f", precision {opts['precision']}" if opts["precision"] else ""),
             f"step ms: median of {opts['steps']} timed steps after {opts['warmup']} warm-up steps, pipelined as in "
             f"training; samples/s = batch / step; epoch s = {n_train:,} training samples ({source}) // batch x step",
             "first step: the first training step to the end of its execution (on XLA: trace + compile + run); "
             "compiles: XLA graphs compiled in the cell (- for eager CPU)",
             "data: " + (" and ".join(data) or "-") + (" (random inputs of the recipe's exact shapes and dtypes "
                                                       "through its own loader and transform)"
                                                       if "synthetic" in data else "")]
    if any("XLA:CPU" in (r.get("device") or "") for r in rows):
        notes.append("XLA:CPU is XLA compiling for this machine's CPU (PJRT_DEVICE=CPU): not a TPU figure")
    md = report.markdown(f"xla_train bench: {opts['recipe']}", prov, HEADERS, table, notes)
    made = charts.sweep_charts(run_dir, rows, prov, opts["recipe"], opts.get("chart_batch"))
    md += "".join(f"\n![{p.stem}]({p.name})\n" for p in made)
    (run_dir / "bench.md").write_text(md)
    print(f"\n{prov['hardware']}\n{prov['versions']}; {prov['date']}")
    for n in notes:
        print(f"- {n}")
    print(report.text_table(HEADERS, table))
    print(f"results: {run_dir} (bench.csv, bench.md{''.join(', ' + p.name for p in made)})")
