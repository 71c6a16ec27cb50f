"""Tables of how XLA runs a step: K steps a program, the While loop, data on the device, SPMD, sharding calls,
and the TPU estimate built on them."""

from __future__ import annotations

import re

from result_tables.claims import Claim, f, one
from result_tables.csvs import block, mb, ms, read

# The assumptions of the TPU estimate, stated on the page: a TPU v5e chip's bf16 peak, the share of it a step's
# matmuls and convolutions reach, and what one of the LSTM's sequential recurrent steps costs there.
V5E_TFLOPS = 197
UTILISATION = (0.5, 0.1)
RECURRENT_US = (5, 10)


def k_steps() -> str:
    """The host's and the device's share of a step at K=1 and K=8 unrolled, one bench run a recipe."""
    out = [
        "| recipe, batch | K | compile s | graphs | first execution s | step ms | host ms/step | device ms/step "
        "| host K=8 / K=1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("k-quickstart.csv", "quickstart CNN"), ("k-cifar10.csv", "CIFAR-10 CNN"), ("k-imdb.csv", "IMDB LSTM")]
    for name, what in names:
        by = {r["steps_per_execution_used"]: r for r in read(name)[1]}
        for k in ("1", "8"):
            r = by[k]
            share = float(r["host_ms_per_step"]) / float(by["1"]["host_ms_per_step"])
            out.append(
                f"| {what}, {r['batch']} | {k} | {float(r['compile_s']):.1f} | {r['compiles']} | "
                f"{float(r['first_step_s']):.1f} | {ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | "
                f"{float(r['device_ms_per_step']):.1f} | {f'**{share:.2f}**' if k == '8' else ''} |"
            )
    return block(out, *(name for name, _ in names))


def k_up_to_32() -> str:
    """The host's share of a step as K grows to 32 unrolled, the data on the device: one bench run a recipe."""
    out = [
        "| recipe, batch | K | compile s | step ms | host ms/step (wall) | host CPU ms/step | host MB | host CPU "
        "against K=1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("k32-quickstart.csv", "quickstart CNN"), ("k32-imdb.csv", "IMDB LSTM")]
    for name, what in names:
        rows = sorted(read(name)[1], key=lambda r: int(r["steps_per_execution_used"]))
        first = float(rows[0]["host_cpu_ms_per_step"])
        for r in rows:
            cpu = float(r["host_cpu_ms_per_step"])
            out.append(
                f"| {what}, {r['batch']} | {r['steps_per_execution_used']} | {float(r['compile_s']):.1f} | "
                f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.2f} | {cpu:.2f} | {mb(r['host_peak_mb'])} | "
                f"{f'1/{first / cpu:.0f}' if cpu < first else '1'} |"
            )
    return block(out, *(name for name, _ in names))


WHILE_FILES = [
    ("while-quickstart.csv", "quickstart CNN"),
    ("while-imdb.csv", "IMDB LSTM"),
    ("while-mlp.csv", "an MLP (my_nets.MLP), quickstart data"),
]


def while_loop() -> str:
    """The same K steps as one While loop and unrolled, on XLA:CPU: one bench run a net, the loops (and runtimes)
    alternating."""
    out = [
        "| net, batch | runtime | K | loop | compile s | step ms | host MB | step against unrolled | compile against "
        "unrolled |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, what in WHILE_FILES:
        rows = read(name)[1]
        unrolled = {
            (r["runtime"], r["steps_per_execution_used"]): r for r in rows if r["execution_loop_used"] == "unroll"
        }
        order = sorted(rows, key=lambda r: (r["runtime"] == "jax", r["execution_loop_used"] == "while"))
        for r in order:
            k, base = r["steps_per_execution_used"], unrolled.get((r["runtime"], r["steps_per_execution_used"]))
            ratios = ["", ""]
            if base is not None and r["execution_loop_used"] == "while":
                step = float(r["step_ms"]) / float(base["step_ms"])
                compile_ = float(r["compile_s"]) / float(base["compile_s"])
                ratios = [f"**{step:.2f}x**", f"{compile_:.2f}x"]
            out.append(
                f"| {what}, {r['batch']} | {r['runtime'] or 'torch_xla'} | {k} | {r['execution_loop_used']} | "
                f"{float(r['compile_s']):.1f} | {ms(r['step_ms'])} | {mb(r['host_peak_mb'])} | {ratios[0]} | "
                f"{ratios[1]} |"
            )
    return block(out, *(name for name, _ in WHILE_FILES))


def auto_k() -> str:
    """steps_per_execution=auto's two choices on XLA:CPU, auto and K=8 alternating in one bench run: one step a program
    traced once (auto, for a run of under 1,000 training steps) against 8 unrolled (auto's from 1,000)."""
    out = [
        "| recipe, batch | K | compile s | first step s | step ms | host ms/step | host MB | K=8 repays its first step "
        "after |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("auto-quickstart.csv", "quickstart CNN")]
    for name, what in names:
        rows = read(name)[1]
        one = next(r for r in rows if r["steps_per_execution"] == "auto")
        eight = next(r for r in rows if r["steps_per_execution"] == "8")
        if (one["steps_per_execution_used"], one["traced_once"]) != ("1", "True"):
            raise SystemExit(f"{name}: auto chose K={one['steps_per_execution_used']}, not the one-step program")
        extra = float(eight["first_step_s"]) - float(one["first_step_s"])
        saved = (float(one["step_ms"]) - float(eight["step_ms"])) / 1000
        repaid = f"{extra / saved:,.0f} steps" if saved > 0 else "never: its step is no shorter"
        for r, k in ((one, "1 (auto: traced once)"), (eight, "8, unrolled")):
            out.append(
                f"| {what}, {r['batch']} | {k} | {float(r['compile_s']):.1f} | {float(r['first_step_s']):.2f} | "
                f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | {mb(r['host_peak_mb'])} | "
                f"{repaid if r is eight else ''} |"
            )
    return block(out, *(name for name, _ in names))


ESTIMATED = [
    ("k-quickstart.csv", "quickstart", "CNN"),
    ("k-cifar10.csv", "cifar10", "CNN"),
    ("k1-resnet.csv", "cifar10_resnet", "ResNet-20"),
    ("k-imdb.csv", "imdb", "LSTM"),
]


def estimates() -> list[dict]:
    """Per recipe: the counted GFLOP, the measured host and device time at K=1, and the estimated range of a TPU v5e
    chip's device time and of the K that would make a step device-bound."""
    flops = {r["recipe"]: r for r in read("flops.csv")[1]}
    out = []
    for name, recipe, what in ESTIMATED:
        r = next(r for r in read(name)[1] if r["steps_per_execution_used"] == "1")
        gflop = float(flops[recipe]["gflop_per_step"])
        if recipe == "imdb":  # latency-bound: its maxlen recurrent steps, forward and backward, one after another
            steps = 2 * int(re.search(r"maxlen (\d+)", flops[recipe]["input"]).group(1))
            low, high = (steps * us / 1e3 for us in RECURRENT_US)
        else:
            low, high = (gflop / (V5E_TFLOPS * u) for u in UTILISATION)  # GFLOP / (TFLOP/s) = ms
        host = float(r["host_ms_per_step"])
        out.append(
            {
                "what": what,
                "recipe": recipe,
                "batch": r["batch"],
                "gflop": gflop,
                "host_ms": host,
                "device_ms": r["device_ms_per_step"],
                "low": low,
                "high": high,
                "k_low": max(1, round(host / high)),
                "k_high": max(1, round(host / low)),
            }
        )
    return out


def tpu_estimate() -> str:
    """Host and device time per step at K=1 measured on XLA:CPU, and an estimate of a TPU chip's device time from the
    step's counted FLOPs: bench (k-*.csv, k1-resnet.csv) and tools/flops.py (flops.csv)."""
    out = [
        "| model (recipe, batch) | GFLOP a step (counted) | host ms/step (measured) | device ms/step on XLA:CPU "
        "(measured) | device ms/step on a TPU v5e chip (**estimate**) | K for device-bound (**estimate**) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in estimates():
        out.append(
            f"| {e['what']} (`{e['recipe']}`, {e['batch']}) | {e['gflop']:.1f} | {e['host_ms']:.1f} | "
            f"{ms(e['device_ms'])} | {e['low']:.2g}-{e['high']:.2g} | {e['k_low']}-{e['k_high']} |"
        )
    return block(out, *(name for name, _, _ in ESTIMATED), "flops.csv")


def replicas() -> str:
    """One XLA device against eight under SPMD at one per-device batch: bench replicas."""
    name = "replicas-quickstart.csv"
    rows = sorted(read(name)[1], key=lambda r: int(r["devices"]))
    out = [
        "| devices | batch a device | global batch | compile s | graphs | step ms | host ms/step | samples/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['devices']} | {r['batch']} | {r['global_batch']} | {float(r['compile_s']):.1f} | {r['compiles']} | "
        f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | {float(r['samples_per_s']):.1f} |"
        for r in rows
    ]
    return block(out, name)


def sharding_call() -> str:
    """Marking a traced tensor replicated: torch_xla's public call against xla_train's, a peer script."""
    name = "sharding-call.csv"
    rows = read(name)[1]
    out = ["| call | ms a tensor (median of rounds) |", "|---|---:|"]
    out += [f"| {r['call']} | {float(r['ms_per_tensor']):.4f} |" for r in rows]
    public, ours = (float(r["ms_per_tensor"]) for r in rows)
    r = rows[0]
    out += [
        "",
        f"{r['tensors']} fresh traced tensors a round, {r['rounds']} rounds after one of warm-up, {r['devices']} "
        f"XLA:CPU devices: the public call takes **{public / ours:.0f}x** as long.",
    ]
    return block(out, name)


def auto_k_claim() -> Claim:
    a, k8 = one("auto-quickstart.csv", steps_per_execution="auto"), one("auto-quickstart.csv", steps_per_execution="8")
    saved = (f(a["step_ms"]) - f(k8["step_ms"])) / 1000
    repaid = f"{(f(k8['first_step_s']) - f(a['first_step_s'])) / saved:,.0f} steps" if saved > 0 else "never"
    return Claim(
        "`steps_per_execution=auto` on XLA:CPU (one step a program traced once under 1,000 training steps, else K=8 "
        "unrolled), the quickstart",
        f"the one-step program compiles in {f(a['compile_s']):.1f} s against K=8's {f(k8['compile_s']):.1f} s, at "
        f"{f(k8['host_peak_mb']) - f(a['host_peak_mb']):,.0f} MB less host memory; K=8's step "
        f"{1 - f(k8['step_ms']) / f(a['step_ms']):.0%} shorter, repaying its longer first step after {repaid}",
        ("auto-quickstart.csv",),
        "what-steps_per_executionauto-chooses",
    )


def k_steps_claim() -> Claim:
    names = (("k-quickstart.csv", "quickstart CNN"), ("k-cifar10.csv", "CIFAR-10 CNN"), ("k-imdb.csv", "IMDB LSTM"))
    host, compile_ = [], []
    for name, what in names:
        k1, k8 = one(name, steps_per_execution_used="1"), one(name, steps_per_execution_used="8")
        host.append(f"{f(k8['host_ms_per_step']) / f(k1['host_ms_per_step']):.2f} ({what})")
        compile_.append(f(k8["compile_s"]) / f(k1["compile_s"]))
    return Claim(
        "host time a step, K=8 unrolled against K=1 traced anew, XLA:CPU",
        f"{', '.join(host)}; K=8 compiling {min(compile_):.1f}-{max(compile_):.1f}x as long",
        tuple(n for n, _ in names),
        "k8-against-k1",
    )


def k_up_to_32_claim() -> Claim:
    parts, grow = [], []
    names = (("k32-quickstart.csv", "quickstart CNN"), ("k32-imdb.csv", "IMDB LSTM"))
    for name, what in names:
        by = {r["steps_per_execution_used"]: r for r in read(name)[1]}
        cpu = {k: f(by[k]["host_cpu_ms_per_step"]) for k in ("1", "8", "32")}
        parts.append(f"{what} {cpu['1']:.1f} against {cpu['8']:.2f} and {cpu['32']:.2f} ms")
        grow.append(f"{f(by['32']['compile_s']) / f(by['8']['compile_s']):.1f}x ({what.split()[-1]})")
    return Claim(
        "host CPU time a step, data on the device, K=1 (traced anew) against K=8 and 32 unrolled",
        f"{'; '.join(parts)}; K=32 compiling {' and '.join(grow)} as long as K=8",
        tuple(n for n, _ in names),
        "data-on-the-device-and-k-up-to-32-unrolled",
    )


def tpu_estimate_claim() -> Claim:
    got = ", ".join(f"{e['k_low']}-{e['k_high']} ({e['what']}, `{e['recipe']}`)" for e in estimates())
    return Claim(
        "the K at which a TPU v5e chip is device-bound",
        f"an **estimate**, not a TPU measurement, from counted FLOPs and this machine's host time at K=1: {got}",
        (*(name for name, _, _ in ESTIMATED), "flops.csv"),
        "host-and-device-time-per-step",
    )


def replicas_claim() -> Claim:
    rows = sorted(read("replicas-quickstart.csv")[1], key=lambda r: -int(r["devices"]))
    many, single = rows[0], rows[-1]
    return Claim(
        f"SPMD over {many['devices']} XLA:CPU devices against {single['devices']}, {many['batch']} samples a device",
        f"compiles once each ({many['compiles']} and {single['compiles']} graph), in {f(many['compile_s']):.1f} "
        f"against {f(single['compile_s']):.1f} s; {f(many['samples_per_s']):.1f} against "
        f"{f(single['samples_per_s']):.1f} samples/s (the devices share the cores)",
        ("replicas-quickstart.csv",),
        "one-xla-device-against-eight",
    )


def sharding_call_claim() -> Claim:
    public, ours = read("sharding-call.csv")[1]
    return Claim(
        f"a sharding call, {public['devices']} XLA:CPU devices",
        f"{f(ours['ms_per_tensor']):.3f} ms a traced tensor, against {f(public['ms_per_tensor']):.3f} for the public "
        f"`xs.mark_sharding` ({f(public['ms_per_tensor']) / f(ours['ms_per_tensor']):.0f}x)",
        ("sharding-call.csv",),
        "a-sharding-calls-cost",
    )
