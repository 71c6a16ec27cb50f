"""Tables of the eager CPU path: eager against XLA:CPU, the fast path's defaults, and a user's net against the
built-in one."""

from __future__ import annotations

import statistics

from result_tables.claims import Claim, f, x
from result_tables.csvs import block, mb, ms, read


def accelerator() -> str:
    """Eager PyTorch against XLA:CPU, each cell its own process: bench accelerators=cpu,xla."""
    out = [
        "| accelerator | batch | ran with | first step s | compile s | graphs | step ms | samples/s | host MB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in read("accelerator-quickstart.csv")[1]:
        if r["accelerator"] == "cpu":
            ran = f"eager, {r['precision']}" + (", channels_last" if r["channels_last"] == "True" else "")
            compile_s = graphs = "-"
        else:
            data = "data on the device" if r["on_device"] == "True" else "data streamed"
            ran = f"{r['device']}, {r['steps_per_execution_used']} step(s) a program, {data}"
            compile_s, graphs = f"{float(r['compile_s']):.1f}", r["compiles"]
        out.append(
            f"| {r['accelerator']} | {r['batch']} | {ran} | {float(r['first_step_s']):.2f} | {compile_s} | {graphs} | "
            f"{ms(r['step_ms'])} | {float(r['samples_per_s']):,.0f} | {mb(r['host_peak_mb'])} |"
        )
    return block(out, "accelerator-quickstart.csv")


def fastpath_nobf16() -> str:
    """The CPU fast path's memory-format default on a CPU without native bf16, against contiguous: bench rounds."""
    out = [
        "| net, batch (float32, eager) | NCHW step ms, median (mean) | channels_last step ms, median (mean) "
        "| channels_last samples/s against NCHW's |",
        "|---|---:|---:|---:|",
    ]
    names = [("fastpath-nobf16-quickstart.csv", "quickstart CNN"), ("fastpath-nobf16-cifar10.csv", "CIFAR-10 CNN")]
    for name, net in names:
        by = {r["channels_last"]: r for r in read(name)[1]}
        nchw, cl = by["False"], by["True"]
        out.append(
            f"| {net}, {nchw['batch']} | {ms(nchw['step_ms'])} ({ms(nchw['step_ms_mean'])}) | "
            f"{ms(cl['step_ms'])} ({ms(cl['step_ms_mean'])}) | "
            f"**{float(cl['samples_per_s']) / float(nchw['samples_per_s']):.2f}x** |"
        )
    return block(out, *(name for name, _ in names))


def own_net() -> str:
    """A user's copy of the built-in CNN against the built-in, alternating bench runs on XLA:CPU."""
    out = ["| net | compile s | step ms | samples/s |", "|---|---:|---:|---:|"]
    means = {}
    for side, what in (("builtin", "built-in `CifarCNN`"), ("copy", "the user's copy (`user_nets.KerasCNN`)")):
        rows = [read(f"own-net-{side}-{n}.csv")[1][0] for n in (1, 2)]
        means[side] = sum(float(r["samples_per_s"]) for r in rows) / len(rows)
        compiles = ", ".join(f"{float(r['compile_s']):.1f}" for r in rows)
        speeds = ", ".join(f"{float(r['samples_per_s']):,.1f}" for r in rows)
        out.append(f"| {what} | {compiles} | {', '.join(ms(r['step_ms']) for r in rows)} | {speeds} |")
    ratio = means["copy"] / means["builtin"]
    out.append(f"\nThe copy's samples/s against the built-in's (means of the two runs): **{ratio:.2f}x**.")
    names = [f"own-net-{side}-{n}.csv" for n in (1, 2) for side in ("builtin", "copy")]
    return block(out, *names)


def own_net_gpu() -> str:
    """A user's copy of the built-in CNN against the built-in on a lent GPU, plain Lightning: bench sweep."""
    name = "own-net-h100.csv"
    at = {(r["net"], r["batch"]): r for r in read(name)[1]}
    batches = sorted({b for _, b in at}, key=int)
    out = [
        "| net | " + " | ".join(f"batch {b}: step ms | samples/s" for b in batches) + " |",
        "|---|" + "---:|---:|" * len(batches),
    ]
    for net, what in (("builtin", "built-in `CifarCNN`"), ("copy", "the user's copy")):
        cells = [f"{ms(at[net, b]['step_ms'])} | {float(at[net, b]['samples_per_s']):,.0f}" for b in batches]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    ratios = [float(at["copy", b]["samples_per_s"]) / float(at["builtin", b]["samples_per_s"]) for b in batches]
    out.append(
        "\nThe copy's samples/s against the built-in's: "
        + " and ".join(f"**{r:.2f}x** at batch {b}" for r, b in zip(ratios, batches))
        + "."
    )
    return block(out, name)


def own_net_claim() -> Claim:
    means = {}
    for side in ("builtin", "copy"):
        means[side] = statistics.mean(f(read(f"own-net-{side}-{n}.csv")[1][0]["samples_per_s"]) for n in (1, 2))
    return Claim(
        "a user's copy of the built-in CNN, XLA:CPU",
        f"{x(means['copy'], means['builtin'])} the built-in's samples/s (means of two alternating runs each)",
        tuple(f"own-net-{side}-{n}.csv" for side in ("builtin", "copy") for n in (1, 2)),
        "your-own-net-against-the-built-in-one",
    )


def accelerator_claim() -> Claim:
    rows = read("accelerator-quickstart.csv")[1]
    parts = []
    for batch in sorted({r["batch"] for r in rows}, key=int):
        cpu, xla = (next(r for r in rows if r["batch"] == batch and r["accelerator"] == a) for a in ("cpu", "xla"))
        parts.append(
            f"batch {batch}: {x(f(xla['samples_per_s']), f(cpu['samples_per_s']))} eager's samples/s "
            f"({f(xla['step_ms']):.1f} against {f(cpu['step_ms']):.1f} ms)"
        )
    return Claim(
        "XLA:CPU against eager PyTorch, quickstart CNN, each at its defaults",
        "; ".join(parts),
        ("accelerator-quickstart.csv",),
        "accelerator-by-batch-size",
    )
