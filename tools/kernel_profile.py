"""Where a training step's time goes on XLA:CPU, kernel by kernel, on either runtime: a bench cell (the product's
Lightning path, recipe defaults, synthetic data) whose timed executions run under the runtime's own profiler
(jax.profiler on JAX, torch_xla.debug.profiler on torch_xla). Both write XLA's xplane traces, which
jax.profiler.ProfileData reads (so jax must be installed), and XLA:CPU's thunk executor marks each kernel there.

A step's time by the bench's clock says how long; this says where: the loops (a While kernel's time holds its
body's), and each kernel run outside them. It is how docs/results.md's "Where JAX's IMDB step lost its time" was
found. A profiled step runs slower than an unprofiled one, so compare kernels, not the steps' totals, with the bench.

    python tools/kernel_profile.py --recipe imdb --runtimes torch_xla,jax --csv docs/results/kernels-imdb.csv
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

COLUMNS = ["runtime", "kernel", "calls", "calls_per_step", "ms_per_call", "ms_per_step", "first_ms"]
WORKERS = "tf_XLAEigen"  # XLA:CPU's worker threads, where its kernels run (a trace line's name starts so)
WRAPPERS = ("ThunkExecutor::", "call.")  # spans that hold other kernels, not kernels of their own


def kernels(events, steps: int) -> list[dict]:
    """One row per kernel name from (name, start ns, duration ns) events on XLA:CPU's worker threads: its calls, its
    ms a call and a training step, and when it first ran (ms from the first kernel), so that a step's kernels read
    in the order they ran. A kernel run once a step is best read by its ms a call: a trace can miss the start of
    the first execution it covers (JAX's runs 32 steps, and its loops were caught in 31)."""
    total, calls, first = collections.Counter(), collections.Counter(), {}
    events = [e for e in events if not e[0].startswith(WRAPPERS)]
    start = min((e[1] for e in events), default=0)
    for name, begin, duration in events:
        total[name] += duration
        calls[name] += 1
        first[name] = min(first.get(name, begin), begin)
    return [
        {
            "kernel": name,
            "calls": calls[name],
            "calls_per_step": calls[name] / steps,
            "ms_per_call": total[name] / 1e6 / calls[name],
            "ms_per_step": total[name] / 1e6 / steps,
            "first_ms": (first[name] - start) / 1e6,
        }
        for name in sorted(total, key=lambda n: -total[n])
    ]


def read_trace(folder: str) -> list[tuple[str, int, int]]:
    from jax.profiler import ProfileData

    path = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))[-1]
    return [
        (event.name, event.start_ns, event.duration_ns)
        for plane in ProfileData.from_file(path).planes
        for line in plane.lines
        if line.name.startswith(WORKERS)
        for event in line.events
    ]


class Profiler:
    """The runtime's profiler, started at the first timed execution and stopped once the last one has run."""

    def __init__(self, runtime: str, folder: str) -> None:
        self.runtime, self.folder, self.steps = runtime, folder, 0

    def start(self) -> None:
        if self.runtime == "jax":
            import jax

            jax.profiler.start_trace(self.folder)
        else:
            import torch_xla.debug.profiler as xp

            self.server = xp.start_server(9012)  # torch_xla traces through its profiler server
            xp.start_trace(self.folder)

    def stop(self) -> None:
        if self.runtime == "jax":
            import jax

            jax.profiler.stop_trace()
        else:
            import torch_xla.debug.profiler as xp

            xp.stop_trace()


def profile(spec: dict) -> list[dict]:
    """The kernels of the spec's timed executions (bench/cell.py's cell, run in this process)."""
    from xla_train.bench import cell, loops, timing

    folder = tempfile.mkdtemp(prefix="xla_train-kernels-")
    profiler = Profiler(spec["runtime"], folder)

    class ProfiledStopwatch(timing.Stopwatch):
        def batch_ready(self, step: int) -> None:
            super().batch_ready(step)
            if step == self.warmup * self.k:  # the first timed execution starts here, on an idle device
                profiler.start()

        def step_done(self, step: int, loss=None) -> None:
            super().step_done(step, loss)
            if step == (self.last + 1) * self.k - 1:  # the last timed execution has run (the clock waited)
                profiler.stop()
                profiler.steps = self.steps * self.k

    loops.Stopwatch = ProfiledStopwatch  # where the cell's loops look it up
    spec = {**spec, "result_path": str(Path(folder) / "result.json")}
    if cell.main([json.dumps(spec)]) != 0:
        raise SystemExit(f"the {spec['runtime']} cell failed: {Path(spec['result_path']).read_text()}")
    return kernels(read_trace(folder), profiler.steps)


def cell(recipe: str, runtime: str, batch: int, warmup: int, steps: int) -> dict:
    """A bench cell at the recipe's defaults on one XLA:CPU device (bench's spec; xla_train/bench/sweep.py), with the
    training size bench gives it, so that steps_per_execution=auto decides as it does there."""
    from xla_train.bench.data import train_size
    from xla_train.config.build import build_parts

    n_train, _ = train_size(build_parts(recipe, {})[1])
    return {
        "recipe": recipe,
        "overrides": {},
        "accelerator": "xla",
        "runtime": runtime,
        "devices": 1,
        "batch": batch,
        "progress_every": 0,
        "steps_per_execution": "auto",
        "execution_loop": "auto",
        "precision": None,
        "compile": "auto",
        "channels_last": "auto",
        "warmup": warmup,
        "steps": steps,
        "data": "synthetic",
        "train_size": n_train,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="imdb")
    parser.add_argument("--runtimes", default="torch_xla,jax", help="each profiled in a process of its own")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=32)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: profile this runtime, print its rows as JSON
    args = parser.parse_args(argv)
    if args.one:
        rows = profile(cell(args.recipe, args.one, args.batch, args.warmup, args.steps))
        print("KERNELS " + json.dumps(rows))
        return 0
    from xla_train.bench.report import provenance, write_csv

    rows = []
    for runtime in args.runtimes.split(","):
        child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one", runtime]
        env = {**os.environ, "PJRT_DEVICE": "CPU"}
        out = subprocess.run(child, env=env, capture_output=True, text=True)
        found = [line for line in out.stdout.splitlines() if line.startswith("KERNELS ")]
        if out.returncode or not found:
            raise SystemExit(f"profiling {runtime} failed:\n{out.stderr[-3000:]}")
        rows += [{"runtime": runtime, **row} for row in json.loads(found[-1][len("KERNELS ") :])]
    command = "python tools/kernel_profile.py " + " ".join(
        f"--{k} {v}" for k, v in (("recipe", args.recipe), ("runtimes", args.runtimes), ("batch", args.batch))
    )
    command += f" --warmup {args.warmup} --steps {args.steps} --csv {args.csv}"
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    partial = args.csv.with_name(args.csv.name + ".partial")
    write_csv(partial, rows, COLUMNS, provenance(command, ["XLA:CPU, one device, each runtime's profiler"]))
    partial.replace(args.csv)  # whole or not at all
    print(f"wrote {args.csv}: {len(rows)} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
