"""Tables of the eager CPU fast path on CPUs with native bf16 (issue 18's figures). No such CPU has been lent since,
so these are the 2026-11-23 runs, transcribed into CSVs from the page that first quoted them: each CSV says so."""

from __future__ import annotations

import ast

from result_tables.claims import Claim, f, one, x
from result_tables.csvs import ROOT, block, ms, read

# The eight variants of precision x compile x channels_last, fp32 eager first: the reference of each ratio.
VARIANTS = [
    (("32", "False", "False"), "fp32 eager (`precision=32 compile=false channels_last=false`)"),
    (("32", "False", "True"), "fp32, channels_last"),
    (("bf16-mixed", "False", "False"), "bf16 autocast"),
    (("bf16-mixed", "False", "True"), "**bf16 + channels_last** (the default on such a CPU)"),
    (("32", "True", "False"), "compile, fp32"),
    (("32", "True", "True"), "compile, fp32, channels_last"),
    (("bf16-mixed", "True", "False"), "compile + bf16"),
    (("bf16-mixed", "True", "True"), "compile + bf16 + channels_last (`compile=true`)"),
]


def steps(name: str) -> dict[tuple[str, str, str], dict[str, str]]:
    return {(r["precision"], r["compile"], r["channels_last"]): r for r in read(name)[1]}


def variants(runs: list[tuple[str, str]], first_step: str | None = None) -> list[str]:
    """One row a variant, one column a run: its step ms and samples/s against that run's fp32 reference."""
    cells = [(steps(name), label) for name, label in runs]
    out = [
        "| variant | "
        + " | ".join(label for _, label in cells)
        + (" | first step s, with compile |" if first_step else " |"),
        "|---|" + "---:|" * (len(cells) + bool(first_step)),
    ]
    for key, label in VARIANTS:
        if not any(key in run for run, _ in cells):
            continue
        row = []
        for run, _ in cells:
            base = run.get(("32", "False", "False")) or run[("32", "False", "True")]
            r = run.get(key)
            row.append(f"{ms(r['step_ms'])} ({float(base['step_ms']) / float(r['step_ms']):.2f}x)" if r else "")
        if first_step:
            r = steps(first_step).get(key)
            row.append(f"{float(r['first_step_s']):.1f}" if r else "")
        out.append(f"| {label} | " + " | ".join(row) + " |")
    return out


def fastpath_bf16_cnn() -> str:
    """The CIFAR-10 CNN at batch 128 in three bench runs of the same day: step ms (x fp32 eager's samples/s)."""
    runs = [
        ("fastpath-bf16-cifar10.csv", "10 steps, foreach optimizer"),
        ("fastpath-bf16-cifar10-rounds.csv", "3 rounds of 20 steps"),
        ("fastpath-bf16-cifar10-compile.csv", "10 steps, with compile"),
    ]
    out = variants(runs, first_step="fastpath-bf16-cifar10-compile.csv")
    out += ["", "Step ms, and in brackets samples/s against fp32 eager's in the same run."]
    return block(out, *(name for name, _ in runs))


def fastpath_bf16_resnet() -> str:
    """ResNet-20 at batch 128, two bench runs of the same day: step ms (x the run's fp32 reference)."""
    runs = [
        ("fastpath-bf16-resnet.csv", "2 rounds of 10 steps"),
        ("fastpath-bf16-resnet-compile.csv", "10 steps, with compile, channels_last"),
    ]
    out = variants(runs)
    out += [
        "",
        "Step ms, and in brackets samples/s against fp32 eager's in the same run (in the second run, fp32 with "
        "channels_last: it has no NCHW cell).",
    ]
    return block(out, *(name for name, _ in runs))


def bf16_profile() -> str:
    """Where the CNN's bf16 step goes, by torch.profiler, against the CPU's own matrix rate."""
    name = "bf16-profile-cifar10.csv"
    out = ["| what | figure |", "|---|---:|"]
    for r in read(name)[1]:
        low, high = r["low"], r["high"]
        out.append(f"| {r['what']} | {low if low == high else f'{low}-{high}'} {r['unit']} |")
    return block(out, name)


