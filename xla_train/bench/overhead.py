"""`bench overhead`: what xla_train's Lightning path costs over a plain hand-written torch_xla loop.

    python -m xla_train bench overhead recipe=quickstart [steps=50 warmup=5 rounds=2 batch_size=32]

Both sides get the same net with the same initial weights (built from the
recipe under its seed), the same batches in the same order (the recipe's data
module and sampler), the same optimizer and hyperparameters, one XLA device and
the same number of steps, each in its own process, launched one after the other
by this one (rounds>1 alternates the order, so slow spells on a shared machine
fall on both sides). The plain loop is what the torch_xla docs teach:
`torch_xla.device()`, MpDeviceLoader (host-to-device copies overlapped with
compute, one graph cut per batch), loss, backward, step. xla_train's side
additionally keeps its on-device epoch metrics and runs its callbacks; that is
part of what it costs. Both are timed by the same Stopwatch (bench/cell.py).
The loss each side computed on its first step is printed: equal losses show
that the two did the same work. The goal is a ratio under 1.05, the margin
Lightning's own parity benchmarks hold it to.
"""
from __future__ import annotations

import math
import statistics

SIDES = ("plain", "xla_train")


def plain_loop(spec: dict) -> dict:
    """The hand-written side, run in a cell process."""
    from xla_train.runtime.accelerators import configure_pjrt

    configure_pjrt(spec["accelerator"], 1)
    import torch
    import torch.nn.functional as F
    import torch_xla
    from torch_xla.distributed.parallel_loader import MpDeviceLoader

    from xla_train.bench.build import recipe_parts, use_data
    from xla_train.bench.cell import Stopwatch, device_name
    from xla_train.runtime.scan_lstm import use_scan_lstm
    from xla_train.tasks import make_optimizer

    model, dm = recipe_parts(spec["recipe"], {**spec.get("overrides", {}), "batch_size": str(spec["batch"])})
    batches = spec["warmup"] + spec["steps"]
    data = use_data(dm, model.net, spec.get("data", "synthetic"), batches * spec["batch"])
    device = torch_xla.device()
    net = model.net
    use_scan_lstm(net, verbose=False)  # as the XLA strategy does, so both sides run the same graph
    net.to(device).train()
    hp = model.hparams
    opt = make_optimizer(hp, net.parameters())
    sched = None
    if hp.schedule == "cosine":  # Lightning's estimated_stepping_batches is this run's step count
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, batches) / batches)))
    watch = Stopwatch(spec["warmup"], spec["steps"], device)
    for i, (x, y) in enumerate(MpDeviceLoader(dm.train_dataloader(), device)):
        watch.batch_ready(i)
        logits = net(x)
        if logits.ndim == 1 or logits.shape[-1] == 1:
            loss = F.binary_cross_entropy_with_logits(logits.reshape(-1), y.to(logits.dtype))
        else:
            loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        watch.step_done(i, loss)
        if i == watch.last:
            break
    out = watch.result()
    out.update(device=device_name(device), devices=1, global_batch=spec["batch"], data=data,
               samples_per_s=spec["batch"] / (out["step_ms"] / 1e3), device_peak_mb=None)
    return out


def overhead_command(opts: dict) -> int:
    from xla_train.bench import report
    from xla_train.bench.build import recipe_parts
    from xla_train.bench.sweep import run_cell

    model, dm = recipe_parts(opts["recipe"], dict(opts["overrides"]))  # bad recipes and keys fail here
    batch = opts["batch_size"] or dm.batch_size
    run_dir = report.new_results_dir(opts)
    spec = {"recipe": opts["recipe"], "overrides": opts["overrides"], "accelerator": opts["accelerator"],
            "devices": 1, "batch": batch, "warmup": opts["warmup"], "steps": opts["steps"], "data": opts["data"]}
    results: dict[str, list[dict]] = {s: [] for s in SIDES}
    order = []
    for r in range(opts["rounds"]):
        order += [(r, s) for s in (SIDES if r % 2 == 0 else SIDES[::-1])]
    from tqdm import tqdm

    for r, side in tqdm(order, desc="overhead", unit="run", disable=None):
        res = run_cell({**spec, "side": side}, run_dir / "cells" / f"{side}-round{r}", opts["timeout"])
        if res.get("error"):
            print(f"{side} (round {r + 1}) failed: {res['error']} (log: {run_dir / 'cells'}/{side}-round{r}.log)")
            return 1
        results[side].append(res)
    rows, summary = [], {}
    for side in SIDES:
        runs = results[side]
        pooled = [t for res in runs for t in res["step_times_ms"]]
        summary[side] = statistics.median(pooled)
        rows.append({"side": side, "device": runs[0]["device"], "batch": batch, "rounds": len(runs),
                     "steps": len(pooled), "first_step_s": statistics.median(r["first_step_s"] for r in runs),
                     "compiles": runs[0]["compiles"], "timed_compiles": max(r["timed_compiles"] for r in runs),
                     "step_ms": summary[side], "step_ms_mean": statistics.fmean(pooled),
                     "samples_per_s": batch / (summary[side] / 1e3), "first_loss": runs[0]["first_loss"],
                     "host_peak_mb": max(r["host_peak_mb"] for r in runs), "data": runs[0]["data"]})
    ratio = summary["xla_train"] / summary["plain"]
    for row in rows:
        row["ratio"] = summary[row["side"]] / summary["plain"]
    prov = report.provenance(opts["command"], sorted({r["device"] for r in rows}))
    columns = ["side", "device", "batch", "data", "rounds", "steps", "first_step_s", "compiles", "timed_compiles",
               "step_ms", "step_ms_mean", "samples_per_s", "ratio", "first_loss", "host_peak_mb"]
    report.write_csv(run_dir / "overhead.csv", rows, columns, prov)
    headers = ["side", "first step s", "compiles", "step ms (median)", "step ms (mean)", "samples/s",
               "vs plain", "first-step loss"]
    table = [[r["side"], report.fmt(r["first_step_s"], 2), r["compiles"], report.fmt(r["step_ms"], 2),
              report.fmt(r["step_ms_mean"], 2), report.fmt(r["samples_per_s"]), f"{r['ratio']:.3f}",
              f"{r['first_loss']:.6f}"] for r in rows]
    verdict = f"xla_train / plain steady step time: {ratio:.3f} (goal < 1.05: {'met' if ratio < 1.05 else 'NOT met'})"
    notes = [f"recipe {opts['recipe']}, batch {batch}, {rows[0]['data']} data; {opts['steps']} timed steps after "
             f"{opts['warmup']} warm-up steps, x {opts['rounds']} round(s), alternating order; "
             f"medians over the steps of all rounds",
             verdict]
    (run_dir / "overhead.md").write_text(report.markdown("xla_train overhead over a plain torch_xla loop", prov,
                                                         headers, table, notes))
    print(f"{prov['hardware']}\n{prov['versions']}; {prov['date']}")
    print(report.text_table(headers, table))
    print(verdict)
    print(f"results: {run_dir}")
    return 0
