"""Input pipeline and progress overhead: does the loader keep up, and what does the live bar cost?

    python -m xla_train.bench.pipeline [--recipes quickstart,imdb] [--batch 32] [--steps 30] [--every 10]

For each recipe: the host loader's own throughput (batches built and collated,
no device), then training with the live progress bar off and on (refreshing
every --every steps), each in its own process, alternated over --rounds. It
prints compile time, steady step time, samples/s, host syncs in the timed steps
and the on/off difference (the goal is under 2%). Synthetic inputs of the
recipe's shapes; the hardware line says what ran it.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from xla_train.bench.sweep import run_cell


def loader_samples_per_s(recipe: str, batch: int, steps: int) -> float:
    from xla_train.bench.build import recipe_parts, use_data

    model, dm = recipe_parts(recipe, {"batch_size": str(batch)})
    use_data(dm, model.net, "synthetic", (steps + 1) * batch)
    it = iter(dm.train_dataloader())
    next(it)
    t0 = time.perf_counter()
    n = sum(int(x.shape[0]) for x, _ in (next(it) for _ in range(steps)))
    return n / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", default="quickstart,imdb")
    ap.add_argument("--accelerator", default="xla")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    import sys

    from xla_train.bench.report import provenance

    accel = "XLA:CPU (not a TPU)" if args.accelerator == "xla" else args.accelerator
    for key, value in provenance("python -m xla_train.bench.pipeline " + " ".join(sys.argv[1:]), [accel]).items():
        print(f"{key}: {value}")
    print(f"{args.accelerator}, batch {args.batch}, median of {args.steps} steps after {args.warmup} warm-up; "
          f"live bar every {args.every} steps when on; {args.rounds} alternating rounds")
    print(f"{'recipe':<11}{'loader/s':>10}{'compile s':>10}{'off ms':>8}{'on ms':>8}{'off/s':>8}{'on/s':>8}"
          f"{'syncs off':>10}{'syncs on':>9}{'diff %':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes.split(","):
            loader = loader_samples_per_s(recipe, args.batch, args.steps)
            runs = {0: [], args.every: []}
            for r in range(args.rounds):
                for every in ((0, args.every) if r % 2 == 0 else (args.every, 0)):
                    spec = {"recipe": recipe, "accelerator": args.accelerator, "batch": args.batch,
                            "steps": args.steps, "warmup": args.warmup, "progress_every": every}
                    out = run_cell(spec, Path(tmp, f"{recipe}-{every}-{r}"), timeout=900)
                    if "error" in out:
                        raise SystemExit(f"{recipe} (progress_every={every}): {out['error']}")
                    runs[every].append(out)
            off, on = runs[0], runs[args.every]
            off_ms = statistics.median(o["step_ms"] for o in off)
            on_ms = statistics.median(o["step_ms"] for o in on)
            print(f"{recipe:<11}{loader:>10,.0f}{statistics.median(o['compile_s'] or 0 for o in off):>10.1f}"
                  f"{off_ms:>8.1f}{on_ms:>8.1f}{args.batch / off_ms * 1e3:>8.0f}{args.batch / on_ms * 1e3:>8.0f}"
                  f"{off[0]['timed_host_syncs']!s:>10}{on[0]['timed_host_syncs']!s:>9}"
                  f"{(on_ms / off_ms - 1) * 100:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
