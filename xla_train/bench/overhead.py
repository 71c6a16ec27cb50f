"""`bench overhead`: what xla_train's Lightning path costs over a plain hand-written loop on the same runtime.

Both sides get the same net with the same layer rewrites, initial weights, batches, loss, optimizer and schedule
(objective.py) and the same steps on one XLA device (torch_xla's, or JAX's with runtime=jax), each in its own
process, timed by the same Stopwatch (bench/loops.py: LightningLoop, PlainLoop); equal first-step losses show the
work was the same, and where they differ the comparison fails. Goals: steady step < 1.05x plain; host share <= 1.10x,
as on a TPU a step costs the larger of host and device time (docs/results.md, "bench overhead").
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

from jsonargparse.typing import PositiveFloat, PositiveInt

from xla_train.bench import report
from xla_train.bench.sweep import Data, Runtime, run_rounds
from xla_train.config.build import build_parts
from xla_train.data.base import check_batch_size
from xla_train.runtime.registry import run_backend

SIDES = {"plain": "plain", "xla_train": "lightning"}  # side -> bench/loops.py loop
LOSS_RTOL = 1e-5  # the two sides' first-step losses agree to float32 rounding: their graphs are the same ops


def overhead(
    recipe: str,
    accelerator: Literal["xla", "tpu"] = "xla",
    runtime: Runtime = "auto",
    batch_size: Optional[PositiveInt] = None,
    steps: PositiveInt = 50,
    warmup: PositiveInt = 5,
    rounds: PositiveInt = 1,
    data: Data = "synthetic",
    timeout: PositiveFloat = 1800.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    overrides = dict(overrides or {})
    run_backend(accelerator, runtime)  # a runtime that cannot run here fails before any cell starts
    _, dm = build_parts(recipe, overrides)  # bad recipes and keys fail here
    batch = batch_size or dm.batch_size
    check_batch_size(batch)
    run_dir = report.new_run_dir(runs_dir)
    spec = {
        "recipe": recipe,
        "overrides": overrides,
        "accelerator": accelerator,
        "runtime": runtime,
        "devices": 1,
        "steps_per_execution": 1,  # Lightning's own step, traced anew each step where the runtime has one
        "batch": batch,
        "warmup": warmup,
        "steps": steps,
        "data": data,
    }
    results = run_rounds({side: {**spec, "loop": loop} for side, loop in SIDES.items()}, run_dir, rounds, timeout)
    failed = [
        f"{side}: {r['error']} (log: {run_dir / 'cells'}/{side}*.log)" for side, r in results.items() if "error" in r
    ]
    if failed:
        print("\n".join(failed))
        return 1, run_dir
    plain = results["plain"]
    rows = [
        {
            "side": side,
            "steps_per_execution": 1,
            "ratio": r["step_ms"] / plain["step_ms"],  # one step at a time
            "host_ratio": r["host_ms_per_step"] / plain["host_ms_per_step"],
            "host_cpu_ratio": r["host_cpu_ms_per_step"] / plain["host_cpu_ms_per_step"],
            **r,
        }
        for side, r in results.items()
    ]
    ours = rows[list(results).index("xla_train")]
    ratio, host_ratio, cpu_ratio = ours["ratio"], ours["host_ratio"], ours["host_cpu_ratio"]
    same_work = same_loss(plain["first_loss"], ours["first_loss"])
    loss_verdict = (
        f"first-step losses: plain {loss_text(plain['first_loss'])}, xla_train {loss_text(ours['first_loss'])}: "
        + ("equal, the same work" if same_work else f"NOT equal to rel {LOSS_RTOL:g}: the sides did different work")
    )
    prov = report.provenance(command, sorted({r["device"] for r in rows}))
    columns = [
        "side",
        "device",
        "runtime",
        "global_batch",
        "steps_per_execution",
        "data",
        "rounds",
        "first_step_s",
        "compiles",
        "timed_compiles",
        "step_ms",
        "step_ms_mean",
        "samples_per_s",
        "ratio",
        "host_ms_per_step",
        "device_ms_per_step",
        "host_bound",
        "host_ratio",
        "host_cpu_ms_per_step",
        "host_cpu_ratio",
        "first_loss",
        "host_peak_mb",
    ]
    headers = [
        "side",
        "first step s",
        "compiles",
        "step ms (median)",
        "step ms (mean)",
        "samples/s",
        "vs plain",
        "host ms",
        "device ms",
        "host vs plain",
        "host CPU ms",
        "host CPU vs plain",
        "first-step loss",
    ]
    table = [
        [
            r["side"],
            report.fmt(r["first_step_s"], 2),
            r["compiles"],
            report.fmt(r["step_ms"], 2),
            report.fmt(r["step_ms_mean"], 2),
            report.fmt(r["samples_per_s"]),
            f"{r['ratio']:.3f}",
            report.fmt(r["host_ms_per_step"], 2),
            report.fmt(r["device_ms_per_step"], 2),
            f"{r['host_ratio']:.3f}",
            report.fmt(r["host_cpu_ms_per_step"], 2),
            f"{r['host_cpu_ratio']:.3f}",
            loss_text(r["first_loss"]),
        ]
        for r in rows
    ]
    verdict = f"xla_train / plain steady step time: {ratio:.3f} (goal < 1.05: {'met' if ratio < 1.05 else 'NOT met'})"
    host_verdict = (
        f"xla_train / plain host ms per step: {host_ratio:.3f} "
        f"(goal <= 1.10: {'met' if host_ratio <= 1.10 else 'NOT met'})"
    )
    cpu_verdict = (
        f"xla_train / plain host CPU ms per step: {cpu_ratio:.3f} "
        f"(goal <= 1.10: {'met' if cpu_ratio <= 1.10 else 'NOT met'})"
    )
    notes = [
        f"recipe {recipe}, batch {batch}, {data} data; {steps} timed steps after {warmup} warm-up steps, "
        f"x {rounds} round(s), alternating order; medians over the steps of all rounds; runtime "
        f"{ours.get('runtime') or runtime}, each side with its layer rewrites",
        loss_verdict,
        verdict,
        "host ms: the host's share of a step (fetch, hooks, trace, sync up to dispatch), from split steps that "
        "start on an idle device; device ms: the execution after it (bench/timing.py)",
        host_verdict,
        "host CPU ms: the training thread's CPU time in the same window, outside syncs: the loop's own work, "
        "without its waits for the GIL that the device loader's threads hold (bench/timing.py)",
        cpu_verdict,
    ]
    report.publish(
        run_dir,
        "overhead",
        "xla_train overhead over a plain torch_xla loop",
        prov,
        rows,
        columns,
        headers,
        table,
        notes,
    )
    if not same_work:
        print(loss_verdict)
        return 1, run_dir
    return 0, run_dir


def same_loss(a: float | None, b: float | None) -> bool:
    """Whether two first-step losses are the same computation's, up to float32 rounding (a missing one is not)."""
    return a is not None and b is not None and math.isclose(a, b, rel_tol=LOSS_RTOL)


def loss_text(loss: float | None) -> str:
    return f"{loss:.6f}" if loss is not None else "not read"