def payback_samples() -> int:
    """compile=auto's threshold as the code sets it, read from the source: importing the package would import torch."""
    tree = ast.parse((ROOT / "xla_train" / "runtime" / "eager" / "fast_path.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILE_PAYBACK_SAMPLES":
            return ast.literal_eval(node.value)
    raise SystemExit("xla_train/runtime/eager/fast_path.py no longer sets COMPILE_PAYBACK_SAMPLES")


def break_even(at: dict) -> tuple[float, float]:
    """(ms a sample compiled bf16 + channels_last saves over bf16 eager, samples until that repays its first step)."""
    eager, compiled = at["bf16-mixed", "False", "False"], at["bf16-mixed", "True", "True"]
    saved_ms = 1e3 / float(eager["samples_per_s"]) - 1e3 / float(compiled["samples_per_s"])
    return saved_ms, float(compiled["first_step_s"]) * 1e3 / saved_ms


def payback() -> str:
    """compile=auto's pay-back rule from issue 18's figures: the compile's seconds over the seconds it saves a sample.
    The threshold it sets is read from the code, so the page and the rule cannot drift apart."""
    name = "payback-amx.csv"
    at = steps(name)
    compiled = at["bf16-mixed", "True", "True"]
    saved_ms, even = break_even(at)
    threshold = payback_samples()
    out = ["| variant | samples/s | against fp32 eager | first step s |", "|---|---:|---:|---:|"]
    base = float(at["32", "False", "False"]["samples_per_s"])
    for key, label in VARIANTS:
        if key in at:
            r = at[key]
            out.append(
                f"| {label} | {float(r['samples_per_s']):,.0f} | {float(r['samples_per_s']) / base:.2f}x | "
                f"{float(r['first_step_s']):.1f} |"
            )
    out += [
        "",
        f"Compiled bf16 + channels_last saves {saved_ms:.2f} ms a sample over bf16 eager, so its first step "
        f"({float(compiled['first_step_s']):.1f} s) is repaid after **{even:,.0f} samples**; `compile=auto` compiles "
        f"a run of at least {threshold:,} training samples (`runtime/eager/fast_path.py`), "
        f"{threshold / even:.1f}x that, for margin.",
    ]
    return block(out, name)


def quickstart_cpu() -> str:
    """The whole quickstart run on accelerator=cpu, its defaults against fp32 eager, run alternately."""
    name = "quickstart-cpu.csv"
    rows = {r["side"]: r for r in read(name)[1]}
    out = ["| settings | wall s | training step ms (batch 32) | held out |", "|---|---:|---:|---:|"]
    for side, r in rows.items():
        out.append(
            f"| {side} (`precision={r['precision']} channels_last={r['channels_last'].lower()}`) | {r['wall_s']} | "
            f"{r['step_ms_low']}-{r['step_ms_high']} | {float(r['held_out_acc']):.1%} |"
        )
    ratio = float(rows["fp32 eager"]["wall_s"]) / float(rows["defaults"]["wall_s"])
    out += [
        "",
        f"The defaults finish the whole run in **{1 / ratio:.2f}x** fp32 eager's wall time ({ratio:.2f}x as fast).",
    ]
    return block(out, name)


def inductor_cache() -> str:
    """torch.compile's first epoch twice with one inductor cache: the second compiles from the first's files."""
    name = "inductor-cache.csv"
    out = ["| run | compile s (the first epoch's line) | graphs |", "|---:|---:|---:|"]
    out += [f"| {r['run']} | {float(r['compile_s']):.1f} | {r['graphs']} |" for r in read(name)[1]]
    return block(out, name)


def fast_path_claim() -> Claim:
    def default(name: str) -> str:
        at = steps(name)
        return x(f(at["32", "False", "False"]["step_ms"]), f(at["bf16-mixed", "False", "True"]["step_ms"]))

    return Claim(
        "the CPU fast path's default on a CPU with native bf16 (bf16 autocast, channels_last, eager) against fp32 "
        "eager, batch 128",
        f"CNN {default('fastpath-bf16-cifar10.csv')}, ResNet-20 {default('fastpath-bf16-resnet.csv')} the samples/s "
        "(transcribed: the bench CSVs were not kept)",
        ("fastpath-bf16-cifar10.csv", "fastpath-bf16-resnet.csv"),
        "the-cnn-on-a-cpu-with-avx512-bf16",
    )


def payback_claim() -> Claim:
    _, even = break_even(steps("payback-amx.csv"))
    return Claim(
        "`compile=auto`'s pay-back, the CNN at batch 128",
        f"break-even near {even:,.0f} samples; `compile=auto` compiles from {payback_samples():,} (transcribed from "
        "issue 18)",
        ("payback-amx.csv",),
        "the-pay-back-rules-figures",
    )


def quickstart_cpu_claim() -> Claim:
    d, e = one("quickstart-cpu.csv", side="defaults"), one("quickstart-cpu.csv", side="fp32 eager")
    return Claim(
        "the quickstart on `accelerator=cpu`, the defaults against fp32 eager, whole run",
        f"{d['wall_s']} s against {e['wall_s']} s wall ({x(f(e['wall_s']), f(d['wall_s']))} as fast); "
        f"{f(d['held_out_acc']):.1%} against {f(e['held_out_acc']):.1%} held out (transcribed)",
        ("quickstart-cpu.csv",),
        "the-quickstart-on-the-cpu",
    )
